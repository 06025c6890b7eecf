"""Activation patching between two prompts (Meng et al. 2022): which layer and module carries what tells them apart.

A pair is a clean prompt and a corrupted one that differs from it in one operand ("Put together 15 and 93." and
"Put together 15 and 94.", answers 108 and 109), in the same phrasing (core.analysis.pairs). Both run as they are;
then the corrupted one runs again with one site's output at the answer position replaced by the clean prompt's own
(`RowPatch`, on the same edit path as every filter and phase shift: core.analysis.filter_hooks). Each prompt is
paired with its partner by its place in the lists, never by batch order (the evaluation sorts prompts by length).

What is read is the logit difference over the number tokens, g = logit(clean answer) - logit(corrupted answer):
positive on the clean prompt, negative on the corrupted one when the model answers both. Two directions
(`DIRECTIONS`):

* **denoising** (the corrupted prompt runs with one site's output taken from the clean one): for a site,

      recovered = (mean g_patched - mean g_corrupt) / (mean g_clean - mean g_corrupt)

  the share of the difference the site's clean output restores: 0 where it changes nothing, 1 where it restores
  the whole difference (the site is sufficient to carry it);
* **noising** (the clean prompt runs with one site's output taken from the corrupted one):

      lost = (mean g_clean - mean g_patched) / (mean g_clean - mean g_corrupt)

  the share of the clean answer's margin the site's corrupted output takes away: 0 where it changes nothing, 1 where
  the clean run ends exactly where the corrupted one does (the site is necessary). Both are stored in the column
  `recovered` ("the share moved"), each read in its own direction; a site that carries everything reads 1 in both.

The means are taken before the ratio (a pair's own ratio is unstable where its two gaps are close); the interval is a
bootstrap over pairs (`BOOTSTRAP` resamples of the pairs, the 2.5th and 97.5th percentiles of the ratio); `moved` is
the share of pairs whose patched run answers the other prompt's answer (denoising: the clean one; noising: the
corrupted one). No ratio is drawn (NaN) where the clean and
corrupted gaps do not differ on average (`MIN_SPREAD`): the model does not tell the prompts apart.

Sites (`module_sites`): the stream h(l) at the answer position for l = 0..L (h(0) the embedding output, h(L) the
last stream the logits read: its patch recovers everything by construction, h(0) nothing when the answer position's
token is the same in both prompts), Attn(l), MLP(l) for l = 1..L, and where the heads can be read
(core.models.parts), each head h of each layer: its output z(l, h) before W_O (TransformerLens' hook_z) patched,
the other heads' left as they are, so what it adds to the stream is the clean prompt's. A group (`group_site`) is
one kind of module (attention or MLP) of the layers first..last patched together, in one forward pass: the
collective claim (a layer range carries the difference between them) that no single site can test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from core.analysis.ablations import Condition, LayerEdits, RowPatch
from core.analysis.evaluation import evaluate_conditions
from core.analysis.patch_table import DENOISE, DIRECTIONS, GROUP, NOISE, PATCH_COLUMNS
from core.errors import CoreError
from core.models.capture import capture
from core.models.names import ATTN, HEAD, MLP, RESID, Z

#: Bootstrap resamples of the pairs for a site's interval, and their seed.
BOOTSTRAP = 1000
BOOTSTRAP_SEED = 0
#: Below this mean difference between the clean and corrupted gaps (logits) no share is drawn.
MIN_SPREAD = 1e-6
@dataclass(frozen=True)
class Site:
    """Where a patch acts: the stream h(layer) (RESID, layer 0..L) or a module's output (ATTN, MLP, layer 1..L);
    `head` (0-based, TransformerLens' count) names one attention head where heads are read; a GROUP is the outputs
    of `modules` (ATTN or MLP) of layers `first`..`layer` together (`group_site`)."""

    kind: str
    layer: int
    head: int | None = None
    first: int | None = None
    modules: str | None = None

    @property
    def from_layer(self) -> int:
        return self.layer if self.first is None else self.first

    @property
    def module_kind(self) -> str:
        return self.modules if self.modules is not None else self.kind

    def label(self) -> str:
        if self.kind == GROUP:
            return (f"{'attention' if self.modules == ATTN else 'MLPs'} of layers {self.from_layer} to "
                    f"{self.layer} together")
        what = {RESID: "stream after layer", ATTN: "attention of layer", MLP: "MLP of layer",
                HEAD: "attention of layer"}.get(self.kind, self.kind)
        if self.kind == RESID and self.layer == 0:
            return "stream before layer 1 (embedding)"
        return f"{what} {self.layer}" + (f", head {self.head}" if self.head is not None else "")


def module_sites(n_layers: int, n_heads: int = 0) -> list[Site]:
    """Every stream and module site of a model of `n_layers` blocks, layer by layer, and each of its `n_heads` heads
    per layer (module docstring)."""
    sites = [Site(RESID, layer) for layer in range(n_layers + 1)]
    for layer in range(1, n_layers + 1):
        sites += [Site(ATTN, layer), Site(MLP, layer)]
    return sites + [Site(HEAD, layer, h) for layer in range(1, n_layers + 1) for h in range(n_heads)]


def group_site(modules: str, first: int, last: int) -> Site:
    """The outputs of `modules` (ATTN or MLP) of the 1-based layers `first`..`last`, patched together."""
    if modules not in (ATTN, MLP):
        raise CoreError(f"a group of sites is attention or MLP outputs, not {modules!r}")
    if not 1 <= first <= last:
        raise CoreError(f"a group of layers {first}..{last}: give 1 <= first <= last")
    return Site(GROUP, int(last), None, int(first), modules)


@dataclass
class PatchResult:
    """What patching measured, pair by pair: the clean and corrupted runs' gaps and each site's patched gaps and
    answers (rows in the order of `sites`)."""

    sites: list[Site]
    clean_gap: np.ndarray  # (pairs,)
    corrupt_gap: np.ndarray  # (pairs,)
    patched_gap: np.ndarray  # (sites, pairs)
    moved: np.ndarray  # (sites, pairs) bool: the patched run answers the other prompt's answer
    direction: str = DENOISE

    @property
    def n(self) -> int:
        return int(len(self.clean_gap))


def checked_pairs(clean_texts: Sequence[str], corrupt_texts: Sequence[str], clean_answers, corrupt_answers,
                  p: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The two answer lists as int arrays, once every pair is checked: as many clean prompts as corrupted ones (at
    least one), an answer for each, the two answers of a pair different (the logit difference reads one against
    the other) and, with `p`, on the number line 0..p-1. Exact, position and attribution patching read pairs alike."""
    if len(clean_texts) != len(corrupt_texts) or not len(clean_texts):
        raise CoreError(f"{len(clean_texts)} clean prompts but {len(corrupt_texts)} corrupted ones: pair them one "
                        "to one")
    clean_answers = np.asarray(clean_answers, dtype=np.int64)
    corrupt_answers = np.asarray(corrupt_answers, dtype=np.int64)
    if len(clean_answers) != len(clean_texts) or len(corrupt_answers) != len(clean_texts):
        raise CoreError(f"{len(clean_texts)} pairs but {len(clean_answers)} clean and {len(corrupt_answers)} "
                        "corrupted answers: give one answer per prompt")
    if (clean_answers == corrupt_answers).any():
        raise CoreError("a pair's two prompts have the same answer: patching reads the logit of one answer against "
                        "the other's")
    both = np.concatenate([clean_answers, corrupt_answers])
    if p is not None and (both.min() < 0 or both.max() >= p):
        raise CoreError(f"an answer is off the number line 0..{p - 1}: patching reads the number tokens' logits")
    return clean_answers, corrupt_answers


def patch_pairs(loaded, clean_texts: Sequence[str], corrupt_texts: Sequence[str], clean_answers, corrupt_answers,
                p: int, sites: Sequence[Site] | None = None, batch_size: int = 32, progress=None,
                direction: str = DENOISE) -> PatchResult:
    """Patch every site of `sites` (default: `module_sites`) at the answer position, in one evaluation of every
    site: denoising, from each clean prompt into its corrupted partner (the same place in the lists); noising, from
    the corrupted prompt into the clean one (module docstring). The prompts as the model reads them."""
    clean_answers, corrupt_answers = checked_pairs(clean_texts, corrupt_texts, clean_answers, corrupt_answers)
    if direction not in DIRECTIONS:
        raise CoreError(f"cannot patch in direction {direction!r}: choose {' or '.join(DIRECTIONS)}")
    sites = list(module_sites(loaded.n_layers) if sites is None else sites)
    for site in sites:
        check_site(site, loaded.n_layers, loaded.parts)
    source, target = (clean_texts, corrupt_texts) if direction == DENOISE else (corrupt_texts, clean_texts)
    other = clean_answers if direction == DENOISE else corrupt_answers  # the answer a patch moves the target run to
    plain = evaluate_conditions(loaded, source, clean_answers, p, [Condition(None)], batch_size=batch_size,
                                contrast=corrupt_answers, progress=progress, desc=f"patching: {direction} source")[0]
    streams = tuple(s for s in (RESID, ATTN, MLP) if any(site.module_kind == s for site in sites))
    heads = any(site.kind == HEAD for site in sites)
    kept = capture(loaded, source, batch_size, streams, progress, heads=heads) if streams or heads else {}
    conditions = [Condition(None)] + [site_condition(site, kept) for site in sites]
    runs = evaluate_conditions(loaded, target, clean_answers, p, conditions, batch_size=batch_size,
                               contrast=corrupt_answers, progress=progress, desc=f"patching: {direction}")
    clean_gap, corrupt_gap = (plain.gaps, runs[0].gaps) if direction == DENOISE else (runs[0].gaps, plain.gaps)
    return PatchResult(sites, clean_gap, corrupt_gap, np.stack([r.gaps for r in runs[1:]]),
                       np.stack([r.predictions == other for r in runs[1:]]), direction)


def check_site(site: Site, n_layers: int, parts=None) -> None:
    """A clear error for a site the model (its `parts`, core.models.parts.ModelParts, for a head) does not have."""
    first = 0 if site.kind == RESID else 1
    if site.kind not in (RESID, ATTN, MLP, HEAD, GROUP):
        raise CoreError(f"cannot patch {site.kind!r}: choose the stream (resid), attn, mlp, a head or a group")
    if site.kind == GROUP:
        group_site(site.module_kind, site.from_layer, site.layer)  # its own checks
    if not first <= site.layer <= n_layers:
        raise CoreError(f"cannot patch the {site.kind} of layer {site.layer}: this model's layers go from {first} "
                        f"to {n_layers}")
    if site.kind == HEAD:
        parts.require_heads("patching one head")
        if site.head is None or not 0 <= site.head < parts.n_heads:
            raise CoreError(f"cannot patch head {site.head} of layer {site.layer}: its heads are "
                            f"0..{parts.n_heads - 1}")


def site_condition(site: Site, kept: dict) -> Condition:
    """The condition that patches `site` with the clean prompts' vectors `kept` (a capture: resid (n, L + 1, D),
    attn and mlp (n, L, D), z (n, L, heads, head_dim) for a head: its columns of W_O's input)."""
    if site.kind == HEAD:
        z = kept[Z][:, site.layer - 1, site.head]
        columns = (site.head * z.shape[1], (site.head + 1) * z.shape[1])
        return Condition(RowPatch(z, columns=columns), modules=Z, layer=site.layer)
    if site.kind == GROUP:
        edits = tuple((layer, RowPatch(kept[site.modules][:, layer - 1]))
                      for layer in range(site.from_layer, site.layer + 1))
        return Condition(LayerEdits(edits), modules=site.modules)
    values = kept[site.kind][:, site.layer if site.kind == RESID else site.layer - 1]
    return Condition(RowPatch(values), modules=site.kind, layer=site.layer)


def recovered_share(patched, clean, corrupt) -> float:
    """(mean patched - mean corrupt) / (mean clean - mean corrupt); NaN where the denominator is below
    `MIN_SPREAD`."""
    spread = float(np.mean(clean) - np.mean(corrupt))
    if not abs(spread) >= MIN_SPREAD:
        return float("nan")
    return float((np.mean(patched) - np.mean(corrupt)) / spread)


def bootstrap_shares(clean_gap, corrupt_gap, patched_gap, resamples: int = BOOTSTRAP,
                     seed: int = BOOTSTRAP_SEED, groups=None) -> np.ndarray:
    """(resamples, conditions): each condition's recovered share (`recovered_share`) over pairs drawn with
    replacement, the same draws for every condition; `patched_gap` is (conditions, pairs). With `groups` (one label
    per pair) the groups are drawn instead, each drawn group bringing all its pairs (a cluster bootstrap)."""
    clean_gap, corrupt_gap = np.asarray(clean_gap, float), np.asarray(corrupt_gap, float)
    n = len(clean_gap)
    rng = np.random.default_rng(seed)
    if groups is None:
        counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(resamples)]).astype(float)
    else:
        labels, member = np.unique(np.asarray(groups), return_inverse=True)
        drawn = np.stack([np.bincount(rng.integers(0, len(labels), len(labels)), minlength=len(labels))
                          for _ in range(resamples)]).astype(float)
        counts = drawn[:, member]
    counts /= counts.sum(axis=1, keepdims=True)
    clean, corrupt = counts @ clean_gap, counts @ corrupt_gap
    patched = counts @ np.asarray(patched_gap, float).T
    spread = (clean - corrupt)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.abs(spread) >= MIN_SPREAD, (patched - corrupt[:, None]) / spread, np.nan)


