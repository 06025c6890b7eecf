"""The periods-only ablation of a run: the `period_ablation` table (core.analysis.period_filters), over every
question.

For attention and for the MLPs (every layer's output at the answer position, as the paper's Table 1 filters), three
narrow removals: the paper's periods (2, 2.5, 5, 10), a low slice and a high slice of as many frequencies, each
built from W_U and from W_U read through the final norm's gain; beside each, `PERIOD_DRAWS` energy-matched random
controls of its own rank (random directions of W_U's row space that remove as much of those modules' output energy
as the slice does). All conditions run in one answer-position pass per batch. One row a condition: which modules,
slice, reading, control and draw, the frequencies and rank, the share of the outputs' energy removed, the accuracy,
the questions read and how many were right. The rule that reads it is core.claims.periods'.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from core.analysis.ablations import Condition
from core.analysis.evaluation import evaluate_conditions
from core.analysis.filters import energy_matched_filter, projection_filter, removed_energy_share
from core.analysis.fourier import fourier_basis
from core.analysis.period_filters import PAPER_PERIODS, READINGS, SLICES, gain_weighted, slice_frequencies
from core.errors import CoreError
from core.models.names import ATTN, MLP
from core.runs.ablation_grid import module_second_moments

#: Energy-matched control draws per removal (their mean and spread are reported).
PERIOD_DRAWS = 5
PERIOD_SEED = 52104
#: Version of the stage's measurement (the manifest's `period_ablation.version`).
PERIOD_VERSION = 1
#: The module kinds filtered.
PERIOD_MODULES = (ATTN, MLP)


def period_filters(loaded, p: int, basis_name: str, second_moments: dict, periods=PAPER_PERIODS,
                   modules=PERIOD_MODULES, slices=SLICES, draws: int = PERIOD_DRAWS) -> list[tuple[dict, object]]:
    """[(spec, filter)] of every condition (module docstring): spec has modules, slice, reading, control, draw,
    frequencies, rank, energy_share."""
    unembedding = loaded.unembedding(p)
    weight_dtype = getattr(unembedding, "weight_dtype", None)
    W_U = unembedding.double().cpu().numpy()
    gain = loaded.final_norm_gain()  # as the files store it, like W_U (whatever dtype the model runs in)
    readings = {READINGS[0]: W_U, **({READINGS[1]: gain_weighted(W_U, gain)} if gain is not None else {})}
    basis = fourier_basis(p, basis_name)
    out = []
    for slice_name, ks in slice_frequencies(p, periods).items():
        if slice_name not in slices:
            continue
        for reading, matrix in readings.items():
            flt = projection_filter(matrix, basis, ks, weight_dtype)
            for kind in modules:
                C = second_moments[kind]
                share = removed_energy_share(flt, C)
                base = {"modules": kind, "slice": slice_name, "reading": reading,
                        "frequencies": ", ".join(map(str, ks)), "rank": flt.rank}
                out.append(({**base, "control": False, "draw": -1, "energy_share": share}, flt))
                for draw in range(draws):
                    seed = PERIOD_SEED + 1000 * draw + 17 * SLICES.index(slice_name) + 7 * READINGS.index(reading)
                    matched = energy_matched_filter(matrix, flt.rank, seed, C, share, weight_dtype)
                    out.append(({**base, "control": True, "draw": draw, "energy_share": matched.share}, matched.flt))
    return out


def period_ablation_table(loaded, texts, answers, p: int, basis_name: str = "paper", positions: str = "last",
                          batch_size: int = 32, progress=None, log=print, periods=PAPER_PERIODS,
                          modules=PERIOD_MODULES, slices=SLICES, draws: int = PERIOD_DRAWS) -> pd.DataFrame:
    """The `period_ablation` table over every one of `texts` (module docstring), with the unedited model's row first
    (slice "none")."""
    with torch.no_grad():
        moments = module_second_moments(loaded, list(texts), batch_size, progress)
    built = period_filters(loaded, p, basis_name, moments, periods, modules, slices, draws)
    log(f"periods-only ablation: {len(built)} conditions, {len(texts)} prompts")
    conditions = [Condition(None)] + [Condition(flt, spec["modules"]) for spec, flt in built]
    with torch.no_grad():
        evaluated = evaluate_conditions(loaded, list(texts), np.asarray(answers), p, conditions, positions,
                                        batch_size, progress=progress,
                                        desc=f"periods-only ablation ({len(built)} conditions)")
    n, answers = len(texts), np.asarray(answers)
    rows = [{"modules": "none", "slice": "none", "reading": "", "control": False, "draw": -1, "frequencies": "",
             "rank": 0, "energy_share": 0.0}]
    rows += [spec for spec, _ in built]
    for row, ev in zip(rows, evaluated):
        row.update({"accuracy": ev.accuracy, "n": n, "correct": int((np.asarray(ev.predictions) == answers).sum())})
    return pd.DataFrame(rows).astype({"rank": np.int64, "draw": np.int64, "n": np.int64, "correct": np.int64})


def has_periods(p: int, periods=PAPER_PERIODS) -> bool:
    """Whether the number line 0..p-1 has every period as a frequency (and a high slice beside them)."""
    try:
        slice_frequencies(p, periods)
    except CoreError:
        return False
    return True


def period_note(periods=PAPER_PERIODS) -> dict:
    """What the manifest says about the table."""
    return {"version": PERIOD_VERSION, "periods": list(periods), "draws": PERIOD_DRAWS}


def write_period_table(writer, loaded, texts, answers, p: int, opts, log=print) -> dict:
    """The table over every one of `texts` into `writer`'s staging folder; the manifest's note on it. `opts`: the
    run's PrecomputeOptions (basis, positions, batch_size, progress are read)."""
    frame = period_ablation_table(loaded, texts, answers, p, opts.basis, opts.positions, opts.batch_size,
                                  opts.progress, log)
    writer.write("period_ablation", frame)
    return period_note()
