"""What a run's tables say, checked against themselves, each other and the model's shape: what a deep `verify`
checks beyond checksums and the manifest's fields (core.runs.manifest_checks).

A table whose checksum was recomputed after an edit (or one written from a model whose activations overflowed)
passes the checksum; these checks catch what it says that cannot be:
- NaN in a column that can never be missing (core.runs.tables.NULLABLE_COLUMNS names the ones that may be null,
  and why), infinity in any column;
- layers and heads outside the model's shape (the manifest's n_layers and heads.n_heads): layers 0..n_layers
  (0: the embeddings) where a table reads the stream, 1..n_layers where it edits or reads a layer's modules or
  heads, heads 0..n_heads-1 (-1 on a patching or attribution row that is not a head's);
- each table's own invariants: shares in [0, 1] (core.runs.tables.SHARE_COLUMNS), counts above 0
  (COUNTED_TABLES), an interval running low to high and no further from its point than its own width (INTERVALS: a
  percentile bootstrap interval of a ratio need not hold its point), all within rounding (`ROUNDING`; a patching
  share also within its gaps' float32 rounding over their spread, `share_rounding`);
- the unfiltered accuracy and loss (the ablations row modules=none, removed=none) against the examples table's mean
  of correct and of loss over the same questions (the manifest's accuracy is checked against the same mean by
  core.runs.manifest_checks.summary_problems), to `NEAR_TIE_POINTS`: the grid's pass and the measuring pass are
  separate float32 passes, and a near tie may round the other way in one of them.

Each problem is one line naming the table, the column and how many rows, ending in what to do.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.runs.manifest_checks import LAYER_TABLES
from core.runs.tables import COUNTED_TABLES, INTERVALS, NULLABLE_COLUMNS, SHARE_COLUMNS

#: How far a share may stray outside [0, 1], or a point outside its interval, by rounding alone.
ROUNDING = 1e-9
#: A float32 logit gap's rounding, relative to the gap: a patching share is a difference of such gaps over their
#: spread (clean - corrupt), so its rounding is this times the gaps over the spread (large where the spread is tiny).
GAP_ROUNDING = 1e-5
#: How many points the unfiltered accuracy may differ from the examples table's over the same questions (or one
#: question, if more): near ties rounded the other way (core.runs.ablate.AGREE_POINTS, the same rule).
NEAR_TIE_POINTS = 0.1
#: The unfiltered loss against the examples table's mean loss: relative difference allowed (float32 rounding).
LOSS_TOLERANCE = 1e-3
#: What to do about a table whose content cannot be.
RECOMPUTE = "the table was edited or the run is broken; recompute the run"
#: Tables read for the checks between tables (`cross_table_problems`).
CROSS_TABLES = ("examples", "ablations")
#: Tables that read a layer's heads: layers 1..n_layers (the others: 0..n_layers).
MODULE_LAYER_TABLES = ("head_spectra", "head_locking")
#: Tables of patching sites (kind: the stream from layer 0, modules and heads from 1; head -1 on a site that is no
#: head's).
SITE_TABLES = ("patching", "attribution")
#: Tables whose layers core.runs.manifest_checks already holds to the manifest's n_layers (not named twice here).
CHECKED_LAYERS = (*LAYER_TABLES, "phase_shift", "group_shift")


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def n_heads_of(manifest: dict) -> int | None:
    """The model's heads a layer, as the run recorded them (its heads stage), None where it did not."""
    heads = manifest.get("heads")
    return _int(heads.get("n_heads")) if isinstance(heads, dict) else None


