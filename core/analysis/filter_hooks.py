"""Fourier filters applied to a running model: forward hooks on the attention and/or MLP output of every layer.

`filtered` puts one filter on the chosen modules (at the answer position or at every position)
for the length of a `with` block. `ConditionHooks` filters many conditions in one forward pass:
rows [g*B, (g+1)*B) of a call carry condition g, and each block of rows gets its own edit, on
the modules (and, for a phase shift, the one layer) its condition names. Both project the output in
float32 on its own device: x - (x Q) Q^T, or zero when the filter erases the output
(`core.analysis.filters`); a phase shift adds its least-norm edit (`core.analysis.phase_shift`); a researcher's
`FunctionEdit` replaces the rows by its function's result; a `RowPatch` (activation patching) puts each prompt's own
given vector at its token, found by the prompt's place in the list evaluated (`ConditionHooks.example_ids`).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from core.analysis.ablations import Condition, FunctionEdit, LayerEdits, PlacedEdit, RowPatch, check_positions
from core.analysis.filters import ProjectionFilter
from core.analysis.phase_shift import PhaseShift
from core.errors import CoreError
from core.models.names import ATTN, BOTH, MLP, MODULE_OUTPUTS, MODULE_SETS, POST, RESID, Z, check_modules
from core.models.positions import ALL, ANSWER, steps_back
from core.models.sublayers import mlp_neurons_module


def device_q(flt: ProjectionFilter, device):
    """The filter's Q as float32 on `device`, made once per device and kept on the filter."""
    key = str(device)
    if key not in flt.device_copies:
        flt.device_copies[key] = torch.as_tensor(flt.q, dtype=torch.float32, device=device)
    return flt.device_copies[key]


def project_out(rows, flt: ProjectionFilter) -> None:
    """Filter `rows` (..., D) in place: zero when `flt` erases the output, else x - (x Q) Q^T in float32."""
    if flt.erased:
        rows.zero_()
    else:
        q = device_q(flt, rows.device)
        x = rows.float()
        rows.copy_((x - (x @ q) @ q.T).to(rows.dtype))


def shift_rows(rows, shift: PhaseShift) -> None:
    """Edit `rows` (..., D) in place by a phase shift (or its control of the same norm), in float32."""
    key = str(rows.device)
    if key not in shift.device_copies:
        as_t = lambda a: torch.as_tensor(a, dtype=torch.float32, device=rows.device)  # noqa: E731
        direction = as_t(shift.direction) if shift.direction is not None else None
        shift.device_copies[key] = (as_t(shift.left), as_t(shift.right), direction)
    left, right, direction = shift.device_copies[key]
    x = rows.float()
    delta = (x @ right.T) @ left.T
    if direction is not None:
        delta = delta.norm(dim=-1, keepdim=True) * direction
    rows.copy_((x + delta).to(rows.dtype))


def function_rows(rows, edit: FunctionEdit) -> None:
    """Edit `rows` (..., D) in place by a researcher's function of the float32 rows; a result of another shape or
    with non-finite values is a clear error."""
    out = edit.fn(rows.float().clone())
    if out is None:
        raise CoreError("the edit function returned None: return the edited rows (a function that edits its rows in "
                        "place ends with `return rows`)")
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(rows.shape):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise CoreError(f"the edit function must return a tensor of shape {tuple(rows.shape)}, got {got}")
    if not torch.isfinite(out).all() and torch.isfinite(rows).all():  # rows the model made non-finite: not the
        raise CoreError("the edit function returned NaN or infinite values")  # edit's doing (core.models.finite)
    rows.copy_(out.to(device=rows.device, dtype=rows.dtype))


def edit_rows(rows, edit, layer: int | None = None) -> None:
    """Apply a filter (`ProjectionFilter`), a phase shift (`PhaseShift`) or a function (`FunctionEdit`) to `rows`
    in place; a group's `LayerEdits` applies its edit of `layer`."""
    if isinstance(edit, LayerEdits):
        edit = edit.at(layer)
    if isinstance(edit, PhaseShift):
        shift_rows(rows, edit)
    elif isinstance(edit, FunctionEdit):
        function_rows(rows, edit)
    else:
        project_out(rows, edit)


def place_conditions(loaded, texts, conditions) -> list:
    """`conditions` with each edit placed where it acts (`PlacedEdit`): a position other than the answer's resolved
    to each prompt's own token (`core.models.positions.steps_back`), a head's or a neuron's unit to its columns;
    the others as given. A unit the model lacks, or an edit of the wrong width for it, is refused."""
    placed = []
    for cond in conditions:
        if cond.flt is None or isinstance(cond.flt, RowPatch) or (cond.position == ANSWER and cond.unit is None):
            placed.append(cond)
            continue
        back = None if cond.position == ALL else steps_back(loaded.tokenizer, texts, cond.position)
        columns, matrix = None, None
        if cond.unit is not None:
            columns, matrix = unit_columns(loaded, cond)
        elif cond.flt.width != loaded.width:
            raise CoreError(f"the edit was built for width {cond.flt.width}, the model has width {loaded.width}")
        edit = PlacedEdit(cond.flt, back, columns, matrix, loaded.width)
        placed.append(Condition(edit, cond.modules, cond.layer))
    return placed


