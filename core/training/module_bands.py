"""The `module_bands` constraint of a recipe: each module's output keeps one band of frequencies.

A recipe's `module_bands` (core.training.recipe.ModuleBands) says which band every attention output and every MLP
output may carry, as W_U reads it. The constraint is the project's own band filter (core.analysis.filters, the
filter of the Table 1 ablation: y = x - Q Q^T x, Q spanning what W_U reads at the removed frequencies) built into
the module's output map: GPT-2's attention and MLP end in a map y = z W + b (`c_proj`), and W <- W P, b <- b P with
P = I - Q Q^T makes every output of that module, at every position and for every input, free of the removed band.
`BandConstraint.apply` does it once before training and after every optimiser step (projected gradient descent),
so the weights the run ships hold the constraint themselves: no hook is needed to read the trained model.

The filters are built once, from W_U's number rows exactly as the run will be read (`LoadedModel.unembedding`:
the rows rounded to the dtype the weights are saved in, held in float32 and tagged with FILTER_DTYPE, whose eps sets
the filters' rank tolerance: core.analysis.filters.rank_tolerance), so the precomputed ablation removes the very
subspace training kept out; the recipe check refuses `module_bands` where W_U could change (untied or unfrozen
number rows).
"""

from __future__ import annotations

import numpy as np
import torch

from core.analysis.filters import ProjectionFilter, high_pass, low_pass
from core.analysis.fourier import fourier_basis
from core.errors import CoreError
from core.models.stored_weights import FILTER_DTYPE
from core.training.recipe import ModuleBands

#: the output map of each module of a GPT-2 block (y = z W + b, W of shape (inner, width))
OUTPUT_MAPS = {"attn": ("attn", "c_proj"), "mlp": ("mlp", "c_proj")}


def band_filters(unembedding, bands: ModuleBands, weight_dtype) -> dict[str, ProjectionFilter]:
    """{module: the filter removing the band it must not carry} for the constrained modules ("attn", "mlp").

    `unembedding`: W_U's number rows (p, D) as the run will read them; `weight_dtype`: the dtype that sets the
    filters' rank tolerance (FILTER_DTYPE for rows read from a model's files, as every run reads them)."""
    W_U = torch.as_tensor(np.asarray(unembedding, dtype=np.float32))
    W_U.weight_dtype = weight_dtype  # read by core.analysis.filters, as an Unembed's dtype is
    basis = fourier_basis(W_U.shape[0], bands.basis)
    out = {}
    for module in OUTPUT_MAPS:
        band = bands.removed(module)
        if band == "low":
            out[module] = high_pass(W_U, basis, bands.tau)  # keeps k >= tau: removes the low band
        elif band == "high":
            out[module] = low_pass(W_U, basis, bands.tau)  # keeps k < tau: removes the high band
    return out


class BandConstraint:
    """Holds every constrained module's output map to its band (module docstring)."""

    def __init__(self, model, number_ids, bands: ModuleBands, save_dtype: str):
        dtype = getattr(torch, save_dtype)
        rows = model.get_output_embeddings().weight.detach()[torch.as_tensor(np.asarray(number_ids))]
        W_U = rows.to(dtype).float().cpu().numpy()  # as the saved run's files hold them
        self.filters = band_filters(W_U, bands, FILTER_DTYPE)
        blocks = getattr(getattr(model, "transformer", None), "h", None)
        if blocks is None:
            raise CoreError("module_bands constrains GPT-2 blocks (transformer.h): only arch 'gpt2' trained here")
        self.maps = []
        for module, flt in self.filters.items():
            if flt.erased:
                raise CoreError(f"module_bands: the {module} filter would erase every output (W_U's band spans the "
                                "width): use a wider model or fewer frozen frequencies")
            q = torch.as_tensor(flt.q, dtype=torch.float32)
            keep = torch.eye(q.shape[0]) - q @ q.T
            for block in blocks:
                part, name = OUTPUT_MAPS[module]
                self.maps.append((getattr(getattr(block, part), name), keep))

    @torch.no_grad()
    def apply(self) -> None:
        """W <- W P and b <- b P on every constrained output map (P = I - Q Q^T of its module's filter)."""
        for conv, keep in self.maps:
            p = keep.to(device=conv.weight.device, dtype=conv.weight.dtype)
            conv.weight.copy_(conv.weight @ p)
            if conv.bias is not None:
                conv.bias.copy_(conv.bias @ p)


def band_constraint(recipe, model, number_ids) -> BandConstraint | None:
    """The recipe's constraint on `model` (None without `module_bands`), applied once."""
    bands = recipe.module_band_config()
    if bands is None:
        return None
    constraint = BandConstraint(model, number_ids, bands, recipe.save_dtype)
    constraint.apply()
    return constraint
