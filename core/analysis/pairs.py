"""The question pairs activation patching reads (core.analysis.patching), torch-free so the pages can name a run's
example pair: each question against the same question, second operand one more (one less at the largest operand),
in the same phrasing, kept where the two answers differ in their last digit and stay among the task's numbers; or,
for the magnitude contrast, ten more (ten less), kept where the two answers differ in their tens digit."""

from __future__ import annotations

from typing import Sequence

from core.errors import CoreError
from core.tasks import Example, number_space, with_operands


def corrupted(example: Example, max_operand: int, step: int = 1) -> Example | None:
    """The pair's corrupted question: `example` with its second operand `step` more (`step` less where that passes
    `max_operand`), in the same phrasing; None where that leaves the answer's digit at the place `step` names as it
    was (step 1: the last digit, as multiplication by 0 or a multiple of 10 does; step 10: the tens digit), so every
    pair's two answers differ in that digit, or puts either answer beyond the task's numbers or an operand below 0."""
    b = example.b + step if example.b + step <= max_operand else example.b - step
    if b < 0:
        return None
    other = with_operands(example, example.a, b)
    if (other.answer // step) % 10 == (example.answer // step) % 10 or other.answer >= number_space(example.task,
                                                                                                   max_operand):
        return None
    return other


def pair_examples(examples: Sequence[Example], max_operand: int, step: int = 1) -> list[tuple[Example, Example]]:
    """(clean, corrupted) for every example whose corrupted question exists (`corrupted`, second operand `step`
    more), in the examples' order."""
    pairs = [(e, corrupted(e, max_operand, step)) for e in examples]
    return [(e, c) for e, c in pairs if c is not None]


def corrupted_text(text: str, clean: Example, corrupt: Example) -> str:
    """The corrupted prompt as the model reads it: the clean prompt `text` (shots and all) with its question, the last
    place it stands, replaced by the corrupted one's."""
    head, found, tail = text.rpartition(clean.question)
    if not found:
        raise CoreError(f"the prompt {text!r} does not ask {clean.question!r}")
    return head + corrupt.question + tail
