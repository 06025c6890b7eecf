"""Batched forward passes that keep only the answer position: h(l), Attn(l), MLP(l) for every layer.

Prompts are tokenized once, sorted by length and cut into batches, so most batches need no
padding at all; the rest are padded on the left, with position ids counted from the first real
token, so the last position of every row is the answer position and each row computes what it
would compute alone. Hooks copy the last position of each block, attention and MLP output (a
few KB per example) and nothing else, so memory grows with examples x layers x width, never
with prompt length. Attention weights and the KV cache are not kept. Every pass runs in eval mode and leaves the
model's own training flags as they were (`core.models.modes.evaluating`).

resid[:, l] is h(l): l = 0 is the embedding output (the input of block 0), l = 1..L the output
of block l. attn[:, l-1] and mlp[:, l-1] are Attn(l), MLP(l), the outputs the block adds to the
stream (after the output projection). With `heads`, z[:, l-1] (B, heads, head_dim) are the heads' outputs in
block l before the output projection W_O (TransformerLens' hook_z), kept by a pre-hook on W_O's input. The names
"resid", "attn", "mlp", "z" (and their TransformerLens hook names) are defined in `core.models.names`.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from core.errors import CoreError
from core.models.modes import evaluating
from core.models.names import (
    ATTN,
    HEAD,
    HEAD_SITES,
    MLP,
    MODULE_OUTPUTS,
    RESID,
    STREAMS,
    Z,
    check_streams,
    hook_name,
    site_of_hook,
)


@dataclass
class PreparedBatch:
    indices: np.ndarray  # positions of these rows in the caller's list of prompts
    input_ids: object
    attention_mask: object
    position_ids: object

    def __repr__(self) -> str:
        return f"PreparedBatch({len(self.indices)} prompts x {self.input_ids.shape[-1]} tokens)"


def prepare_batches(tokenizer, texts: Sequence[str], batch_size: int, by_length: bool = True) -> list[PreparedBatch]:
    """Tokenize, sort by length, batch, left-pad; position ids start at 0 on the first real token.

    With `by_length=False` the batches follow the prompts' own order (a sample whose every prefix is
    representative stays so batch by batch), at the cost of some padding."""
    if batch_size < 1:
        raise CoreError(f"batch size must be at least 1, got {batch_size}")
    if len(texts) == 0:
        raise CoreError("no prompts to run")
    encoded = tokenizer(list(texts))["input_ids"]
    lengths = np.array([len(e) for e in encoded])
    if lengths.min() == 0:
        raise CoreError("a prompt tokenized to nothing")
    order = np.argsort(lengths, kind="stable") if by_length else np.arange(len(lengths))
    batches = []
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batches.append(PreparedBatch(idx, *left_pad([encoded[i] for i in idx], tokenizer.pad_token_id)))
    return batches


def left_pad(seqs, pad_id: int):
    """(input_ids, attention_mask, position_ids) for token lists padded on the left.

    Position ids count from the first real token, so each row computes what it would alone.
    """
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, width - len(seq) :] = torch.tensor(seq)
        mask[row, width - len(seq) :] = 1
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def forward_accepts(model, name: str) -> bool:
    """Whether the model's forward takes the keyword `name` (e.g. logits_to_keep, which older architectures lack)."""
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def forward_batch(loaded, batch: PreparedBatch):
    """One forward pass, in eval mode; returns the logits at the last (answer) position, (B, vocab)."""
    model = loaded.model
    device = loaded.input_device
    kwargs = dict(
        input_ids=batch.input_ids.to(device),
        attention_mask=batch.attention_mask.to(device),
        position_ids=batch.position_ids.to(device),
        use_cache=False,
    )
    if forward_accepts(model, "logits_to_keep"):
        kwargs["logits_to_keep"] = 1
    with torch.no_grad(), evaluating(model):
        out = model(**kwargs)
    return out.logits[:, -1, :]


def progress_bar(total: int, desc: str, enabled: bool | None = None):
    """A tqdm bar on stderr, shown when stderr is a terminal (or when `enabled`)."""
    if enabled is None:
        enabled = sys.stderr.isatty() and total > 1
    return tqdm(total=total, desc=desc, disable=not enabled, leave=False, file=sys.stderr)


