"""Figures shared by all sessions (app/shared.py) are the very figures each session would build."""

import shutil
import time

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app.figures import logits
from app.run_loading import open_run, valid_runs
from app.shared import shared_on_run
from core.files import PROJECT_ROOT

PAGES = [
    "views/tour.py",
    "views/logit_lens.py",
    "views/spectra.py",
    "views/waves.py",
    "views/ablations.py",
    "views/numbers.py",
    "views/patching.py",
    "views/training.py",
    "views/behaviour.py",
]


def page_charts(app_env, monkeypatch, shared: bool, large: bool):
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(app_env["cache"]))
    monkeypatch.setenv("FOURIER_MODELS_DIR", str(app_env["models"]))
    monkeypatch.setenv("FOURIER_SHARED_FIGURES", "1" if shared else "0")
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    if large:
        at.query_params["large"] = "1"
    at.run()
    out = {}
    for page in PAGES:
        at.switch_page(page)
        at.run()
        assert not at.exception, (page, [e.message for e in at.exception])
        out[page] = [el.proto.SerializeToString() for el in at.get("vega_lite_chart")]
    return out


@pytest.mark.parametrize("large", [False, True], ids=["normal", "presentation"])
def test_shared_figures_are_byte_for_byte_the_unshared_ones(app_env, monkeypatch, large):
    unshared = page_charts(app_env, monkeypatch, shared=False, large=large)
    first = page_charts(app_env, monkeypatch, shared=True, large=large)  # builds and shares
    again = page_charts(app_env, monkeypatch, shared=True, large=large)  # served from the shared cache
    assert sum(len(v) for v in unshared.values()) >= 8
    for page in PAGES:
        assert first[page] == unshared[page], page
        assert again[page] == unshared[page], page


def test_a_shared_figure_is_built_once_and_its_data_cannot_be_changed_through_it(app_env, monkeypatch):
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(app_env["cache"]))
    monkeypatch.setenv("FOURIER_SHARED_FIGURES", "1")
    good, _ = valid_runs(str(app_env["cache"]))
    run = open_run(next(r for r in good if r["manifest"].get("tables", {}).get("layer_accuracy")))
    chart1, data1, _ = logits.accuracy_by_layer(run, False)
    chart2, data2, _ = logits.accuracy_by_layer(run, False)
    assert chart1 is chart2  # one chart for every session
    data1["accuracy"] = -1.0  # a page that scribbles on its data changes its own copy only
    assert (data2["accuracy"] >= 0).all()
    assert isinstance(logits.accuracy_by_layer.unshared(run, False)[1], pd.DataFrame)


def test_a_reading_shared_on_a_run_is_computed_once_per_run_and_arguments(app_env, monkeypatch):
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(app_env["cache"]))
    monkeypatch.setenv("FOURIER_SHARED_FIGURES", "1")
    good, _ = valid_runs(str(app_env["cache"]))
    run = open_run(good[0])
    calls = []

    def reading(r, n):
        calls.append(n)
        return pd.DataFrame({"run": [r.name], "n": [n]})

    first, again, other = (shared_on_run(reading, run, n) for n in (3, 3, 4))
    assert calls == [3, 4] and first.equals(reading(run, 3)) and other["n"].iloc[0] == 4
    first["n"] = -1  # a page's change stays its own
    assert again["n"].iloc[0] == 3


def test_the_run_list_is_checked_again_when_a_table_changes(app_env, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(app_env["cache"], cache)
    good, broken = valid_runs(str(cache))
    n_good = len(good)
    victim = next(cache.glob(f"{good[0]['name']}/examples.parquet"))
    victim.write_bytes(victim.read_bytes()[:-10] + b"0123456789")  # same size, other bytes: the checksum fails
    time.sleep(1.1)  # the folder listing is read again at most once a second
    good, broken = valid_runs(str(cache))
    assert len(good) == n_good - 1 and any("sha256" in p for b in broken for p in b["problems"])
