"""The phase-shift stage of a run: the `phase_shift` and `phase_shift_answers` tables (core.analysis.phase_shift),
over every example (for a deep model, a screen of every module and every condition of the modules it keeps on a
fixed sample: core.runs.sampled_design).

For every attention and MLP layer and the residual stream after the last layer, every period set of
`PERIOD_SETS` and every shift d of `SHIFTS`, the model's answers with that module's waves moved by d,
against its answers unedited: the shares that moved to y + d, stayed at y, went elsewhere, and whose
last digit (residue) moved by d, with 95% Wilson intervals. Beside each shift of all four short periods,
`CONTROL_DRAWS` controls that move the same module by the same norm in a random direction of W_U's row
space. All conditions run in one answer-position pass per batch (the prefix runs once and its key/value
cache serves every condition, as in the ablation grid).

Every edit is capped (core.analysis.phase_shift, `capped_edit`): a capture pass over the first CALIBRATION
questions reads each module's outputs at the answer position, and each module's edit keeps the most directions
whose median size is within EDIT_CAP of those outputs' norms (the table's edit_size, kept, full_rank, misfit).
For the shifts of all four short periods (the verdict's set, edits and controls), `phase_shift_answers` keeps
each question's outcome, so that the verdict's interval can resample questions (core.analysis.shift_reading).
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
    moved_periods,
    random_direction,
    residue_modulus,
    shift_decomposition,
    shift_outcomes,
    wilson_interval,
)
from core.models.capture import iter_capture
from core.models.names import ATTN, MLP, RESID
from core.runs.sampled_design import screened_modules

#: Period set whose shifts get random-direction controls and per-question outcomes (the verdict's set).
CONTROLLED_SET = "all"
#: Questions whose module outputs set each module's edit cap (the first ones the stage reads).
CALIBRATION = 512
#: Version of the stage's measurement: 2 = capped edits and per-question outcomes (1: uncapped, pooled only).
SHIFT_VERSION = 2


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
            if not moved_periods(periods, d):
                continue  # d is a whole number of every period: the shift changes nothing (parity by 2)
            for kind, layer in shifted_modules(n_layers):
                specs.append({"kind": kind, "layer": layer, "period_set": name, "d": int(d), "control": False,
                              "draw": -1})
                if name == CONTROLLED_SET:
                    for draw in range(draws):
                        specs.append({"kind": kind, "layer": layer, "period_set": name, "d": int(d),
                                      "control": True, "draw": draw})
    return specs


def phase_shift_table(loaded, texts, answers, p: int, opts, log=print, design=None) -> dict[str, pd.DataFrame]:
    """The `phase_shift` and `phase_shift_answers` tables of a run (module docstring). `opts`: the run's
    PrecomputeOptions (batch_size, progress are read). Under a sampled `design` (core.runs.sampled_design): a screen
    of every attention and MLP layer on the sample's first questions, then every condition for the modules it keeps
    and the residual stream on the whole sample; the modules it drops keep their screen rows."""
    W_U = loaded.unembedding(p).double().cpu().numpy()
    specs = shift_specs(p, loaded.n_layers)
    answers = np.asarray(answers)
    positions = np.arange(len(texts)) if design is None else np.asarray(design.sample)
    keys = [(s["kind"], s["layer"], s["period_set"], s["d"]) for s in specs]
    edits = capped_edits(loaded, W_U, [texts[i] for i in positions[:CALIBRATION]], p, keys, opts.batch_size,
                         opts.progress)
    if design is None:
        return _tables(_shift_rows(loaded, edits, texts, answers, p, specs, opts, log, positions))
    order = {_key(s): i for i, s in enumerate(specs)}
    screen_specs = [s for s in specs if s["period_set"] == CONTROLLED_SET and not s["control"] and s["kind"] != RESID]
    sample_texts = [texts[i] for i in design.sample]
    if not screen_specs:  # no shift of all four short periods on this number line: the sample reads every module
        return _tables(_shift_rows(loaded, edits, sample_texts, answers[design.sample], p, specs, opts, log,
                                   positions))
    screen = design.sample[: design.screen]
    screen_rows = _shift_rows(loaded, edits, [texts[i] for i in screen], answers[screen], p, screen_specs, opts, log,
                              np.asarray(screen), "phase-shift screen")
    kept = {*screened_modules(pd.DataFrame(screen_rows)), (RESID, int(loaded.n_layers))}
    log(f"phase shift: the screen keeps {', '.join(f'{k} {l}' for k, l in sorted(kept))}")
    full_specs = [s for s in specs if (s["kind"], s["layer"]) in kept]
    rows = [r for r in screen_rows if (r["kind"], r["layer"]) not in kept]
    rows += _shift_rows(loaded, edits, sample_texts, answers[design.sample], p, full_specs, opts, log, positions)
    rows.sort(key=lambda r: order[_key(r)])
    return _tables(rows)


def capped_edits(loaded, W_U, texts, p: int, keys, batch_size: int = 32, progress=None) -> dict:
    """The capped edit (core.analysis.phase_shift) of every (kind, layer, period set, d) in `keys`, its cap set
    on the modules' answer-position outputs over `texts` (one capture pass)."""
    keys = list(dict.fromkeys(keys))
    modules = list(dict.fromkeys((kind, layer) for kind, layer, _, _ in keys))
    outputs = {}
    for cb in iter_capture(loaded, texts, batch_size, progress=progress, desc="phase-shift cap"):
        for kind, layer in modules:
            stream = cb.resid[:, layer] if kind == RESID else getattr(cb, kind)[:, layer - 1]
            outputs.setdefault((kind, layer), []).append(stream.double().cpu().numpy())
    outputs = {key: np.concatenate(chunks) for key, chunks in outputs.items()}
    basis = fourier_basis(p, "paper")
    decompositions = {key: shift_decomposition(W_U, basis, PERIOD_SETS[key[0]], key[1])
                      for key in dict.fromkeys((name, d) for _, _, name, d in keys)}
    return {(kind, layer, name, d): decompositions[(name, d)].capped_edit(outputs[(kind, layer)])
            for kind, layer, name, d in keys}


