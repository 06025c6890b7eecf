"""Fourier filters applied to a running model: forward hooks on the attention and/or MLP output of every layer.

`filtered` puts one filter on the chosen modules (at the answer position or at every position)
for the length of a `with` block. `ConditionHooks` filters many conditions in one forward pass:
rows [g*B, (g+1)*B) of a call carry condition g, and each block of rows gets its own filter, on
the modules its condition names. Both project the output in float32 on its own device:
x - (x Q) Q^T, or zero when the filter erases the output (`core.analysis.filters`).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from core.analysis.ablations import check_positions
from core.analysis.filters import ProjectionFilter
from core.errors import CoreError
from core.models.names import ATTN, BOTH, MODULE_OUTPUTS, MODULE_SETS, check_modules


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
    """Hooks on every attention and MLP module that filter, per block of rows, the last position.

    `plan` maps ATTN/MLP (`core.models.names`) to [(first row, end row, filter)]; empty while the prefix runs.
    """

    def __init__(self, loaded):
        self.parts = loaded.parts
        self.plan: dict[str, list] = {}
        self.handles = []

    def _hook(self, kind: str):
        def hook(module, args, out):
            steps = self.plan.get(kind)
            if not steps:
                return None
            t = out[0] if isinstance(out, tuple) else out
            if t.requires_grad:
                t = t.clone()
            last = t[:, -1, :]
            for start, stop, flt in steps:
                project_out(last[start:stop], flt)
            if isinstance(out, tuple):
                return (t, *out[1:])
            return t

        return hook

    def __enter__(self):
        for kind in MODULE_OUTPUTS:
            for mod in self.parts.outputs(kind):
                self.handles.append(mod.register_forward_hook(self._hook(kind)))
        # registered after, run before the filter hooks (prepend): the first attention runs on one copy
        first = self.parts.outputs(ATTN)[0]
        self.handles.append(first.register_forward_pre_hook(self._share_input, with_kwargs=True, prepend=True))
        self.handles.append(first.register_forward_hook(self._share_output, prepend=True))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []
        self.plan = {}
        self.shared = None

    #: (copies, rows per copy) while a call runs conditions whose first-attention inputs are identical
    shared: tuple[int, int] | None = None

    def _share_input(self, module, args, kwargs):
        """Every condition's answer position reaches layer 1's attention unchanged: keep one copy."""
        if not self.shared:
            return None
        copies, rows = self.shared
        total = copies * rows
        return _first_rows(args, total, rows), _first_rows(kwargs, total, rows)

    def _share_output(self, module, args, out):
        if not self.shared:
            return None
        copies = self.shared[0]
        t = out[0] if isinstance(out, tuple) else out
        t = t.repeat(copies, *([1] * (t.dim() - 1)))
        return (t, *out[1:]) if isinstance(out, tuple) else t


def _first_rows(value, total: int, rows: int):
    """`value` with every tensor whose first dimension is `total` cut to its first `rows` rows."""
    if isinstance(value, torch.Tensor):
        return value[:rows] if value.dim() and value.shape[0] == total else value
    if isinstance(value, tuple):
        return tuple(_first_rows(v, total, rows) for v in value)
    if isinstance(value, list):
        return [_first_rows(v, total, rows) for v in value]
    if isinstance(value, dict):
        return {k: _first_rows(v, total, rows) for k, v in value.items()}
    return value
