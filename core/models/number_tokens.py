"""Which single tokens a model emits for the numbers 0..P-1 after a prompt (docs/method.md, "Number tokens").

The analysis reads the logits of the number tokens only, so every model needs its own: GPT-2 writes
" 108" with its space inside the token, a word-level tokenizer drops the space, a digit-splitting
tokenizer has only 0..9 as single tokens. The tokenizer is probed with the paper's running example
under each way of writing an answer (`NUMBER_CONVENTIONS`); nothing here loads a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from core.errors import CoreError

#: The prompt the number tokens are probed with: the paper's running example.
PROBE_PROMPT = "Put together 15 and 93. Answer:"
NUMBER_SCAN_LIMIT = 2048


@dataclass(frozen=True)
class NumberTokens:
    """The single tokens the model would emit for the numbers 0..P-1 after a prompt.

    A prompt is read as `prompt + prompt_suffix`; the answer n follows it as the text
    `answer_prefix + str(n)`, one token. Three ways are tried (`NUMBER_CONVENTIONS`):

    * "leading-space": the token carries its space (GPT-2's " 108" after "Answer:");
    * "no-space" after a prompt ending in a space ("Answer: " then "108": the space is its own
      token or is dropped by a word-level tokenizer);
    * "no-space" right after the prompt ("Answer:" then "108": what the paper's fine-tuned GPT-2
      emits; with GPT-2's vocabulary it is the only way the numbers 0..520 are all single tokens).

    k-shot prompts write their solved examples the same way, so an un-fine-tuned model sees in
    the prompt the very tokens it is scored on.
    """

    ids: tuple[int, ...]
    prompt_suffix: str
    first_split: int | None  # first number that is not a single token (None: all up to the scan limit are)
    first_split_pieces: tuple[str, ...] = ()
    convention: str = "leading-space"  # "leading-space" or "no-space"
    answer_prefix: str = " "  # text between the prompt (with its suffix) and the number

    @property
    def P(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        """One line: the range and convention, never every token id."""
        span = f"0..{self.P - 1}" if self.P else "none"
        return (f"NumberTokens({span}, {self.convention}, prompt suffix {self.prompt_suffix!r}, answer prefix "
                f"{self.answer_prefix!r}, first split {self.first_split})")

    def ids_for(self, p: int) -> np.ndarray:
        require_number_range(self, p)
        return np.asarray(self.ids[:p], dtype=np.int64)

    def answer_text(self, n: int) -> str:
        """The text that follows the prompt (as the model reads it) when the answer is n."""
        return f"{self.answer_prefix}{n}"

    def describe(self) -> str:
        style = {
            ("leading-space", "", " "): 'with the leading space inside the token (" 108" after "Answer:")',
            ("no-space", "", " "): 'without a space ("108" after "Answer:", the tokenizer drops the space between)',
            ("no-space", " ", ""): 'without a space, after a prompt ending in a space ("108" after "Answer: ")',
            ("no-space", "", ""): 'without a space, right after the prompt ("108" after "Answer:")',
        }.get((self.convention, self.prompt_suffix, self.answer_prefix), f"{self.convention} tokens")
        if self.first_split is None:
            return f"numbers 0..{self.P - 1} (at least) are single tokens, {style}"
        return f"numbers 0..{self.P - 1} are single tokens, {style}; {self.first_split} is the first that is not"


#: (convention, prompt_suffix, answer_prefix), in order of preference when several cover a task:
#: the way running text writes an answer first, the fine-tuned paper models' way last.
NUMBER_CONVENTIONS = (("leading-space", "", " "), ("no-space", " ", ""), ("no-space", "", ""))


def require_number_range(numbers: NumberTokens, p: int, what: str = "this task") -> None:
    """Fail with a clear message when the numbers 0..p-1 are not all single tokens."""
    if p <= numbers.P:
        return
    if numbers.P == 0:
        pieces = f" (it becomes {list(numbers.first_split_pieces)})" if numbers.first_split_pieces else ""
        raise CoreError(
            f"{what} needs the numbers 0..{p - 1} as single tokens, but this tokenizer has not even 0 as one token "
            f"after the prompt{pieces}: this model cannot be analysed with this method"
        )
    if numbers.P == 10 and numbers.first_split == 10:
        hint = "this tokenizer splits numbers into digits, so only 0..9 are single tokens (P = 10)"
    else:
        hint = f"the model's usable range is 0..{numbers.P - 1} (P = {numbers.P})"
    pieces = f" (it becomes {list(numbers.first_split_pieces)})" if numbers.first_split_pieces else ""
    largest = (numbers.P - 1) // 2
    raise CoreError(
        f"{what} needs the numbers 0..{p - 1} as single tokens, but {numbers.first_split} is the first "
        f"number that is not one token{pieces}: {hint}. "
        + (
            f"Use --max-operand {largest} to shrink the task to answers 0..{2 * largest}."
            if largest >= 1
            else "This model cannot be analysed with this method."
        )
    )


def number_token_candidates(
    tokenizer, probe_prompt: str = PROBE_PROMPT, limit: int = NUMBER_SCAN_LIMIT
) -> list[NumberTokens]:
    """The number tokens under each convention of `NUMBER_CONVENTIONS`, in that order.

    A number counts only if `prompt + suffix + prefix + str(n)` tokenizes to the prompt's own
    tokens plus exactly one more, that token is not the unknown token, decodes back to the
    number, and differs from the tokens of all smaller numbers. The scan stops at the first
    number that fails.
    """
    unk = getattr(tokenizer, "unk_token_id", None)
    out = []
    for convention, suffix, prefix in NUMBER_CONVENTIONS:
        base = tokenizer(probe_prompt + suffix)["input_ids"]
        texts = [probe_prompt + suffix + prefix + str(n) for n in range(limit)]
        encoded = tokenizer(texts)["input_ids"]
        ids: list[int] = []
        seen: set[int] = set()
        first_split, pieces = None, ()
        for n, full in enumerate(encoded):
            new = full[len(base):]
            ok = (
                full[: len(base)] == base
                and len(new) == 1
                and new[0] != unk
                and new[0] not in seen
                and tokenizer.decode([new[0]]).strip() == str(n)
            )
            if not ok:
                first_split = n
                pieces = tuple(tokenizer.convert_ids_to_tokens(new if full[: len(base)] == base else full[-4:]))
                break
            ids.append(new[0])
            seen.add(new[0])
        if ids and convention == "leading-space" and not _carries_space(tokenizer, ids[0]):
            convention = "no-space"  # a word-level tokenizer drops the space: the token is the bare number
        out.append(NumberTokens(tuple(ids), suffix, first_split, pieces, convention, prefix))
    return out


def _carries_space(tokenizer, token_id: int) -> bool:
    """Whether the token's text starts with a space (or the piece with a space marker: Ġ, ▁)."""
    piece = tokenizer.convert_ids_to_tokens(token_id)
    return tokenizer.decode([token_id]).startswith(" ") or (isinstance(piece, str) and piece[:1] in ("Ġ", "▁", " "))


def choose_number_tokens(candidates: Sequence[NumberTokens], p: int | None = None) -> NumberTokens:
    """The first convention (in order of preference) that covers 0..p-1; else the longest range."""
    if p is not None:
        for cand in candidates:
            if cand.P >= p:
                return cand
    best = candidates[0]
    for cand in candidates[1:]:
        if cand.P > best.P:
            best = cand
    return best


def find_number_tokens(
    tokenizer, probe_prompt: str = PROBE_PROMPT, limit: int = NUMBER_SCAN_LIMIT, p: int | None = None
) -> NumberTokens:
    """Find, for each n, the single token a model emits for n after `probe_prompt`.

    With `p`, the first convention that covers 0..p-1 wins (a natural-text convention before the
    fine-tuned models' no-space one); without, the one that covers the longest run 0..P-1.
    """
    return choose_number_tokens(number_token_candidates(tokenizer, probe_prompt, limit), p)
