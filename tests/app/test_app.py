"""Drive every dashboard page with streamlit.testing on real cached runs of tiny models."""

from __future__ import annotations

import json
import shutil as sh

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from app.figures.style import title_text
from app.live.ablation import status_line
from app.live.queue import LiveStatus
from core.analysis.behaviour import error_summary
from core.analysis.phase_shift import wilson_interval
from core.cli import main
from core.files import PROJECT_ROOT
from core.runs import live_ablation, summaries
from core.runs import live_sample as live_sampling
from core.runs.cache import read_table
from core.runs.live_model import live_model_folder
from core.runs.live_sample import running_estimate
from core.training.stages import retrain_commands

PAGES = {
    "tour": "views/tour.py",
    "logit_lens": "views/logit_lens.py",
    "spectra": "views/spectra.py",
    "waves": "views/waves.py",
    "ablations": "views/ablations.py",
    "embeddings": "views/numbers.py",
    "patching": "views/patching.py",
    "training": "views/training.py",
    "behaviour": "views/behaviour.py",
}


def open_app(app_env, monkeypatch, timeout: float = 120) -> AppTest:
    """The dashboard on the test fixture's cache and models, opened once (each script run may take `timeout` s)."""
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(app_env["cache"]))
    monkeypatch.setenv("FOURIER_MODELS_DIR", str(app_env["models"]))
    monkeypatch.setenv("STREAMLIT_CLIENT_SHOW_ERROR_DETAILS", "full")
    st.cache_data.clear()
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=timeout)
    at.run()
    return at


@pytest.fixture
def app(app_env, monkeypatch):
    return open_app(app_env, monkeypatch)


def goto(at, page):
    at.switch_page(PAGES[page])
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def charts(at):
    return at.get("vega_lite_chart")


def chart_title(el) -> str:
    """The chart's title and subtitle (the run's name), as one line."""
    spec = json.loads(el.proto.spec)
    title = spec.get("title")
    if not isinstance(title, dict):
        return str(title)
    parts = [title_text(title), title.get("subtitle", "")]
    return " — ".join(" ".join(p) if isinstance(p, list) else str(p) for p in parts if p)


def chart_data(el) -> pd.DataFrame:
    """The chart's main data: the largest of its datasets (a layer of marks, the dotted periods, has its own)."""
    frames = [pa.ipc.open_stream(d.data.data).read_all().to_pandas() for d in el.proto.datasets]
    return max(frames, key=len) if frames else pd.DataFrame()


def widget(at, kind, key):
    return next(w for w in getattr(at, kind) if w.key == key)


def run_named(at, app_env, label):
    return app_env["runs"][label]


def test_every_page_renders_with_charts_and_captions(app):
    for page in PAGES:
        goto(app, page)
        assert app.title, page
        if page != "behaviour" or len(charts(app)):
            assert len(charts(app)) >= 1, page
        for el in charts(app):
            assert chart_title(el), page
        assert len(app.caption) >= 1, page


def test_broken_run_is_named_and_skipped(app, app_env):
    run_select = widget(app, "selectbox", "run")
    assert "zz-broken-0000000000" not in run_select.options
    texts = " ".join(c.value for c in app.sidebar.get("caption"))
    assert "zz-broken-0000000000" in texts and "sha256" in texts


def test_run_picker_changes_page_and_url(app, app_env):
    goto(app, "logit_lens")
    target = app_env["runs"]["random llama"]
    widget(app, "selectbox", "run").set_value(target.name).run()
    assert app.query_params["run"] == target.name
    assert "random llama" in chart_title(charts(app)[0])


def test_logit_lens_controls(app, app_env):
    goto(app, "logit_lens")
    run = app_env["runs"]["tiny trained"]
    widget(app, "selectbox", "run").set_value(run.name).run()
    table = read_table(app_env["cache"], run.name, "layer_accuracy")
    for norm in (False, True):
        widget(app, "toggle", "norm").set_value(norm).run()
        data = chart_data(charts(app)[0])
        exact = data[data["measure"] == "exact"].sort_values("layer")["accuracy"].to_numpy()
        want = table[table["final_norm"] == norm].sort_values("layer")["exact"].to_numpy()
        assert np.allclose(exact, want)
    widget(app, "select_slider", "layer").set_value(1).run()
    assert chart_title(charts(app)[2]).startswith("Layer 1")
    assert app.query_params["layer"] == "1"
    examples = widget(app, "selectbox", "example").options
    assert examples[0].startswith("15 + 93 = 108")


