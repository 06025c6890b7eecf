"""The phase-shift stage of a run: the `phase_shift` table (core.analysis.phase_shift), over every example.

For every attention and MLP layer and the residual stream after the last layer, every period set of
`PERIOD_SETS` and every shift d of `SHIFTS`, the model's answers with that module's waves moved by d,
against its answers unedited: the shares that moved to y + d, stayed at y, went elsewhere, and whose
last digit (residue) moved by d, with 95% Wilson intervals. Beside each shift of all four short periods,
`CONTROL_DRAWS` controls that move the same module by the same norm in a random direction of W_U's row
space. All conditions run in one answer-position pass per batch (the prefix runs once and its key/value
cache serves every condition, as in the ablation grid).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.ablations import Condition
from core.analysis.evaluation import evaluate_conditions
from core.analysis.fourier import fourier_basis
from core.analysis.phase import period_frequencies
from core.analysis.phase_shift import (
    CONTROL_DRAWS,
    CONTROL_SEED,
    PERIOD_SETS,
    SHIFTS,
    phase_shift,
    random_direction,
    residue_modulus,
    shift_outcomes,
    wilson_interval,
)
from core.models.names import ATTN, MLP, RESID

#: Period set whose shifts get random-direction controls.
CONTROLLED_SET = "all"


def shifted_modules(n_layers: int) -> list[tuple[str, int]]:
    """The (kind, layer) edited: attention 1..L, MLP 1..L, and the residual stream after layer L (the
    positive control: every wave the unembedding reads moves)."""
    L = int(n_layers)
    return [(ATTN, l) for l in range(1, L + 1)] + [(MLP, l) for l in range(1, L + 1)] + [(RESID, L)]


def shift_specs(p: int, n_layers: int, shifts=SHIFTS, draws: int = CONTROL_DRAWS) -> list[dict]:
    """Every condition of the stage as a dict (kind, layer, period_set, d, control, draw); draw -1 is the shift."""
    available = period_frequencies(p, sorted({t for ts in PERIOD_SETS.values() for t in ts}))
    specs = []
    for name, periods in PERIOD_SETS.items():
        if any(float(t) not in available for t in periods):
            continue  # a period the number line does not have (p - 1 not a multiple of 10)
        for d in shifts:
            if all(abs(d / t - round(d / t)) < 1e-9 for t in periods):
                continue  # d is a whole number of every period: the shift changes nothing (parity by 2)
            for kind, layer in shifted_modules(n_layers):
                specs.append({"kind": kind, "layer": layer, "period_set": name, "d": int(d), "control": False,
                              "draw": -1})
                if name == CONTROLLED_SET:
                    for draw in range(draws):
                        specs.append({"kind": kind, "layer": layer, "period_set": name, "d": int(d),
                                      "control": True, "draw": draw})
    return specs


def phase_shift_table(loaded, texts, answers, p: int, opts, log=print) -> pd.DataFrame:
    """The `phase_shift` table of a run (module docstring). `opts`: the run's PrecomputeOptions (batch_size,
    progress are read)."""
    W_U = loaded.unembedding(p).double().cpu().numpy()
    basis = fourier_basis(p, "paper")
    specs = shift_specs(p, loaded.n_layers)
    built = {key: phase_shift(W_U, basis, PERIOD_SETS[key[0]], key[1])
             for key in dict.fromkeys((s["period_set"], s["d"]) for s in specs)}
    directions = [random_direction(W_U, CONTROL_SEED + draw) for draw in range(CONTROL_DRAWS)]
    conditions = [Condition(None)]
    for s in specs:
        edit = built[(s["period_set"], s["d"])]
        if s["control"]:
            edit = edit.control(directions[s["draw"]])
        conditions.append(Condition(edit, s["kind"], s["layer"]))
    log(f"phase shift: {len(specs)} conditions ({len(built)} distinct shifts), {len(texts)} prompts")
    evaluations = evaluate_conditions(
        loaded, texts, answers, p, conditions, "last", opts.batch_size, progress=opts.progress,
        desc=f"phase shift ({len(specs)} conditions)",
    )
    before = evaluations[0].predictions
    rows = []
    for s, ev in zip(specs, evaluations[1:]):
        periods = PERIOD_SETS[s["period_set"]]
        out = shift_outcomes(before, ev.predictions, s["d"], p, residue_modulus(periods))
        low, high = wilson_interval(out["moved"], out["n"])
        rows.append({
            **s,
            "periods": ", ".join(f"{t:g}" for t in periods),
            **out,
            "moved_low": low,
            "moved_high": high,
            "accuracy": ev.accuracy,
            "misfit": built[(s["period_set"], s["d"])].misfit,
        })
    table = pd.DataFrame(rows)
    table["layer"] = table["layer"].astype(np.int64)
    return table
