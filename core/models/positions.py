"""Which token of each prompt a capture reads or an edit acts at: an index, the answer position, an operand, or all.

A position is named one way for every prompt and found in each prompt's own tokens (prompts are left-padded in a
batch, so the same index is a different column of the batch for prompts of different lengths):

    "answer"     the last token, where the answer is read (the default everywhere)
    an int i     the prompt's own token i: 0 its first real token, -1 its last (the answer position), -2 the one
                 before, and so on
    "a", "b"     the first / second operand: the last token of the number (the token by which the whole number has
                 been read: with one token per number the number's own token, with one token per digit its last
                 digit). The operands are the last two whole numbers of the prompt (the question comes last, after any
                 solved examples; the answer cue holds no number); a prompt with fewer than two is refused
    "all"        every token of the prompt

`token_index` gives, per prompt, the 0-based index of the chosen token among the prompt's own tokens; `steps_back`
the same counted from the end (1: the last token), as `core.analysis.ablations.RowPatch.back` counts.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from core.errors import CoreError

ANSWER = "answer"
ALL = "all"
#: The operands by name: the first and the second number of the question.
OPERANDS = ("a", "b")
NAMED_POSITIONS = (ANSWER, *OPERANDS, ALL)
_NUMBER = re.compile(r"\d+")


def check_position(position) -> str | int:
    """`position` as given if it names a position (an int, or one of `NAMED_POSITIONS`); else a clear error."""
    if isinstance(position, (int, np.integer)) and not isinstance(position, bool):
        return int(position)
    if isinstance(position, str) and position in NAMED_POSITIONS:
        return position
    if isinstance(position, str) and re.fullmatch(r"-?\d+", position.strip()):
        return int(position)
    raise CoreError(f"position {position!r}: give a token index (0 the prompt's first token, -1 its last), "
                    f"or one of {', '.join(repr(p) for p in NAMED_POSITIONS)}")


def operand_span(text: str, which: str) -> tuple[int, int]:
    """(start, end) characters of operand `which` ("a" or "b") in `text`: the second-last / last whole number."""
    numbers = [m.span() for m in _NUMBER.finditer(text)]
    if len(numbers) < 2:
        raise CoreError(f"position {which!r}: the prompt {text!r} holds {len(numbers)} whole number(s), not the two "
                        "operands of a question; give a token index instead")
    return numbers[-2] if which == "a" else numbers[-1]


def token_ends(tokenizer, text: str, ids: Sequence[int]) -> list[int]:
    """The character (in `text`) each token ends at: from the tokenizer's offsets where it gives them, else from
    decoding ever longer prefixes (which must reproduce the text)."""
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(text, return_offsets_mapping=True)
        if list(enc["input_ids"]) == list(ids):
            return [int(end) for _, end in enc["offset_mapping"]]
    ends, shown = [], ""
    for i in range(len(ids)):
        shown = tokenizer.decode(list(ids[: i + 1]))
        ends.append(len(shown))
    if shown != text:
        raise CoreError(f"cannot find the operands' tokens: the tokenizer decodes the prompt {text!r} as {shown!r}")
    return ends


def operand_token(tokenizer, text: str, ids: Sequence[int], which: str) -> int:
    """The index, among the prompt's own tokens `ids`, of the token that ends operand `which` (module docstring)."""
    _, end = operand_span(text, which)
    for i, token_end in enumerate(token_ends(tokenizer, text, ids)):
        if token_end >= end:
            return i
    raise CoreError(f"position {which!r}: no token of {text!r} covers its operand")


def token_index(tokenizer, texts: Sequence[str], position, encoded: Sequence[Sequence[int]] | None = None
                ) -> np.ndarray | None:
    """Per prompt, the 0-based index among its own tokens of the token `position` names (None for "all"); an index
    beyond a prompt's tokens is refused with the prompt's length. `encoded` are the prompts' token ids when known."""
    position = check_position(position)
    if position == ALL:
        return None
    encoded = tokenizer(list(texts))["input_ids"] if encoded is None else encoded
    lengths = np.array([len(e) for e in encoded])
    if position == ANSWER:
        return lengths - 1
    if position in OPERANDS:
        return np.array([operand_token(tokenizer, t, e, position) for t, e in zip(texts, encoded)])
    index = np.where(position < 0, lengths + position, position)
    bad = np.flatnonzero((index < 0) | (index >= lengths))
    if len(bad):
        i = int(bad[0])
        raise CoreError(f"position {position}: prompt {i} ({texts[i]!r}) has {lengths[i]} tokens (0..{lengths[i] - 1}, "
                        f"or -1..-{lengths[i]} from its end)")
    return index


def steps_back(tokenizer, texts: Sequence[str], position) -> np.ndarray | None:
    """Per prompt, how far from its end the token `position` names lies (1: the last token); None for "all"."""
    encoded = tokenizer(list(texts))["input_ids"]
    index = token_index(tokenizer, texts, position, encoded)
    if index is None:
        return None
    return np.array([len(e) for e in encoded]) - index
