"""The Patching page's controls, driven with streamlit.testing on the app's tiny cached runs: the reading (direction and
contrast), the kind of site, and one pair computed now with the run's model, each read back from the chart's data
against the run's table or against the one-pair code of `python -m core patch`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.analysis.patch_table import with_defaults
from core.runs.cache import read_table
from tests.app.test_app import chart_data, charts, goto, open_app, widget

ONE_PAIR = "one pair, computed now"


@pytest.fixture
def app(app_env, monkeypatch):
    return open_app(app_env, monkeypatch, timeout=180)  # a one-pair patch computed live takes longer than a page


def open_patching(app, app_env, label="tiny trained"):
    goto(app, "patching")
    run = app_env["runs"][label]
    widget(app, "selectbox", "run").set_value(run.name).run()
    assert not app.exception, [e.message for e in app.exception]
    return run, with_defaults(read_table(app_env["cache"], run.name, "patching"))


def colour_domain(el) -> list[float]:
    spec = json.loads(el.proto.spec)
    enc = spec.get("encoding") or spec["layer"][0]["encoding"]
    return enc["color"]["scale"]["domain"]


def test_each_reading_and_kind_draws_its_own_rows_on_a_scale_centred_on_zero_fitted_to_them(app, app_env):
    run, table = open_patching(app, app_env)
    reading = widget(app, "selectbox", "patching-reading")
    assert ("noise", 1) in reading.options or "take away, b ± 1" in reading.options
    for direction, contrast in (("denoise", 1), ("noise", 1), ("denoise", 10), ("noise", 10)):
        widget(app, "selectbox", "patching-reading").set_value((direction, contrast)).run()
        assert not app.exception, [e.message for e in app.exception]
        data = chart_data(charts(app)[0])
        rows = table[(table["direction"] == direction) & (table["contrast"] == contrast)
                     & table["kind"].isin(("resid", "attn", "mlp"))]
        assert len(data) == len(rows)
        assert np.allclose(np.sort(data["recovered"].to_numpy()), np.sort(rows["recovered"].to_numpy()))
        reach = float(np.abs(rows["recovered"]).max())
        low, zero, high = colour_domain(charts(app)[0])
        assert zero == 0 and high == pytest.approx(max(reach, 0.02)) and low == -high
        words = " ".join(m.value for m in app.markdown)
        assert f"{int(rows['n'].iloc[0]):,} pairs" in words
        assert ("second operand ten more, so the answer's tens digit differs" in words) == (contrast == 10)
    widget(app, "selectbox", "patching-reading").set_value(("denoise", 1)).run()
    widget(app, "radio", "patching-kind").set_value("Heads").run()
    heads = table[(table["kind"] == "head") & (table["direction"] == "denoise")]
    data = chart_data(charts(app)[0])
    assert len(data) == len(heads)
    # the heads' own scale: the strongest head is the end of it, not the stream's 100%
    assert colour_domain(charts(app)[0])[2] == pytest.approx(max(float(np.abs(heads["recovered"]).max()), 0.02))
    widget(app, "radio", "patching-kind").set_value("Layers together").run()
    data = chart_data(charts(app)[0])
    groups = table[table["kind"] == "group"]
    assert len(data) == len(groups) and set(np.round(data["recovered"], 9)) == set(np.round(groups["recovered"], 9))
    assert "Patched together" in " ".join(m.value for m in app.markdown)


def test_one_pair_is_computed_now_and_the_stream_at_the_top_restores_all_of_it(app, app_env):
    run, _ = open_patching(app, app_env)
    widget(app, "radio", "patching-pairs").set_value(ONE_PAIR).run()
    assert not app.exception, [e.message for e in app.exception]
    pair = widget(app, "selectbox", "patching-pair-1")
    pair.set_value(pair.options[3]).run()
    assert not app.exception, [e.message for e in app.exception]
    data = chart_data(charts(app)[0])
    assert (data["n"] == 1).all()
    top = data[(data["where"] == "Stream")].sort_values("layer")
    assert top["recovered"].iloc[-1] == pytest.approx(1.0, abs=1e-3)  # the last stream is what the logits read
    words = " ".join(m.value for m in app.markdown)
    assert "For one pair" in words and "The pair:" in words
    widget(app, "selectbox", "patching-reading").set_value(("noise", 1)).run()
    data = chart_data(charts(app)[0])
    top = data[(data["where"] == "Stream")].sort_values("layer")
    assert top["recovered"].iloc[-1] == pytest.approx(1.0, abs=1e-3)  # noising the last stream: all of it lost


def test_a_run_whose_model_is_not_here_offers_only_the_cached_pairs(app, app_env):
    open_patching(app, app_env, "random llama")
    pairs = widget(app, "radio", "patching-pairs")
    assert pairs.disabled
    assert any("needs the model" in m.value for m in app.markdown)
