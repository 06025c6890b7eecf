"""The agreement of attribution with exact patching (core.claims.attribution) against its rule, re-derived here on a
hand-built pair of tables and on every shipped run that has both tables (the sentence says what its own tables hold,
whatever the agreement)."""

import numpy as np
import pandas as pd
import pytest

from core.analysis.patch_table import with_defaults
from core.claims.attribution import BROAD, CLOSE, agreement, agreement_sentence, attribution_summary, spearman
from core.runs.cache import list_runs
from core.runs.reader import RunReader, Table

SHIPPED = [r.name for r in list_runs("cache")
           if {"patching", "attribution"} <= set(((r.manifest or {}).get("tables") or {}))]


def tables(sites):
    """(patching, attribution) frames from (kind, layer, head, exact share, estimated share) rows."""
    exact = pd.DataFrame([dict(kind=k, layer=layer, head=h, n=300 if k == "head" else 1000, recovered=e,
                               recovered_low=e - 0.05, recovered_high=e + 0.05) for k, layer, h, e, _ in sites])
    estimate = pd.DataFrame([dict(kind=k, layer=layer, head=h, n=1000, attributed=a, attributed_low=a - 0.05,
                                  attributed_high=a + 0.05) for k, layer, h, _, a in sites])
    return exact, estimate


SITES = [("resid", 0, -1, 0.0, 0.0), ("resid", 1, -1, 0.5, 0.1), ("resid", 2, -1, 0.8, 0.77),
         ("resid", 3, -1, 0.95, 0.91), ("resid", 4, -1, 1.0, 0.98), ("attn", 1, -1, 0.45, 0.2),
         ("mlp", 1, -1, 0.05, 0.06), ("attn", 4, -1, 0.02, 0.01), ("mlp", 4, -1, 0.4, 0.38),
         ("head", 1, 0, 0.3, 0.26), ("head", 1, 1, 0.1, 0.12), ("head", 4, 0, 0.01, -0.001),
         ("head", 4, 1, float("nan"), 0.3)]


def test_the_rule_reads_ranks_tops_and_disagreements_from_the_two_tables():
    found = agreement(*tables(SITES))
    assert len(found.sites) == 12  # the head whose exact share is NaN is not compared
    ranks = lambda v: pd.Series(v).rank().to_numpy()  # noqa: E731
    exact = found.sites["recovered"].to_numpy()
    estimate = found.sites["attributed"].to_numpy()
    assert found.rho["all"] == pytest.approx(np.corrcoef(ranks(exact), ranks(estimate))[0, 1])
    assert found.rho["heads"] == pytest.approx(1.0) and found.counts["heads"] == 3
    assert found.rho["stream"] == pytest.approx(1.0) and found.counts["stream"] == 5
    assert found.rho["modules"] == pytest.approx(spearman([0.45, 0.05, 0.02, 0.4], [0.2, 0.06, 0.01, 0.38]))
    assert np.isnan(spearman([0.3, 0.1], [0.26, 0.12]))  # too few sites
    assert list(found.top_exact["site"]) == ["attention of layer 1", "the MLP of layer 4", "head 0 of layer 1"]
    assert found.top_attributed["site"].iloc[0] == "the MLP of layer 4"
    # shares 5 points apart or more, the largest gap first: the stream after layer 1 (40 points), attention 1 (25)
    assert list(found.disagreements["site"]) == ["the stream after layer 1", "attention of layer 1"]
    text = agreement_sentence(found)
    inner = found.sites[found.sites["kind"] != "resid"]
    rho = found.rho["inner"]
    assert rho == pytest.approx(np.corrcoef(ranks(inner["recovered"]), ranks(inner["attributed"]))[0, 1])
    assert f"rho {rho:+.2f} over the 7 of them" in text and f"every site {found.rho['all']:+.2f} over 12" in text
    words = ("almost as exact patching does" if rho >= CLOSE else
             "broadly as exact patching does" if rho >= BROAD else "differently from exact patching")
    assert words in text
    row = found.sites.set_index("site").loc["the stream after layer 1"]
    assert (f"They differ most at the stream after layer 1 (50% exact, 10% estimated), ranked {row.rank_exact} "
            f"by exact patching and {row.rank_attributed} by attribution; attention of layer 1 (45% exact, "
            "20% estimated)") in text
    assert "The stream near the embeddings is among them" in text  # layer 1 of 4: the first quarter
    assert ("Exact patching's top single site is attention of layer 1 (45%), attribution's the MLP of layer 4 "
            "(38%)") in text
    assert "the heads over 300 of the pairs and the other sites over 1,000" in text
    same = agreement(*tables([(k, layer, h, e, e + 0.01) for k, layer, h, e, _ in SITES[:-1]]))
    said = agreement_sentence(same)
    assert "almost as exact patching does: Spearman's rho +1.00" in said and "No site's estimate is 5% or more" in said
    assert "Both put attention of layer 1 (45% exact, 46% estimated) first" in said
    two_layers = agreement(*tables([("resid", 0, -1, 0.0, 0.0), ("resid", 1, -1, 0.9, 0.5), ("resid", 2, -1, 1, 1)]))
    assert "near the embeddings" not in agreement_sentence(two_layers)  # layer 1 of 2 is not the first quarter


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_run_says_how_its_own_tables_agree(name):
    run = RunReader("cache", name)
    exact, estimate = run.table(Table.PATCHING), run.table(Table.ATTRIBUTION)
    exact = with_defaults(exact)  # attribution estimates exact patching's denoising at contrast 1, site by site
    exact = exact[(exact["direction"] == "denoise") & (exact["contrast"] == 1) & (exact["kind"] != "group")]
    both = exact.merge(estimate, on=["kind", "layer", "head"])
    both = both[np.isfinite(both["recovered"]) & np.isfinite(both["attributed"])]
    inner = both[both["kind"] != "resid"]
    rho = np.corrcoef(inner["recovered"].rank(), inner["attributed"].rank())[0, 1]
    text = attribution_summary(run)
    assert f"rho {rho:+.2f} over the {len(inner)} of them" in text
    words = ("almost as exact" if rho >= CLOSE else "broadly as exact" if rho >= BROAD else "differently from exact")
    assert f"head sites {words} patching" in text
    assert f"over {int(estimate['n'].iloc[0]):,} pairs" in text
    top = estimate.set_index(["kind", "layer", "head"])
    assert top.loc[("resid", 0, -1), "attributed"] == pytest.approx(0.0, abs=1e-6)  # the same answer token in both