def test_spectra_controls(app, app_env):
    goto(app, "spectra")
    run = app_env["runs"]["tiny trained"]
    widget(app, "selectbox", "run").set_value(run.name).run()
    widget(app, "radio", "module").set_value("attn").run()
    top = chart_data(charts(app)[0])  # the strongest periods of both modules, as bars
    assert set(top["module"]) == {"MLP", "Attention"}
    titles = [chart_title(c) for c in charts(app)]
    # step 4's two counts layer by layer, then the chosen module's spectrum
    assert titles[1].startswith("Low band in each of the last"), titles
    assert titles[2].startswith("Periods 2, 2.5, 5, 10"), titles
    module = next(i for i, t in enumerate(titles) if t.startswith("Attention"))
    widget(app, "slider", "tau").set_value(30).run()
    energy = summaries.energy_by_band(read_table(app_env["cache"], run.name, "module_spectra"), "paper", 30)
    layer = widget(app, "select_slider", "layer").value
    want = energy[(energy["module"] == "attn") & (energy["layer"] == layer)].iloc[0]["low"]
    metric = next(m for m in app.metric if m.label == f"Attention layer {layer} alone: energy below tau = 30")
    assert metric.value == f"{want:.1%}"
    data = chart_data(charts(app)[module + 1]).dropna(subset=["band"])
    assert (
        set(data["band"]) == {"low (k < tau)", "high (k ≥ tau)"}
        and (data[data["k"] < 30]["band"] == "low (k < tau)").all()
    )
    widget(app, "radio", "basis").set_value("dft").run()
    assert app.query_params["basis"] == "dft"
    assert "period T = 201/k" in charts(app)[module].proto.spec


def test_waves_k_slider(app):
    goto(app, "waves")
    widget(app, "slider", "k").set_value(3).run()
    data = chart_data(charts(app)[0])
    assert data["component"].nunique() == 3
    assert app.query_params["k"] == "3"


def test_ablations_table_cell_and_live_run(app, app_env):
    goto(app, "ablations")
    run = app_env["runs"]["tiny trained"]
    widget(app, "selectbox", "run").set_value(run.name).run()
    widget(app, "slider", "tau").set_value(10).run()
    ablations = read_table(app_env["cache"], run.name, "ablations")
    shown = app.dataframe[0].value
    none = ablations[ablations["removed"] == "none"].iloc[0]
    assert np.isclose(shown.iloc[0]["accuracy %"], 100 * none["accuracy"])
    mlp_low = ablations[
        (ablations["modules"] == "mlp") & (ablations["removed"] == "low") & (ablations["tau"] == 10)
    ].iloc[0]
    row = shown[shown["filter"] == "MLP: low removed"].iloc[0]
    assert np.isclose(row["accuracy %"], 100 * mlp_low["accuracy"])
    # empty cells read "—": the paper's figures exist only at tau = 50, and "none" has no rank
    assert set(shown["paper GPT-2-XL accuracy %"]) == {"—"} and shown.iloc[0]["rank"] == "—"
    config = json.loads(app.dataframe[0].proto.columns)  # a "—" in a number column would show as an error cell
    assert config["rank"]["type_config"]["type"] == "text" and config["accuracy %"]["type_config"]["type"] == "number"
    widget(app, "selectbox", "cell").set_value("Attn: high removed").run()
    assert app.query_params["cell"] == "Attn: high removed"
    # live: the same filter computed on the spot must agree with the cached grid
    widget(app, "selectbox", "live_modules").set_value("mlp").run()
    widget(app, "selectbox", "live_removed").set_value("low").run()
    next(b for b in app.button if b.label.endswith("with this filter")).click().run()
    assert not app.exception, [e.message for e in app.exception]
    acc = next(m for m in app.metric if m.label == "accuracy")
    assert acc.value == f"{mlp_low['accuracy']:.2%}"
    assert not any("Stale" in w.value for w in app.warning)
    # another tau: the old result is marked stale, not shown as if it were the new one's
    widget(app, "slider", "tau").set_value(20).run()
    assert any("Stale" in w.value for w in app.warning)
    assert not any(m.label == "accuracy" for m in app.metric)


