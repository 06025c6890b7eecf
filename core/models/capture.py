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
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from core.errors import CoreError
from core.models.finite import require_finite_logits
from core.models.modes import evaluating
from core.models.names import (
    ATTN,
    MLP,
    MODULE_OUTPUTS,
    PATTERN,
    READ_HOOKS,
    RESID,
    STREAMS,
    Z,
    check_streams,
    hook_name,
    read_site,
)
from core.models.positions import ANSWER, check_position, token_index
from core.models.site_recorder import SiteRecorder


@dataclass
class PreparedBatch:
    indices: np.ndarray  # positions of these rows in the caller's list of prompts
    input_ids: object
    attention_mask: object
    position_ids: object

    def __repr__(self) -> str:
        return f"PreparedBatch({len(self.indices)} prompts x {self.input_ids.shape[-1]} tokens)"


def prepare_batches(tokenizer, texts: Sequence[str], batch_size: int | Sequence[int],
                    by_length: bool = True) -> list[PreparedBatch]:
    """Tokenize, sort by length, batch, left-pad; position ids start at 0 on the first real token.

    `batch_size`: one size for every batch, or the sizes of the first batches in order, the last repeated (the live
    sample's (64, 448): a small first batch for a quick first estimate, then the rest at once). With
    `by_length=False` the batches follow the prompts' own order (a sample whose every prefix is representative stays
    so batch by batch), at the cost of some padding."""
    sizes = [batch_size] if isinstance(batch_size, int) else [int(b) for b in batch_size]
    if not sizes or min(sizes) < 1:
        raise CoreError(f"batch size must be at least 1, got {batch_size}")
    if len(texts) == 0:
        raise CoreError("no prompts to run")
    encoded = tokenizer(list(texts))["input_ids"]
    lengths = np.array([len(e) for e in encoded])
    if lengths.min() == 0:
        raise CoreError("a prompt tokenized to nothing")
    order = np.argsort(lengths, kind="stable") if by_length else np.arange(len(lengths))
    batches, start = [], 0
    while start < len(order):
        size = sizes[min(len(batches), len(sizes) - 1)]
        idx = order[start : start + size]
        batches.append(PreparedBatch(idx, *left_pad([encoded[i] for i in idx], tokenizer.pad_token_id)))
        start += size
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
    """One forward pass, in eval mode; returns the logits at the last (answer) position, (B, vocab). NaN or infinite
    logits stop it with where they start (`core.models.finite.require_finite_logits`)."""
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
    logits = out.logits[:, -1, :]
    require_finite_logits(loaded, batch, logits)
    return logits


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



class Activations(dict):
    """{TransformerLens hook name: float32 array} as `capture_hooks` and `run_with_cache` return them, with what says
    where they were read: `position` as asked; `index`, per prompt, the token read among the prompt's own tokens (0
    its first; None for "all"); `mask` (prompts, tokens), True on the prompts' real tokens, for "all" (whose arrays
    are left-padded with zeros to the longest prompt: a prompt's token i sits at column tokens - length + i), else
    None; `tokens`, each prompt's tokens as text."""

    position: object = ANSWER
    index: np.ndarray | None = None
    mask: np.ndarray | None = None
    tokens: list | None = None

    def __repr__(self) -> str:
        kept = ", ".join(f"{k} {tuple(v.shape)}" for k, v in self.items())
        return f"Activations(position={self.position!r}; {kept})"


@contextmanager
def eager_attention(model, needed: bool = True):
    """Run `model` with eager attention while the block is active (transformers' sdpa and flash kernels do not return
    the attention probabilities a pattern is read from), its own implementation given back after."""
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    if not needed or before in (None, "eager"):
        yield
        return
    switch = getattr(model, "set_attn_implementation", None)
    try:
        if switch is not None:
            switch("eager")
        else:
            config._attn_implementation = "eager"
        yield
    finally:
        if switch is not None:
            switch(before)
        else:
            config._attn_implementation = before


def capture_hooks(loaded, texts: Sequence[str], hooks: Sequence[str], position="answer", batch_size: int = 32,
                  progress=None) -> Activations:
    """The activations at TransformerLens hook names (`core.models.names.READ_HOOKS`, blocks counted from 0; what each
    holds and its shape: `core.models.site_recorder`), float32, keyed by the names as given, at `position`
    (`core.models.positions`: "answer", a token index counted on each prompt's own tokens, the operands "a" and "b",
    or "all", which adds a token axis, left-padded with zeros, and sets the result's `mask`). An attention pattern
    (blocks.N.attn.hook_pattern) at one token is (prompts, heads, keys), its keys left-padded with zeros to the
    longest prompt like "all"'s tokens; it needs eager attention, which this call switches on for its passes and
    then gives back. The per-head names need a model whose heads can be read (`ModelParts.require_heads`),
    hook_resid_mid sequential blocks, hook_post an MLP with a down projection: each refused with why otherwise."""
    return read_activations(loaded, texts, hooks, position, batch_size, progress, logits=False)[1]