def missing_value_problems(table: str, frame: pd.DataFrame) -> list[str]:
    """NaN (or None) in a column that can never be missing, infinity in any numeric column (numpy on each column:
    a whole number or boolean column holds neither)."""
    nullable = NULLABLE_COLUMNS.get(table, {})
    problems = []
    for column, values in frame.items():
        dtype = values.dtype
        if isinstance(dtype, np.dtype) and dtype.kind in "iub":
            continue  # whole numbers and booleans in numpy hold no NaN and no infinity
        if isinstance(dtype, np.dtype) and dtype.kind == "f":
            array = values.to_numpy()
            missing, infinite = int(np.isnan(array).sum()), int(np.isinf(array).sum())
        else:  # text, categories, nullable numbers
            missing, infinite = int(values.isna().sum()), 0
        if missing and column not in nullable:
            problems.append(f"table {table}: column {column} is NaN or empty in {_rows(missing)} of {len(frame)}, "
                            f"and it can never be missing (a model whose activations overflowed writes NaN): "
                            f"{RECOMPUTE} (in float32 if the model overflows)")
        if infinite:
            problems.append(f"table {table}: column {column} is infinite in {_rows(infinite)} of {len(frame)}: "
                            f"{RECOMPUTE} (in float32 if the model overflows)")
    return problems


def _outside(table: str, column: str, values, low: int, high: int, what: str) -> list[str]:
    values = np.asarray(values, dtype=float)
    bad = values[(values < low) | (values > high)]
    if not len(bad):
        return []
    return [f"table {table}: {_rows(len(bad))} at {column} {int(bad.min())}..{int(bad.max())}, outside {what} "
            f"{low}..{high}: {RECOMPUTE}"]


def shape_problems(manifest: dict, table: str, frame: pd.DataFrame) -> list[str]:
    """Layers and heads against the model's shape (module docstring)."""
    n_layers, n_heads = _int(manifest.get("n_layers")), n_heads_of(manifest)
    problems = []
    if n_layers is not None:
        model = f"the model's {n_layers} layers:"
        if "layer" in frame.columns and table not in CHECKED_LAYERS:
            layers = frame["layer"]
            if table in SITE_TABLES and "kind" in frame.columns:
                stream = frame["kind"] == "resid"
                problems += _outside(table, "layer", layers[stream], 0, n_layers, f"{model} the stream after layers")
                problems += _outside(table, "layer", layers[~stream], 1, n_layers, f"{model} modules and heads of")
            elif table in MODULE_LAYER_TABLES:
                problems += _outside(table, "layer", layers, 1, n_layers, f"{model} layers")
            else:
                problems += _outside(table, "layer", layers, 0, n_layers, f"{model} layers (0: the embeddings)")
        if "first_layer" in frame.columns:
            problems += _outside(table, "first_layer", frame["first_layer"], 1, n_layers, f"{model} layers")
    if "head" in frame.columns:
        heads = frame["head"]
        if table in SITE_TABLES and "kind" in frame.columns:
            is_head = frame["kind"] == "head"
            problems += _outside(table, "head", heads[~is_head], -1, -1, "a site that is no head: head")
            heads = heads[is_head]
        if n_heads is not None:
            problems += _outside(table, "head", heads, 0, n_heads - 1, f"the model's {n_heads} heads:")
    return problems


def invariant_problems(table: str, frame: pd.DataFrame) -> list[str]:
    """Shares in [0, 1], counts above 0 and points inside their intervals, within rounding."""
    problems = []
    for column in SHARE_COLUMNS.get(table, ()):
        if column in frame.columns:
            values = frame[column].to_numpy(dtype=float)
            bad = values[(values < -ROUNDING) | (values > 1 + ROUNDING)]  # NaN is neither: missing values are not here
            if len(bad):
                problems.append(f"table {table}: column {column} is a share but is {float(bad[0]):g} in "
                                f"{_rows(len(bad))} (shares lie in [0, 1]): {RECOMPUTE}")
    if table in COUNTED_TABLES and "n" in frame.columns:
        counts = frame["n"].to_numpy(dtype=float)
        bad = counts[counts <= 0]
        if len(bad):
            problems.append(f"table {table}: column n (questions read) is {int(bad[0])} in {_rows(len(bad))}, "
                            f"and every row reads at least one: {RECOMPUTE}")
    for point, low, high in INTERVALS.get(table, ()):
        if {point, low, high} <= set(frame.columns):
            p, lo, hi = (frame[c].to_numpy(dtype=float) for c in (point, low, high))
            known = np.isfinite(p) & np.isfinite(lo) & np.isfinite(hi)
            # a percentile bootstrap interval of a ratio of means need not hold its point (skewed draws, few pairs),
            # but it runs low to high and cannot lie further from its point than its own width and its rounding
            slack = share_rounding(frame, p) + np.where(known, np.abs(hi - lo), 0)
            bad = known & ((lo > hi + ROUNDING) | (lo > p + slack) | (p > hi + slack))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                problems.append(f"table {table}: {point} lies far outside its interval {low}..{high}, or the interval "
                                f"runs backwards, in {_rows(int(bad.sum()))} (first: {p[i]:g} against "
                                f"{lo[i]:g}..{hi[i]:g}): {RECOMPUTE}")
    return problems