def test_live_on_a_deep_model_reads_the_fixed_sample_with_its_interval(app, app_env, monkeypatch):
    monkeypatch.setattr(live_sampling, "LIVE_SAMPLE", 48)  # the page's sample and the computation's
    monkeypatch.setattr(live_ablation, "LIVE_SAMPLE", 48)
    monkeypatch.setattr(live_sampling, "SAMPLE_FROM_PARAMS", 0)  # the tiny model counts as deep
    goto(app, "ablations")
    run = app_env["runs"]["tiny trained"]
    widget(app, "selectbox", "run").set_value(run.name).run()
    assert any(t.label.startswith("Every question (120)") for t in app.toggle)
    next(b for b in app.button if b.label == "Run the 48-question sample with this filter").click().run()
    assert not app.exception, [e.message for e in app.exception]
    assert any("a fixed sample of 48 of the 120 test questions" in m.value for m in app.markdown)
    acc = next(m for m in app.metric if m.label == "accuracy")
    examples = read_table(app_env["cache"], run.name, "examples")
    base = live_sampling.live_sample(examples, 48)["correct"].mean()  # the unfiltered model on the same 48
    shown_change = float(acc.delta.split(" points")[0])
    assert "on the same questions" in acc.delta and abs(shown_change - (float(acc.value[:-1]) - 100 * base)) < 0.01
    assert any("95% interval" in c.value and "48 questions" in c.value for c in app.caption)
    # every question instead: the same filter over the whole split, as the cached grid has it, with no interval
    widget(app, "toggle", "live_whole").set_value(True).run()
    next(b for b in app.button if b.label == "Run all 120 questions with this filter").click().run()
    assert any("all 120 test questions" in m.value for m in app.markdown)
    assert not any("95% interval" in c.value and "Wilson" in c.value for c in app.caption)


def test_the_waiting_line_shows_the_running_estimate():
    status = LiveStatus("running", done=64, total=512, estimate=running_estimate(20, 64, 512))
    line, fraction = status_line(status, "MLP: low removed", 3.2)
    low, high = wilson_interval(20 / 64, 64)
    assert fraction == 64 / 512 and "64 of 512 questions" in line
    assert f"so far {20 / 64:.1%} correct (95% interval {low:.1%} to {high:.1%}" in line
    assert "correct (95% interval" not in status_line(LiveStatus("running", done=0, total=512), "x", 1.0)[0]


def test_ablations_says_when_live_is_unavailable(app, app_env):
    goto(app, "ablations")
    widget(app, "selectbox", "run").set_value(app_env["runs"]["random llama"].name).run()
    assert any("not available" in i.value for i in app.info)


def test_numbers_page_compares_runs_layer_by_layer(app, app_env):
    goto(app, "embeddings")
    a, b = app_env["runs"]["tiny trained"], app_env["runs"]["random llama"]
    widget(app, "selectbox", "run").set_value(a.name).run()
    widget(app, "selectbox", "compare").set_value(b.name).run()
    titles = [chart_title(c) for c in charts(app)]
    assert any("tiny trained" in t for t in titles) and any("random llama" in t for t in titles)
    widget(app, "slider", "nlayer").set_value(1).run()
    assert not app.exception
    first = next(c for c in charts(app) if "Spectrum of the numbers at layer 1" in chart_title(c))
    spec = read_table(app_env["cache"], a.name, "number_spectrum")
    want = spec[(spec["layer"] == 1) & (spec["basis"] == "paper")].sort_values("k")
    data = chart_data(first).sort_values("k")
    assert np.allclose(data["magnitude"], want["magnitude"]) and np.allclose(
        data["null_threshold"], want["null_threshold"]
    )
    probes = next(c for c in charts(app) if "Linear probes" in chart_title(c))
    got = chart_data(probes).dropna(subset=["modulus"])
    table = read_table(app_env["cache"], a.name, "number_probes")
    assert len(got) == len(table) and set(got["series"]) >= {"n mod 10", "n mod 3 (control)"}
    caption = " ".join(c.value for c in app.caption)
    k10 = float(table[(table["layer"] == 1) & (table["modulus"] == 10)]["kappa_mean"].iloc[0])
    assert f"mod 10: {k10:.2f}" in caption
    # the embedding rows of single-token models are still there
    widget(app, "radio", "matrix").set_value("output").run()
    emb = next(c for c in charts(app) if "unembedding" in chart_title(c))
    spec = read_table(app_env["cache"], a.name, "embedding_spectrum")
    want = spec[(spec["basis"] == "paper") & (spec["matrix"] == "output")].sort_values("k")["magnitude"].to_numpy()
    assert np.allclose(chart_data(emb).sort_values("k")["magnitude"].to_numpy(), want)
    widget(app, "radio", "colour").set_value("magnitude").run()
    assert any("size of the number" in chart_title(c) for c in charts(app))


