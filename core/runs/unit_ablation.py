"""One attention head or one MLP neuron ablated now, beside its control: what `python -m core ablate --head L.H` prints.

A head's output z_h (TransformerLens' blocks.N.attn.hook_z[:, :, h]) or a neuron's activation (blocks.N.mlp.hook_post
[:, :, i]) is set to zero ("zero") or to its mean over the questions read ("mean", at the same token), at the answer
position by default or at any `core.models.positions` position, on the one edit path every filter, phase shift and
patch takes (`Condition(..., modules="z" | "post", layer, unit=...)`, core.analysis.filter_hooks).

The control is the same ablation of other units of the same layer: every other head of the layer (at most
`CONTROL_UNITS`, a seeded sample where there are more), or `CONTROL_UNITS` neurons drawn at random (seeded) from the
layer's others; the report gives their mean accuracy and its spread (sd over the control units) beside the unit's,
so a unit matters where its ablation moves accuracy well beyond what ablating a random sibling does. All run in one
evaluation with the unedited model. The loss is the cross-entropy of the answer token (over the whole vocabulary),
averaged over the questions.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from core.analysis.ablations import Condition, FunctionEdit
from core.analysis.evaluation import evaluate_conditions
from core.analysis.phase_shift import wilson_interval
from core.errors import CoreError
from core.models.capture import capture_hooks
from core.models.names import POST, Z
from core.models.positions import ANSWER, check_position
from core.models.sublayers import mlp_neurons_module
from core.runs.ablate import Report, Target, interval, pct

MODES = ("zero", "mean")
#: How many other units of the same layer the control ablates (all the layer's other heads where fewer), and the seed.
CONTROL_UNITS = 8
CONTROL_SEED = 0


def ablate_head(target: Target, layer: int, head: int, mode: str = "zero", position=ANSWER, progress=None) -> Report:
    """Head `head` (counted from 0) of attention `layer` (counted from 1) ablated (`mode` "zero" or "mean") at
    `position`, beside the same ablation of the layer's other heads (module docstring)."""
    return ablate_unit(target, Z, layer, head, mode, position, progress)


def ablate_neuron(target: Target, layer: int, neuron: int, mode: str = "zero", position=ANSWER,
                  progress=None) -> Report:
    """Neuron `neuron` (counted from 0) of MLP `layer` (counted from 1) ablated (`mode` "zero" or "mean") at
    `position`, beside the same ablation of `CONTROL_UNITS` random other neurons of the layer."""
    return ablate_unit(target, POST, layer, neuron, mode, position, progress)


def unit_count(loaded, kind: str, layer: int) -> int:
    """How many heads (Z) or neurons (POST) layer `layer` has; refused where they cannot be read."""
    if not 1 <= int(layer) <= loaded.n_layers:
        raise CoreError(f"layer {layer}: this model's layers are 1..{loaded.n_layers} (counted from 1)")
    if kind == Z:
        loaded.parts.require_heads("ablating one head")
        return loaded.parts.n_heads
    neurons = mlp_neurons_module(loaded.parts, layer)
    return int(neurons.in_features if isinstance(neurons, torch.nn.Linear) else neurons.weight.shape[0])


def control_units(count: int, unit: int, kind: str) -> list[int]:
    """The other units of the layer the control ablates: all of them up to `CONTROL_UNITS`, else a seeded sample."""
    others = [u for u in range(count) if u != unit]
    if len(others) <= CONTROL_UNITS:
        return others
    rng = np.random.default_rng([CONTROL_SEED, count, unit, 0 if kind == Z else 1])
    return sorted(int(u) for u in rng.choice(others, CONTROL_UNITS, replace=False))


def ablation_edits(loaded, texts, kind: str, layer: int, units: list[int], mode: str, position) -> list:
    """For each unit, the edit that sets it to zero, or to its mean over `texts` at `position` (over their real
    tokens for "all"); the activations are read once for all of them."""
    if mode == "zero":
        width = loaded.parts.head_dim if kind == Z else 1
        return [FunctionEdit(lambda rows: torch.zeros_like(rows), width) for _ in units]
    name = f"blocks.{layer - 1}.attn.hook_z" if kind == Z else f"blocks.{layer - 1}.mlp.hook_post"
    acts = capture_hooks(loaded, texts, [name], position=position)
    return [mean_edit(acts, name, kind, unit, loaded.parts.head_dim) for unit in units]