def _key(s: dict) -> tuple:
    return (s["kind"], s["layer"], s["period_set"], s["d"], s["control"], s["draw"])


def _shift_rows(loaded, edits: dict, texts, answers, p: int, specs, opts, log, positions,
                what: str = "phase shift") -> list[dict]:
    """One row per spec: the answers on `texts` with that shift, against the unedited answers (one pass). Rows of
    the controlled set carry their per-question outcomes (`_questions`: examples at `positions`)."""
    W_U = loaded.unembedding(p).double().cpu().numpy()
    directions = [random_direction(W_U, CONTROL_SEED + draw) for draw in range(CONTROL_DRAWS)]
    # lowest layer first, so each call's conditions edit nearby layers and share the blocks below them
    by_layer = sorted(range(len(specs)), key=lambda i: (specs[i]["layer"], i))
    conditions = [Condition(None)]
    for i in by_layer:
        s = specs[i]
        edit = edits[(s["kind"], s["layer"], s["period_set"], s["d"])]
        if s["control"]:
            edit = edit.control(directions[s["draw"]])
        conditions.append(Condition(edit, s["kind"], s["layer"]))
    log(f"{what}: {len(specs)} conditions, {len(texts)} prompts")
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
        row = outcome_row(s, before, ev, p, [edits[(s["kind"], s["layer"], s["period_set"], s["d"])]])
        if s["period_set"] == CONTROLLED_SET:
            modulus = residue_modulus(PERIOD_SETS[s["period_set"]])
            row["_questions"] = question_outcomes(before, ev.predictions, s["d"], p, modulus, positions)
        rows.append(row)
    return rows


def outcome_row(spec: dict, before, evaluation, p: int, used: list) -> dict:
    """One condition's row: its spec, the periods, the outcomes at its d (shift_outcomes) with the Wilson interval of
    the answers moved, the accuracy, and the figures of the edits `used` (one module's, or a group's: the largest
    misfit and size, the fewest directions kept)."""
    periods = PERIOD_SETS[spec["period_set"]]
    out = shift_outcomes(before, evaluation.predictions, spec["d"], p, residue_modulus(periods))
    low, high = wilson_interval(out["moved"], out["n"])
    return {**spec, "periods": ", ".join(f"{t:g}" for t in periods), **out, "moved_low": low, "moved_high": high,
            "accuracy": evaluation.accuracy, "misfit": max(e.misfit for e in used),
            "edit_size": max(e.edit_size for e in used), "kept": min(e.kept for e in used),
            "full_rank": max(e.full_rank for e in used)}


def question_outcomes(before, after, d: int, p: int, modulus: int, positions) -> pd.DataFrame:
    """Per question read at d (y + d on the number line): its example position, whether its last digit moved by d,
    whether its answer stayed (what `shift_outcomes` pools)."""
    before, after = np.asarray(before, dtype=np.int64), np.asarray(after, dtype=np.int64)
    keep = before + d <= p - 1
    return pd.DataFrame({
        "example": np.asarray(positions, dtype=np.int32)[keep],
        "residue_moved": ((after - before - d) % modulus == 0)[keep],
        "stayed": (after == before)[keep],
    })


def _tables(rows: list[dict]) -> dict[str, pd.DataFrame]:
    """The two tables from the rows in their final order: a condition of `phase_shift_answers` is its row's
    position in `phase_shift`."""
    per_question = [r.pop("_questions").assign(condition=np.int32(i)) for i, r in enumerate(rows) if "_questions" in r]
    table = pd.DataFrame(rows)
    table["layer"] = table["layer"].astype(np.int64)
    return {"phase_shift": table, "phase_shift_answers": answers_table(per_question)}


def answers_table(per_question: list[pd.DataFrame]) -> pd.DataFrame:
    """The per-question outcomes of every condition (`question_outcomes` with its `condition`) as one table of the
    cache's columns and types."""
    answers = (pd.concat(per_question, ignore_index=True) if per_question
               else pd.DataFrame({"condition": [], "example": [], "residue_moved": [], "stayed": []}))
    return answers[["condition", "example", "residue_moved", "stayed"]].astype(
        {"condition": np.int32, "example": np.int32, "residue_moved": bool, "stayed": bool})
