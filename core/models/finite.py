"""Stop on NaN or infinite activations, naming the first layer and module where they appear.

A model whose activations overflow (float16's range ends at 65504; a weight scaled far too large) gives NaN logits
and losses, and every table computed from them would be NaN: an accuracy of 0%, spectra of nothing. The shared
forward paths check what they compute anyway, at no cost on a healthy model: the answer-position logits of every
batch (`core.models.capture.forward_batch`) and the losses of every evaluated condition
(`core.analysis.evaluation.evaluate_conditions`, which patching runs on). When one is not finite, that batch runs once
more with a hook on the embedding and on every block's attention, MLP and stream output (`first_nonfinite_site`),
and `NonFiniteError` (a CoreError: one line on the command line) names the first site, counted from 1 as the docs
count, with its TransformerLens hook name, and what to do.

Rule: only the prompts' real tokens are checked (left padding is never read), and the sites are checked in the order
the model computes them, so the site named is where the overflow starts, not where it spread to.
"""

from __future__ import annotations

import numpy as np
import torch

from core.errors import CoreError
from core.models.modes import evaluating
from core.models.names import ATTN, MLP, RESID, hook_name


class NonFiniteError(CoreError):
    """NaN or infinite activations, logits or losses: where they first appear and what to do."""


def site_label(stream: str, layer: int, n_layers: int) -> str:
    """How the docs name a site (layers from 1), with its TransformerLens hook name."""
    if stream == RESID:
        what = "the embedding output (the stream before layer 1)" if layer == 0 else f"the stream after layer {layer}"
    else:
        what = f"the {'attention' if stream == ATTN else 'MLP'} output of layer {layer}"
    return f"{what} ({hook_name(stream, layer, n_layers)})"


def logits_finite(logits) -> bool:
    """Whether every logit is finite (one reduction over the answer position's logits)."""
    return bool(torch.isfinite(logits).all())


def first_nonfinite_site(loaded, input_ids, attention_mask, position_ids=None) -> str | None:
    """The first site (`site_label`) whose output holds NaN or infinity on a real token, running the prompts once
    more with hooks on every block's input, attention, MLP and output (whatever other hooks are on stay on); None
    when every block's output is finite."""
    parts, model = loaded.parts, loaded.model
    L = parts.n_layers
    found: list[str] = []
    real = attention_mask.bool()

    def check(t, stream: str, layer: int) -> None:
        t = t[0] if isinstance(t, tuple) else t
        if found or not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return
        rows = t[real.to(t.device)] if t.dim() == 3 and t.shape[:2] == real.shape else t
        if not bool(torch.isfinite(rows).all()):
            found.append(site_label(stream, layer, L))

    handles = [parts.blocks[0].register_forward_pre_hook(
        lambda m, args, kwargs: check(args[0] if args else kwargs.get("hidden_states"), RESID, 0), with_kwargs=True)]
    for layer in range(1, L + 1):
        for stream in (ATTN, MLP):
            handles.append(parts.outputs(stream)[layer - 1].register_forward_hook(
                lambda m, args, out, s=stream, n=layer: check(out, s, n)))
        handles.append(parts.blocks[layer - 1].register_forward_hook(
            lambda m, args, out, n=layer: check(out, RESID, n)))
    device = loaded.input_device
    kwargs = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device), "use_cache": False}
    if position_ids is not None:
        kwargs["position_ids"] = position_ids.to(device)
    try:
        with torch.no_grad(), evaluating(model):
            model(**kwargs)
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None


def nonfinite_error(loaded, batch, what: str = "the model's logits", edited: bool = False) -> NonFiniteError:
    """The one-line error for a batch (`core.models.capture.PreparedBatch`) whose `what` came out NaN or infinite:
    where it starts (`first_nonfinite_site`) and what to do. `edited`: the batch ran under an edit (a filter, patch
    or shift), so a model that is finite without it is the edit's doing."""
    site = first_nonfinite_site(loaded, batch.input_ids, batch.attention_mask, batch.position_ids)
    dtype = str(loaded.model.get_output_embeddings().weight.dtype).removeprefix("torch.")
    n = len(batch.indices)
    if site is None and edited:
        return NonFiniteError(
            f"{loaded.source}: {what} are NaN or infinite on {n} prompt(s) under an edit, while the model alone is "
            "finite on them: the edit makes them so (check the values it writes; a scale far too large?)"
        )
    where = f"first in {site}" if site is not None else "after the last block (the final norm or the unembedding)"
    if dtype in ("float16", "bfloat16"):
        todo = (f"its activations overflow in {dtype}: load it in float32 (--dtype float32), or check its weights "
                "(one scaled far too large?)")
    else:
        todo = ("its activations overflow even in float32: check its weights (one scaled far too large? a "
                "diverged training run?) or use a checkpoint at a smaller scale")
    if edited:  # the hooks of the edit may still be on while the site is sought: it may be the edit's doing
        todo = (f"an edit (a filter, patch or shift) was on, and the check may have run with it: run the model without "
                f"the edit first; if it is NaN there too, {todo}")
    return NonFiniteError(f"{loaded.source}: NaN or infinite activations, {where}, on {n} prompt(s) ({what} are "
                          f"not finite); {todo}")


def require_finite_logits(loaded, batch, logits) -> None:
    """Raise `nonfinite_error` when the batch's answer-position logits are not all finite."""
    if not logits_finite(logits):
        raise nonfinite_error(loaded, batch)


def require_finite_losses(loaded, batch, losses, edited: bool = False) -> None:
    """Raise `nonfinite_error` when a batch's losses (a numpy array, already computed) are not all finite: a NaN or
    infinite logit makes the loss over the whole vocabulary NaN."""
    if not np.isfinite(np.asarray(losses)).all():
        raise nonfinite_error(loaded, batch, "the losses", edited)
