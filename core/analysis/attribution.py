"""Attribution patching (Nanda 2023; Syed et al. 2023, "Attribution Patching Outperforms Automated Circuit
Discovery"): the first-order estimate of activation patching (core.analysis.patching), one forward and backward pass
per pair instead of one pass per site.

The metric is exact patching's: m = logit(clean answer) - logit(corrupted answer) over the number tokens, read at the
answer position. For each pair the corrupted prompt runs forward and backward once, keeping at every site its
activation a_corrupt at the answer position and the gradient dm/da there; the clean prompt runs forward once
(core.models.capture.capture), keeping a_clean. A site's estimated effect on the gap is

    effect = (a_clean - a_corrupt) . dm/da |corrupt

the change exact patching would measure if m were linear in the site's activation (exactly so where it is: the MLP
of the last layer and the last stream of a model without a final norm; a test checks both, and that the estimate is
the derivative of exact patching along a_clean - a_corrupt everywhere). The estimated recovered share is exact
patching's ratio of means with the estimated patched gap corrupt + effect:

    attributed = mean effect / (mean g_clean - mean g_corrupt)

over the pairs (`recovered_share`, NaN below `MIN_SPREAD`), with exact patching's bootstrap interval over pairs
(`bootstrap_shares`, the same resamples and seed). Where the gap bends (a norm between the site and the logits, a
saturated softmax in attention) the estimate drifts from exact patching; the stream near the embeddings, whose change
passes through every norm of the model, is where it is known to fail most (Syed et al.).

Sites are exact patching's (`module_sites`): the stream h(l) for l = 0..L, Attn(l) and MLP(l) for l = 1..L, and where
the heads can be read, each head's output z(l, h) before W_O (hook_z), every one at the answer position and by
default all of them (they cost nothing more: one backward pass gives every gradient). Gradients are taken with
respect to the activations only (`torch.autograd.grad` on the hooked tensors; no parameter's `.grad` is touched and
the model's flags are left as they were), in eval mode, the metric and the products in float32 (the backward pass
runs in the model's own dtype).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from core.analysis.patching import (
    BOOTSTRAP,
    BOOTSTRAP_SEED,
    Site,
    bootstrap_shares,
    check_site,
    checked_pairs,
    module_sites,
    recovered_share,
    share_interval,
)
from core.errors import CoreError
from core.models.capture import capture, forward_accepts, prepare_batches, progress_bar
from core.models.modes import evaluating
from core.models.names import ATTN, HEAD, MLP, RESID, STREAMS, Z, hook_name

#: The columns of an attribution table: one row per site (head -1 for a whole module or the stream), the estimated
#: recovered share with its bootstrap interval, the mean estimated effect on the gap and the mean gaps (logits).
ATTRIBUTION_COLUMNS = ("kind", "layer", "head", "n", "attributed", "attributed_low", "attributed_high", "effect",
                       "clean_gap", "corrupt_gap")


@dataclass
class AttributionResult:
    """What attribution patching estimated, pair by pair: the clean and corrupted runs' gaps and each site's estimated
    effect on the corrupted gap (rows in the order of `sites`)."""

    sites: list[Site]
    clean_gap: np.ndarray  # (pairs,)
    corrupt_gap: np.ndarray  # (pairs,)
    effect: np.ndarray  # (sites, pairs): (a_clean - a_corrupt) . dm/da at the corrupted run

    @property
    def n(self) -> int:
        return int(len(self.clean_gap))

    @property
    def patched_gap(self) -> np.ndarray:
        """The estimated patched gaps, corrupt + effect, (sites, pairs): what exact patching's `patched_gap` holds."""
        return self.corrupt_gap[None, :] + self.effect


def every_site(loaded) -> list[Site]:
    """Exact patching's sites of this model, each head of each layer included where the heads can be read."""
    return module_sites(loaded.n_layers, loaded.parts.n_heads if loaded.parts.has_heads else 0)


