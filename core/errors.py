"""The one exception type that carries a message meant for a person.

Every bad input the core can recognise raises `CoreError` with a sentence that says what was
wrong and what to do. The CLI prints it without a traceback; the dashboard shows it in a box.
"""


class CoreError(Exception):
    """A problem with the user's input or environment, explained in the message."""
