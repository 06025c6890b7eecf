"""The tables a run holds: each table's required columns, which tables a run may lack, and the check of a frame
against its columns. One place, read by the writer and the readers (core.runs.cache, core.runs.reader)."""

from __future__ import annotations

import pandas as pd

from core.errors import CoreError

#: Required columns of each table. A table may carry more.
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "examples": ("id", "split", "a", "b", "answer", "prompt", "prediction", "correct", "loss"),
    "layer_accuracy": ("layer", "final_norm", "exact", "within_2", "within_10", "n"),
    "module_spectra": ("basis", "module", "layer", "k", "period", "magnitude"),
    "module_spectra_baseline": (
        "basis",
        "module",
        "layer",
        "k",
        "period",
        "magnitude",
        "magnitude_p95",
        "rms_norm",
        "match",
    ),
    "module_logits": ("example_id", "module", "layer", "number", "logit"),
    "final_waves": ("example_id", "basis", "rank", "k", "period", "magnitude", "number", "value"),
    "embedding_spectrum": ("basis", "matrix", "k", "period", "magnitude", "null_mean", "null_threshold", "outlier"),
    "embedding_clusters": ("matrix", "number", "x", "y", "cluster", "last_digit"),
    "ablations": ("modules", "removed", "tau", "keep_k", "label", "accuracy", "loss", "n", "erased", "rank", "width"),
    "ablation_errors": ("modules", "removed", "tau", "keep_k", "error", "count"),
    "error_analysis": ("source", "n", "n_wrong", "accuracy", "share_multiple_of_10"),
    "training_log": ("seed", "epoch", "split", "accuracy", "loss"),
    "number_spectrum": ("layer", "basis", "k", "period", "magnitude", "null_mean", "null_threshold", "outlier"),
    "number_probes": ("layer", "modulus", "role", "kappa_mean", "kappa_sd", "n_splits"),
    "generations": ("id", "shots", "a", "b", "answer", "prompt", "generated", "prediction", "is_number", "correct"),
    "phase_locking": ("kind", "layer", "period", "locking", "offset", "energy_share", "null_95", "n"),
    "wave_peaks": ("example_id", "top", "answer", "peak", "at_answer"),
    "phase_shift": (
        "kind", "layer", "period_set", "d", "control", "draw", "n", "moved", "stayed", "elsewhere", "residue_moved",
    ),
    "phase_shift_answers": ("condition", "example", "residue_moved", "stayed"),
    "group_shift": (
        "group", "kind", "first_layer", "layer", "period_set", "d", "control", "draw", "n", "moved", "stayed",
        "elsewhere", "residue_moved",
    ),
    "group_shift_answers": ("condition", "example", "residue_moved", "stayed"),
    "period_ablation": (
        "modules", "slice", "reading", "control", "draw", "frequencies", "rank", "energy_share", "accuracy", "n",
        "correct",
    ),
    "number_rows_origin": ("number", "start_norm", "moved", "cosine"),
    "patching": ("kind", "layer", "head", "n", "recovered", "recovered_low", "recovered_high", "moved", "patched_gap",
                 "clean_gap", "corrupt_gap"),
    "head_spectra": ("basis", "layer", "head", "k", "period", "magnitude"),
    "head_locking": ("layer", "head", "period", "locking", "offset", "energy_share", "null_95", "n"),
    "helix_fit": ("layer", "model", "rank", "explained_mean", "explained_sd", "n_train", "n_test", "n_splits"),
    "helix_points": ("layer", "period", "number", "x", "y", "z", "fit_x", "fit_y", "fit_z"),
    "helix_patching": ("layer", "condition", "draw", "rank", "n", "recovered", "recovered_low", "recovered_high",
                       "moved"),
}
#: Tables a run may lack: the training log (models trained here only), k-shot generations (models whose numbers are
#: not single tokens), the phase shift (runs cached without the weights here; per-question answers since
#: core.runs.shift_run.SHIFT_VERSION 2), the group shift and the periods-only ablation (the same, and runs cached
#: before them), the rows against their start (number-token fine-tunings with trained rows: core.training.row_start),
#: activation patching, attention head by head and the helix (runs cached without the weights here, or before them;
#: a layout whose heads cannot be read has no head tables).
#: A run also lacks the tables its manifest's `not_applicable` names, each with the reason (see `required_tables`).
OPTIONAL_TABLES = ("training_log", "generations", "phase_shift", "phase_shift_answers", "group_shift",
                   "group_shift_answers", "period_ablation", "number_rows_origin", "patching", "head_spectra",
                   "head_locking", "helix_fit", "helix_points", "helix_patching")
REQUIRED_TABLES = tuple(t for t in TABLE_COLUMNS if t not in OPTIONAL_TABLES)


def required_tables(manifest: dict | None) -> tuple[str, ...]:
    """The tables a run must have: all but the optional ones, those its manifest says do not apply
    (`not_applicable`) and those `precompute --stages` left out (`not_computed`)."""
    skip = {**((manifest or {}).get("not_applicable") or {}), **((manifest or {}).get("not_computed") or {})}
    return tuple(t for t in REQUIRED_TABLES if t not in skip)


def check_table(name: str, frame: pd.DataFrame) -> None:
    if name not in TABLE_COLUMNS:
        raise CoreError(f"unknown table {name!r}")
    missing = [c for c in TABLE_COLUMNS[name] if c not in frame.columns]
    if missing:
        raise CoreError(f"table {name} lacks columns {missing}")
