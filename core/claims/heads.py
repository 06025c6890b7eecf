"""Attention read head by head (the tables `head_spectra`, `head_locking`: core.analysis.heads), in words computed
from them, beside what the same run's attention as a whole does (its `phase_locking` and `module_spectra` rows).

The rule for "a head locks" is the modules' own (core.analysis.phase.locked: R above the family-wise shuffle
threshold, whose family is every head of the model, at least MIN_LOCKING, a phase that moves with the answer, a
wave that favours it). `heads_summary` counts, for each of the paper's short periods, the heads that lock, names the
strongest, and says how many layers have a head that locks where the layer's attention as a whole does not (or the
reverse), since a head's wave can be drowned in its layer's sum or cancelled by another head's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.head_readings import head_bands, head_locking_grid
from core.analysis.phase import SHORT_PERIODS, locked
from core.runs.reader import RunReader, Table


def head_periods(run: RunReader) -> list[float]:
    """The short periods (2, 2.5, 5, 10) the run's head table has."""
    table = run.table(Table.HEAD_LOCKING)
    return [T for T in SHORT_PERIODS if np.isclose(table["period"], T).any()]


def locking_by_head(run: RunReader) -> pd.DataFrame:
    """Every head at every short period the run has (`head_periods`), with `locks` by the modules' rule."""
    table = run.table(Table.HEAD_LOCKING)
    return pd.concat([head_locking_grid(table, T) for T in head_periods(run)], ignore_index=True)


def layers_attention_locks(run: RunReader, period: float) -> set[int]:
    """The layers whose attention as a whole locks at `period` (the run's phase_locking table)."""
    t = run.table(Table.PHASE_LOCKING)
    t = t[(t["kind"] == "attn") & np.isclose(t["period"], period)]
    return {int(x) for x in t.loc[locked(t), "layer"]}


def count(n: int, what: str) -> str:
    """ "1 head", "2 heads"."""
    return f"{n} {what}{'' if n == 1 else 's'}"


def heads_summary(run: RunReader, basis: str = "paper") -> str:
    """This run's heads in a few sentences, every number from its tables (module docstring)."""
    grid = locking_by_head(run)
    n_heads = grid[["layer", "head"]].drop_duplicates().shape[0]
    measured = run.has(Table.PHASE_LOCKING)
    words, alone, drowned = [], 0, 0
    for T, rows in grid.groupby("period", sort=True):
        locks = rows[rows["locks"]]
        whole = layers_attention_locks(run, float(T)) if measured else set()
        own = set(locks["layer"].astype(int))
        alone, drowned = alone + len(own - whole), drowned + len(whole - own)
        if len(locks):
            top = locks.loc[locks["locking"].idxmax()]
            verb = "locks" if len(locks) == 1 else "lock"
            words.append(f"at period {T:g}, {count(len(locks), 'head')} {verb} (the strongest, head {int(top['head'])} "
                         f"of layer {int(top['layer'])}, R = {top['locking']:.2f})")
        else:
            words.append(f"at period {T:g}, no head locks" + (f", though the attention of {count(len(whole), 'layer')} "
                                                               "does as a whole" if whole else ""))
    threshold = float(grid["null_95"].max())
    text = (f"Read one head at a time by the modules' rule (the chance threshold, over all {n_heads} heads, at most "
            f"R = {threshold:.2f}): " + "; ".join(words) + ".")
    if measured:
        text += (" Every layer with a locking head locks as a whole too." if alone == 0 else
                 f" In {count(alone, 'case')} a head locks where its layer's attention as a whole does not.")
        if drowned:
            text += f" In {count(drowned, 'case')} a layer's attention locks as a whole and none of its heads alone."
    text += " " + locking_is_correlation(run, grid)
    bands = head_bands(run.table(Table.HEAD_SPECTRA), basis, run.default_tau(basis))
    text += (f" Below the cutoff tau = {run.default_tau(basis)} lies a median {100 * bands['low'].median():.0f}% of a "
             f"head's Fourier energy (from {100 * bands['low'].min():.0f}% to {100 * bands['low'].max():.0f}%).")
    return text


def locking_is_correlation(run: RunReader, grid: pd.DataFrame) -> str:
    """A head that locks has a wave that moves with the answer: a correlation, not a cause. Where the run patched
    heads (its `patching` table's head rows: a head's output from the clean prompt into the corrupted one), what the
    most strongly locking head restores, beside the head that restores most."""
    said = "Locking is a correlation: a head's wave moves with the answer, which does not show that the model uses it."
    locks = grid[grid["locks"]]
    if locks.empty or not run.has(Table.PATCHING):
        return said
    heads = run.table(Table.PATCHING)
    heads = heads[heads["kind"] == "head"]
    top = locks.loc[locks["locking"].idxmax()]
    mine = heads[(heads["layer"] == int(top["layer"])) & (heads["head"] == int(top["head"]))]
    if mine.empty:
        return said
    best = heads.loc[heads["recovered"].idxmax()]
    one = mine.iloc[0]
    return (f"{said} Patched from a clean prompt into a corrupted one (over {int(one['n'])} pairs of {run.split} "
            f"questions), head {int(top['head'])} of layer {int(top['layer'])}, the strongest lock "
            f"(R = {top['locking']:.2f}), restores "
            f"{100 * one['recovered']:.0f}% of the logit difference; the head that restores most, head "
            f"{int(best['head'])} of layer {int(best['layer'])}, {100 * best['recovered']:.0f}%.")


def one_head_locking(run: RunReader, layer: int, head: int) -> pd.DataFrame:
    """One head's locking at each short period, as the page shows it: R, the chance threshold, where its wave
    peaks against the answer, and whether it locks by the modules' rule."""
    rows = locking_by_head(run)
    rows = rows[(rows["layer"] == int(layer)) & (rows["head"] == int(head))]
    return pd.DataFrame({"period T": [f"{T:g}" for T in rows["period"]], "locking R": rows["locking"].round(3),
                         "chance threshold": rows["null_95"].round(3),
                         "peak at answer + (numbers)": rows["offset"].round(2),
                         "locks": ["yes" if x else "no" for x in rows["locks"]]})