def attribute_pairs(loaded, clean_texts: Sequence[str], corrupt_texts: Sequence[str], clean_answers, corrupt_answers,
                    p: int, sites: Sequence[Site] | None = None, batch_size: int = 32,
                    progress=None) -> AttributionResult:
    """Estimate every site of `sites` (default: `every_site`) patched from each clean prompt into its corrupted
    partner (the same place in the lists) at the answer position (module docstring); the prompts as the model reads
    them."""
    clean_answers, corrupt_answers = checked_pairs(clean_texts, corrupt_texts, clean_answers, corrupt_answers, p)
    sites = list(every_site(loaded) if sites is None else sites)
    for site in sites:
        check_site(site, loaded.n_layers, loaded.parts)
    heads = any(site.kind == HEAD for site in sites)
    ids = torch.as_tensor(loaded.numbers.ids_for(p))
    n = len(clean_texts)
    clean_gap, corrupt_gap = np.zeros(n), np.zeros(n)
    effect = np.zeros((len(sites), n))
    bar = progress_bar(n, "attribution", progress)
    try:
        for batch in prepare_batches(loaded.tokenizer, list(corrupt_texts), batch_size):
            rows = batch.indices
            kept = capture(loaded, [clean_texts[i] for i in rows], len(rows), STREAMS, False, heads=heads)
            target, other = ids[clean_answers[rows]], ids[corrupt_answers[rows]]
            logits, picked = kept["logits"], np.arange(len(rows))
            clean_gap[rows] = logits[picked, target.numpy()] - logits[picked, other.numpy()]
            gap, acts, grads = corrupt_gradients(loaded, batch, target, other, heads)
            corrupt_gap[rows] = gap
            # each stream's (a_clean - a_corrupt) . dm/da at once: (B, layers), z's (B, layers, heads)
            products = {s: ((torch.as_tensor(kept[s]) - acts[s]) * grads[s]).sum(-1).numpy() for s in acts}
            for s, site in enumerate(sites):
                effect[s, rows] = site_values(products, site)
            bar.update(len(rows))
    finally:
        bar.close()
    check_finite(effect, corrupt_gap, clean_gap, sites, loaded.n_layers)
    return AttributionResult(sites, clean_gap, corrupt_gap, effect)


def check_finite(effect: np.ndarray, corrupt_gap: np.ndarray, clean_gap: np.ndarray, sites, n_layers: int) -> None:
    """A clear error where a gap or an estimate is NaN or infinite (activations that overflow the model's dtype), naming
    the first site (its TransformerLens hook name) where it appears."""
    if not (np.isfinite(clean_gap).all() and np.isfinite(corrupt_gap).all()):
        raise CoreError("attribution: the model's logits are NaN or infinite on some prompts: its activations "
                        "overflow; run it in float32 (--dtype float32) or with smaller weights")
    bad = [s for s, row in zip(sites, effect) if not np.isfinite(row).all()]
    if bad:
        stream = Z if bad[0].kind == HEAD else bad[0].kind
        raise CoreError(f"attribution: the gradient at {hook_name(stream, bad[0].layer, n_layers)} is NaN or infinite "
                        "(activations or gradients overflow); run the model in float32 (--dtype float32)")


def site_values(arrays: dict, site: Site):
    """One site's column of a capture-shaped dict whose rows are one number per layer (resid (B, L + 1), attn and mlp
    (B, L), z (B, L, heads)): (B,)."""
    if site.kind == HEAD:
        return arrays[Z][:, site.layer - 1, site.head]
    return arrays[site.kind][:, site.layer if site.kind == RESID else site.layer - 1]


