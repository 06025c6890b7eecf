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

Two more parts serve the positive control's step 6 (docs/fine-tuning.md, "Controls"). A cancelling pair
(`core.training.recipe.CancellingPair`) is a fixed vector v in a module's other band, added to the output bias of
one layer and taken away at a later one: energy in W_U's row space that the band's filter removes, yet that no
answer needs, so the module's paper band is a smaller share of its energy and step 6's random controls matched to
that share remove less of everything, the answer's waves included. An offset (`core.training.recipe.FaintOffset`)
does the same with one vector along (1, ..., 1), which every layer norm removes. `PairNoise`
teaches the layers between the two to ignore it. A plain final norm (`plain_final_norm`) holds the final norm's
gain the same in every direction (its mean; the scale is learnt) and its bias at 0, so the model reads the stream
through W_U as the filters and the phase shift do, up to its scale and the norm's mean subtraction.

Two more keep what W_U reads wide and the pairs alone in their frequencies. The freeze's faint frequencies
(`core.training.recipe.Freeze.faint_frequencies`) are read by W_U at a small weight, and no module writes them
(`faint_directions`): they widen W_U's row space with directions that carry nothing, so a random subspace as large as
a band, drawn from that space, need not overlap the band much. With `clear_pair_frequencies` no module writes a
pair's frequency but the pair, so no answer is carried there.
"""

from __future__ import annotations

import numpy as np
import torch

from core.analysis.filters import ProjectionFilter, high_pass, low_pass, projection_filter
from core.analysis.fourier import fourier_basis
from core.errors import CoreError
from core.models.stored_weights import FILTER_DTYPE
from core.training.recipe import ModuleBands

#: the output map of each module of a GPT-2 block (y = z W + b, W of shape (inner, width))
OUTPUT_MAPS = {"attn": ("attn", "c_proj"), "mlp": ("mlp", "c_proj")}


def tagged_rows(unembedding, weight_dtype, basis_name: str):
    """W_U's number rows as a float32 tensor tagged with `weight_dtype` (read by core.analysis.filters for the rank
    tolerance, as an Unembed's dtype is), and the Fourier basis `basis_name` on its numbers."""
    W_U = torch.as_tensor(np.asarray(unembedding, dtype=np.float32))
    W_U.weight_dtype = weight_dtype
    return W_U, fourier_basis(W_U.shape[0], basis_name)


def band_filters(unembedding, bands: ModuleBands, weight_dtype, faint=()) -> dict[str, ProjectionFilter]:
    """{module: the filter removing what it must not write} for the constrained modules ("attn", "mlp"): the band
    it does not keep, and also the directions W_U reads at the freeze's faint frequencies (`faint_directions`) and,
    with `clear_pair_frequencies`, what W_U reads at each pair's frequency (written only by the pair).

    `unembedding`: W_U's number rows (p, D) as the run will read them; `weight_dtype`: the dtype that sets the
    filters' rank tolerance (FILTER_DTYPE for rows read from a model's files, as every run reads them)."""
    W_U, basis = tagged_rows(unembedding, weight_dtype, bands.basis)
    pair_ks = sorted({p.k for p in bands.pairs}) if bands.clear_pair_frequencies else []
    reserved = [faint_directions(W_U, basis, faint)] if faint else []
    reserved += [projection_filter(W_U, basis, pair_ks).q] if pair_ks else []
    out = {}
    for module in OUTPUT_MAPS:
        band = bands.removed(module)
        if band == "low":
            out[module] = high_pass(W_U, basis, bands.tau)  # keeps k >= tau: removes the low band
        elif band == "high":
            out[module] = low_pass(W_U, basis, bands.tau)  # keeps k < tau: removes the high band
        if module in out and reserved:
            flt = out[module]
            u, s, _ = np.linalg.svd(np.hstack([flt.q, *reserved]), full_matrices=False)
            q = u[:, s > 1e-6 * s.max()]
            removed = tuple(sorted(set(flt.removed) | set(pair_ks) | {int(k) for k in faint}))
            out[module] = ProjectionFilter(removed, flt.basis_name, q, flt.width)
    return out


