"""How a model turns a residual-stream vector into logits over the number tokens
(docs/method.md#residual-stream-and-logit-lens).

`Unembed` holds the final norm, the number tokens' unembedding rows, the lm_head bias and the
logit transforms some models apply after lm_head (a constant scale, soft-capping), so the logit
lens reproduces the model's own logits; `Unembed.read` is the linear part W_U reads off a module
output, what the module spectra and the Fourier filters use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(eq=False)
class Unembed:
    """How the model turns a residual-stream vector into logits over the number tokens.

    logits(h) = softcap(scale * (W_U norm(h) + b)): the final norm (optional, off for the
    logit lens "without the final norm"), the unembedding rows of the number tokens 0..p-1, the
    lm_head bias, a constant logit scale (Cohere, Granite) and final logit soft-capping
    (c tanh(z / c), Gemma2). `read(x)` is the linear part scale * W_U x: what W_U reads off a
    module output (module logits, module spectra, the Fourier filters), with no bias, since a
    module output adds no bias of its own.
    """

    weight: object  # (p, D) float32 tensor, on the lm_head's device
    bias: object | None  # (p,) float32 or None
    norm: object | None  # the final norm module or None
    scale: float = 1.0
    softcap: float | None = None
    weight_dtype: object = None  # the dtype the model stores W_U in (sets the filters' rank tolerance)

    @property
    def p(self) -> int:
        return int(self.weight.shape[0])

    @property
    def width(self) -> int:
        return int(self.weight.shape[1])

    def read(self, x):
        """scale * W_U x over the last axis, float32 (..., D) -> (..., p)."""
        out = x.to(self.weight.device).float() @ self.weight.T
        return out * self.scale if self.scale != 1.0 else out

    def logits(self, h, final_norm: bool = True):
        """The model's own logits over the number tokens for residual vectors h (..., D)."""
        if final_norm and self.norm is not None:
            # the norm runs in its own weights' device and dtype (a model loaded in bfloat16 has a bfloat16 norm, and
            # a layer norm refuses inputs of another dtype)
            like = next(self.norm.parameters(), h)
            with torch.no_grad():
                h = self.norm(h.to(device=like.device, dtype=like.dtype))
        z = h.to(self.weight.device).float() @ self.weight.T
        if self.bias is not None:
            z = z + self.bias
        if self.scale != 1.0:
            z = z * self.scale
        if self.softcap:
            z = torch.tanh(z / self.softcap) * self.softcap
        return z


def build_unembed(model, final_norm, ids) -> Unembed:
    """The model's `Unembed` restricted to the token ids `ids` (the number tokens)."""
    head = model.get_output_embeddings()
    weight = head.weight
    t = torch.as_tensor(np.asarray(ids, dtype=np.int64), device=weight.device)
    rows = weight.detach()[t].float()
    bias = getattr(head, "bias", None)
    bias = bias.detach()[t.to(bias.device)].float().to(weight.device) if bias is not None else None
    scale, softcap = logit_transform(model.config)
    return Unembed(rows, bias, final_norm, scale, softcap, weight.dtype)


def logit_transform(config) -> tuple[float, float | None]:
    """(scale, softcap) the model applies to its logits after lm_head, read from its config."""
    model_type = getattr(config, "model_type", "")
    text = getattr(config, "text_config", None) or config
    scale = 1.0
    if model_type.startswith("cohere") and getattr(text, "logit_scale", None):
        scale = float(text.logit_scale)
    if model_type.startswith("granite") and getattr(text, "logits_scaling", None):
        scale = 1.0 / float(text.logits_scaling)
    softcap = getattr(text, "final_logit_softcapping", None)
    return scale, (float(softcap) if softcap else None)
