"""The Tour on every shipped run: each step's verdict, as shown on screen, against the run's tables.

The verdict rules are re-derived here from the raw tables (not through core.claims), so a change to
the claims that makes a sentence disagree with its data fails this test.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from core.cache import list_runs, read_table
from core.claims import run_origin
from core.fourier import band_energy_share, fourier_basis, frequency_magnitudes

CACHE = Path(__file__).resolve().parent.parent / "cache"
SHIPPED = [r for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []
BADGES = {"Agrees": "agrees", "Partly": "partly", "Does not agree": "does not", "Not tested here": "not tested"}
STEP_KEYS = ["accuracy", "logit_lens", "module_waves", "spectra", "waves", "ablations", "numbers"]
SHORT = (2.0, 2.5, 5.0, 10.0)


def expected_verdicts(name: str, manifest: dict) -> dict[str, str]:
    t = lambda table: read_table(CACHE, name, table)  # noqa: E731
    out = {"numbers": expected_numbers_verdict(name, manifest)}
    if "examples" not in manifest["tables"]:  # a digit-splitting model: nothing to read from number logits
        return {**{k: "not tested" for k in STEP_KEYS}, **out}
    ex = t("examples")
    acc = ex["correct"].mean()
    out["accuracy"] = "agrees" if acc >= 0.95 else "partly" if acc >= 0.5 else "does not"

    la = t("layer_accuracy")
    la = la[~la["final_norm"]].sort_values("layer")
    inner = la[la["layer"] < la["layer"].max()]
    gaps = (inner["within_10"] - inner["exact"]).to_numpy()
    i = int(np.argmax(gaps))
    out["logit_lens"] = (
        "agrees" if gaps[i] >= 0.25 and inner["within_10"].iloc[i] >= 0.5 else "partly" if gaps[i] >= 0.10 else "does not"
    )

    p = manifest["p"]
    basis = fourier_basis(p, "paper")
    ml = t("module_logits")
    ml = ml[(ml["example_id"] == "15+93") & ml["module"].isin(["attn", "mlp"])]
    dominant = []
    for (module, layer), g in ml.groupby(["module", "layer"], observed=True):
        k = int(np.argmax(frequency_magnitudes(basis, g.sort_values("number")["logit"].to_numpy(float)))) + 1
        dominant.append((str(module), (p - 1) / k))
    mlp2 = any(m == "mlp" and np.isclose(T, 2) for m, T in dominant)
    attn510 = any(m == "attn" and (np.isclose(T, 5) or np.isclose(T, 10)) for m, T in dominant)
    short = any(any(np.isclose(T, s) for s in SHORT) for _, T in dominant)
    out["module_waves"] = "agrees" if mlp2 and attn510 else "partly" if short else "does not"

    spec = t("module_spectra")
    spec = spec[spec["basis"] == "paper"]
    L = manifest["n_layers"]
    keep = range(max(1, L - 14), L + 1)
    low, tops = {}, {}
    for m in ("mlp", "attn"):
        mean = spec[(spec["module"] == m) & spec["layer"].isin(keep)].groupby("k")["magnitude"].mean().sort_index()
        low[m] = band_energy_share(mean.to_numpy(), 50)[0]
        tops[m] = [(p - 1) / k for k in mean.sort_values(ascending=False).index[:5]]
    a = low["mlp"] >= low["attn"] + 0.10
    b = any(any(np.isclose(T, s) for s in SHORT) for T in tops["attn"])
    out["spectra"] = "agrees" if a and b else "partly" if a or b else "does not"

    w = t("final_waves")
    w = w[(w["example_id"] == "15+93") & (w["basis"] == "paper") & (w["rank"] <= 5)]
    total = w.groupby("number")["value"].sum()
    at_answer = int(total.idxmax()) == 108
    ks = w.groupby("rank")["k"].first()
    both = bool((ks < 50).any() and (ks >= 50).any())
    n_short = len({s for s in SHORT if any(np.isclose((p - 1) / k, s) for k in ks)})
    out["waves"] = (
        "agrees" if at_answer and (ks < 50).any() and n_short >= 2 else "partly" if at_answer or both else "does not"
    )

    ab = t("ablations")
    taus = sorted(ab["tau"].dropna().unique())
    tau = min(taus, key=lambda x: (abs(x - 50), x))
    acc_of = lambda m, r: float(ab[(ab["modules"] == m) & (ab["removed"] == r) & (ab["tau"] == tau)]["accuracy"].iloc[0])  # noqa: E731
    a = acc_of("mlp", "low") <= acc_of("attn", "low") - 0.10
    b = acc_of("attn", "high") <= acc_of("mlp", "high") - 0.10
    out["ablations"] = "agrees" if a and b else "partly" if a or b else "does not"

    es = t("embedding_spectrum")
    es = es[(es["basis"] == "paper") & (es["matrix"] == "input") & es["outlier"]]
    found = sum(bool(np.isclose(es["period"], s, atol=0.05).any()) for s in SHORT)
    kind = run_origin(manifest)["kind"]
    if kind in ("planted", "transplanted"):  # features put there by hand or copied from another model
        out["embeddings"] = "not tested"
    elif kind == "scratch":
        out["embeddings"] = "agrees" if found == 0 else "does not"
    else:
        out["embeddings"] = "agrees" if found >= 3 else "partly" if found else "does not"
    return out


def expected_numbers_verdict(name: str, manifest: dict) -> str:
    ns, pr = read_table(CACHE, name, "number_spectrum"), read_table(CACHE, name, "number_probes")
    kind = run_origin(manifest)["kind"]
    layer = 0 if kind == "scratch" else int(pr[pr["role"] != "control"].groupby("layer")["kappa_mean"].mean().idxmax())
    out = ns[(ns["layer"] == layer) & (ns["basis"] == "paper") & ns["outlier"]]
    found = sum(bool(np.isclose(out["period"], s, atol=0.05).any()) for s in SHORT)
    if kind in ("planted", "transplanted"):
        return "not tested"
    if kind == "scratch":
        return "agrees" if found == 0 else "does not"
    return "agrees" if found >= 3 else "partly" if found else "does not"


def shown_verdict(at) -> tuple[str, str]:
    """(verdict, text) of the step on screen: the markdown with the paper's finding carries the badge."""
    line = next(m.value for m in at.markdown if "**Paper:**" in m.value)
    badge = re.search(r":\w+-badge\[([^\]]+)\]", line).group(1)
    return BADGES[badge], line


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
@pytest.mark.parametrize("run", SHIPPED, ids=[r.name[:24] for r in SHIPPED])
def test_tour_verdicts_match_the_tables_on_every_shipped_run(run, monkeypatch):
    from streamlit.testing.v1 import AppTest

    import streamlit as st

    monkeypatch.setenv("FOURIER_CACHE_DIR", str(CACHE))
    st.cache_data.clear()
    expected = expected_verdicts(run.name, run.manifest)
    for step, key in enumerate(STEP_KEYS, start=1):
        at = AppTest.from_file("../app/main.py", default_timeout=120)
        at.query_params.update({"run": run.name, "step": str(step), "best": "0"})
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        verdict, _ = shown_verdict(at)
        assert verdict == expected[key], f"{run.name} step {step} ({key}): shown {verdict}, tables say {expected[key]}"
        measured = next(m.value for m in at.markdown if m.value.startswith("**") and "**Paper:**" not in m.value and ":**" in m.value)
        if key == "accuracy" and "examples" in run.manifest["tables"]:
            ex = read_table(CACHE, run.name, "examples")
            assert f"{100 * ex['correct'].mean():.1f}%" in measured
            assert "planted by hand" in " ".join(m.value for m in at.markdown) or run_origin(run.manifest)["kind"] != "planted"


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
def test_tour_picks_the_run_that_shows_a_step_best_and_says_so(monkeypatch):
    from streamlit.testing.v1 import AppTest

    import streamlit as st

    from core.claims import VERDICT_SCORE

    monkeypatch.setenv("FOURIER_CACHE_DIR", str(CACHE))
    st.cache_data.clear()
    verdicts = {r.name: expected_verdicts(r.name, r.manifest) for r in SHIPPED if r.manifest["task"]["split"] == "test"
                and "examples" in r.manifest["tables"]}
    worst = min(verdicts, key=lambda n: VERDICT_SCORE[verdicts[n]["accuracy"]])
    at = AppTest.from_file("../app/main.py", default_timeout=120)
    at.query_params.update({"run": worst, "step": "1"})
    at.run()
    verdict, _ = shown_verdict(at)
    assert VERDICT_SCORE[verdict] == max(VERDICT_SCORE[v["accuracy"]] for v in verdicts.values())
    if verdict != verdicts[worst]["accuracy"]:
        assert any("shows this step best" in c.value for c in at.caption)


