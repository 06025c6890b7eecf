"""Attribution patching (core.analysis.attribution) against its definition: each site's estimate is the derivative of
exact patching along a_clean - a_corrupt (checked by central differences through the project's own patch path), it
equals exact patching where the gap is linear in the site, and its table is exact patching's ratio of means with the
same bootstrap."""

import numpy as np
import pytest
import torch

from core.analysis.ablations import Condition
from core.analysis.attribution import AttributionResult, attribute_pairs, attribution_table, every_site
from core.analysis.evaluation import evaluate_conditions
from core.analysis.pairs import corrupted_text, pair_examples
from core.analysis.patching import Site, bootstrap_shares, patch_pairs, site_condition
from core.errors import CoreError
from core.models.capture import capture
from core.models.names import ATTN, HEAD, MLP, RESID, STREAMS
from core.runs.ablate import open_target
from core.tasks import build_examples


def pairs_of(target, n):
    examples = {e.id: e for e in build_examples("addition", 260, 0)}
    pairs = pair_examples([examples[i] for i in target.ids[:n]], 260)
    clean = [target.texts[target.ids.index(c.id)] for c, _ in pairs]
    corrupt = [corrupted_text(t, c, k) for t, (c, k) in zip(clean, pairs)]
    return clean, corrupt, np.array([c.answer for c, _ in pairs]), np.array([k.answer for _, k in pairs])


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def tiny(request, model_dir):
    return open_target(str(model_dir(request.param)), limit=40, threads=1, log=lambda *_: None)


def test_each_estimate_is_the_derivative_of_exact_patching_along_the_clean_minus_corrupted_direction(tiny):
    loaded, p = tiny.loaded, tiny.p
    clean, corrupt, ca, ka = pairs_of(tiny, 8)
    result = attribute_pairs(loaded, clean, corrupt, ca, ka, p, batch_size=3, progress=False)
    assert {s.kind for s in result.sites} == {RESID, ATTN, MLP, HEAD} and result.sites == every_site(loaded)
    a = capture(loaded, clean, 4, STREAMS, False, heads=True)
    b = capture(loaded, corrupt, 4, STREAMS, False, heads=True)
    eps = 1e-2
    conditions = [Condition(None)]
    for sign in (1, -1):  # each site patched with a_corrupt +- eps (a_clean - a_corrupt), on exact patching's path
        moved = {k: b[k] + sign * eps * (a[k] - b[k]) for k in a if k != "logits"}
        conditions += [site_condition(s, moved) for s in result.sites]
    runs = evaluate_conditions(loaded, corrupt, ca, p, conditions, batch_size=4, contrast=ka, progress=False)
    S = len(result.sites)
    plus, minus = np.stack([r.gaps for r in runs[1:1 + S]]), np.stack([r.gaps for r in runs[1 + S:]])
    np.testing.assert_allclose(result.corrupt_gap, runs[0].gaps, atol=1e-4)
    np.testing.assert_allclose(result.effect, (plus - minus) / (2 * eps), atol=5e-5)
    assert np.abs(result.effect).max() > 1e-2  # the sites move the gap at all: the check can fail
    assert np.all(result.effect[result.sites.index(Site(RESID, 0))] == 0)  # the answer token is the same in both


def test_the_estimate_is_exact_where_the_gap_is_linear_in_the_site(tiny):
    loaded, p = tiny.loaded, tiny.p
    clean, corrupt, ca, ka = pairs_of(tiny, 8)
    L = loaded.n_layers
    sites = [Site(RESID, L), Site(MLP, L), Site(ATTN, L)]
    path, _, name = loaded.parts.names.final_norm.rpartition(".")
    holder = loaded.model.get_submodule(path)
    norm = getattr(holder, name)
    setattr(holder, name, torch.nn.Identity())  # no final norm: the logits are linear in the last stream and MLP
    try:
        estimate = attribute_pairs(loaded, clean, corrupt, ca, ka, p, sites, 3, False)
        exact = patch_pairs(loaded, clean, corrupt, ca, ka, p, sites, 3, False)
    finally:
        setattr(holder, name, norm)
    np.testing.assert_allclose(estimate.clean_gap, exact.clean_gap, atol=1e-4)  # the share's denominator too
    np.testing.assert_allclose(estimate.corrupt_gap, exact.corrupt_gap, atol=1e-4)
    moved = np.abs(exact.patched_gap - exact.corrupt_gap).max(axis=1)
    error = np.abs(estimate.patched_gap - exact.patched_gap).max(axis=1)
    assert (moved > 1e-4).all()
    assert error[0] < 1e-3 * moved[0] and error[1] < 1e-3 * moved[1]
    assert error[2] > 1e-3 * moved[2]  # the MLP after it bends the attention's effect: only first order there


def test_the_table_is_exact_patchings_ratio_of_means_with_its_bootstrap():
    rng = np.random.default_rng(1)
    clean, corrupt = rng.normal(3, 1, 40), rng.normal(-2, 1, 40)
    effect = np.stack([rng.normal(2.5, 1, 40), rng.normal(0.1, 1, 40)])
    sites = [Site(RESID, 1), Site(HEAD, 1, 2)]
    table = attribution_table(AttributionResult(sites, clean, corrupt, effect), resamples=200)
    spread = clean.mean() - corrupt.mean()
    np.testing.assert_allclose(table["attributed"], effect.mean(1) / spread)
    draws = bootstrap_shares(clean, corrupt, corrupt[None] + effect, 200)
    np.testing.assert_allclose(table["attributed_low"], np.percentile(draws, 2.5, axis=0))
    assert list(table["head"]) == [-1, 2] and (table["n"] == 40).all()
    assert (table["attributed_low"] <= table["attributed"]).all()
    assert (table["attributed"] <= table["attributed_high"]).all()
    one = attribution_table(AttributionResult(sites, clean[:1], corrupt[:1], effect[:, :1]))
    assert one["attributed_low"].isna().all()  # one pair: no interval


def test_bad_pairs_and_sites_are_refused(tiny):
    loaded, p = tiny.loaded, tiny.p
    with pytest.raises(CoreError, match="pair them one to one"):
        attribute_pairs(loaded, ["a"], [], [1], [2], p)
    with pytest.raises(CoreError, match="same answer"):
        attribute_pairs(loaded, ["a"], ["b"], [1], [1], p)
    with pytest.raises(CoreError, match="off the number line"):
        attribute_pairs(loaded, ["a"], ["b"], [1], [p], p)
    with pytest.raises(CoreError, match="layers go from 1"):
        attribute_pairs(loaded, ["a"], ["b"], [1], [2], p, [Site(MLP, 0)])
