"""The group phase shift of a run: the `group_shift` and `group_shift_answers` tables, over every question.

The paper's claim about attention is collective: attention, as a whole, classifies the last digit. One module's
shift (core.runs.shift_run) asks whether a single layer decides it; this stage asks it of a group. For each group
of layers (`shift_groups`: the layers a fine-tuning trained, the last third, every layer) and each module kind
(attention, MLP), the waves of periods 2, 2.5, 5 and 10 of *every* module of the group are shifted by d together,
in one forward pass, each module's edit its own capped least-norm edit (core.analysis.phase_shift: at most
EDIT_CAP times that module's own output at the answer position, as for one module). Beside it:

- the positive control, the whole residual stream after the group's last layer shifted by the same d;
- `CONTROL_DRAWS` random controls: each module of the group moved by the norm of its own edit along one random
  direction of W_U's row space, the same direction for every module of a draw (so the controls add up in the
  stream at least as much as the shifts can: a conservative control of the same size).

Every condition is read on every question of the split, and each question's outcome is kept
(`group_shift_answers`), so that core.analysis.shift_reading reads a group exactly as it reads one module (a share
of the stream's shift at the same d, with an interval that resamples questions). The rule that turns the reading
into a verdict is core.claims.last_digit's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from core.analysis.ablations import Condition, LayerEdits
from core.analysis.evaluation import evaluate_conditions
from core.analysis.phase import period_frequencies
from core.analysis.phase_shift import (
    CONTROL_DRAWS,
    CONTROL_SEED,
    PERIOD_SETS,
    SHIFTS,
    moved_periods,
    random_direction,
    residue_modulus,
)
from core.errors import CoreError
from core.models.names import ATTN, MLP, RESID
from core.runs.shift_run import (
    CALIBRATION,
    CONTROLLED_SET,
    answers_table,
    capped_edits,
    outcome_row,
    question_outcomes,
)

#: Version of the stage's measurement (the manifest's `group_shift.version`).
GROUP_SHIFT_VERSION = 1
#: The module kinds shifted as groups.
GROUP_KINDS = (ATTN, MLP)


@dataclass(frozen=True)
class LayerGroup:
    """Layers first..last (1-based, inclusive), and what they are."""

    name: str  # "trained", "last third", "every layer"
    first: int
    last: int

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(range(self.first, self.last + 1))

    @property
    def span(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


def trained_from(model_folder) -> int | None:
    """The first layer (1-based) a fine-tuning of pre-trained blocks trained, read from the recipe beside the
    weights (its number_tokens.frozen_blocks); None when the folder holds no such recipe (a model trained whole, or
    one from elsewhere)."""
    try:
        spec = json.loads((Path(model_folder) / "recipe.json").read_text())
    except (OSError, ValueError, TypeError):
        return None
    frozen = ((spec or {}).get("number_tokens") or {}).get("frozen_blocks") if isinstance(spec, dict) else None
    return int(frozen) + 1 if isinstance(frozen, int) and frozen > 0 else None


def shift_groups(n_layers: int, trained_first: int | None = None) -> list[LayerGroup]:
    """The groups a run's layers are shifted in: the layers its fine-tuning trained (`trained_first`..L, when some
    lower blocks were kept frozen), the last third (the last ceil(L/3) layers), every layer; a group with the same
    layers as one before it is left out."""
    L = int(n_layers)
    groups = []
    if trained_first is not None and 1 < trained_first <= L:
        groups.append(LayerGroup("trained", int(trained_first), L))
    groups.append(LayerGroup("last third", L - math.ceil(L / 3) + 1, L))
    groups.append(LayerGroup("every layer", 1, L))
    seen, kept = set(), []
    for g in groups:
        if g.layers not in seen:
            seen.add(g.layers)
            kept.append(g)
    return kept


def group_specs(p: int, groups: list[LayerGroup], shifts=SHIFTS, draws: int = CONTROL_DRAWS) -> list[dict]:
    """Every condition of the stage as a dict (group, kind, first_layer, layer, period_set, d, control, draw): for
    each d that moves the four short periods, each group of each kind with its draws, and the stream after each
    distinct last layer with its draws (draw -1: the shift itself)."""
    periods = PERIOD_SETS[CONTROLLED_SET]
    if not has_group_shift(p):
        return []
    if len({g.last for g in groups}) > 1:
        raise CoreError("every group ends at the same layer: the reading keeps one positive-control stream a d")
    specs = []
    for d in shifts:
        if not moved_periods(periods, d) or d % residue_modulus(periods) == 0:
            continue
        sites = [(g.name, kind, g.first, g.last) for g in groups for kind in GROUP_KINDS]
        sites += [("stream", RESID, last, last) for last in sorted({g.last for g in groups})]
        for name, kind, first, last in sites:
            for draw in range(-1, draws):
                specs.append({"group": name, "kind": kind, "first_layer": int(first), "layer": int(last),
                              "period_set": CONTROLLED_SET, "d": int(d), "control": draw >= 0, "draw": int(draw)})
    return specs


def has_group_shift(p: int) -> bool:
    """Whether the number line 0..p-1 has every period of the four the groups shift (2, 2.5, 5, 10) as a frequency."""
    periods = PERIOD_SETS[CONTROLLED_SET]
    return len(period_frequencies(p, periods)) == len(periods)


def group_shift_tables(loaded, texts, answers, p: int, groups: list[LayerGroup], batch_size: int = 32,
                       progress=None, log=print) -> dict[str, pd.DataFrame]:
    """The `group_shift` and `group_shift_answers` tables (module docstring) over every one of `texts`."""
    W_U = loaded.unembedding(p).double().cpu().numpy()
    specs = group_specs(p, groups)
    answers = np.asarray(answers)
    keys = list(dict.fromkeys((s["kind"], layer, s["period_set"], s["d"]) for s in specs
                              for layer in range(s["first_layer"], s["layer"] + 1)))
    edits = capped_edits(loaded, W_U, list(texts[:CALIBRATION]), p, keys, batch_size, progress)
    directions = [random_direction(W_U, CONTROL_SEED + draw) for draw in range(CONTROL_DRAWS)]

    def edit_of(s: dict, layer: int):
        edit = edits[(s["kind"], layer, s["period_set"], s["d"])]
        return edit.control(directions[s["draw"]]) if s["control"] else edit

    conditions = [Condition(None)]
    for s in specs:
        layers = range(s["first_layer"], s["layer"] + 1)
        conditions.append(Condition(LayerEdits(tuple((layer, edit_of(s, layer)) for layer in layers)), s["kind"]))
    log(f"group phase shift: {len(specs)} conditions ({', '.join(f'{g.name} {g.span}' for g in groups)}), "
        f"{len(texts)} prompts")
    evaluated = evaluate_conditions(loaded, list(texts), answers, p, conditions, "last", batch_size,
                                    progress=progress, desc=f"group phase shift ({len(specs)} conditions)")
    before = evaluated[0].predictions
    positions = np.arange(len(texts))
    rows, per_question = [], []
    for i, (s, ev) in enumerate(zip(specs, evaluated[1:])):
        layers = range(s["first_layer"], s["layer"] + 1)
        rows.append(outcome_row(s, before, ev, p, [edits[(s["kind"], lyr, s["period_set"], s["d"])] for lyr in layers]))
        modulus = residue_modulus(PERIOD_SETS[s["period_set"]])
        per_question.append(question_outcomes(before, ev.predictions, s["d"], p, modulus, positions)
                            .assign(condition=np.int32(i)))
    table = pd.DataFrame(rows).astype({"layer": np.int64, "first_layer": np.int64})
    return {"group_shift": table, "group_shift_answers": answers_table(per_question)}


def group_note(groups: list[LayerGroup]) -> dict:
    """What the manifest says about the group tables."""
    return {"version": GROUP_SHIFT_VERSION, "groups": [{"name": g.name, "first": g.first, "last": g.last}
                                                       for g in groups]}


def run_groups(loaded) -> list[LayerGroup]:
    """The groups of a loaded model: `shift_groups` with the trained layers its recipe names (a local folder)."""
    return shift_groups(loaded.n_layers, trained_from(loaded.source) if loaded.local else None)


def write_group_tables(writer, loaded, texts, answers, p: int, opts, log=print) -> dict:
    """The group tables over every one of `texts` into `writer`'s staging folder; the manifest's note on them.
    `opts`: the run's PrecomputeOptions (batch_size, progress are read)."""
    groups = run_groups(loaded)
    with torch.no_grad():
        tables = group_shift_tables(loaded, texts, answers, p, groups, opts.batch_size, opts.progress, log)
    for name, frame in tables.items():
        writer.write(name, frame)
    return group_note(groups)