def share_interval(draws: np.ndarray | None) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of one condition's bootstrap draws (NaN without draws, or where one is)."""
    if draws is None or not np.isfinite(draws).all():
        return float("nan"), float("nan")
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(low), float(high)


def moved_share(patched, clean, corrupt, direction: str = DENOISE) -> float:
    """The share of the difference a patch moves, in its direction: denoising, the share restored
    (`recovered_share`); noising, the share of the clean margin lost, (mean clean - mean patched) / (mean clean -
    mean corrupt), one minus it."""
    share = recovered_share(patched, clean, corrupt)
    return share if direction == DENOISE else 1.0 - share


def patching_table(result: PatchResult, resamples: int = BOOTSTRAP, seed: int = BOOTSTRAP_SEED,
                   contrast: int = 1) -> pd.DataFrame:
    """One row per site (`PATCH_COLUMNS`): the share it moves in the result's direction (`moved_share`) with the
    bootstrap interval over pairs (none for one pair), the share of pairs it moves to the other prompt's answer, the
    mean gaps, the direction and the `contrast` the pairs were built with."""
    draws = None
    if result.n > 1:
        draws = bootstrap_shares(result.clean_gap, result.corrupt_gap, result.patched_gap, resamples, seed)
        if result.direction == NOISE:
            draws = 1.0 - draws
    rows = []
    for i, site in enumerate(result.sites):
        share = moved_share(result.patched_gap[i], result.clean_gap, result.corrupt_gap, result.direction)
        low, high = share_interval(None if draws is None else draws[:, i])
        rows.append({"kind": site.kind, "layer": site.layer, "head": -1 if site.head is None else site.head,
                     "n": result.n, "recovered": share, "recovered_low": low, "recovered_high": high,
                     "moved": float(result.moved[i].mean()), "patched_gap": float(result.patched_gap[i].mean()),
                     "clean_gap": float(result.clean_gap.mean()), "corrupt_gap": float(result.corrupt_gap.mean()),
                     "direction": result.direction, "contrast": int(contrast), "from_layer": site.from_layer,
                     "modules": site.module_kind})
    return pd.DataFrame(rows, columns=list(PATCH_COLUMNS))