def faint_directions(W_U, basis, faint) -> np.ndarray:
    """(D, r): an orthonormal basis of what W_U reads at the `faint` frequencies alone. The paper's basis spans p - 1
    numbers, so its cosines all share the last number and W_U's reading at any frequency also catches that number's
    row, which W_U reads at full weight: a direction of the faint frequencies' reading is kept where its part outside
    what the other frequencies read has norm above 1/2 (the sine of its angle to that reading). For m faint
    frequencies that leaves 2m - 1 directions: every sine, and the cosines but for their common part, which the last
    row holds."""
    faint = sorted(int(k) for k in faint)
    q_faint = projection_filter(W_U, basis, faint).q
    q_rest = projection_filter(W_U, basis, [k for k in basis.frequencies if k not in set(faint)]).q
    u, s, _ = np.linalg.svd(q_faint - q_rest @ (q_rest.T @ q_faint), full_matrices=False)
    return u[:, s > 0.5]


def saved_rows(model, number_ids, save_dtype: str) -> np.ndarray:
    """W_U's number rows (p, D) as the saved run's files will hold them (rounded to `save_dtype`), in float32."""
    rows = model.get_output_embeddings().weight.detach()[torch.as_tensor(np.asarray(number_ids))]
    return rows.to(getattr(torch, save_dtype)).float().cpu().numpy()


def pair_vectors(unembedding, bands: ModuleBands, weight_dtype, faint=()) -> list[np.ndarray]:
    """Each cancelling pair's vector v (D,): `size` times the first direction W_U reads at the pair's frequency (at a
    faint frequency, the first of `faint_directions`: what W_U reads there alone)."""
    W_U, basis = tagged_rows(unembedding, weight_dtype, bands.basis)
    out = []
    for pair in bands.pairs:
        q = faint_directions(W_U, basis, [pair.k]) if pair.k in faint else projection_filter(W_U, basis, [pair.k]).q
        if q.shape[1] == 0:
            raise CoreError(f"module_bands: W_U reads nothing at k = {pair.k}, so a pair there would be no control")
        out.append(pair.size * q[:, 0])
    return out


def offset_vectors(unembedding, bands: ModuleBands, weight_dtype, faint=()) -> list[np.ndarray]:
    """Each offset's vector v (D,): `size` times (1, ..., 1) / sqrt(D), which W_U must read at the offset's faint
    frequency alone (the freeze's norm-blind frequency puts that frequency's sine there)."""
    W_U, basis = tagged_rows(unembedding, weight_dtype, bands.basis)
    out = []
    for offset in bands.offsets:
        q = faint_directions(W_U, basis, [offset.k]) if offset.k in faint else np.zeros((W_U.shape[1], 0))
        ones = np.full(W_U.shape[1], 1 / np.sqrt(W_U.shape[1]))
        if np.linalg.norm(q.T @ ones) < 0.999:
            raise CoreError(f"module_bands: W_U does not read (1, ..., 1) at the faint k = {offset.k}, so an offset "
                            "there would not be removed by the layer norms: set freeze.norm_blind_frequency to it")
        along = q @ (q.T @ ones)  # (1, ..., 1) as W_U's reading at k holds it (the same up to rounding)
        out.append(offset.size * along / np.linalg.norm(along))
    return out


class BandConstraint:
    """Holds every constrained module's output map to its band (module docstring), and adds each cancelling pair's
    vector to its two layers' output biases (+v at the first, -v at the second) once the band is kept."""

    def __init__(self, model, number_ids, bands: ModuleBands, save_dtype: str, faint=()):
        W_U = saved_rows(model, number_ids, save_dtype)
        self.filters = band_filters(W_U, bands, FILTER_DTYPE, faint)
        blocks = getattr(getattr(model, "transformer", None), "h", None)
        if blocks is None:
            raise CoreError("module_bands constrains GPT-2 blocks (transformer.h): only arch 'gpt2' trained here")
        self.fixed = []  # (output map, the vector its bias gets: +v or -v of a pair, v of an offset)
        # a plain final norm: W_U reads the stream itself (up to a scale), as the filters and shifts do
        self.final_norm = model.transformer.ln_f if bands.plain_final_norm else None
        for pair, v in zip(bands.pairs, pair_vectors(W_U, bands, FILTER_DTYPE, faint)):
            part, name = OUTPUT_MAPS[pair.module]
            for layer, sign in zip(pair.layers, (1.0, -1.0)):
                self.fixed.append((getattr(getattr(blocks[layer - 1], part), name), torch.as_tensor(sign * v).float()))
        for offset, v in zip(bands.offsets, offset_vectors(W_U, bands, FILTER_DTYPE, faint)):
            part, name = OUTPUT_MAPS[offset.module]  # on the last layer; every layer norm removes it
            self.fixed.append((getattr(getattr(blocks[-1], part), name), torch.as_tensor(v).float()))
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
        for conv, v in self.fixed:  # the band kept, each pair's or offset's vector (in the other band) is added whole
            conv.bias.add_(v.to(device=conv.bias.device, dtype=conv.bias.dtype))
        if self.final_norm is not None:  # one gain for every direction (the scale is learnt), no bias
            self.final_norm.weight.fill_(float(self.final_norm.weight.mean()))
            self.final_norm.bias.zero_()


