"""Step 3's tables on the Waves page, re-derived from each shipped run's own tables."""

import pandas as pd
import pytest

from core.analysis.phase import locked
from core.claims.last_digit import (
    MOVED_AT_ALL,
    causal_test,
    module_lock_table,
    module_shift_table,
    shift_summary,
)
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs
from core.runs.reader import RunReader, Table

CACHE = PROJECT_ROOT / "cache"
SHIPPED = [RunReader(CACHE, r.name) for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []
LOCKING = [r for r in SHIPPED if r.has(Table.PHASE_LOCKING)]
SHIFTED = [r for r in SHIPPED if causal_test(r)]


@pytest.mark.skipif(not SHIFTED, reason="no shipped run with a phase shift")
@pytest.mark.parametrize("run", SHIFTED, ids=lambda r: r.name[:24])
def test_the_shift_table_shows_the_modules_that_moved_the_last_digit_strongest_first(run):
    table, summary = module_shift_table(run), shift_summary(run)
    modules = summary[summary["kind"].isin(["attn", "mlp"])]
    rows = table[~table["module"].str.startswith("whole stream")]
    share_column = next(c for c in table.columns if c.startswith("of "))
    shown = [float(v.split()[0]) for v in rows[share_column]]
    assert shown == sorted(shown, reverse=True)
    expected = sorted(100 * modules["read"], reverse=True)
    moved = [v for v in expected if v >= 100 * MOVED_AT_ALL] or expected[:1]
    assert shown == pytest.approx([round(v, 1) for v in moved[: len(shown)]], abs=0.051)
    moved_column = next(c for c in table.columns if c.startswith("moved, d = "))
    ds = [int(d) for d in moved_column.removeprefix("moved, d = ").removesuffix(" (%)").split("/")]
    for row in rows.to_dict("records"):  # each module's moved shares per d, from its own summary row
        kind, layer = ("attn" if row["module"].startswith("attention") else "mlp"), int(row["module"].split()[-1])
        own = modules[(modules["kind"] == kind) & (modules["layer"] == layer)].iloc[0]
        assert row[moved_column] == " / ".join(f"{100 * own[f'share_d{d}']:.0f}" for d in ds)
    if (summary["read_of"] == "stream").any():  # the positive control heads the table, with the stream's own shares
        first = table.iloc[0]
        assert first["module"] == f"whole stream {run.n_layers}" and first[share_column] == "100"
        assert first[moved_column] == " / ".join(f"{100 * summary.iloc[0][f'stream_d{d}']:.0f}" for d in ds)


@pytest.mark.skipif(not LOCKING, reason="no shipped run with phase locking")
@pytest.mark.parametrize("run", LOCKING, ids=lambda r: r.name[:24])
def test_the_lock_table_gives_each_module_its_strongest_short_period(run):
    t = run.table(Table.PHASE_LOCKING)
    t = t[t["kind"].isin(["attn", "mlp"]) & t["period"].isin([2.0, 2.5, 5.0, 10.0])].copy()
    t["beats"] = locked(t)
    table = module_lock_table(run)
    for module, r, period, beyond in table.itertuples(index=False):
        kind, layer = ("attn" if module.startswith("attention") else "mlp"), int(module.split()[-1])
        own = t[(t["kind"] == kind) & (t["layer"] == layer)]
        best = own.loc[own["locking"].idxmax()]
        assert float(r) == pytest.approx(best["locking"], abs=0.0051) and float(period) == best["period"]
        assert (beyond == "yes") == bool(best["beats"])
    strongest = t.groupby(["kind", "layer"])["locking"].max().sort_values(ascending=False)
    assert [float(r) for r in table["locking R"]] == pytest.approx(list(strongest.head(len(table))), abs=0.0051)
    assert not table.isna().any().any() and isinstance(table, pd.DataFrame)
