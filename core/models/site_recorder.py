"""Hooks that keep TransformerLens-named sites at chosen tokens of each prompt, one batch at a time.

`SiteRecorder` is the reading side of `core.models.capture.capture_hooks` and `run_with_cache`: given the sites
(`core.models.names.read_site`) and, per batch, the column of each row's chosen token (`where`, or None for every
token), each hook copies what that site holds at those tokens and nothing else:

    blocks.N.hook_resid_pre    the input of block N (a pre-hook)            (rows, width)
    blocks.N.hook_resid_post   the output of block N                        (rows, width)
    blocks.N.hook_attn_out     what block N's attention adds to the stream   (rows, width)
    blocks.N.hook_mlp_out      what block N's MLP adds to the stream         (rows, width)
    blocks.N.attn.hook_z       the heads' outputs, the input of W_O          (rows, heads, head_dim)
    blocks.N.attn.hook_result  z_h W_O^h, computed from hook_z               (rows, heads, width)
    blocks.N.attn.hook_pattern the attention probabilities of each head      (rows, heads, keys)
    blocks.N.mlp.hook_post     the MLP's neurons, the input of its down projection (a pre-hook)   (rows, d_mlp)
    blocks.N.hook_resid_mid    the input of the norm before the MLP (a pre-hook; none in parallel blocks)
    ln_final.hook_normalized   the final norm's output                       (rows, width)

With every token (`where` None) each array gains a token axis after the rows (a pattern: queries and keys). Where
each part lives is `core.models.sublayers` (`mlp_neurons_module`, `mid_stream_module`, `attention_module`). Attention
probabilities exist only under eager attention: the attention module then returns them as the second item of its
output, which the hook reads (`capture_hooks` switches the model to eager attention for the pass that reads them).
"""

from __future__ import annotations

import torch

from core.errors import CoreError
from core.models.names import ATTN, HEAD, LN_FINAL, MLP, PATTERN, POST, RESID_MID, Z
from core.models.sublayers import attention_module, mid_stream_module, mlp_neurons_module


def _first(out):
    return out[0] if isinstance(out, tuple) else out


class SiteRecorder:
    """Forward hooks keeping `sites` ({TransformerLens name: (kind, block from 0)}) at the tokens `where` of each
    row (a LongTensor of columns, or None: every token), set before each batch; `take` hands over and forgets."""

    def __init__(self, parts, sites: dict):
        self.parts = parts
        self.sites = dict(sites)
        self.where = None
        self.store: dict = {}
        self.handles = []
        if any(kind in (Z, HEAD) for kind, _ in self.sites.values()):
            asked = ", ".join(n for n, (k, _) in self.sites.items() if k in (Z, HEAD))
            parts.require_heads(f"capturing {asked}")
        self.modules = {name: self._module(kind, block) for name, (kind, block) in self.sites.items()}

    def _module(self, kind: str, block):
        """(module, hooked on its input?) holding the site."""
        p, layer = self.parts, None if block is None else block + 1
        if kind == "resid_pre":
            return p.blocks[block], True
        if kind == "resid_post":
            return p.blocks[block], False
        if kind in (ATTN, MLP):
            return p.outputs(kind)[block], False
        if kind in (Z, HEAD):
            return p.out_proj[block], True
        if kind == PATTERN:
            return attention_module(p, layer), False
        if kind == POST:
            return mlp_neurons_module(p, layer), True
        if kind == RESID_MID:
            return mid_stream_module(p, layer), True
        if kind == LN_FINAL:
            if p.final_norm is None:
                raise CoreError("ln_final.hook_normalized cannot be read: this model has no final norm "
                                f"({p.names})")
            return p.final_norm, False
        raise CoreError(f"internal: no hook for a site of kind {kind!r}")

    def _at(self, t):
        """`t` (rows, tokens, ...) at each row's chosen token, or whole; a detached copy."""
        if self.where is None:
            return t.detach().clone()
        rows = torch.arange(t.shape[0], device=t.device)
        return t[rows, self.where.to(t.device)].detach().clone()

    def _keep(self, name: str, kind: str):
        def keep(t):
            if kind in (Z, HEAD):
                t = t.reshape(*t.shape[:2], self.parts.n_heads, self.parts.head_dim)
            self.store[name] = self._at(t)

        def pre_hook(module, args, kwargs):
            keep(args[0] if args else kwargs.get("hidden_states", next(iter(kwargs.values()), None)))

        def hook(module, args, out):
            if kind != PATTERN:
                keep(_first(out))
                return
            weights = out[1] if isinstance(out, tuple) and len(out) > 1 else None
            if not isinstance(weights, torch.Tensor) or weights.dim() != 4:
                raise CoreError(f"{type(module).__name__} returned no attention probabilities: the pattern is read "
                                "under eager attention only, which this model's attention did not run")
            if self.where is None:
                self.store[name] = weights.detach().clone()  # (rows, heads, queries, keys)
            else:  # each row's query token: (rows, heads, keys)
                self.store[name] = self._at(weights.transpose(1, 2))

        return pre_hook, hook

    def __enter__(self):
        for name, (kind, _) in self.sites.items():
            module, on_input = self.modules[name]
            pre_hook, hook = self._keep(name, kind)
            if on_input:
                self.handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
            else:
                self.handles.append(module.register_forward_hook(hook))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []

    def take(self) -> dict:
        """{name: float32 CPU tensor} of the batch just run (hook_result computed from hook_z); then forget them."""
        out = {}
        for name, (kind, block) in self.sites.items():
            if name not in self.store:
                raise CoreError(f"the hook of {name} did not fire: the module names ({self.parts.names}) do not match "
                                "what the model runs")
            t = self.store[name].float().cpu()
            if kind == HEAD:
                t = torch.einsum("...hd,hdw->...hw", t, self.parts.head_weights(block + 1).cpu())
            out[name] = t
        self.store = {}
        return out
