"""The one exception type that carries a message meant for a person.

Every bad input the core can recognise raises `CoreError` with a sentence that says what was
wrong and what to do. The CLI prints it without a traceback; the dashboard shows it in a box.
"""


class CoreError(Exception):
    """A problem with the user's input or environment, explained in the message."""


def choices(items) -> str:
    """Choices as every message states them: "2, '5,10' or all" (an item holding a comma or a space quoted, so a
    list of lists reads as one); ranges are written A..B ("choose 2..260")."""
    shown = [repr(str(x)) if ("," in str(x) or " " in str(x)) else str(x) for x in items]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"
