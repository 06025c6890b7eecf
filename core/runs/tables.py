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
    # patching since version 2 also carries direction, contrast, from_layer and modules (core.analysis.patch_table);
    # a version-1 table lacks them and reads as denoising at contrast 1 (with_defaults), so they are not required
    "patching": ("kind", "layer", "head", "n", "recovered", "recovered_low", "recovered_high", "moved", "patched_gap",
                 "clean_gap", "corrupt_gap"),
    "head_spectra": ("basis", "layer", "head", "k", "period", "magnitude"),
    "head_locking": ("layer", "head", "period", "locking", "offset", "energy_share", "null_95", "n"),
    "helix_fit": ("layer", "model", "rank", "explained_mean", "explained_sd", "n_train", "n_test", "n_splits"),
    "helix_points": ("layer", "period", "number", "x", "y", "z", "fit_x", "fit_y", "fit_z"),
    "helix_patching": ("layer", "condition", "draw", "rank", "n", "recovered", "recovered_low", "recovered_high",
                       "moved"),
    "position_patching": ("position", "token", "role", "layer", "n", "recovered", "recovered_low", "recovered_high",
                          "moved", "patched_gap", "clean_gap", "corrupt_gap"),
    "attribution": ("kind", "layer", "head", "n", "attributed", "attributed_low", "attributed_high", "effect",
                    "clean_gap", "corrupt_gap"),
    "helix_clock": ("layer", "condition", "draw", "rank", "n", "recovered", "recovered_low", "recovered_high", "moved"),
    "neuron_fits": ("layer", "neuron", "helix_r2", "heuristic_r2", "n_fit", "n_scored"),
    "neurons": ("selection", "k", "draw", "n", "accuracy", "last_digit_shift", "helix_r2_mean", "heuristic_r2_mean",
                "overlap"),
}
#: Tables a run may lack: the training log (models trained here only), k-shot generations (models whose numbers are
#: not single tokens), the phase shift (runs cached without the weights here; per-question answers since
#: core.runs.shift_run.SHIFT_VERSION 2), the group shift and the periods-only ablation (the same, and runs cached
#: before them), the rows against their start (number-token fine-tunings with trained rows: core.training.row_start),
#: activation patching, attribution patching, attention head by head and the helix (runs cached without the weights
#: here, or before them; a layout whose heads cannot be read has no head tables), and the neuron-level test (written
#: by `python -m core neurons RUN` alone, core.runs.neuron_run).
#: A run also lacks the tables its manifest's `not_applicable` names, each with the reason (see `required_tables`).
OPTIONAL_TABLES = ("training_log", "generations", "phase_shift", "phase_shift_answers", "group_shift",
                   "group_shift_answers", "period_ablation", "number_rows_origin", "patching", "head_spectra",
                   "head_locking", "helix_fit", "helix_points", "helix_patching", "attribution", "position_patching",
                   "helix_clock", "neuron_fits", "neurons")
REQUIRED_TABLES = tuple(t for t in TABLE_COLUMNS if t not in OPTIONAL_TABLES)

