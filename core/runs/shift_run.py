"""The phase-shift stage of a run: the `phase_shift` table (core.analysis.phase_shift), over every example (for
a deep model, a screen of every module and every condition of the modules it keeps on a fixed sample:
core.runs.sampled_design).

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
from core.runs.sampled_design import screened_modules

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


def phase_shift_table(loaded, texts, answers, p: int, opts, log=print, design=None) -> pd.DataFrame:
    """The `phase_shift` table of a run (module docstring). `opts`: the run's PrecomputeOptions (batch_size,
    progress are read). Under a sampled `design` (core.runs.sampled_design): a screen of every attention and MLP
    layer on the sample's first questions, then every condition for the modules it keeps and the residual stream
    on the whole sample; the modules it drops keep their screen rows."""
    W_U = loaded.unembedding(p).double().cpu().numpy()
    specs = shift_specs(p, loaded.n_layers)
    answers = np.asarray(answers)
    if design is None:
        return _table(_shift_rows(loaded, W_U, texts, answers, p, specs, opts, log))
    order = {(s["kind"], s["layer"], s["period_set"], s["d"], s["control"], s["draw"]): i for i, s in enumerate(specs)}
    screen_specs = [s for s in specs if s["period_set"] == CONTROLLED_SET and not s["control"] and s["kind"] != RESID]
    if not screen_specs:  # no shift of all four short periods on this number line: the sample reads every module
        return _table(_shift_rows(loaded, W_U, [texts[i] for i in design.sample], answers[design.sample], p, specs,
                                  opts, log))
    screen = design.sample[: design.screen]
    screen_rows = _shift_rows(loaded, W_U, [texts[i] for i in screen], answers[screen], p, screen_specs, opts, log,
                              "phase-shift screen")
    kept = {*screened_modules(pd.DataFrame(screen_rows)), (RESID, int(loaded.n_layers))}
    log(f"phase shift: the screen keeps {', '.join(f'{k} {l}' for k, l in sorted(kept))}")
    full_specs = [s for s in specs if (s["kind"], s["layer"]) in kept]
    rows = [r for r in screen_rows if (r["kind"], r["layer"]) not in kept]
    rows += _shift_rows(loaded, W_U, [texts[i] for i in design.sample], answers[design.sample], p, full_specs, opts,
                        log)
    rows.sort(key=lambda r: order[(r["kind"], r["layer"], r["period_set"], r["d"], r["control"], r["draw"])])
    return _table(rows)


def _shift_rows(loaded, W_U, texts, answers, p: int, specs, opts, log, what: str = "phase shift") -> list[dict]:
    """One row per spec: the answers on `texts` with that shift, against the unedited answers (one pass)."""
    basis = fourier_basis(p, "paper")
    built = {key: phase_shift(W_U, basis, PERIOD_SETS[key[0]], key[1])
             for key in dict.fromkeys((s["period_set"], s["d"]) for s in specs)}
    directions = [random_direction(W_U, CONTROL_SEED + draw) for draw in range(CONTROL_DRAWS)]
    # lowest layer first, so each call's conditions edit nearby layers and share the blocks below them
    by_layer = sorted(range(len(specs)), key=lambda i: (specs[i]["layer"], i))
    conditions = [Condition(None)]
    for i in by_layer:
        s = specs[i]
        edit = built[(s["period_set"], s["d"])]
        if s["control"]:
            edit = edit.control(directions[s["draw"]])
        conditions.append(Condition(edit, s["kind"], s["layer"]))
    log(f"{what}: {len(specs)} conditions ({len(built)} distinct shifts), {len(texts)} prompts")
    evaluated = evaluate_conditions(
        loaded, texts, answers, p, conditions, "last", opts.batch_size, progress=opts.progress,
        desc=f"{what} ({len(specs)} conditions)",
    )
    before = evaluated[0].predictions
    evaluations = [None] * len(specs)
    for i, ev in zip(by_layer, evaluated[1:]):
        evaluations[i] = ev
    rows = []
    for s, ev in zip(specs, evaluations):
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
    return rows


def _table(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    table["layer"] = table["layer"].astype(np.int64)
    return table
