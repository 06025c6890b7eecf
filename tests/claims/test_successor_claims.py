"""The heads' and the helix's sentences (core.claims.heads, core.claims.helix) against their rules, re-derived here
from each shipped run's tables, and the rules shown able to say both things on tables built to a known answer."""

import numpy as np
import pandas as pd
import pytest

from core.analysis.phase import locked
from core.claims.heads import head_periods, heads_summary
from core.claims.helix import SHUFFLE_MARGIN, circles_fit, circles_used, helix_summary, patch_rows, views_side_by_side
from core.runs.cache import list_runs
from core.runs.reader import RunReader, Table

RUNS = [r.name for r in list_runs("cache") if r.ok]


def runs_with(table: str) -> list[str]:
    return [n for n in RUNS if table in (RunReader("cache", n).manifest.get("tables") or {})]


@pytest.mark.parametrize("name", runs_with("head_locking"))
def test_each_runs_heads_sentence_counts_the_heads_its_table_says_lock(name):
    run = RunReader("cache", name)
    table = run.table(Table.HEAD_LOCKING)
    text = heads_summary(run)
    for T in head_periods(run):
        rows = table[np.isclose(table["period"], T)]
        n = int(locked(rows).sum())
        said = f"at period {T:g}, {n} head{'' if n == 1 else 's'} lock" if n else f"at period {T:g}, no head locks"
        assert said in text, (T, n)


def test_the_fit_rule_reads_the_circles_against_the_line_not_the_shuffle():
    # a line that beats its shuffle by far, with circles adding nothing: no periodic structure
    flat = {"helix": (0.40, 0.01), "line": (0.395, 0.01), "helix_shuffled": (-0.05, 0.01), "pca": (0.5, 0.01)}
    assert not circles_fit(flat)
    assert circles_fit({**flat, "helix": (0.40 + 0.001 + SHUFFLE_MARGIN * np.hypot(0.01, 0.01), 0.01)})


def test_the_causal_rule_reads_the_helixs_interval_against_the_lines():
    def rows(helix, line):
        out = [{"layer": 5, "condition": c, "draw": 0, "rank": 8, "n": 100, "recovered": v, "recovered_low": v - 0.02,
                "recovered_high": v + 0.02, "moved": 0.0}
               for c, v in (("activation", 0.95), ("helix", helix), ("line", line), ("pca", 0.8), ("mean", 0.4))]
        out += [{**out[-1], "condition": "random", "draw": d, "recovered": 0.41} for d in range(3)]
        return pd.DataFrame(out)
    assert circles_used(patch_rows(rows(0.6, 0.5), 5))
    assert not circles_used(patch_rows(rows(0.52, 0.5), 5))


@pytest.mark.parametrize("name", runs_with("helix_fit"))
def test_each_runs_helix_sentences_follow_their_rules(name):
    run = RunReader("cache", name)
    fit = run.table(Table.HELIX_FIT)
    helix = fit[fit["model"] == "helix"]
    layer = int(helix.loc[helix["explained_mean"].idxmax(), "layer"])
    at = {m: (float(r["explained_mean"]), float(r["explained_sd"])) for m, r in
          fit[fit["layer"] == layer].set_index("model").iterrows()}
    adds = at["helix"][0] - at["line"][0] > SHUFFLE_MARGIN * np.hypot(at["helix"][1], at["line"][1])
    text = helix_summary(run)
    assert f"fits best at layer {layer}:" in text
    assert ("the circles add to the line" in text) == adds
    if run.has(Table.HELIX_PATCHING):
        patched = run.table(Table.HELIX_PATCHING)
        used = [int(x) for x in sorted(patched["layer"].unique())
                if patched.query("layer == @x and condition == 'helix'")["recovered_low"].iloc[0]
                > patched.query("layer == @x and condition == 'line'")["recovered_high"].iloc[0]]
        assert (f"at layer{'s' if len(used) > 1 else ''} {', '.join(map(str, used))}." in text) if used else (
            "At no patched layer do the circles restore more than the line alone." in text)
    claims_numbers = {"layer": 0, "short_found": [2.0, 5.0, 10.0], "kappa": {10: 0.9}}  # the Fourier view sees
    table, sentence = views_side_by_side(run, claims_numbers)
    first = fit[fit["layer"] == int(fit["layer"].min())].set_index("model")
    at_first = first.loc["helix", "explained_mean"] - first.loc["line", "explained_mean"] > SHUFFLE_MARGIN * np.hypot(
        first.loc["helix", "explained_sd"], first.loc["line", "explained_sd"])
    assert len(table) >= 2 and ("views agree:" in sentence) == at_first