def test_a_run_that_cannot_answer_a_claim_says_so(tmp_path):
    """A claim the tables cannot answer is 'not tested', with what is missing, never a crash."""
    import pandas as pd

    from core.claims import run_claims

    class Thin:
        manifest = {"p": 521, "n_layers": 2, "label": "thin", "model": {}, "tables": {}}

        def table(self, name):
            if name == "examples":
                return pd.DataFrame({"id": ["1+2"], "in_sample": [False], "correct": [True], "prediction": [3], "answer": [3]})
            raise KeyError(name)

    claims = run_claims(Thin())
    assert claims["accuracy"].verdict == "not tested" and "cannot answer" in claims["accuracy"].measured
    assert all(c.verdict in ("not tested", "agrees", "partly", "does not") for c in claims.values())


@pytest.mark.skipif(not any(run_origin(r.manifest)["kind"] == "external" for r in SHIPPED), reason="no real pre-trained run shipped")
def test_step_7_shows_a_model_that_learned_from_text_on_a_tie(monkeypatch):
    """Where do the features come from: with the best run shown, a tie between a real pre-trained
    model and the from-scratch control (both agree) goes to the pre-trained model."""
    from streamlit.testing.v1 import AppTest

    import streamlit as st

    monkeypatch.setenv("FOURIER_CACHE_DIR", str(CACHE))
    st.cache_data.clear()
    first = next(r for r in SHIPPED if run_origin(r.manifest)["kind"] != "external")
    at = AppTest.from_file("../app/main.py", default_timeout=120)
    at.query_params.update({"run": first.name, "step": "7", "best": "1"})
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    verdict, _ = shown_verdict(at)
    text = " ".join(m.value for m in at.markdown)
    external = [r.manifest["label"] for r in SHIPPED if run_origin(r.manifest)["kind"] == "external"]
    assert verdict == "agrees" and any(f"**{label}" in text for label in external), text[:2000]


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
@pytest.mark.parametrize("run", SHIPPED, ids=[r.name[:24] for r in SHIPPED])
def test_logit_lens_sentence_gives_the_last_layer_both_ways(run):
    """The lens without the final norm (the paper's) at the last layer is not the model's answer: the
    sentence gives the same layer through the final norm too, each figure read from the table."""
    from core.claims import TableRun, claim_logit_lens

    def pct(x: float) -> str:  # how the claims write a share
        return f"{100 * x:.1f}%"

    run = TableRun(CACHE, run.name)
    if "layer_accuracy" not in run.manifest["tables"]:
        pytest.skip("this run has no logit lens (a k-shot generation run)")
    la = run.table("layer_accuracy")
    top = la[la["layer"] == la["layer"].max()].set_index("final_norm")["exact"]
    measured = claim_logit_lens(run).measured
    assert f"at the last layer ({int(la['layer'].max())}), {pct(top[False])} exact" in measured
    if True in top.index:
        assert f"through the final norm, as the model reads it: {pct(top[True])}" in measured
