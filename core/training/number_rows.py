"""The number-token embedding rows of a demo model: which ids they are, what they are frozen to, and
the hook that keeps them there.

Frozen rows are (a) "fourier": synthetic sinusoids of chosen periods, (b) "transplant": another
model's embedding rows, copied number by number through each model's number tokens, or
(c) "representation": another model's hidden states of the numbers at a layer, mapped into the
recipe's width by an isometry. They get no gradient and are restored after every optimiser step, so
AdamW's weight decay cannot shrink them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from core.analysis.numbers import number_representations, transplant_matrix
from core.errors import CoreError
from core.models.loading import load_model
from core.models.number_tokens import find_number_tokens, require_number_range
from core.models.packages import import_hint
from core.training.recipe import Freeze


def number_token_ids(tokenizer, p: int) -> np.ndarray:
    """The ids of the tokens of the numbers 0..p-1 in a demo model's tokenizer."""
    numbers = find_number_tokens(tokenizer, p=p)
    require_number_range(numbers, p)
    if numbers.prompt_suffix:
        raise CoreError("the training code expects number tokens that follow the prompt directly")
    return np.asarray(numbers.ids[:p])


def frozen_values(freeze: Freeze, tokenizer, n_numbers: int, width: int, seed: int, log=print) -> np.ndarray:
    """The rows the numbers 0..n_numbers-1 are frozen to, as the recipe's `freeze` says."""
    if freeze.kind == "fourier":
        periods = freeze.periods + tuple((n_numbers - 1) / k for k in freeze.frequencies)  # the paper's basis: p - 1
        faint = tuple((n_numbers - 1) / k for k in freeze.faint_frequencies)
        weights = (1.0,) * len(periods) + (freeze.faint_scale,) * len(faint)
        blind = None
        if freeze.norm_blind_frequency is not None:  # the sine's column: after the cosine of its period
            blind = 2 * (len(periods) + freeze.faint_frequencies.index(freeze.norm_blind_frequency)) + 1
        return fourier_embedding(n_numbers, width, periods + faint, freeze.scale, seed, weights, blind)
    if freeze.kind == "representation":
        return representation_rows(freeze, n_numbers, width, log)
    return transplant_rows(freeze.source, tokenizer, n_numbers, width)


def fourier_embedding(n_numbers: int, width: int, periods, scale: float = 1.0, seed: int = 0,
                      weights=None, blind_column: int | None = None) -> np.ndarray:
    """Rows n = 0..n_numbers-1: sum over periods T of w_T (cos(2 pi n / T) u_T + sin(2 pi n / T) v_T).

    u_T, v_T are orthonormal directions drawn once (seeded); sin is left out where it vanishes on
    the integers (T = 2); w_T is 1 unless `weights` gives it (a faint frequency). Every row has norm `scale`.
    `blind_column` (an index into the 2 * len(periods) directions, cos then sin of each period) puts that direction
    along (1, ..., 1) / sqrt(width), which every layer norm's mean subtraction removes.
    """
    periods = [float(t) for t in periods]
    weights = [1.0] * len(periods) if weights is None else [float(w) for w in weights]
    n_dirs = 2 * len(periods)
    if n_dirs > width:
        raise CoreError(f"{len(periods)} periods need width >= {n_dirs}")
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(width, n_dirs)))
    if blind_column is not None:  # the all-ones direction first, the drawn ones made orthogonal to it
        q, _ = np.linalg.qr(np.hstack([np.ones((width, 1)), q[:, :-1]]))
        q = np.roll(q * np.sign(q[0, 0]), blind_column, axis=1) if blind_column else q * np.sign(q[0, 0])
    x = np.arange(n_numbers)[:, None]
    feats = []
    for T, w in zip(periods, weights):
        feats.append(w * np.cos(2 * np.pi * x / T))
        s = np.sin(2 * np.pi * x / T)
        feats.append(w * s if np.abs(s).max() > 1e-9 else np.zeros_like(s))
    F = np.hstack(feats)  # (n, 2 * len(periods))
    if blind_column is not None and not (0 <= blind_column < n_dirs and np.abs(F[:, blind_column]).max() > 0):
        raise CoreError(f"the norm-blind direction must be the sine of a frozen period that does not vanish on the "
                        f"integers (not period 2), got column {blind_column} of {n_dirs}")
    E = F @ q.T
    norms = np.linalg.norm(E, axis=1, keepdims=True)
    return (scale * E / np.where(norms > 0, norms, 1)).astype(np.float32)


def transplant_rows(source: str, tokenizer, n_numbers: int, width: int) -> np.ndarray:
    """The input-embedding rows of numbers 0..n-1 of another model, found through its number tokens."""
    donor = load_model(source)
    donor.select_numbers(n_numbers, f"transplanting {n_numbers} number embeddings from {source}")
    if donor.width != width:
        raise CoreError(f"cannot transplant: {source} is {donor.width} wide, the recipe's model is {width}; "
                        f"set width to {donor.width}")
    return donor.number_embedding(n_numbers).cpu().numpy()


def representation_rows(freeze: Freeze | dict, n_numbers: int, width: int, log=print) -> np.ndarray:
    """Rows from another model's number representations (`core.analysis.numbers`) at `freeze.layer`,
    read in `freeze.context`: centred, unit rows, mapped into `width` by the isometry seeded with
    `freeze.isometry_seed` (the same for every training seed). `freeze` may be the recipe's dict."""
    if isinstance(freeze, dict):
        freeze = Freeze.parse(freeze)
    source = freeze.source
    if not Path(source).is_dir():
        raise CoreError(f"the representation source {source} is not here; {import_hint(source)}")
    donor = load_model(source)
    layer = freeze.layer
    if not 0 <= layer <= donor.n_layers:
        raise CoreError(f"layer {layer} is outside 0..{donor.n_layers} for {source}")
    reps = number_representations(donor, n_numbers, freeze.context, progress=False)
    log(f"frozen rows: {source} layer {layer}, {reps.describe()}")
    return transplant_matrix(reps.vectors[layer], width, freeze.isometry_seed)


class FrozenRows:
    """Keeps chosen rows of the input embedding (and, if untied, nothing else) fixed during training."""

    def __init__(self, model, row_ids: np.ndarray, values: np.ndarray):
        self.weight = model.get_input_embeddings().weight
        self.ids = torch.as_tensor(row_ids, dtype=torch.long, device=self.weight.device)
        with torch.no_grad():
            self.weight[self.ids] = torch.as_tensor(values, dtype=self.weight.dtype, device=self.weight.device)
        self.values = self.weight.detach()[self.ids].clone()
        mask = torch.zeros(self.weight.shape[0], 1, device=self.weight.device)
        mask[self.ids] = 1.0
        self.mask = mask
        self.handle = self.weight.register_hook(lambda g: g * (1 - self.mask).to(g.dtype))

    def restore(self):
        with torch.no_grad():
            self.weight[self.ids] = self.values