def test_a_digit_model_run_says_which_pages_do_not_apply(app, app_env):
    digits = app_env["runs"]["digit model"]
    for page in ("logit_lens", "spectra", "waves", "ablations"):
        goto(app, page)
        widget(app, "selectbox", "run").set_value(digits.name).run()
        assert not app.exception, page
        info = " ".join(i.value for i in app.info)
        assert "does not apply" in info and "writes numbers as several tokens" in info, page
    goto(app, "embeddings")
    widget(app, "selectbox", "run").set_value(digits.name).run()
    assert not app.exception and any("Linear probes" in chart_title(c) for c in charts(app))
    goto(app, "behaviour")
    widget(app, "selectbox", "run").set_value(digits.name).run()
    assert not app.exception
    gens = read_table(app_env["cache"], digits.name, "generations")
    four = gens[gens["shots"] == 4]
    assert app.metric[0].value == f"{four['correct'].mean():.2%}"
    widget(app, "radio", "shots").set_value(0).run()
    assert app.metric[0].value == f"{gens[gens['shots'] == 0]['correct'].mean():.2%}"


def test_training_curves_come_from_the_log(app, app_env):
    goto(app, "training")
    data = chart_data(charts(app)[0])
    log = read_table(app_env["cache"], app_env["runs"]["tiny trained"].name, "training_log")
    val = log[log["split"] == "val"].sort_values("epoch")["accuracy"].to_numpy()
    assert np.allclose(data.sort_values("epoch")["mean"].to_numpy(), val)


def test_behaviour_metrics(app, app_env):
    goto(app, "behaviour")
    name = widget(app, "selectbox", "run").value
    ex = read_table(app_env["cache"], name, "examples")
    s = error_summary(ex["answer"], ex["prediction"])
    assert next(m for m in app.metric if m.label == "Accuracy").value == f"{s.accuracy:.2%}"
    assert any(u for u in app.get("file_uploader"))


def test_tour_steps_and_presentation_mode(app):
    goto(app, "tour")
    assert app.subheader[0].value.startswith("1.")
    next(b for b in app.button if "Next" in b.label).click().run()
    assert app.subheader[0].value.startswith("2.") and app.query_params["step"] == "2"
    for _ in range(6):
        next(b for b in app.button if "Next" in b.label).click().run()
        assert not app.exception, [e.message for e in app.exception]
    assert app.subheader[0].value.startswith("8.")
    widget(app, "toggle", "large").set_value(True).run()
    assert app.query_params["large"] == "1"
    styles = [h.proto.body for h in app.get("html")]  # the page styles go in through st.html (no room taken)
    assert any(".st-key-tour-claim" in body and "font-size" in body for body in styles)


def test_shared_link_reopens_the_view(app_env, monkeypatch):
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(app_env["cache"]))
    run = app_env["runs"]["random llama"]
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"run": run.name, "tau": "20", "basis": "dft", "step": "3"})
    at.run()
    assert widget(at, "selectbox", "run").value == run.name
    assert widget(at, "slider", "tau").value == 20
    assert widget(at, "radio", "basis").value == "dft"
    assert at.subheader[0].value.startswith("3.")
    at.query_params.update({"tau": "9999", "run": "../../etc"})
    at2 = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at2.query_params.update({"tau": "9999", "run": "../../etc"})
    at2.run()
    assert not at2.exception
    # a cutoff out of range and a run that does not exist: each said in one line, each shown at its default
    plain = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    plain.run()  # the same first run with no link: its default cutoff
    assert widget(at2, "slider", "tau").value == widget(plain, "slider", "tau").value
    notes = [t.value for t in at2.toast]
    assert any(n.startswith("The link asks for tau '9999'") for n in notes), notes
    assert any(n.startswith("The link asks for run '\\.\\./\\.\\./etc'") for n in notes), notes
    assert all("\n" not in n for n in notes)


def test_empty_cache_says_how_to_make_a_run(tmp_path, monkeypatch):
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(tmp_path))

    st.cache_data.clear()
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=60)
    at.run()
    assert not at.exception
    assert any("No usable runs" in w.value for w in at.warning)
    assert any("python -m core precompute" in m.value for m in at.markdown)


