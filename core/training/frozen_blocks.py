"""Frozen lower blocks: their output for every training prompt computed once.

With `frozen_blocks` K > 0 blocks 0..K-1 get no trained LoRA (a later stage keeps the earlier stage's
factors there, frozen: `keep_lower`). When the new rows stay frozen too (`rows_lr_ratio` 0; with trained
rows the fine-tuning runs the whole stack each step), nothing below block K ever changes: the output of
block K-1 for every training prompt is computed once, and each step runs
(forward and backward) only blocks K.., the final norm and the head. Prompts of one length are
batched together (`length_batches`), so no padding or mask is needed; the result is the same model
the whole forward pass computes (a test checks the logits).
"""

from __future__ import annotations

import numpy as np
import torch

from core.errors import CoreError
from core.training.answers import autocast, model_device


def _llama_stack(model):
    """The Llama-style inner model (embed_tokens, layers, norm, rotary_emb) that blocks are run from by hand."""
    inner = getattr(model, "model", None)
    if inner is None or not all(hasattr(inner, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
        raise CoreError(
            "frozen_blocks needs a Llama-style model (model.embed_tokens, layers, norm, rotary_emb); "
            "set number_tokens.frozen_blocks to 0 for this model"
        )
    return inner


def run_blocks(inner, hidden, blocks):
    """`hidden` (batch, length, width) through `blocks`, causal, positions 0..length-1, no padding."""
    pos = torch.arange(hidden.shape[1], device=hidden.device)[None]
    pe = inner.rotary_emb(hidden, position_ids=pos)
    for block in blocks:
        hidden = block(hidden, attention_mask=None, position_ids=pos, position_embeddings=pe)
    return hidden


def length_batches(lengths: np.ndarray, batch_size: int, rng, order: np.ndarray | None = None) -> list[np.ndarray]:
    """Batches of example indices in which every prompt has the same length: the examples in a
    seeded order (or `order`, an epoch's draw), cut into batches length by length, then the batches
    in a seeded order."""
    order = rng.permutation(len(lengths)) if order is None else order
    chunks = []
    for n in np.unique(lengths):
        members = order[lengths[order] == n]
        chunks += [members[s : s + batch_size] for s in range(0, len(members), batch_size)]
    return [chunks[i] for i in rng.permutation(len(chunks))]


class FrozenBottom:
    """The output of blocks 0..K-1 for every prompt of a split (float32), computed once."""

    def __init__(self, model, encoded, first_trained: int, precision: str, batch_size: int = 256):
        self.inner = _llama_stack(model)
        device = model_device(model)
        self.K = first_trained
        self.lengths = np.array([len(e) for e in encoded])
        by_length = {}
        for i, n in enumerate(self.lengths):
            by_length.setdefault(int(n), []).append(i)
        self.tensors, self.row = {}, np.zeros(len(encoded), dtype=np.int64)
        with torch.no_grad(), autocast(precision, device.type):
            for n, idx in sorted(by_length.items()):
                parts = []
                for s in range(0, len(idx), batch_size):
                    ids = torch.as_tensor([encoded[i] for i in idx[s : s + batch_size]], device=device)
                    hidden = run_blocks(self.inner, self.inner.embed_tokens(ids), self.inner.layers[: self.K])
                    parts.append(hidden.float())
                self.tensors[n] = torch.cat(parts)
                self.row[idx] = np.arange(len(idx))

    def __call__(self, idx: np.ndarray):
        n = int(self.lengths[idx[0]])
        if (self.lengths[idx] != n).any():
            raise CoreError("a batch for the frozen lower blocks mixes prompt lengths")
        return self.tensors[n][self.row[idx]]

    def loss(self, model, idx: np.ndarray, target, precision: str):
        """Answer-token cross-entropy of the prompts `idx`, running only blocks K.. on their kept states."""
        states = self(idx)
        with autocast(precision, states.device.type):
            hidden = run_blocks(self.inner, states, self.inner.layers[self.K :])
            logits = model.lm_head(self.inner.norm(hidden[:, -1]))
        return torch.nn.functional.cross_entropy(logits.float(), target.to(states.device))