def unit_columns(loaded, cond) -> tuple[tuple[int, int], object]:
    """(columns, W_O^h or None) of the head or neuron `cond.unit` of `cond.layer`, checked against the model and the
    edit's width: a head takes an edit of head_dim (on z_h) or of the stream's width (on z_h W_O^h), a neuron one of
    width 1."""
    parts, unit, width = loaded.parts, int(cond.unit), int(cond.flt.width)
    if cond.modules == Z:
        parts.require_heads("editing one head")
        if not 0 <= unit < parts.n_heads:
            raise CoreError(f"head {unit}: this model's heads are 0..{parts.n_heads - 1} (counted from 0)")
        dim = parts.head_dim
        if width not in (dim, loaded.width):
            raise CoreError(f"an edit of a head acts on its output z_h ({dim} wide) or on what it adds to the stream "
                            f"({loaded.width} wide), not on {width} numbers")
        matrix = parts.head_output_matrix(cond.layer, unit) if width != dim else None
        return (unit * dim, (unit + 1) * dim), matrix
    neurons = mlp_neurons_module(parts, cond.layer)
    size = neurons.in_features if isinstance(neurons, torch.nn.Linear) else neurons.weight.shape[0]
    if not 0 <= unit < size:
        raise CoreError(f"neuron {unit}: MLP {cond.layer}'s neurons are 0..{size - 1} (counted from 0)")
    if width != 1:
        raise CoreError(f"an edit of one neuron acts on its one number, not on {width}")
    return (unit, unit + 1), None


def placed_rows(block, placed: PlacedEdit, example_ids, layer: int) -> None:
    """Edit one condition's rows `block` (rows, positions, width) in place where `placed` says: at each prompt's own
    token (or every token), in its columns. An edit of the stream's width on a head reaches z_h through W_O^h: the
    head's result r = z_h W_O^h is edited to r', and z_h moves by (r' - r) pinv(W_O^h), the least change of z_h
    whose result is closest to r' (exactly r' when r' - r lies in the head's output space)."""
    first, end = placed.columns or (0, block.shape[2])
    if placed.back is None:
        index = (slice(None), slice(None), slice(first, end))
    else:
        back = np.asarray(placed.back)[example_ids]
        where = torch.as_tensor(block.shape[1] - back, device=block.device)
        index = (torch.arange(block.shape[0], device=block.device), where, slice(first, end))
    rows = block[index].clone()
    if placed.out_matrix is None:
        edit_rows(rows, placed.edit, layer)
    else:
        matrix = torch.as_tensor(placed.out_matrix, dtype=torch.float32, device=rows.device)
        result = rows.float() @ matrix
        edited = result.clone()
        edit_rows(edited, placed.edit, layer)
        rows = (rows.float() + (edited - result) @ torch.linalg.pinv(matrix)).to(rows.dtype)
    block[index] = rows


def patch_rows(block, patch: RowPatch, example_ids) -> None:
    """Patch one condition's rows in place: `block` (rows, positions, width) holds the prompts `example_ids` (their
    places in the list evaluated); each gets its own vector of `patch.values` at its token `patch.back` from the end
    (in `patch.columns` only, when it names them)."""
    rows, positions = block.shape[0], block.shape[1]
    if example_ids is None or len(example_ids) != rows:
        raise CoreError("internal: a patch needs the places of the prompts in a batch (ConditionHooks.example_ids)")
    back = np.broadcast_to(np.asarray(patch.back), (len(patch.values),))[example_ids]
    if (back > positions).any():
        raise CoreError(f"internal: a patch {int(back.max())} tokens from the end reached a pass of {positions} "
                        "token(s); a call runs as many last tokens as its earliest patch (evaluate_conditions)")
    values = torch.as_tensor(np.asarray(patch.values)[example_ids], dtype=torch.float32, device=block.device)
    where = torch.as_tensor(positions - back, device=block.device)
    first, end = patch.columns or (0, block.shape[2])
    block[torch.arange(rows, device=block.device), where, first:end] = values.to(block.dtype)


def _filter_hook(flt: ProjectionFilter, positions: str):

    def hook(module, args, out):
        t = out[0] if isinstance(out, tuple) else out
        if t.requires_grad:
            t = t.clone()
        project_out(t[:, -1, :] if positions == "last" else t, flt)
        if isinstance(out, tuple):
            return (t, *out[1:])
        return t

    return hook