def _output_tensor(out):
    return out[0] if isinstance(out, tuple) else out


class LastPositionRecorder:
    """Forward hooks that keep a copy of the last position of every block, attention and MLP output; with `heads`,
    also of every attention's per-head outputs z (the input of its output projection, `ModelParts.out_proj`)."""

    def __init__(self, parts, streams: Sequence[str] = STREAMS, heads: bool = False):
        self.parts = parts
        self.streams = check_streams(streams) + ((Z,) if heads else ())
        if heads:
            parts.require_heads("keeping the attention heads' outputs (hook_z)")
        self.handles = []
        self.reset()

    def reset(self):
        L = self.parts.n_layers
        self.store = {RESID: [None] * (L + 1), ATTN: [None] * L, MLP: [None] * L, Z: [None] * L}

    def _keep(self, stream: str, index: int):
        def hook(module, args, out):
            t = _output_tensor(out)
            if not isinstance(t, torch.Tensor) or t.dim() != 3:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise CoreError(
                    f"the {stream} module of block {index} ({type(module).__name__}) gives an output of shape {shape}, "
                    "not (batch, positions, width): some models flatten the positions inside a block (OPT's fc2), so "
                    "its output is not what the block adds to the stream. Name the module whose output is added to "
                    "the stream with --modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH, or use another model."
                )
            self.store[stream][index] = t[:, -1, :].detach().clone()

        return hook

    def _keep_input(self, module, args, kwargs):
        hidden = args[0] if args else kwargs.get("hidden_states")
        self.store[RESID][0] = hidden[:, -1, :].detach().clone()

    def _keep_heads(self, index: int):
        def hook(module, args, kwargs):
            z = args[0] if args else next(iter(kwargs.values()))
            last = z[:, -1, :].detach().clone()  # a copy: the whole (B, positions, heads x head_dim) is not kept
            self.store[Z][index] = last.reshape(z.shape[0], self.parts.n_heads, self.parts.head_dim)

        return hook

    def __enter__(self):
        p = self.parts
        if RESID in self.streams:
            self.handles.append(p.blocks[0].register_forward_pre_hook(self._keep_input, with_kwargs=True))
            for l, block in enumerate(p.blocks):
                self.handles.append(block.register_forward_hook(self._keep(RESID, l + 1)))
        for stream in MODULE_OUTPUTS:
            if stream in self.streams:
                for l, mod in enumerate(p.outputs(stream)):
                    self.handles.append(mod.register_forward_hook(self._keep(stream, l)))
        if Z in self.streams:
            for l, proj in enumerate(p.out_proj):
                self.handles.append(proj.register_forward_pre_hook(self._keep_heads(l), with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []

    def take(self, device) -> dict:
        """The batch's vectors stacked per stream, (B, layers, D), on `device` (z: (B, layers, heads, head_dim));
        then forget them."""
        out = {}
        for stream in self.streams:
            vecs = self.store[stream]
            if any(v is None for v in vecs):
                first = 0 if stream == RESID else 1  # the store's index 0 is h(0) for RESID, layer 1 otherwise
                missing = [hook_name(stream, i + first, self.parts.n_layers) for i, v in enumerate(vecs) if v is None]
                raise CoreError(
                    f"the {stream} hooks did not fire at {', '.join(missing[:5])}: the module names "
                    f"({self.parts.names}) do not match what the model runs"
                )
            out[stream] = torch.stack([v.to(device) for v in vecs], dim=1)
        self.reset()
        return out


@dataclass
class CapturedBatch:
    indices: np.ndarray  # rows of the caller's prompt list
    logits: object  # (B, vocab) final logits at the answer position
    resid: object | None = None  # (B, L+1, D)
    attn: object | None = None  # (B, L, D)
    mlp: object | None = None  # (B, L, D)
    z: object | None = None  # (B, L, heads, head_dim)

    def __repr__(self) -> str:
        kept = ", ".join(f"{s} {tuple(getattr(self, s).shape)}" for s in (*STREAMS, Z) if getattr(self, s) is not None)
        return f"CapturedBatch({len(self.indices)} prompts; {kept or 'logits only'})"


def iter_capture(
    loaded,
    texts: Sequence[str],
    batch_size: int = 32,
    streams: Sequence[str] = STREAMS,
    progress: bool | None = None,
    desc: str = "capture",
    heads: bool = False,
) -> Iterator[CapturedBatch]:
    """Run the prompts in batches and yield the answer-position vectors of each batch (with `heads`, the heads'
    outputs z too; refused for a model whose heads cannot be read, `ModelParts.require_heads`).

    `texts` are the prompts exactly as the model reads them (see `core.models.loading.prompt_texts`).
    """
    batches = prepare_batches(loaded.tokenizer, texts, batch_size)
    target = loaded.model.get_output_embeddings().weight.device
    bar = progress_bar(len(texts), desc, progress)
    try:
        with LastPositionRecorder(loaded.parts, streams, heads) as rec, evaluating(loaded.model):
            for batch in batches:
                logits = forward_batch(loaded, batch)
                vecs = rec.take(target)
                yield CapturedBatch(batch.indices, logits.to(target), **vecs)
                bar.update(len(batch.indices))
    finally:
        bar.close()


def capture(
    loaded, texts: Sequence[str], batch_size: int = 32, streams: Sequence[str] = STREAMS, progress=None,
    heads: bool = False,
) -> dict:
    """All answer-position vectors at once, in the order of `texts`, as float32 numpy arrays (with `heads`, "z" too:
    (prompts, layers, heads, head_dim)).

    Fine for small sets; `iter_capture` streams for large ones.
    """
    chunks: dict[str, list] = {s: [] for s in ("logits", *streams, *((Z,) if heads else ()))}
    order = []
    for cb in iter_capture(loaded, texts, batch_size, streams, progress, heads=heads):
        order.append(cb.indices)
        for s in chunks:
            chunks[s].append(getattr(cb, s).float().cpu().numpy())
    inv = np.argsort(np.concatenate(order), kind="stable")
    return {s: np.concatenate(v)[inv] for s, v in chunks.items()}



def capture_hooks(loaded, texts: Sequence[str], hooks: Sequence[str], position: str = "answer", batch_size: int = 32,
                  progress=None) -> dict[str, np.ndarray]:
    """The activations at TransformerLens hook names (`core.models.names.site_of_hook`: blocks.N.hook_attn_out,
    hook_mlp_out, hook_resid_pre, hook_resid_post, each (prompts, width); blocks.N.attn.hook_z, the heads' outputs
    before W_O, (prompts, heads, head_dim), and blocks.N.attn.hook_result, each head's z_h @ W_O^h, (prompts, heads,
    width), whose sum over heads plus W_O's bias is hook_attn_out), float32, keyed by the names as given. The
    per-head names need a model whose heads can be read (`core.models.parts.ModelParts.require_heads`).
    `position` is explicit: "answer", the position the answer is read at, is the one this project keeps (a capture
    of every position would hold prompts x tokens x layers x width)."""
    if position != "answer":
        raise CoreError(f"position {position!r}: this project's capture keeps the answer position only "
                        "(position=\"answer\")")
    sites = {h: site_of_hook(h, loaded.n_layers, heads=True) for h in hooks}
    heads = any(stream in HEAD_SITES for stream, _ in sites.values())
    if heads:
        asked = ", ".join(h for h, (stream, _) in sites.items() if stream in HEAD_SITES)
        loaded.parts.require_heads(f"capturing {asked}")
    streams = tuple(s for s in STREAMS if any(stream == s for stream, _ in sites.values()))
    arrays = capture(loaded, texts, batch_size, streams, progress, heads=heads)
    out = {}
    for h, (stream, layer) in sites.items():
        if stream == HEAD:
            weights = loaded.parts.head_weights(layer).cpu().numpy()  # (heads, head_dim, width)
            out[h] = np.einsum("nhd,hdw->nhw", arrays[Z][:, layer - 1], weights).astype(np.float32)
        else:
            out[h] = arrays[stream][:, layer if stream == RESID else layer - 1]
    return out