def test_live_is_refused_with_a_reason(tmp_path, monkeypatch, app_env):
    run = app_env["runs"]["tiny trained"]
    monkeypatch.setenv("FOURIER_MODELS_DIR", str(app_env["models"]))
    folder, why = live_model_folder(run.manifest)
    assert folder is not None and why == ""
    # weights not shipped (in a models folder of this test's own: app_env's is shared, read-only)
    models = tmp_path / "models"
    monkeypatch.setenv("FOURIER_MODELS_DIR", str(models))
    copy = models / "copy-without-weights"
    sh.copytree(app_env["models"] / "tiny-trained", copy, ignore=sh.ignore_patterns("*.safetensors", "checkpoint"))
    manifest = {**run.manifest, "model": {**run.manifest["model"], "source_as_given": str(copy), "source": str(copy)}}
    folder, why = live_model_folder(manifest)
    assert folder is None and "weights are not on this machine" in why and "--recipe tiny-trained" in why
    assert "--device cuda" not in why
    # a small model trained on a GPU trains again on this CPU (minutes); a fine-tuning of a pre-trained LLM on a GPU
    spec = json.loads((copy / "recipe.json").read_text())
    (copy / "recipe.json").write_text(json.dumps({**spec, "device": "cuda"}))
    folder, why = live_model_folder(manifest)
    assert folder is None and "--recipe tiny-trained` trains them again on this CPU" in why
    assert "precompute --model" in why  # the new weights are not these bit for bit: the run is made again
    (copy / "recipe.json").write_text(json.dumps({**spec, "device": "cuda", "number_tokens": {"n": 521}}))
    folder, why = live_model_folder(manifest)
    assert folder is None and "--recipe tiny-trained --device cuda` trains them again on a GPU" in why
    (copy / "recipe.json").write_text(json.dumps({**spec, "device": "cuda"}))
    # a later stage whose earlier stage's delta is not here either: both commands, the earlier first
    later = models / "later-stage"
    sh.copytree(copy, later)
    spec2 = {
        **spec,
        "name": "tiny-later",
        "device": None,
        "lora": {**(spec.get("lora") or {}), "init_delta": str(copy / "delta.safetensors")},
    }
    (later / "recipe.json").write_text(json.dumps(spec2))
    folder, why = live_model_folder(
        {**manifest, "model": {**manifest["model"], "source_as_given": str(later), "source": str(later)}}
    )
    assert (
        folder is None
        and (
            "`python -m core train --recipe tiny-trained`, then "
            "`python -m core train --recipe tiny-later` train them again (each stage starts from the one before)"
        )
        in why
    )
    (copy / "delta.safetensors").write_bytes(b"")  # the earlier stage's delta is here: only this stage is retrained

    assert retrain_commands(later) == [("python -m core train --recipe tiny-later", False)]
    # outside the models folder
    monkeypatch.setenv("FOURIER_MODELS_DIR", str(models))
    folder, why = live_model_folder(run.manifest)
    assert folder is None and "outside" in why


def test_a_link_the_app_wrote_opens_the_same_view_without_a_warning(app, app_env, monkeypatch):
    """Every page mirrors its controls into the URL; opening that URL in a new session (a shared link)
    restores the view and shows no 'the link asks for ...' notice (a link's 0 is the value False)."""

    for page in PAGES:
        at = goto(app, page)
        link = {"large": "0", **{k: at.query_params[k] for k in at.query_params}}  # the toggle, once off, writes 0
        fresh = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
        fresh.query_params.update(link)
        fresh.run()
        fresh.switch_page(PAGES[page])
        fresh.run()
        assert not fresh.exception, [e.message for e in fresh.exception]
        assert not [t.value for t in fresh.toast], (page, link, [t.value for t in fresh.toast])
        shown = {k: fresh.query_params[k] for k in fresh.query_params}
        assert {k: shown.get(k) for k in link} == link, page


def test_a_run_made_with_some_stages_says_what_was_not_computed(model_dir, tmp_path, monkeypatch):
    """A run of `precompute --stages measure,ablations`: every page and Tour step opens without an exception, and the
    pages whose tables were left out say so (not "does not apply", which is about the model)."""
    cache = tmp_path / "cache"
    assert main(["precompute", "--model", str(model_dir("llama")), "--cache-dir", str(cache), "--max-operand", "40",
                 "--limit", "60", "--taus", "5,10", "--n-sample", "2", "--no-progress",
                 "--stages", "measure,ablations"]) == 0
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(cache))
    st.cache_data.clear()
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at.run()
    said = []
    for page in PAGES:
        goto(at, page)
        said += [i.value for i in at.info]
    assert any("was not computed for" in s and "--stages measure,ablations" in s for s in said), said
    assert not any("does not apply" in s for s in said), said
    goto(at, "tour")
    for step in range(2, 10):
        next(b for b in at.button if "Next" in b.label).click().run()
        assert not at.exception, (step, [e.message for e in at.exception])