#: The columns of each table that may be null (NaN or None), and why; every other column of a table (the extra ones
#: it carries too) can never be missing, and `verify` fails on NaN there (core.runs.table_checks), as it does on
#: infinity in any column. Found by reading every shipped run's tables and the code that writes them.
NULLABLE_COLUMNS: dict[str, dict[str, str]] = {
    "ablations": {
        "tau": "keep-K, none and periods rows have no cutoff",
        "keep_k": "only keep-K rows keep a frequency",
        "keep_period": "only keep-K rows keep a frequency",
        "mean_abs_error": "a condition with no wrong number answers",
        "share_multiple_of_10": "a condition with no wrong number answers",
        "share_within_2": "a condition with no wrong number answers",
        "energy_removed": "modules whose outputs carry no energy (or a run cached before it was measured)",
    },
    "ablation_errors": {"tau": "keep-K and none rows have no cutoff", "keep_k": "only keep-K rows keep a frequency"},
    "error_analysis": {
        "mean_abs_error": "no wrong number answers",
        "share_multiple_of_10": "no wrong number answers",
        "share_within_2": "no wrong number answers",
    },
    "patching": {
        "recovered": "clean and corrupted gaps too close to divide by",
        "recovered_low": "one pair (no bootstrap), or a draw whose gaps are too close",
        "recovered_high": "one pair (no bootstrap), or a draw whose gaps are too close",
    },
    "position_patching": {
        "recovered": "clean and corrupted gaps too close to divide by",
        "recovered_low": "one pair (no bootstrap), or a draw whose gaps are too close",
        "recovered_high": "one pair (no bootstrap), or a draw whose gaps are too close",
    },
    "attribution": {
        "attributed": "clean and corrupted gaps too close to divide by",
        "attributed_low": "one pair (no bootstrap), or a draw whose gaps are too close",
        "attributed_high": "one pair (no bootstrap), or a draw whose gaps are too close",
    },
    "helix_patching": {
        "recovered": "clean and corrupted gaps too close to divide by",
        "recovered_low": "one pair (no bootstrap), or a draw whose gaps are too close",
        "recovered_high": "one pair (no bootstrap), or a draw whose gaps are too close",
    },
    "helix_clock": {
        "recovered": "clean and corrupted gaps too close to divide by",
        "recovered_low": "one pair (no bootstrap), or a draw whose gaps are too close",
        "recovered_high": "one pair (no bootstrap), or a draw whose gaps are too close",
    },
    "phase_locking": {"locking": "one example cannot lock", "null_95": "one example cannot lock"},
    "head_locking": {"locking": "one example cannot lock", "null_95": "one example cannot lock"},
    **{
        table: {
            **{share: "no answer could move by d (n = 0)" for share in ("moved", "stayed", "elsewhere",
                                                                        "residue_moved")},
            "edit_size": "not measured",
        }
        for table in ("phase_shift", "group_shift")
    },
    "number_rows_origin": {"cosine": "a row that starts or ends at zero"},
    "neurons": {"helix_r2_mean": "the unedited model's row ablates no neuron",
                "heuristic_r2_mean": "the unedited model's row ablates no neuron"},
}
#: Columns that are shares (in [0, 1]) in each table.
SHARE_COLUMNS: dict[str, tuple[str, ...]] = {
    "layer_accuracy": ("exact", "within_2", "within_10"),
    "ablations": ("accuracy", "within_2", "within_10", "parity_match", "energy_removed", "share_multiple_of_10",
                  "share_within_2"),
    "error_analysis": ("accuracy", "share_multiple_of_10", "share_within_2"),
    "training_log": ("accuracy",),
    "phase_locking": ("locking", "energy_share", "null_95", "constant_phase"),
    "head_locking": ("locking", "energy_share", "null_95", "constant_phase"),
    **{table: ("accuracy", "moved", "stayed", "elsewhere", "residue_moved", "moved_high", "moved_low")
       for table in ("phase_shift", "group_shift")},
    "period_ablation": ("accuracy", "energy_share"),
    "patching": ("moved",),
    "helix_patching": ("moved",),
    "helix_clock": ("moved",),
    "position_patching": ("moved",),
    "neurons": ("accuracy", "last_digit_shift"),
}
#: Tables whose rows each count questions, pairs or examples read (`n` > 0).
COUNTED_TABLES = ("layer_accuracy", "ablations", "error_analysis", "phase_locking", "head_locking", "period_ablation",
                  "patching", "helix_patching", "helix_clock", "attribution", "position_patching", "neurons")
#: Point estimates with their interval (point, low, high) in each table: low <= point <= high within rounding.
INTERVALS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "patching": (("recovered", "recovered_low", "recovered_high"),),
    "helix_patching": (("recovered", "recovered_low", "recovered_high"),),
    "helix_clock": (("recovered", "recovered_low", "recovered_high"),),
    "attribution": (("attributed", "attributed_low", "attributed_high"),),
    "position_patching": (("recovered", "recovered_low", "recovered_high"),),
}


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
