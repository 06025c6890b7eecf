"""Head locking is a correlation (issue 67 item 9): the heads' summary says so and, where the run patched heads,
states what the strongest locking head restores, read afresh from the raw head_locking and patching tables."""

from __future__ import annotations

import pytest

from core.analysis.phase import locked
from core.claims.heads import heads_summary
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs, read_table
from core.runs.reader import RunReader

CACHE = PROJECT_ROOT / "cache"
WITH_HEADS = [r for r in list_runs(CACHE, deep=False) if r.ok and {"head_locking", "patching"}
              <= set(r.manifest.get("tables", {}))] if CACHE.is_dir() else []


@pytest.mark.parametrize("run", WITH_HEADS, ids=[r.name for r in WITH_HEADS])
def test_the_strongest_lock_is_said_beside_what_it_restores(run):
    text = heads_summary(RunReader(CACHE, run.name, run.manifest))
    assert "Locking is a correlation" in text
    hl = read_table(CACHE, run.name, "head_locking")
    hl = hl[hl["period"].isin([2.0, 2.5, 5.0, 10.0])]
    hl = hl[locked(hl)]
    if hl.empty:
        return
    top = hl.loc[hl["locking"].idxmax()]
    p = read_table(CACHE, run.name, "patching")
    row = p[(p["kind"] == "head") & (p["layer"] == top["layer"]) & (p["head"] == top["head"])]
    if row.empty:
        return
    assert (f"head {int(top['head'])} of layer {int(top['layer'])}, the strongest lock (R = {top['locking']:.2f}), "
            f"restores {100 * row['recovered'].iloc[0]:.0f}%") in text