@contextmanager
def filtered(loaded, flt: ProjectionFilter | None, modules: str = BOTH, positions: str = "last"):
    """Apply `flt` to the chosen modules' outputs at every layer while the block is active."""
    check_positions(positions)
    if flt is None:
        yield
        return
    check_modules(modules)
    if flt.width != loaded.width:
        raise CoreError(f"the filter was built for width {flt.width}, the model has width {loaded.width}")
    handles = []
    try:
        for kind in MODULE_SETS[modules]:
            for mod in loaded.parts.outputs(kind):
                handles.append(mod.register_forward_hook(_filter_hook(flt, positions)))
        yield
    finally:
        for h in handles:
            h.remove()


class ConditionHooks:
    """Hooks on every attention and MLP module (and every block, for the residual stream) that edit, per
    block of rows, the last position (a `PlacedEdit`: the tokens and columns it names).

    `plan` maps ATTN/MLP/RESID (`core.models.names`) to [(first row, end row, edit, layers)], layers None for
    every layer, else the 1-based layers whose outputs are edited (`Condition.layers`; RESID layer 0: the stream
    before the first block, edited as that block's input; Z: the heads' outputs side by side, the input of attention
    l's output projection, edited in one head's columns; POST: the MLP's neurons, its down projection's input, edited
    in one neuron's column); empty while the prefix runs. `example_ids` are
    the places, in the list evaluated, of the prompts of one block of rows (the same in every block), for a
    `RowPatch` or a `PlacedEdit`.
    """

    def __init__(self, loaded):
        self.parts = loaded.parts
        self.plan: dict[str, list] = {}
        self.handles = []
        self.example_ids = None
        #: {1-based layer: (kept, inverse, copies, rows per copy)} while a call runs conditions of which some give
        #: that layer's MLP the same input: the MLP runs on the copies `kept` only, and copy g's output is that of
        #: copy kept[inverse[g]] (`core.analysis.evaluation.mlp_sharing` finds them)
        self.mlp_share: dict[int, tuple] = {}
        self._cut: set[int] = set()

    def _edit(self, t, start: int, stop: int, edit, layer: int) -> None:
        """One condition's edit of its rows of `t` (rows, positions, width) at `layer` (a group's patch: its own
        layer's `RowPatch`)."""
        if isinstance(edit, LayerEdits) and isinstance(edit.at(layer), RowPatch):
            edit = edit.at(layer)
        if isinstance(edit, RowPatch):
            patch_rows(t[start:stop], edit, self.example_ids)
        elif isinstance(edit, PlacedEdit):
            placed_rows(t[start:stop], edit, self.example_ids, layer)
        else:
            edit_rows(t[start:stop, -1, :], edit, layer)

    def _hook(self, kind: str, layer: int):
        def hook(module, args, out):
            steps = self.plan.get(kind)
            if not steps:
                return None
            steps = [s for s in steps if s[3] is None or layer in s[3]]
            if not steps:
                return None
            t = out[0] if isinstance(out, tuple) else out
            if t.requires_grad:
                t = t.clone()
            for start, stop, edit, _ in steps:
                self._edit(t, start, stop, edit, layer)
            if isinstance(out, tuple):
                return (t, *out[1:])
            return t

        return hook

    def __enter__(self):
        # registered first and prepended, so they run before any edit: the blocks (and the attention) whose inputs
        # are the same in every condition run on one copy (`shared`)
        for layer, block in enumerate(self.parts.blocks, start=1):
            self.handles.append(block.register_forward_pre_hook(self._one_copy(layer, True), with_kwargs=True))
            self.handles.append(block.register_forward_hook(self._every_copy(layer, True), prepend=True))
        for layer, attn in enumerate(self.parts.outputs(ATTN), start=1):
            self.handles.append(attn.register_forward_pre_hook(self._one_copy(layer, False), with_kwargs=True))
            self.handles.append(attn.register_forward_hook(self._every_copy(layer, False), prepend=True))
        for layer, mlp in enumerate(self.parts.outputs(MLP), start=1):
            self.handles.append(mlp.register_forward_pre_hook(self._mlp_in(layer), with_kwargs=True))
            self.handles.append(mlp.register_forward_hook(self._mlp_out(layer), prepend=True))
        for kind in MODULE_OUTPUTS:
            for layer, mod in enumerate(self.parts.outputs(kind), start=1):
                self.handles.append(mod.register_forward_hook(self._hook(kind, layer)))
        for layer, block in enumerate(self.parts.blocks, start=1):
            self.handles.append(block.register_forward_hook(self._hook(RESID, layer)))
        if self.parts.has_heads:  # the heads' outputs z (blocks.N.attn.hook_z) are W_O's input: edited there
            for layer, proj in enumerate(self.parts.out_proj, start=1):
                self.handles.append(proj.register_forward_pre_hook(self._z_hook(layer)))
        for layer in range(1, self.parts.n_layers + 1):  # the MLP's neurons (hook_post): its down projection's input
            try:
                down = mlp_neurons_module(self.parts, layer)
            except CoreError:  # none found: a neuron edit is refused when placed (unit_columns)
                continue
            self.handles.append(down.register_forward_pre_hook(self._z_hook(layer, POST)))
        # the stream before block 1 (RESID layer 0, blocks.0.hook_resid_pre) is block 1's input: edited there
        self.handles.append(self.parts.blocks[0].register_forward_pre_hook(self._input_hook, with_kwargs=True))
        return self

    def _mlp_in(self, layer: int):
        def pre_hook(module, args, kwargs):
            share = self.mlp_share.get(layer)
            x = args[0] if args else kwargs.get("hidden_states")
            if share is None or x is None or x.shape[0] != share[2] * share[3]:
                return None
            kept, _, copies, rows = share
            x = x.view(copies, rows, *x.shape[1:])[kept.to(x.device)].reshape(-1, *x.shape[1:])
            self._cut.add(layer)
            if args:
                return (x, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": x}

        return pre_hook

    def _mlp_out(self, layer: int):
        def hook(module, args, out):
            if layer not in self._cut:
                return None
            self._cut.discard(layer)
            _, inverse, copies, rows = self.mlp_share[layer]
            t = out[0] if isinstance(out, tuple) else out
            t = t.view(-1, rows, *t.shape[1:])[inverse.to(t.device)].reshape(copies * rows, *t.shape[1:])
            return (t, *out[1:]) if isinstance(out, tuple) else t

        return hook

    def _z_hook(self, layer: int, kind: str = Z):
        def pre_hook(module, args):
            steps = [s for s in self.plan.get(kind) or () if layer in s[3]]
            if not steps:
                return None
            z = args[0].clone()
            for start, stop, edit, _ in steps:
                self._edit(z, start, stop, edit, layer)
            return (z, *args[1:])

        return pre_hook

    def _input_hook(self, module, args, kwargs):
        """Edit the embedding output at the last position (RESID layer 0) as it enters the first block."""
        steps = [s for s in self.plan.get(RESID) or () if s[3] is not None and 0 in s[3]]
        if not steps:
            return None
        hidden = (args[0] if args else kwargs["hidden_states"]).clone()
        for start, stop, edit, _ in steps:
            self._edit(hidden, start, stop, edit, 0)
        if args:
            return (hidden, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": hidden}

    def end_call(self) -> None:
        """Forget one call's plan, sharing and cut MLPs (after it ends, or fails part way)."""
        self.plan = {}
        self.shared = None
        self.mlp_share = {}
        self._cut = set()

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []
        self.end_call()
        self.example_ids = None

    #: (copies, rows per copy, first edited layer) while a call runs `copies` conditions whose last tokens (the answer
    #: position, or the tokens from the earliest edited one on) are the same up to the output of that layer's
    #: attention (no edit acts before it): every block before it, and its attention, run on the first copy alone and
    #: their output is repeated for every copy
    shared: tuple[int, int, int] | None = None

    def _one_copy(self, layer: int, whole_block: bool):
        def pre_hook(module, args, kwargs):
            if not self.shared:
                return None
            copies, rows, first = self.shared
            if layer > first or (whole_block and layer == first):
                return None
            total = copies * rows
            return _first_rows(args, total, rows), _first_rows(kwargs, total, rows)

        return pre_hook

    def _every_copy(self, layer: int, whole_block: bool):
        def hook(module, args, out):
            if not self.shared:
                return None
            copies, _, first = self.shared
            if layer != (first - 1 if whole_block else first):
                return None
            t = out[0] if isinstance(out, tuple) else out
            t = t.repeat(copies, *([1] * (t.dim() - 1)))
            return (t, *out[1:]) if isinstance(out, tuple) else t

        return hook


def _first_rows(value, total: int, rows: int):
    """`value` with every tensor of rows (two dimensions or more) whose first dimension is `total` cut to its first
    `rows` rows (a pass of several tokens also carries their cache positions, one dimension, never cut)."""
    if isinstance(value, torch.Tensor):
        return value[:rows] if value.dim() > 1 and value.shape[0] == total else value
    if isinstance(value, tuple):
        return tuple(_first_rows(v, total, rows) for v in value)
    if isinstance(value, list):
        return [_first_rows(v, total, rows) for v in value]
    if isinstance(value, dict):
        return {k: _first_rows(v, total, rows) for k, v in value.items()}
    return value
