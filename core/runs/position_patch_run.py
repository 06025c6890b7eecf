"""The position x layer patching stage of a run (`--stages position_patching`, table `position_patching`), and what
`python -m core patch --positions` prints for one pair.

Pairs are the patching stage's (core.analysis.pairs: second operand one more, the same phrasing). Prompts of
different phrasings, or operands written with more or fewer tokens, have different token layouts, so one heatmap
reads one layout: the running example's ("Put together 15 and 93. Answer:" for addition, its partner 15 + 94), and
every pair whose question, from its first token to the answer position, has the same tokens but for the operands'
digits (`layout_key`). The cells are that question's tokens (any solved examples before it are left out) at every
layer 0..L (core.analysis.position_patching); the table holds each cell's mean recovered share over the pairs with
its bootstrap interval, `token` the running example's text there and `role` which are the operands' and the answer
position. Every pair of that layout is read, on every model (`n` records how many): a cell runs only the tokens from
its own on, and the cells before the pair's first differing token are the corrupted run (core.analysis.
position_patching), about five times faster than every token run again for every cell
(scripts/bench_position_patching.py); the 692 pairs of the default run's layout took 275 s on two CPU threads. A
table that read fewer (deep models read a seeded 300 before 2026-11-30) is made again on an upgrade
(`reads_every_pair`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from core.analysis.pairs import corrupted_text, pair_examples
from core.analysis.position_patching import position_patch, position_table
from core.errors import CoreError
from core.models.positions import token_ends
from core.runs.cache import RunWriter
from core.runs.patch_run import PAIR_RULE
from core.tasks import RUNNING_EXAMPLE, example_id

#: The version of the position_patching table: a run whose table is of another version is given a new one.
POSITION_VERSION = 1
LAYOUT_RULE = ("the running example's pair and every pair whose question has its tokens but for the operands' "
               "digits (the same phrasing, operands of as many tokens)")


def question_start(tokenizer, text: str, question: str) -> int:
    """The index of the first token of `text` that holds part of `question` (its last occurrence)."""
    start = text.rfind(question)
    if start < 0:
        raise CoreError(f"the question {question!r} is not in its prompt {text!r}: position patching cannot tell "
                        "which tokens are the question's")
    ends = token_ends(tokenizer, text, tokenizer([text])["input_ids"][0])
    return next(i for i, end in enumerate(ends) if end > start)


def layout_key(tokenizer, text: str, question: str) -> tuple:
    """The question's tokens (from its first to the answer position) with every token holding a digit blanked."""
    ids = tokenizer([text])["input_ids"][0]
    tail = ids[question_start(tokenizer, text, question):]
    return tuple(-1 if any(ch.isdigit() for ch in tokenizer.decode([t])) else int(t) for t in tail)


def layout_pairs(tokenizer, pairs: list, text_of: dict, task: str) -> list:
    """The pairs of the running example's layout (module docstring), the running example's pair first."""
    reference = next((pr for pr in pairs if pr[0].id == example_id(task, *RUNNING_EXAMPLE)), pairs[0])
    key = layout_key(tokenizer, text_of[reference[0].id], reference[0].question)
    chosen = []
    for clean, corrupt in pairs:
        text = text_of[clean.id]
        if clean.phrasing != reference[0].phrasing:
            continue
        other = corrupted_text(text, clean, corrupt)
        if layout_key(tokenizer, text, clean.question) == key == layout_key(tokenizer, other, corrupt.question):
            chosen.append((clean, corrupt))
    chosen.sort(key=lambda pr: pr[0].id != reference[0].id)
    return chosen


def position_patch_run(loaded, examples, texts, p: int, max_operand: int, batch_size: int, progress=None,
                       log=print) -> pd.DataFrame | None:
    """The `position_patching` table over the run's pairs of the running example's layout; None without pairs."""
    t0 = time.time()
    text_of = {e.id: t for e, t in zip(examples, texts)}
    pairs = pair_examples(examples, max_operand)
    if not pairs:
        log(f"position patching: left out: none of the {len(examples)} questions has a partner ({PAIR_RULE})")
        return None
    chosen = layout_pairs(loaded.tokenizer, pairs, text_of, examples[0].task)
    first = chosen[0][0]
    span = len(loaded.tokenizer([text_of[first.id]])["input_ids"][0]) - question_start(
        loaded.tokenizer, text_of[first.id], first.question)
    clean = [text_of[c.id] for c, _ in chosen]
    corrupt = [corrupted_text(text_of[c.id], c, k) for c, k in chosen]
    result = position_patch(loaded, clean, corrupt, [c.answer for c, _ in chosen], [k.answer for _, k in chosen], p,
                            span, batch_size, progress)
    log(f"position patching: {len(result.cells)} cells over {result.n} pairs of {len(examples)} questions "
        f"({time.time() - t0:.0f}s)")
    return position_table(result)


