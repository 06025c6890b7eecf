"""A tokenizer must give back the prompt it was given: one that garbles it (a Qwen2-type folder whose tokenizer turned
"Put together 15 and 93. Answer:" into "1593.:", its words lost) feeds the model something else than the question,
and every number a run computes from it would be about that something else. `check_round_trip` encodes the probe
prompt, decodes it again and refuses the tokenizer, with the reason, when the text differs.

transformers picks a tokenizer class by the model's type, and the class of some types (Qwen2's, in transformers 5)
rebuilds the folder's tokenizer.json its own way: a word-level tokenizer.json read so garbles the prompt although
the file itself does not. `faithful_tokenizer` then reads the file as it is (PreTrainedTokenizerFast), and only a
tokenizer that garbles the prompt either way is refused.

Only whitespace may differ: the project's own word-level tokenizers drop spaces and decode with a space between
tokens ("93 . Answer :"), GPT-2's no-space numbers join "Answer:" and "108"; none of that changes the characters
the model reads. The probe's operands are ones the tokenizer has single tokens for (a tokenizer made for numbers
0..40 has no "93"; that is its number range, which core.models.number_tokens reports, not a garbled text).
"""

from __future__ import annotations

import re

from transformers import PreTrainedTokenizerFast

from core.errors import CoreError

#: The probe prompt (core.models.number_tokens.PROBE_PROMPT is it with the running example's operands).
PROBE_TEMPLATE = "Put together {a} and {b}. Answer:"
#: The running example's operands, and the smallest ones, for a tokenizer whose single-token numbers stop below 94.
RUNNING_OPERANDS, SMALL_OPERANDS = (15, 93), (1, 2)


def probe_prompts(n_numbers: int) -> tuple[str, ...]:
    """The prompts checked: the running example's, or (for a tokenizer whose single-token numbers stop below 94,
    `n_numbers`; 0: numbers written as digits) the same with operands it has, both with an answer after."""
    a, b = RUNNING_OPERANDS if n_numbers == 0 or n_numbers > max(RUNNING_OPERANDS) else SMALL_OPERANDS
    prompt = PROBE_TEMPLATE.format(a=a, b=b)
    return (prompt, f"{prompt} {a + b}") if n_numbers == 0 or n_numbers > a + b else (prompt,)


def same_text(given: str, decoded: str) -> bool:
    """Whether two texts are the same but for whitespace (module docstring)."""
    return re.sub(r"\s+", "", given) == re.sub(r"\s+", "", decoded)


def round_trips(tokenizer, prompt: str) -> tuple[bool, str, int]:
    """(whether `prompt` decodes to itself, what it decodes to, how many tokens it is)."""
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    return same_text(prompt, decoded), decoded, len(ids)


def faithful_tokenizer(tokenizer, source: str, revision: str | None = None):
    """`tokenizer` (as transformers chose its class for `source`), or the folder's tokenizer.json read as it is
    where only that gives the probe prompt back (module docstring); a tokenizer neither reading makes faithful is
    returned as it was, for `check_round_trip` to refuse with the reason."""
    prompt = PROBE_TEMPLATE.format(a=SMALL_OPERANDS[0], b=SMALL_OPERANDS[1])  # words any tokenizer here has
    if round_trips(tokenizer, prompt)[0]:
        return tokenizer
    try:
        own = PreTrainedTokenizerFast.from_pretrained(source, revision=revision)
    except Exception:  # no tokenizer.json, or one this transformers cannot read: many kinds
        return tokenizer
    return own if round_trips(own, prompt)[0] else tokenizer


def check_round_trip(tokenizer, source: str, n_numbers: int) -> None:
    """Refuse `tokenizer` (of the model `source`, with `n_numbers` single-token numbers) when a probe prompt it
    encodes does not decode to the same text (module docstring)."""
    for prompt in probe_prompts(n_numbers):
        same, decoded, n_tokens = round_trips(tokenizer, prompt)
        if not same:
            raise CoreError(
                f"the tokenizer of {source} garbles the prompt: {prompt!r} is encoded as {n_tokens} tokens that decode "
                f"to {decoded!r}, so the model would not read the question. Use the tokenizer the model was trained "
                "with (its tokenizer.json and tokenizer_config.json), or a newer transformers if it cannot read them"
            )
