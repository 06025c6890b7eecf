"""Behaviour of a model that writes numbers digit by digit: k-shot prompts and greedy generation.

A model whose tokenizer splits numbers into digits has no single answer token, so the logit lens,
the Fourier view of the logits and the filters do not apply to it. What does apply is what the
paper measures of such models' behaviour (section 4.3): prompted with k solved examples (the
training split's, as `core.tasks.with_shots` draws them), the model writes the answer greedily;
the first whole number in what it writes is its answer. Accuracy, the histogram of signed errors
and the share of wrong answers off by a multiple of 10 follow (`core.analysis.behaviour`).
"""

from __future__ import annotations

import re
import time

import pandas as pd
import torch

from core.analysis.behaviour import error_summary
from core.errors import CoreError
from core.models.capture import prepare_batches, progress_bar
from core.models.modes import evaluating
from core.tasks import with_shots

SHOTS = (0, 4)
MAX_NEW_TOKENS = 6
NUMBER_AT_START = re.compile(r"^\s*(\d+)")


def parse_answer(text: str) -> int | None:
    """The whole number the generated text starts with (after spaces), or None."""
    m = NUMBER_AT_START.match(text)
    return int(m.group(1)) if m else None


def generate(loaded, texts, max_new_tokens: int = MAX_NEW_TOKENS, batch_size: int = 16, progress=None) -> list[str]:
    """Greedy continuations of `texts` (only the new text), in the order of `texts`, in eval mode."""
    tok = loaded.tokenizer
    batches = prepare_batches(tok, texts, batch_size)
    out: list[str | None] = [None] * len(texts)
    bar = progress_bar(len(texts), "generate", progress)
    device = loaded.input_device
    eos = tok.eos_token_id
    for batch in batches:
        ids = batch.input_ids.to(device)
        with torch.no_grad(), evaluating(loaded.model):
            new = loaded.model.generate(
                input_ids=ids,
                attention_mask=batch.attention_mask.to(device),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=eos,
            )[:, ids.shape[1] :]
        for row, i in enumerate(batch.indices):
            out[i] = tok.decode(new[row].tolist(), skip_special_tokens=True)
        bar.update(len(batch.indices))
    bar.close()
    return out  # type: ignore[return-value]


def generations_table(
    loaded, examples, pool, shots=SHOTS, seed: int = 0, batch_size: int = 16, log=print, progress=None
) -> pd.DataFrame:
    """One row per (example, shots): the prompt, what the model wrote, its answer and whether it is right."""
    if not examples:
        raise CoreError("no examples to prompt the model with")
    frames = []
    for k in shots:
        t0 = time.time()
        prompts = with_shots(examples, pool, k, seed, lambda n: f" {n}")
        written = generate(loaded, prompts, batch_size=batch_size, progress=progress)
        parsed = [parse_answer(w) for w in written]
        frame = pd.DataFrame(
            {
                "id": [e.id for e in examples],
                "shots": k,
                "a": [e.a for e in examples],
                "b": [e.b for e in examples],
                "answer": [e.answer for e in examples],
                "prompt": prompts,
                "generated": written,
                "prediction": [-1 if p is None else p for p in parsed],
                "is_number": [p is not None for p in parsed],
            }
        )
        frame["correct"] = frame["prediction"] == frame["answer"]
        log(f"{k}-shot: {frame['correct'].mean():.1%} right of {len(frame)} ({time.time() - t0:.0f}s)")
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def generation_error_table(generations: pd.DataFrame) -> pd.DataFrame:
    """Per shot count: accuracy, and of the wrong answers that are numbers, the share off by a
    multiple of 10 (answers that are not a number are counted wrong and reported apart)."""
    rows = []
    for k, g in generations.groupby("shots", sort=True):
        numbers = g[g["is_number"]]
        s = error_summary(numbers["answer"], numbers["prediction"])
        rows.append(
            {
                **s.as_row(),
                "source": f"{k}-shot",
                "n": int(len(g)),
                "n_wrong": int((~g["correct"]).sum()),
                "accuracy": float(g["correct"].mean()),
                "n_not_a_number": int((~g["is_number"]).sum()),
                "n_wrong_numbers": s.n_wrong,
            }
        )
    frame = pd.DataFrame(rows)
    return frame[["source"] + [c for c in frame.columns if c != "source"]]


def accuracy_by_shots(generations: pd.DataFrame) -> dict[int, float]:
    return {int(k): float(v) for k, v in generations.groupby("shots")["correct"].mean().items()}