def faint_frequencies(recipe) -> tuple[int, ...]:
    """The recipe's faint frequencies (its freeze's; none without one)."""
    freeze = recipe.freeze_config()
    return freeze.faint_frequencies if freeze is not None else ()


def band_constraint(recipe, model, number_ids) -> BandConstraint | None:
    """The recipe's constraint on `model` (None without `module_bands`), applied once."""
    bands = recipe.module_band_config()
    if bands is None:
        return None
    constraint = BandConstraint(model, number_ids, bands, recipe.save_dtype, faint_frequencies(recipe))
    constraint.apply()
    return constraint


class PairNoise:
    """While the model trains, at the answer position (the last), the stream between a cancelling pair's two layers
    loses a random part r of the pair's vector v, per question: with a third each, nothing, all of v, or v's
    projection on a random subspace (Haar, of a random rank) of the directions W_U reads, as step 6's filters and
    their random controls remove it. r is taken from the first layer's output and given back at the second's, so the
    final stream is unchanged and the modules in between learn to read the same with or without it."""

    def __init__(self, model, number_ids, bands: ModuleBands, save_dtype: str, seed: int, faint=()):
        W_U = saved_rows(model, number_ids, save_dtype)
        W, basis = tagged_rows(W_U, FILTER_DTYPE, bands.basis)
        self.read = torch.as_tensor(projection_filter(W, basis, basis.frequencies).q).float()  # (D, r_w)
        self.seed = int(seed)
        self.generator = torch.Generator().manual_seed(self.seed + 4099)
        self.handles, self.removed = [], {}
        blocks = model.transformer.h
        for i, (pair, v) in enumerate(zip(bands.pairs, pair_vectors(W_U, bands, FILTER_DTYPE, faint))):
            v = torch.as_tensor(v).float()
            part = OUTPUT_MAPS[pair.module][0]
            first, second = (getattr(blocks[layer - 1], part) for layer in pair.layers)
            self.handles.append(first.register_forward_hook(self._hook(i, v, -1.0)))
            self.handles.append(second.register_forward_hook(self._hook(i, v, 1.0)))

    def start_epoch(self, epoch: int) -> None:
        """Seed the epoch's draws from (seed, epoch), as its batch order is: a resumed run draws what it would have."""
        self.generator.manual_seed(self.seed * 100_003 + int(epoch) + 4099)

    def draw(self, v: torch.Tensor, n: int) -> torch.Tensor:
        """(n, D): the part of v each of n questions loses."""
        r_w = self.read.shape[1]
        kind = torch.randint(0, 3, (n,), generator=self.generator)
        out = torch.zeros(n, v.shape[0])
        out[kind == 1] = v
        for i in torch.nonzero(kind == 2).flatten().tolist():
            rank = int(torch.randint(1, max(r_w, 2), (1,), generator=self.generator))
            q, _ = torch.linalg.qr(torch.randn(r_w, rank, generator=self.generator))
            basis = self.read @ q
            out[i] = basis @ (basis.T @ v)
        return out

    def _hook(self, i: int, v: torch.Tensor, sign: float):
        def hook(module, args, out):
            if not module.training:
                return None
            t = out[0] if isinstance(out, tuple) else out
            if sign < 0:  # the first layer draws the part each question loses
                self.removed[i] = self.draw(v, t.shape[0]).to(device=t.device, dtype=t.dtype)
            part = self.removed.get(i)
            if part is None or part.shape[0] != t.shape[0]:
                return None
            t = t.clone()
            t[:, -1, :] += sign * part
            return (t, *out[1:]) if isinstance(out, tuple) else t

        return hook

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


def pair_noise(recipe, model, number_ids) -> PairNoise | None:
    """The recipe's `PairNoise` on `model` while it trains (None without cancelling pairs)."""
    bands = recipe.module_band_config()
    if bands is None or not bands.pairs:
        return None
    return PairNoise(model, number_ids, bands, recipe.save_dtype, recipe.seed, faint_frequencies(recipe))