def share_rounding(frame: pd.DataFrame, point: np.ndarray) -> np.ndarray:
    """How far each row's point may be off by rounding alone: ROUNDING, and where the row holds the mean logit gaps
    its share was made from (patching: `clean_gap`, `corrupt_gap`, `patched_gap`), GAP_ROUNDING times the largest
    gap over the spread |clean - corrupt| (a share of a spread near float32's noise is that noisy)."""
    rounding = ROUNDING * np.maximum(1.0, np.abs(point))
    if not {"clean_gap", "corrupt_gap"} <= set(frame.columns):
        return rounding
    gaps = frame[[c for c in ("clean_gap", "corrupt_gap", "patched_gap") if c in frame]].abs().max(axis=1)
    spread = (frame["clean_gap"] - frame["corrupt_gap"]).abs().to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        noise = np.where(spread > 0, GAP_ROUNDING * gaps.to_numpy(dtype=float) / spread, 0.0)
    return rounding + np.nan_to_num(noise)


def content_problems(manifest: dict, table: str, frame: pd.DataFrame) -> list[str]:
    """Everything one table says that cannot be (module docstring), `cross_table_problems` aside."""
    if not len(frame):
        return []
    manifest = manifest if isinstance(manifest, dict) else {}
    return missing_value_problems(table, frame) + shape_problems(manifest, table, frame) + invariant_problems(
        table, frame)


def cross_table_problems(frames: dict[str, pd.DataFrame]) -> list[str]:
    """The unfiltered accuracy and loss of the ablation grid against the examples table's, over the same questions
    (module docstring); `frames` holds the `CROSS_TABLES` a deep verify read (either may be absent)."""
    examples, ablations = frames.get("examples"), frames.get("ablations")
    if examples is None or ablations is None or not len(examples):
        return []
    if not {"modules", "removed", "accuracy", "n"} <= set(ablations.columns) or "correct" not in examples.columns:
        return []
    unfiltered = ablations[(ablations["modules"] == "none") & (ablations["removed"] == "none")]
    unfiltered = unfiltered[unfiltered["n"] == len(examples)]  # the same questions (a sampled grid reads others)
    if not len(unfiltered):
        return []
    row, n = unfiltered.iloc[0], len(examples)
    split = ", ".join(sorted({str(s) for s in examples["split"]})) if "split" in examples.columns else "the"
    accuracy, own = float(row["accuracy"]), float(examples["correct"].mean())
    problems = []
    if np.isfinite(accuracy) and abs(accuracy - own) > max(NEAR_TIE_POINTS / 100, 1 / n) + ROUNDING:
        problems.append(f"table ablations: the unfiltered accuracy (modules none, removed none) {accuracy:.2%} is not "
                        f"the examples table's {own:.2%} (the mean of correct over the same {n} {split} questions): "
                        f"{RECOMPUTE}")
    if "loss" in ablations.columns and "loss" in examples.columns:
        loss, own_loss = float(row["loss"]), float(examples["loss"].mean())
        if np.isfinite(loss) and np.isfinite(own_loss) and abs(loss - own_loss) > LOSS_TOLERANCE * max(1.0, own_loss):
            problems.append(f"table ablations: the unfiltered loss {loss:.4f} is not the examples table's mean loss "
                            f"{own_loss:.4f} (the same {n} {split} questions): {RECOMPUTE}")
    return problems
