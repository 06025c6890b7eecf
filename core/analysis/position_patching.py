"""Position x layer patching: the residual stream at one token and one layer copied from a clean prompt into its
corrupted partner, for every token and layer (the familiar heatmap of Meng et al. 2022 and of TransformerLens' demos).

A cell (position i, layer l) runs the corrupted prompt with h(l) at its token i (counted on the prompt's own tokens)
replaced by the clean prompt's h(l) at the same token; l = 0 is the embedding output (the input of block 1), l = L
the last stream, as `core.analysis.patching` counts the stream (`resid`). What is read is the same logit difference
g = logit(clean answer) - logit(corrupted answer) and the same recovered share,
(mean g_patched - mean g_corrupt) / (mean g_clean - mean g_corrupt), with the same bootstrap over pairs
(`core.analysis.patching.bootstrap_shares`). Two prompts of a pair must have the same number of tokens (else the
same index names different words); the cells are counted back from the answer position over the last `span`
tokens, so pairs of one call should share the layout of those tokens (core.runs.position_patch_run selects them).

Each cell is a `RowPatch` of the stream at its token (`RowPatch.back`) on the one edit path (core.analysis.
filter_hooks), all cells in one evaluation: a patch k tokens from the end runs the last k tokens against the prefix of
the rest (core.analysis.evaluation.answer_position_passes). A cell before the first token where a pair's prompts differ
(`differing_reach`) copies the corrupted prompt's own vector into it (the two prompts are the same up to there, and a
token's stream reads only the tokens up to it): its patched run is the corrupted run, taken as it is, not run again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from core.analysis.ablations import Condition, RowPatch
from core.analysis.evaluation import evaluate_conditions
from core.analysis.patching import (
    BOOTSTRAP,
    BOOTSTRAP_SEED,
    bootstrap_shares,
    checked_pairs,
    recovered_share,
    share_interval,
)
from core.errors import CoreError
from core.models.capture import capture_hooks
from core.models.names import RESID, hook_name
from core.models.positions import operand_span, token_ends

#: The columns of a position x layer patching table: one row per cell. `position` counts the compared tokens from
#: the first (0), `token` is its text in the first pair, `role` says what it is ("a", "b": an operand's token,
#: "answer": the answer position, "" another).
POSITION_COLUMNS = ("position", "token", "role", "layer", "n", "recovered", "recovered_low", "recovered_high", "moved",
                    "patched_gap", "clean_gap", "corrupt_gap")


@dataclass
class PositionPatchResult:
    """Pair by pair: the clean and corrupted gaps and each cell's patched gap and answers; cells in the order of
    `cells`, (steps back from the answer position, layer)."""

    cells: list[tuple[int, int]]
    tokens: list[str]  # the compared tokens' text (first pair's clean prompt), first to last
    roles: list[str]
    clean_gap: np.ndarray
    corrupt_gap: np.ndarray
    patched_gap: np.ndarray  # (cells, pairs)
    moved: np.ndarray  # (cells, pairs)

    @property
    def n(self) -> int:
        return int(len(self.clean_gap))


def token_layout(tokenizer, clean_texts: Sequence[str], corrupt_texts: Sequence[str]) -> tuple[np.ndarray, int]:
    """Each pair's number of tokens, and how far from the end the earliest token where a pair's prompts differ lies
    (`differing_reach`); refused, saying how they differ, where a pair's two prompts differ in length."""
    clean = tokenizer(list(clean_texts))["input_ids"]
    corrupt = tokenizer(list(corrupt_texts))["input_ids"]
    for i, (c, k) in enumerate(zip(clean, corrupt)):
        if len(c) != len(k):
            show = lambda ids: "|".join(tokenizer.decode([t]) for t in ids)  # noqa: E731
            raise CoreError(f"position patching needs the two prompts of a pair to have as many tokens: pair {i}'s "
                            f"clean prompt has {len(c)} ({show(c)}), its corrupted one {len(k)} ({show(k)}); choose "
                            "operands written with as many tokens")
    return np.array([len(c) for c in clean]), differing_reach(clean, corrupt)


def differing_reach(clean, corrupt) -> int:
    """How many tokens from the end the earliest token where some pair's prompts differ lies (0 where none differs),
    from each pair's token ids: a stream patched further back than that copies the corrupted prompt's own vector."""
    reach = 0
    for c, k in zip(clean, corrupt):
        differ = [i for i, (a, b) in enumerate(zip(c, k)) if a != b]
        if differ:
            reach = max(reach, len(c) - differ[0])
    return reach