def mean_edit(acts, name: str, kind: str, unit: int, head_dim: int) -> FunctionEdit:
    """The edit that sets `unit` to its mean over the activations `acts[name]` (their real tokens only)."""
    width = head_dim if kind == Z else 1
    values = acts[name][..., unit, :] if kind == Z else acts[name][..., unit : unit + 1]
    if acts.mask is not None:
        values = values[acts.mask]
    mean = torch.as_tensor(values.reshape(-1, width).mean(0), dtype=torch.float32)
    return FunctionEdit(lambda rows: mean.to(rows.device).expand_as(rows).clone(), width)


def ablate_unit(target: Target, kind: str, layer: int, unit: int, mode: str = "zero", position=ANSWER,
                progress=None) -> Report:
    """What `ablate_head` and `ablate_neuron` share: the unit's ablation and its controls in one evaluation."""
    if mode not in MODES:
        raise CoreError(f"--mode {mode!r}: choose zero or mean")
    position = check_position(position)
    loaded = target.loaded
    count = unit_count(loaded, kind, layer)
    if not 0 <= int(unit) < count:
        what = "heads" if kind == Z else "neurons"
        raise CoreError(f"{what[:-1]} {unit}: layer {layer}'s {what} are 0..{count - 1} (counted from 0)")
    units = [int(unit), *control_units(count, int(unit), kind)]
    t0 = time.perf_counter()
    edits = ablation_edits(loaded, target.texts, kind, layer, units, mode, position)
    conditions = [Condition(None)] + [Condition(e, kind, layer, position, u) for e, u in zip(edits, units)]
    runs = evaluate_conditions(loaded, target.texts, target.answers, target.p, conditions, progress=progress,
                               desc=f"{mode}-ablating {len(units)} units")
    seconds = time.perf_counter() - t0
    base, edited, controls = runs[0], runs[1], runs[2:]
    n = len(target.answers)
    control_acc = [c.accuracy for c in controls]
    mean = float(np.mean(control_acc)) if controls else float("nan")
    sd = float(np.std(control_acc, ddof=1)) if len(controls) > 1 else float("nan")
    name = (f"blocks.{layer - 1}.attn.hook_z[{unit}]" if kind == Z else f"blocks.{layer - 1}.mlp.hook_post[{unit}]")
    what = f"{'head' if kind == Z else 'neuron'} {unit} of {'attention' if kind == Z else 'MLP'} {layer}"
    sibling = "heads" if kind == Z else "neurons"
    at = "the answer position" if position == ANSWER else f"position {position!r}"
    lines = [
        f"accuracy {interval(edited.accuracy, n)}",
        f"unedited {pct(base.accuracy)}: change {100 * (edited.accuracy - base.accuracy):+.2f} points; loss "
        f"{edited.loss:.3f} against {base.loss:.3f} ({edited.loss - base.loss:+.3f})",
        (f"control: the same ablation of {len(controls)} other {sibling} of layer {layer}: accuracy {pct(mean)} "
         + (f"(sd {100 * sd:.2f} points), change {100 * (mean - base.accuracy):+.2f} points" if controls and sd == sd
            else f"change {100 * (mean - base.accuracy):+.2f} points")) if controls
        else f"control: layer {layer} has no other {sibling}",
        f"answers changed by the ablation: {pct(float(np.mean(edited.predictions != base.predictions)))}",
        f"{seconds:.1f} s for {len(conditions)} conditions",
    ]
    figures = {
        "run": target.run_name, "model": target.source, "site": name, "kind": "head" if kind == Z else "neuron",
        "layer": int(layer), "unit": int(unit), "mode": mode, "position": position,
        "accuracy": edited.accuracy, "base_accuracy": base.accuracy, "change": edited.accuracy - base.accuracy,
        "interval_95": list(wilson_interval(edited.accuracy, n)), "loss": edited.loss, "base_loss": base.loss,
        "loss_change": edited.loss - base.loss,
        "changed": float(np.mean(edited.predictions != base.predictions)),
        "control": {"units": units[1:], "accuracy": control_acc, "mean": mean, "sd": sd,
                    "change": mean - base.accuracy if controls else float("nan"),
                    "loss_change": float(np.mean([c.loss for c in controls]) - base.loss) if controls else float("nan"),
                    "what": f"the same {mode} ablation of other {sibling} of layer {layer}, one at a time"},
        "seconds": seconds,
    }
    return Report(f"{what} {mode}-ablated at {at} ({name})", target.split, n, target.n_split, edited.accuracy,
                  base.accuracy, lines, figures)
