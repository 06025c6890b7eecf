"""The optimiser of a training run, its learning-rate schedule, and the bar that counts its steps."""

from __future__ import annotations

import sys

import torch
from tqdm.auto import tqdm

BETAS, EPS = (0.9, 0.98), 1e-8  # AdamW's, for every run


def adamw(groups, lr: float):
    """AdamW over parameter groups (each a dict with "params" and its own "weight_decay", maybe "lr")."""
    return torch.optim.AdamW(groups, lr=lr, betas=BETAS, eps=EPS)


def whole_model_optimizer(model, lr: float, weight_decay: float):
    """AdamW over every trainable parameter of `model`; embeddings, biases and norms take no weight decay."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim < 2 or "wte" in name or "wpe" in name or "embed" in name or "lm_head" in name:
            no_decay.append(param)
        else:
            decay.append(param)
    return adamw([{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr)


def lr_schedule(opt, total_steps: int, warmup: int, min_ratio: float):
    """Linear warm-up over `warmup` steps, then linear decay to `min_ratio` of the rate at `total_steps`."""

    def factor(step):
        if step < warmup:
            return (step + 1) / max(1, warmup)
        frac = (step - warmup) / max(1, total_steps - warmup)
        return max(min_ratio, 1.0 - frac * (1 - min_ratio))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def step_bar(total, desc, enabled):
    """A progress bar of training steps on stderr; `enabled` None: shown when stderr is a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, disable=not enabled, leave=False, file=sys.stderr)
