"""Step 4 read layer by layer (issue 67 item 2): the rule of core.claims.spectra.claim_spectra written afresh from
the raw module_spectra and module_spectra_baseline tables on every shipped addition run, and hand-made runs on which
the layer-by-layer reading and the mean spectrum disagree, each way."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from core.claims.registry import run_claims
from core.claims.spectra import claim_spectra
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs, read_table
from core.runs.reader import RunReader, Table

CACHE = PROJECT_ROOT / "cache"
SHIPPED = [r for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []
SHORT = (2.0, 2.5, 5.0, 10.0)


def low_share(mag: np.ndarray, tau: int = 50) -> float:
    """Energy (squared magnitude) at k = 1..tau-1 over all of it, written out."""
    sq = mag.astype(float) ** 2
    return float(sq[: tau - 1].sum() / sq.sum())


def bar_of(baseline: np.ndarray) -> np.ndarray:
    """2, or the square root of the most a module could reach over the baseline at k (all its energy there)."""
    return np.minimum(2.0, np.sqrt(np.sqrt((baseline**2).sum()) / baseline))


def expected(manifest: dict, name: str) -> tuple[str, list[int], list[int]]:
    """(verdict, layers where MLP's low share is 10 points above attention's, attention layers carrying a short
    period above the bar), from the raw tables."""
    spec = read_table(CACHE, name, "module_spectra")
    spec = spec[spec["basis"] == "paper"]
    base = read_table(CACHE, name, "module_spectra_baseline")
    base = base[base["basis"] == "paper"]
    L = manifest["n_layers"]
    keep = range(max(1, L - 14), L + 1)
    mlp_low, attn_low, attn_short = [], [], []
    for layer in keep:
        share = {}
        for m in ("mlp", "attn"):
            own = spec[(spec["module"] == m) & (spec["layer"] == layer)].sort_values("k")
            share[m] = low_share(own["magnitude"].to_numpy())
            if m == "attn":
                b = base[(base["module"] == m) & (base["layer"] == layer)].sort_values("k")["magnitude"].to_numpy()
                ratio = own["magnitude"].to_numpy() / b
                hit = [T for T, r, q in zip(own["period"], ratio, bar_of(b)) if r >= q and
                       any(abs(T - s) < 1e-6 for s in SHORT)]
                if hit:
                    attn_short.append(layer)
        if share["mlp"] - share["attn"] >= 0.10:
            mlp_low.append(layer)
        if share["attn"] - share["mlp"] >= 0.10:
            attn_low.append(layer)
    n = len(keep)
    a = len(mlp_low) >= math.ceil(n / 2) and len(mlp_low) > len(attn_low)
    b = len(attn_short) >= max(1, math.ceil(n / 10))
    return ("agrees" if a and b else "partly" if a or b else "does not"), mlp_low, attn_short


ADDITION = [
    r for r in SHIPPED
    if "module_spectra_baseline" in r.manifest.get("tables", {})
    and r.manifest.get("task", {}).get("task", "addition") != "multiplication"
]


@pytest.mark.parametrize("run", ADDITION, ids=[r.name for r in ADDITION])
def test_step_4_on_every_shipped_run_is_its_layer_by_layer_reading(run):
    verdict, mlp_low, attn_short = expected(run.manifest, run.name)
    claim = run_claims(RunReader(CACHE, run.name, run.manifest))["spectra"]
    assert claim.verdict == verdict
    assert claim.numbers["mlp_low_layers"] == mlp_low
    assert claim.numbers["attn_short_layers"] == attn_short
    n = min(15, run.manifest["n_layers"])
    # the sentence quotes the counts it was judged by
    assert f"in {len(mlp_low)} of {n} layers" in claim.measured
    assert f"in {len(attn_short)} of {n} layers" in claim.measured


def test_the_default_run_reads_partly_from_attention_24_and_27():
    """The audit (issue 67): attention 24 and 27 carry period 10 above the bar (1.82x and 1.87x against 1.59x)."""
    default = [r for r in ADDITION if r.name.endswith("882bc8ee3b")]
    if not default:
        pytest.skip("the default run is not in this checkout")
    claim = run_claims(RunReader(CACHE, default[0].name, default[0].manifest))["spectra"]
    assert claim.verdict == "partly"
    assert claim.numbers["attn_short_layers"] == [24, 27]
    assert "1.82x against 1.59x" in claim.measured and "1.87x against 1.59x" in claim.measured


class TableRun:
    def __init__(self, tables: dict, n_layers: int):
        self.tables = {Table(k): v for k, v in tables.items()}
        self.manifest = {"n_layers": n_layers, "p": 521, "tables": {k: {} for k in tables}, "task": {"split": "test"}}
        self.name, self.label = "hand-made", "hand-made"

    def table(self, name):
        return self.tables[Table(name)]

    def has(self, name):
        return Table(name) in self.tables


def hand_made(mlp_low_in: set, attn_short_in: set, big_layer: int | None = None, n_layers: int = 12) -> TableRun:
    """Flat spectra (baseline flat too) where the MLP of the layers `mlp_low_in` has 3x magnitude below k = 50 and the
    attention of `attn_short_in` 3x at period 10 (k = 52); `big_layer`'s attention is 1000x louder and all low."""
    spec, base = [], []
    for module in ("mlp", "attn"):
        for layer in range(1, n_layers + 1):
            for k in range(1, 261):
                mag = 1.0
                if module == "mlp" and layer in mlp_low_in and k < 50:
                    mag = 3.0
                if module == "attn" and layer in attn_short_in and k == 52:
                    mag = 3.0
                if module == "attn" and layer == big_layer:
                    mag = 1000.0 if k < 50 else 0.01
                row = {"basis": "paper", "module": module, "layer": layer, "k": k, "period": 520 / k}
                spec.append({**row, "magnitude": mag})
                base.append({**row, "magnitude": 1.0, "magnitude_p95": 1.5, "rms_norm": 1.0, "match": "energy"})
    return TableRun({"module_spectra": pd.DataFrame(spec), "module_spectra_baseline": pd.DataFrame(base)}, n_layers)


