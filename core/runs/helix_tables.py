"""The helix tables of a run (core.analysis.helix, Kantamneni & Tegmark 2025): `helix_fit`, the held-out variance a
helix explains by layer against PCA of the same rank and the shuffled helix, and `helix_points`, the 3-D view of the
best layer. Read off the same number representations as the number stage (core.runs.number_tables): from a model,
or from the vectors that stage already captured, so that one capture serves both. And `helix_patching`, the helix's
causal test over the run's questions (core.analysis.helix_patching): the stage `helix` of precompute.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from core.analysis.helix import (
    N_SPLITS,
    PERIODS,
    VIEW_PERIODS,
    basis_columns,
    best_layer,
    helix_fit_table,
    helix_points,
)
from core.analysis.helix_patching import answer_pairs, clock_layers, helix_patching, operand_pairs
from core.analysis.numbers import DEFAULT_N, number_representations
from core.errors import CoreError
from core.runs.cache import RunWriter, read_manifest, run_lock
from core.tasks import build_examples

#: The helix tables' version: raised when what they hold or how it is computed changes.
HELIX_VERSION = 1
#: Where the staging folder keeps the helix note until the manifest is written.
HELIX_JSON = "helix.json"


def helix_tables_from_vectors(vectors: np.ndarray, seed: int = 0, log=print, periods=PERIODS,
                              view_periods=VIEW_PERIODS, n_splits: int = N_SPLITS) -> dict[str, pd.DataFrame]:
    """{"helix_fit": ..., "helix_points": ...} of the numbers' vectors by layer, (L + 1, N, D) with row n the number
    n (`NumberRepresentations.vectors`); the splits and the shuffles seeded by `seed`."""
    t0 = time.time()
    kept, dropped = basis_columns(periods)
    fit = helix_fit_table(vectors, periods, n_splits=n_splits, seed=seed)
    layer = best_layer(fit)
    at = fit[fit["layer"] == layer].set_index("model")["explained_mean"]
    zero = f"; {', '.join(dropped)} is 0 at every whole n, dropped" if dropped else ""
    log(f"helix: basis {', '.join(kept)} (rank {len(kept)}{zero}); best layer {layer}: held-out variance explained "
        f"{at['helix']:.1%} by the helix, {at['pca']:.1%} by PCA of the same rank, {at['helix_shuffled']:.1%} "
        f"shuffled ({time.time() - t0:.0f}s)")
    points = helix_points(vectors, layer, periods, view_periods)
    return {"helix_fit": fit, "helix_points": points}


def helix_tables(loaded, n_numbers: int = DEFAULT_N, seed: int = 0, log=print, batch_size: int = 64,
                 progress=None) -> dict[str, pd.DataFrame]:
    """`helix_tables_from_vectors` of a model's numbers 0..n_numbers-1, captured by
    `core.analysis.numbers.number_representations` (its default context)."""
    t0 = time.time()
    reps = number_representations(loaded, n_numbers, batch_size=batch_size, progress=progress)
    log(f"helix: number representations: {reps.describe()} ({time.time() - t0:.0f}s)")
    periods = fitting_periods(n_numbers)
    return helix_tables_from_vectors(reps.vectors, seed, log, periods, tuple(T for T in VIEW_PERIODS if T in periods))


def has_helix(p: int) -> bool:
    """Whether the helix stage applies: the number line 0..p-1 fits a circle of period 10 at least (20 numbers); a
    shorter one (a test's 0..8) has only parity, no helix."""
    return 10 in fitting_periods(p)


def fitting_periods(n_numbers: int) -> tuple[float, ...]:
    """The helix's periods (2, 5, 10, 100) that a line of `n_numbers` numbers can fit (core.analysis.helix: each at
    most half of them); a shorter line (a demo's 0..186) drops 100."""
    return tuple(T for T in PERIODS if 2 * T <= n_numbers)


def helix_patch_table(loaded, examples, texts, p: int, max_operand: int, batch_size: int = 32, progress=None,
                      log=print) -> pd.DataFrame | None:
    """The helix's causal test over the run's questions (core.analysis.helix_patching), or None where no question's
    first operand is one token in both prompts of its pair (a model that splits numbers into digits)."""
    t0 = time.time()
    try:
        pairs = operand_pairs(loaded.tokenizer, examples, texts, max_operand)
        table = helix_patching(loaded, pairs, p, max_operand + 1, periods=fitting_periods(max_operand + 1),
                               batch_size=batch_size, progress=progress)
    except CoreError as exc:  # digits, or too few questions on either side of the split: the table is left out
        log(f"helix patching: left out: {exc}")
        return None
    log(f"helix patching: {table['condition'].nunique()} conditions at layers "
        f"{', '.join(map(str, sorted(table['layer'].unique())))} over {int(table['n'].iloc[0])} held-out pairs "
        f"({time.time() - t0:.0f}s)")
    return table


def helix_clock_table(loaded, examples, texts, p: int, max_operand: int, batch_size: int = 32, progress=None,
                      log=print) -> pd.DataFrame | None:
    """The Clock test (core.analysis.helix_patching.answer_pairs): the helix of the answer a + b, fitted on the
    answer position's stream of the questions whose answer is in one half of 0..p-1, put in at that position on the
    pairs (second operand one more) whose answer is in the other half, at `clock_layers`; the table has the columns
    of `helix_patching`. None where no pair keeps its token length (a model that splits numbers into digits)."""
    t0 = time.time()
    try:
        pairs = answer_pairs(loaded.tokenizer, examples, texts, max_operand)
        table = helix_patching(loaded, pairs, p, p, layers=clock_layers(loaded.n_layers),
                               periods=fitting_periods(p), batch_size=batch_size, progress=progress)
    except CoreError as exc:
        log(f"helix clock: left out: {exc}")
        return None
    log(f"helix clock: {table['condition'].nunique()} conditions at the answer position, layers "
        f"{', '.join(map(str, sorted(table['layer'].unique())))}, over {int(table['n'].iloc[0])} held-out pairs "
        f"({time.time() - t0:.0f}s)")
    return table


def write_helix_tables(writer, loaded, examples, texts, p: int, opts, log=print) -> dict:
    """The helix stage: `helix_fit` and `helix_points` over the numbers 0..p-1, and `helix_patching` over the run's
    questions where it applies, into `writer`'s staging folder; the manifest's note on them."""
    tables = helix_tables(loaded, p, opts.dataset_seed, log, progress=opts.progress)
    patched = helix_patch_table(loaded, examples, texts, p, opts.max_operand, opts.batch_size, opts.progress, log)
    if patched is not None:
        tables["helix_patching"] = patched
    clock = helix_clock_table(loaded, examples, texts, p, opts.max_operand, opts.batch_size, opts.progress, log)
    if clock is not None:
        tables["helix_clock"] = clock
    for name, frame in tables.items():  # all at once, at the end: a stage cut short leaves none, and is run again
        writer.write(name, frame)
    return helix_note(patched, p, clock)


def helix_note(patched: pd.DataFrame | None, p: int, clock: pd.DataFrame | None = None) -> dict:
    """What the manifest says of the helix tables: the version, the periods, the causal test's and the Clock test's
    held-out pairs (the latter only where the Clock test was made)."""
    note = {"version": HELIX_VERSION, "periods": list(fitting_periods(p)),
            "patching_pairs": int(patched["n"].iloc[0]) if patched is not None and len(patched) else 0}
    if clock is not None and len(clock):
        note["clock_pairs"] = int(clock["n"].iloc[0])
    return note


def add_helix_clock(target, batch_size: int = 32, log=print) -> pd.DataFrame | None:
    """The Clock test (`helix_clock_table`) of a run cached before it (`core.runs.ablate.Target` of the run: its model
    and its questions), written into the run as `helix_clock` with the manifest's helix note's `clock_pairs`; nothing
    else of the run changes. None (and nothing written) where it does not apply."""
    if target.run_name is None:
        raise CoreError("the Clock test is written into a run: name a run of the cache, not a model")
    everything = {e.id: e for e in build_examples(target.task, target.max_operand, target.dataset_seed)}
    examples = [everything[i] for i in target.ids]
    with torch.no_grad():
        clock = helix_clock_table(target.loaded, examples, target.texts, target.p, target.max_operand, batch_size,
                                  log=log)
    if clock is None:
        return None
    with run_lock(target.run_dir, target.run_name, log):
        manifest = read_manifest(target.run_dir, target.run_name)
        writer = RunWriter(target.run_dir, target.run_name, manifest.get("identity") or {},
                           manifest.get("options") or {})
        keep = writer.stage_published()
        writer.write("helix_clock", clock)
        keep["helix"] = {**(keep.get("helix") or {}), "clock_pairs": int(clock["n"].iloc[0])}
        writer.publish(keep)
    log(f"run {target.run_name}: table helix_clock written; nothing else recomputed")
    return clock

