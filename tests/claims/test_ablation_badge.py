"""Step 6's badge (issue 67 item 3): where Table 1 has no power for either module, the powered narrow test
(core.claims.periods) gives the badge and Table 1 stands beside it; the cells that still say something are stated.
Re-derived here from the raw ablations table on every shipped run."""

from __future__ import annotations

import pytest

from core.claims.mechanism import claim_ablations
from core.claims.periods import claim_periods
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs, read_table
from core.runs.reader import RunReader

CACHE = PROJECT_ROOT / "cache"
SHIPPED = [r for r in list_runs(CACHE, deep=False) if r.ok and "ablations" in r.manifest.get("tables", {})] \
    if CACHE.is_dir() else []


def informative(name: str, modules: list[str]) -> list[tuple[str, str, float, float]]:
    """(module, band, accuracy, control mean) for each cell at least max(10 points, 2 sd) below its random control:
    the rank-and-energy one first, else the rank-only one, written afresh."""
    ab = read_table(CACHE, name, "ablations")
    tau = min(sorted(ab["tau"].dropna().unique()), key=lambda x: (abs(x - 50), x))
    out = []
    for m in modules:
        for band in ("low", "high"):
            acc = float(ab[(ab["modules"] == m) & (ab["removed"] == band) & (ab["tau"] == tau)]["accuracy"].iloc[0])
            for kind in (f"matched-{band}", f"random-{band}"):
                draws = ab[(ab["modules"] == m) & (ab["removed"] == kind) & (ab["tau"] == tau)]["accuracy"]
                if len(draws) > 1 and acc <= draws.mean() - max(0.10, 2 * draws.std(ddof=1)):
                    out.append((m, band, round(acc, 4), round(float(draws.mean()), 4)))
                    break
    return out


@pytest.mark.parametrize("run", SHIPPED, ids=[r.name for r in SHIPPED])
def test_the_badge_is_the_powered_test_s(run):
    reader = RunReader(CACHE, run.name, run.manifest)
    claim = claim_ablations(reader)
    table1 = claim.numbers["table1_verdict"]
    narrow = claim_periods(reader) if table1 == "not tested" else None
    if narrow is not None and narrow.verdict != "not tested":
        assert claim.verdict == narrow.verdict and claim.numbers["decided_by"] == "the narrow test"
        assert narrow.headline in claim.measured  # the narrow test's numbers, with Table 1 beside them
        assert "Table 1 beside it" in claim.measured
    elif reader.manifest.get("task", {}).get("task") != "multiplication":
        assert claim.verdict == table1 and claim.numbers["decided_by"] == "Table 1"
    powerless = [m for m, v in claim.numbers["pattern"].items() if v is None]
    got = [(c["module"], c["band"], round(c["accuracy"], 4), round(c["control"], 4))
           for c in claim.numbers["informative"]]
    assert got == informative(run.name, powerless)


def test_the_whole_model_reads_the_narrow_test_and_states_its_informative_cells():
    whole = [r for r in SHIPPED if r.name.endswith("087c27b8f9")]
    if not whole:
        pytest.skip("the whole-model run is not in this checkout")
    claim = claim_ablations(RunReader(CACHE, whole[0].name, whole[0].manifest))
    assert claim.numbers["table1_verdict"] == "not tested" and claim.verdict == "does not"
    assert "the MLPs' low band leaves 24.8% against 72.7% ± 9.1" in claim.measured
    assert "attention's low band leaves 36.3% against 93.8%" in claim.measured