class GradientRecorder:
    """Hooks that keep, during one forward pass with gradients, every site's activation tensor (whole, with its graph):
    the stream before block 1 (made a leaf that requires a gradient, so a model whose weights require none still has a
    graph), each block's output, each attention and MLP output and, with `heads`, each attention's heads' outputs z
    (W_O's input). `answer_position` gives the activations and their gradients at the last position, shaped as a
    capture is (`core.models.capture.capture`)."""

    def __init__(self, parts, heads: bool = False):
        self.parts = parts
        self.heads = heads
        if heads:
            parts.require_heads("attribution patching of the attention heads (hook_z)")
        self.handles = []
        L = parts.n_layers
        self.kept = {RESID: [None] * (L + 1), ATTN: [None] * L, MLP: [None] * L, Z: [None] * L}

    def _leaf_input(self, module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        leaf = hidden.detach().requires_grad_(True)
        self.kept[RESID][0] = leaf
        return ((leaf, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": leaf})

    def _keep(self, stream: str, index: int):
        def hook(module, args, out):
            self.kept[stream][index] = out[0] if isinstance(out, tuple) else out

        return hook

    def _keep_heads(self, index: int):
        def hook(module, args, kwargs):
            self.kept[Z][index] = args[0] if args else next(iter(kwargs.values()))

        return hook

    def __enter__(self):
        p = self.parts
        self.handles.append(p.blocks[0].register_forward_pre_hook(self._leaf_input, with_kwargs=True))
        for layer, block in enumerate(p.blocks):
            self.handles.append(block.register_forward_hook(self._keep(RESID, layer + 1)))
        for stream in (ATTN, MLP):
            for layer, mod in enumerate(p.outputs(stream)):
                self.handles.append(mod.register_forward_hook(self._keep(stream, layer)))
        if self.heads:
            for layer, proj in enumerate(p.out_proj):
                self.handles.append(proj.register_forward_pre_hook(self._keep_heads(layer), with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []

    def tensors(self) -> list:
        """Every kept tensor, stream by stream (the order `answer_position` reads the gradients in)."""
        streams = (RESID, ATTN, MLP, *((Z,) if self.heads else ()))
        kept = [t for s in streams for t in self.kept[s]]
        if any(t is None for t in kept):
            raise CoreError(f"attribution: the hooks did not fire on every layer: the module names "
                            f"({self.parts.names}) do not match what the model runs")
        return kept

    def answer_position(self, grads) -> tuple[dict, dict]:
        """(activations, gradients) at the last position, float32 on the CPU, keyed as a capture is; `grads` in the
        order of `tensors`."""
        acts, out = {}, {}
        streams = (RESID, ATTN, MLP, *((Z,) if self.heads else ()))
        i = 0
        for s in streams:
            count = len(self.kept[s])
            last = [t[:, -1, :].detach().float().cpu() for t in self.kept[s]]
            g = [torch.zeros_like(a) if d is None else d[:, -1, :].float().cpu()
                 for a, d in zip(last, grads[i:i + count])]
            acts[s], out[s] = torch.stack(last, 1), torch.stack(g, 1)
            i += count
        if self.heads:
            shape = (*acts[Z].shape[:2], self.parts.n_heads, self.parts.head_dim)
            acts[Z], out[Z] = acts[Z].reshape(shape), out[Z].reshape(shape)
        return acts, out


def corrupt_gradients(loaded, batch, target, other, heads: bool):
    """One forward and backward pass of a batch of corrupted prompts: (their gaps m, (B,) numpy; the activations and
    dm/da at the answer position, capture-shaped dicts of float32 tensors). `target`, `other`: the token ids whose
    logits' difference is m, one per row.

    Nothing before the answer position depends on what happens at it (causal attention), so the prefix (every token
    but the last) runs once without gradients, keeping its keys and values, and only the answer token runs with them
    against that cache, as the filters' evaluation does (core.analysis.evaluation): the gradient at the answer
    position is the same, its backward pass one token long."""
    model = loaded.model
    device = loaded.input_device
    ids, mask = batch.input_ids.to(device), batch.attention_mask.to(device)
    pos = batch.position_ids.to(device)
    extra = {"logits_to_keep": 1} if forward_accepts(model, "logits_to_keep") else {}
    last = dict(input_ids=ids[:, -1:], attention_mask=mask, position_ids=pos[:, -1:], use_cache=True, **extra)
    recorder = GradientRecorder(loaded.parts, heads)
    with evaluating(model):
        if ids.shape[1] > 1:
            with torch.no_grad():
                last["past_key_values"] = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1],
                                                position_ids=pos[:, :-1], use_cache=True, **extra).past_key_values
        with torch.enable_grad(), recorder:
            logits = model(**last).logits[:, -1, :].float()
            rows = torch.arange(len(target), device=logits.device)
            gaps = logits[rows, target.to(logits.device)] - logits[rows, other.to(logits.device)]
            kept = recorder.tensors()
            # rows are independent (left padding, each row's own mask), so the gradient of the sum is each row's own
            grads = torch.autograd.grad(gaps.sum(), kept, allow_unused=True)
    acts, out = recorder.answer_position(grads)
    return gaps.detach().cpu().numpy(), acts, out


def attribution_table(result: AttributionResult, resamples: int = BOOTSTRAP,
                      seed: int = BOOTSTRAP_SEED) -> pd.DataFrame:
    """One row per site (`ATTRIBUTION_COLUMNS`): its estimated recovered share with exact patching's bootstrap interval
    over pairs (none for one pair), the mean estimated effect and the mean gaps."""
    patched = result.patched_gap
    draws = None
    if result.n > 1:
        draws = bootstrap_shares(result.clean_gap, result.corrupt_gap, patched, resamples, seed)
    rows = []
    for i, site in enumerate(result.sites):
        low, high = share_interval(None if draws is None else draws[:, i])
        rows.append({"kind": site.kind, "layer": site.layer, "head": -1 if site.head is None else site.head,
                     "n": result.n, "attributed": recovered_share(patched[i], result.clean_gap, result.corrupt_gap),
                     "attributed_low": low, "attributed_high": high, "effect": float(result.effect[i].mean()),
                     "clean_gap": float(result.clean_gap.mean()), "corrupt_gap": float(result.corrupt_gap.mean())})
    return pd.DataFrame(rows, columns=list(ATTRIBUTION_COLUMNS))