def reads_every_pair(note: dict, loaded, examples, texts, max_operand: int) -> bool:
    """Whether a run's position_patching table, as its manifest's `note` (`position_note`) says, read every pair of
    the running example's layout (a table made while deep models read a sample of 300 did not)."""
    pairs = pair_examples(examples, max_operand)
    if not pairs:
        return True
    text_of = {e.id: t for e, t in zip(examples, texts)}
    return int(note.get("pairs") or 0) >= len(layout_pairs(loaded.tokenizer, pairs, text_of, examples[0].task))


def position_note(table, n_questions: int) -> dict:
    """What the manifest says of the `position_patching` table."""
    return {"version": POSITION_VERSION, "pairs": int(table["n"].iloc[0]) if len(table) else 0,
            "questions": int(n_questions), "rule": f"{PAIR_RULE}; {LAYOUT_RULE}"}


def write_position_table(writer: RunWriter, loaded, examples, texts, p: int, opts, log) -> dict:
    """The `position_patching` table into the staging folder; returns the manifest's note on it."""
    table = position_patch_run(loaded, examples, texts, p, opts.max_operand, opts.batch_size, opts.progress, log)
    if table is None:
        return {"version": POSITION_VERSION, "pairs": 0, "questions": len(examples), "rule": PAIR_RULE}
    writer.write("position_patching", table)
    return position_note(table, len(examples))


@dataclass
class PositionPatchReport:
    """What `python -m core patch --positions` prints: the stream's recovered share at every token and layer."""

    what: str
    pairs: int
    clean_gap: float
    corrupt_gap: float
    cells: list[dict] = field(default_factory=list)
    split: str = "given"  # a pair given on the command line (as `patch`'s PatchReport says it)
    #: the run's cached position_patching table beside this one; None for a model that is no run
    cached: dict | None = None
    cached_line: str | None = None

    def text(self) -> str:
        """A compact table: one row per layer (0: the embeddings), one column per token."""
        frame = pd.DataFrame(self.cells)
        tokens = frame.drop_duplicates("position").sort_values("position")
        grid = frame.pivot(index="layer", columns="position", values="recovered")
        heads = [repr(t)[1:-1][:7] for t in tokens["token"]]
        lines = [f"{self.what}: logit(clean answer) - logit(corrupted answer) is {self.clean_gap:+.2f} clean, "
                 f"{self.corrupt_gap:+.2f} corrupted; the stream at one token after one layer patched from clean "
                 "into corrupted recovers (0: nothing, 1: all of it):",
                 "  layer " + " ".join(f"{h:>7}" for h in heads)]
        for layer, row in grid.iterrows():
            lines.append(f"  {layer:>5} " + " ".join(f"{v:>7.3f}" if np.isfinite(v) else f"{'-':>7}" for v in row))
        if self.cached_line:
            lines.append(f"  {self.cached_line}")
        lines.append("  (layer 0: the embeddings; --json prints every cell)")
        return "\n".join(lines)

    def as_json(self) -> str:
        """Every field (as `patch --json` without --positions: the split, the text's `lines`, the `cached`
        comparison), NaN as null."""
        clean = [{k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in c.items()}
                 for c in self.cells]
        fields = {k: v for k, v in asdict(self).items() if k != "cached_line"}
        return json.dumps({**fields, "cells": clean, "lines": self.text().splitlines()}, indent=1, allow_nan=False)


def position_report(loaded, clean_text: str, corrupt_text: str, clean_answer: int, corrupt_answer: int, p: int,
                    what: str, progress=None) -> PositionPatchReport:
    """Position x layer patching of one pair of prompts (as the model reads them), every token of the prompt."""
    result = position_patch(loaded, [clean_text], [corrupt_text], [clean_answer], [corrupt_answer], p,
                            progress=progress)
    table = position_table(result)
    cells = [{"position": int(r.position), "token": r.token, "role": r.role, "layer": int(r.layer),
              "recovered": float(r.recovered), "moved": float(r.moved)} for r in table.itertuples(index=False)]
    return PositionPatchReport(what, 1, float(table["clean_gap"].iloc[0]), float(table["corrupt_gap"].iloc[0]), cells)