def run_with_cache(loaded, texts: Sequence[str], names: Sequence[str] | None = None, position="answer",
                   batch_size: int = 32, progress=None) -> tuple[np.ndarray, Activations]:
    """(logits, activations), as TransformerLens' `run_with_cache` gives them, at `position` (`capture_hooks`):
    the model's logits over its whole vocabulary at that token, (prompts, vocab) (with "all", (prompts, tokens,
    vocab), left-padded), and every hook this model has (`core.models.names.READ_HOOKS`, block by block) or those
    `names` list. A hook the model cannot give (the heads of a post-norm layout, hook_resid_mid of parallel blocks)
    is left out of the default list; asked by name, it is refused with why."""
    if names is None:
        names = available_hooks(loaded)
    return read_activations(loaded, texts, names, position, batch_size, progress, logits=True)


def available_hooks(loaded) -> list[str]:
    """Every TransformerLens name (`READ_HOOKS`) this model can give, block by block."""
    names = []
    for block in range(loaded.n_layers):
        for hook in READ_HOOKS[:-1]:
            name = hook.replace("N", str(block))
            try:
                SiteRecorder(loaded.parts, {name: read_site(name, loaded.n_layers)})
            except CoreError:
                continue
            names.append(name)
    if loaded.parts.final_norm is not None:
        names.append(READ_HOOKS[-1])
    return names


def read_activations(loaded, texts: Sequence[str], hooks: Sequence[str], position="answer", batch_size: int = 32,
                     progress=None, logits: bool = False) -> tuple[np.ndarray | None, Activations]:
    """What `capture_hooks` and `run_with_cache` share: the sites at `position`, and with `logits` the logits there."""
    position = check_position(position)
    sites = {h: read_site(h, loaded.n_layers) for h in hooks}
    batches = prepare_batches(loaded.tokenizer, texts, batch_size)
    encoded = loaded.tokenizer(list(texts))["input_ids"]
    index = token_index(loaded.tokenizer, texts, position, encoded)
    lengths = np.array([len(e) for e in encoded])
    longest = int(lengths.max())
    pattern = any(kind == PATTERN for kind, _ in sites.values())
    chunks: dict[str, list] = {h: [] for h in hooks}
    logit_chunks, order = [], []
    bar = progress_bar(len(texts), "capture", progress)
    model, device = loaded.model, loaded.input_device
    try:
        with SiteRecorder(loaded.parts, sites) as rec, evaluating(model), eager_attention(model, pattern):
            for batch in batches:
                width = batch.input_ids.shape[1]
                where = None if index is None else torch.as_tensor(
                    width - lengths[batch.indices] + index[batch.indices])
                rec.where = where
                with torch.no_grad():
                    out = model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
                                position_ids=batch.position_ids.to(device), use_cache=False)
                kept = rec.take()
                real = batch.attention_mask.bool()
                for h in hooks:
                    is_pattern = sites[h][0] == PATTERN
                    chunks[h].append(padded(zero_padding(kept[h], real, where is None, is_pattern), longest,
                                            where is None, is_pattern))
                if logits:
                    got = out.logits.float().cpu()
                    got = got if where is None else got[torch.arange(len(where)), where]
                    logit_chunks.append(padded(zero_padding(got, real, where is None, False), longest, where is None,
                                               False))
                order.append(batch.indices)
                bar.update(len(batch.indices))
    finally:
        bar.close()
    inverse = np.argsort(np.concatenate(order), kind="stable")
    result = Activations({h: np.concatenate(chunks[h])[inverse] for h in hooks})
    result.position, result.index = position, index
    result.tokens = [[loaded.tokenizer.decode([t]) for t in e] for e in encoded]
    if index is None:
        result.mask = np.arange(longest)[None, :] >= (longest - lengths)[:, None]
    return (np.concatenate(logit_chunks)[inverse] if logits else None), result


def zero_padding(t, real, every_token: bool, pattern: bool):
    """A batch's activations with every pad token's entries set to zero (`real`: the attention mask, (B, tokens)):
    a pad token's row is computed by the model but means nothing (a fully masked query can even be NaN), so "left-
    padded with zeros" holds for a prompt shorter than its batch too. A pattern's pad keys (and, with `every_token`,
    its pad queries) are zeroed; other arrays' pad tokens when `every_token`."""
    if pattern and every_token:  # (rows, heads, queries, keys)
        keep = real[:, None, None, :] & real[:, None, :, None]
    elif pattern:  # one query a row: (rows, heads, keys)
        keep = real[:, None, :]
    elif every_token:
        keep = real.reshape(*real.shape, *([1] * (t.dim() - 2)))
    else:
        return t
    return torch.where(keep.to(t.device), t, torch.zeros((), dtype=t.dtype, device=t.device))


def padded(t, longest: int, every_token: bool, pattern: bool) -> np.ndarray:
    """A batch's array with its token axes (the one after the rows when `every_token`; a pattern's keys, and its
    queries too when `every_token`) left-padded with zeros to `longest` tokens."""
    a = t.numpy()
    axes = ([2, 3] if every_token else [2]) if pattern else ([1] if every_token else [])
    widths = [(0, 0)] * a.ndim
    for axis in axes:
        widths[axis] = (longest - a.shape[axis], 0)
    return np.pad(a, widths) if axes else a