def test_the_rule_can_agree_and_can_fail():
    everywhere = set(range(1, 13))
    assert claim_spectra(hand_made(everywhere, {3, 7})).verdict == "agrees"
    assert claim_spectra(hand_made(everywhere, {3})).verdict == "partly"  # one attention layer in 12 is not 2
    assert claim_spectra(hand_made({1, 2, 3, 4}, {3, 7})).verdict == "partly"  # MLP ahead in 4 of 12 layers
    assert claim_spectra(hand_made(set(), set())).verdict == "does not"


def test_one_loud_layer_does_not_decide_the_reading():
    """The audit's case: one attention layer 1000x louder, all in the low band, makes the mean spectrum say attention
    is the low-band module (the old rule: MLP not ahead). Layer by layer the MLP is still ahead in 11 of 12 layers."""
    run = hand_made(set(range(1, 13)), {3, 7}, big_layer=9)
    claim = claim_spectra(run)
    assert claim.numbers["low_share"]["attn"] > claim.numbers["low_share"]["mlp"]  # the mean says the reverse
    assert claim.numbers["mlp_low_layers"] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12]
    assert claim.verdict == "agrees"


def test_without_the_baseline_the_raw_top_periods_are_read_and_the_sentence_says_so():
    made = hand_made(set(range(1, 13)), {3, 7})
    run = TableRun({"module_spectra": made.tables[Table.MODULE_SPECTRA]}, 12)
    claim = claim_spectra(run)
    assert claim.numbers["attn_short_layers"] == [3, 7]  # period 10 is in those layers' raw top 5
    assert claim.verdict == "agrees"
    assert "no W_U baseline cached" in claim.measured
    flat = TableRun({"module_spectra": hand_made(set(), set()).tables[Table.MODULE_SPECTRA]}, 12)
    assert "no W_U baseline cached" in claim_spectra(flat).reason