def token_roles(tokenizer, text: str, length: int, span: int) -> list[str]:
    """The roles of the last `span` tokens of `text` (`length` tokens): "a"/"b" for an operand's tokens (found as
    `core.models.positions` finds them; none where the prompt holds no two numbers), "answer" for the last."""
    ids = tokenizer([text])["input_ids"][0]
    roles = [""] * length
    try:
        ends = token_ends(tokenizer, text, ids)
        for which in ("a", "b"):
            start, end = operand_span(text, which)
            starts = [0, *ends[:-1]]
            for i in range(length):
                if starts[i] < end and ends[i] > start:
                    roles[i] = which
    except CoreError:
        pass
    roles[-1] = "answer"
    return roles[length - span:]


def position_patch(loaded, clean_texts: Sequence[str], corrupt_texts: Sequence[str], clean_answers, corrupt_answers,
                   p: int, span: int | None = None, batch_size: int = 32, progress=None) -> PositionPatchResult:
    """Patch the stream at each of the last `span` tokens (default: every token) and each layer 0..L from each clean
    prompt into its corrupted partner (the same place in the lists); module docstring. The prompts as the model
    reads them, every one with the same number of tokens (`token_layout`)."""
    clean_answers, corrupt_answers = checked_pairs(clean_texts, corrupt_texts, clean_answers, corrupt_answers)
    lengths, reach = token_layout(loaded.tokenizer, clean_texts, corrupt_texts)
    shortest = int(lengths.min())
    span = shortest if span is None else min(int(span), shortest)
    L = loaded.n_layers
    names = [hook_name(RESID, layer, L) for layer in range(L + 1)]
    kept = capture_hooks(loaded, clean_texts, names, position="all", batch_size=batch_size, progress=progress)
    width = kept.mask.shape[1]  # left-padded: the token `back` from every prompt's end is column width - back
    cells = [(back, layer) for back in range(span, 0, -1) for layer in range(L + 1)]
    run = [(back, layer) for back, layer in cells if back <= reach]  # the others are the corrupted run (docstring)
    conditions = [Condition(None)] + [
        Condition(RowPatch(kept[names[layer]][:, width - back], back=back), RESID, layer) for back, layer in run]
    runs = evaluate_conditions(loaded, corrupt_texts, clean_answers, p, conditions, batch_size=batch_size,
                               contrast=corrupt_answers, progress=progress, desc="position patching")
    clean = evaluate_conditions(loaded, clean_texts, clean_answers, p, [Condition(None)], batch_size=batch_size,
                                contrast=corrupt_answers, progress=progress, desc="position patching: clean")[0]
    patched = dict(zip(run, runs[1:]))
    outcome = [patched.get(cell, runs[0]) for cell in cells]
    tokens = kept.tokens[0][len(kept.tokens[0]) - span:]
    roles = token_roles(loaded.tokenizer, clean_texts[0], int(lengths[0]), span)
    return PositionPatchResult(cells, tokens, roles, clean.gaps, runs[0].gaps, np.stack([r.gaps for r in outcome]),
                               np.stack([r.predictions == clean_answers for r in outcome]))


def position_table(result: PositionPatchResult, resamples: int = BOOTSTRAP, seed: int = BOOTSTRAP_SEED
                   ) -> pd.DataFrame:
    """One row per cell (`POSITION_COLUMNS`), as `core.analysis.patching.patching_table` makes one per site."""
    draws = None
    if result.n > 1:
        draws = bootstrap_shares(result.clean_gap, result.corrupt_gap, result.patched_gap, resamples, seed)
    span = len(result.tokens)
    rows = []
    for i, (back, layer) in enumerate(result.cells):
        low, high = share_interval(None if draws is None else draws[:, i])
        position = span - back
        rows.append({"position": position, "token": result.tokens[position], "role": result.roles[position],
                     "layer": layer, "n": result.n,
                     "recovered": recovered_share(result.patched_gap[i], result.clean_gap, result.corrupt_gap),
                     "recovered_low": low, "recovered_high": high, "moved": float(result.moved[i].mean()),
                     "patched_gap": float(result.patched_gap[i].mean()), "clean_gap": float(result.clean_gap.mean()),
                     "corrupt_gap": float(result.corrupt_gap.mean())})
    return pd.DataFrame(rows, columns=list(POSITION_COLUMNS))
