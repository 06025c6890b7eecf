"""The screen agrees with itself, on every shipped run: each Tour step's line about the run quotes numbers its figure
shows (or says they come from elsewhere), "This run" speaks of the sidebar's run only, a step that does not follow
the sidebar's tau or basis says which it shows, and the run picker tells the runs apart."""

from __future__ import annotations

import functools
import json
import re

import pandas as pd
import pyarrow as pa
import pytest
import streamlit as st
from screen_text import spec_strings
from streamlit.testing.v1 import AppTest

from app.sidebar import PICKER_SHOWS, picker_label, picker_labels, precision_note
from app.tour.lines import ONE_OF_THEM, settings_note
from app.tour.steps import OVER_RUNS, STEPS
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs
from core.runs.reader import RunReader

CACHE = PROJECT_ROOT / "cache"
SHIPPED = [r for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []
#: A number in a sentence, not a digit inside a name (SmolLM2, GPT-2-XL): its text and decimals.
NUMBER = re.compile(r"(?<![\w.\-])(\d+(?:,\d{3})*(?:\.\d+)?)(%?)")

pytestmark = pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")


@pytest.fixture
def shipped_cache(monkeypatch):
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(CACHE))
    st.cache_data.clear()


def chart_values(chart) -> tuple[list[float], list[float], list[str]]:
    """(the shares in a chart's data (columns within 0..1), every number in it, every text it shows) as the page sent
    them to the browser."""
    frames = [pa.ipc.open_stream(d.data.data).read_all().to_pandas() for d in chart.proto.datasets]
    spec = json.loads(chart.proto.spec)
    frames += [pd.DataFrame(v["values"]) for v in (spec.get("datasets") or {}).values() if isinstance(v, list)]
    shares, numbers = [], []
    for f in frames:
        for c in f.columns:
            col = pd.to_numeric(f[c], errors="coerce").dropna()
            numbers += [float(x) for x in col]
            if len(col) and col.min() >= -0.001 and col.max() <= 1.001:
                shares += [float(x) for x in col]
            if not pd.api.types.is_numeric_dtype(f[c]):  # labels such as period "47.3" or a run's "640 wide"
                numbers += [float(x.replace(",", "")) for v in f[c].dropna().astype(str) for x, _ in NUMBER.findall(v)]
    return shares, numbers, spec_strings(spec)


def in_figure(token: str, percent: str, shown: dict) -> bool:
    """Whether a number quoted as `token` (with `percent` '%' or '') is an axis value, a bar, a point or a label of
    the figure, at the precision the sentence writes it: a percentage is a share in the data or a text shown."""
    if any(re.search(rf"(?<![\d.]){re.escape(token)}{re.escape(percent)}(?![\d])", t) for t in shown["texts"]):
        return True
    x = float(token.replace(",", ""))
    decimals = len(token.split(".")[1]) if "." in token else 0
    candidates = [v * 100 for v in shown["shares"]] if percent else shown["numbers"]
    return any(abs(round(v, decimals) - x) < 10**-decimals / 2 + 1e-9 for v in candidates)


@functools.cache
def tour_walk(name: str) -> list[dict]:
    """Each Tour step of one run in normal mode: the line beside the badge, and what the figure column shows."""
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"run": name})
    at.run()
    out = []
    for step in range(1, len(STEPS) + 1):
        at.session_state["step"] = step
        at.run()
        assert not at.exception, (name, step, [e.message for e in at.exception])
        line = next(
            m.value for m in at.markdown if m.value.startswith("**") and ":**" in m.value and "Paper:" not in m.value
        ).split("  \n**Why")[0]  # the line beside the badge; the verdict's reason under it is not the figure's
        shown = {"shares": [], "numbers": [], "texts": [f"{m.label} {m.value}" for m in at.metric]}
        for chart in at.get("vega_lite_chart"):
            for part, values in zip(("shares", "numbers", "texts"), chart_values(chart)):
                shown[part] += values
        out.append({"step": step, "key": STEPS[step - 1].key, "line": line, **shown})
    return out


@pytest.mark.parametrize("run", SHIPPED, ids=lambda r: r.name[:24])
def test_every_number_a_steps_line_quotes_is_in_its_figure_or_labelled(run, shipped_cache):
    for shown in tour_walk(run.name):
        who, _, said = shown["line"].partition(":** ")
        said = re.split(r"\(the paper", said)[0]  # the paper's numbers are labelled as the paper's
        if ONE_OF_THEM in said:  # over every question; the figure shows one of them (named after the label)
            said = said.split(ONE_OF_THEM)[1]
        if not shown["numbers"] and not shown["texts"]:
            continue  # a step this run cannot draw says so instead of a figure
        missing = [tok + pc for tok, pc in NUMBER.findall(said) if not in_figure(tok, pc, shown)]
        assert missing == [], (run.name, shown["key"], shown["line"])


@pytest.mark.parametrize("run", SHIPPED, ids=lambda r: r.name[:24])
def test_a_this_run_line_speaks_of_this_run_only(run, shipped_cache):
    """A line labelled 'This run' names no other shipped run; step 8, over the models trained here, is not labelled
    'This run'."""
    others = {RunReader(CACHE, r.name).label.split(" (")[0] for r in SHIPPED if r.name != run.name}
    mine = RunReader(CACHE, run.name).label.split(" (")[0]
    for shown in tour_walk(run.name):
        if shown["key"] in OVER_RUNS:  # over several runs: the models trained here, one run per operation
            assert not shown["line"].startswith("**This run"), shown["line"]
            continue
        assert shown["line"].startswith("**This run:**"), (shown["key"], shown["line"])
        named = [o for o in others if o in shown["line"] and o not in mine]
        assert named == [], (run.name, shown["key"], shown["line"])


@pytest.mark.parametrize("run", SHIPPED, ids=lambda r: r.name[:24])
def test_a_step_that_does_not_follow_the_sidebars_tau_or_basis_says_so(run):
    """With the sidebar at tau = 40 and the dft basis, the steps read at the paper's settings say which tau and basis
    they show and where the sidebar's are used; steps 1-3 use neither; at the paper's settings nothing is said."""
    reader = RunReader(CACHE, run.name)
    for step in STEPS:
        note = settings_note(step, reader, 40, "dft")
        if step.key in ("spectra", "ablations"):
            assert "tau = 40" in note and re.search(r"paper's tau = \d+", note), (step.key, note)
        if step.key in ("spectra", "waves", "numbers"):
            assert "paper basis" in note and "dft basis" in note, (step.key, note)
        if step.key in ("accuracy", "logit_lens", "module_waves"):
            assert note == "", (step.key, note)
        if step.key == "training":
            assert "not used" in note
        if step.key not in ("training", "ablations", "operations"):
            assert settings_note(step, reader, 50, "paper") == "", step.key


def test_the_tour_shows_the_settings_note_and_its_figure_the_tau_its_line_quotes(shipped_cache):
    default = min(SHIPPED, key=lambda r: (r.manifest["task"].get("split") != "test",  # the run the sidebar opens with
                                          r.manifest.get("display_order", 100), r.manifest.get("label", "")))
    if "module_spectra" not in default.manifest["tables"]:
        pytest.skip("the default run has no module spectra")
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"run": default.name, "step": "4", "tau": "40", "basis": "dft"})
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("sidebar's tau = 40" in c.value and "paper's tau = 50" in c.value for c in at.caption)
    line = next(m.value for m in at.markdown if m.value.startswith("**This run:**"))
    legend = " ".join(t for c in at.get("vega_lite_chart") for t in chart_values(c)[2])
    assert "tau = 50" in line and "tau = 50" in legend and "tau = 40" not in line + legend


def test_the_run_picker_tells_every_shipped_run_apart_in_what_it_shows():
    """The closed picker shows about PICKER_SHOWS characters of its choice in presentation mode: every shipped run's
    label differs from the others of its split within them."""
    by_split: dict[str, list[str]] = {}
    for r in SHIPPED:
        label = picker_label(r.manifest, RunReader(CACHE, r.name).label)
        by_split.setdefault(r.manifest["task"]["split"], []).append(label[:PICKER_SHOWS])
    for split, labels in by_split.items():
        assert len(set(labels)) == len(labels), (split, sorted(labels))


@pytest.mark.parametrize("page", ["views/spectra.py", "views/ablations.py"])
def test_a_page_whose_verdict_reads_another_tau_than_the_sidebar_says_so(page, shipped_cache):
    default = min(SHIPPED, key=lambda r: (r.manifest["task"].get("split") != "test",  # the run the sidebar opens with
                                          r.manifest.get("display_order", 100), r.manifest.get("label", "")))
    notes = {}
    for tau in (40, 50):
        at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
        at.query_params.update({"run": default.name, "tau": str(tau)})
        at.run()
        at.switch_page(page)
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        notes[tau] = [c.value for c in at.caption if "judged at the paper's cutoff tau = 50" in c.value]
    assert len(notes[40]) == 1 and "sidebar's tau = 40" in notes[40][0] and notes[50] == []


def test_two_runs_with_one_label_are_told_apart_by_their_ids():
    run = SHIPPED[0]
    twins = [{"name": f"{run.name[:-10]}{tail}", "manifest": run.manifest, "label": run.label}
             for tail in ("aaaaaaaaaa", "bbbbbbbbbb")]
    labels = picker_labels(twins + [{"name": SHIPPED[1].name, "manifest": SHIPPED[1].manifest,
                                     "label": SHIPPED[1].label}])
    assert len(set(labels.values())) == 3
    assert labels[twins[0]["name"]].endswith("aaaaaaaaaa")
    assert not labels[SHIPPED[1].name].endswith(SHIPPED[1].name[-10:])  # a label of its own keeps no id


def test_the_run_picker_says_when_a_run_was_computed_in_another_dtype_than_float32():
    assert precision_note({"model": {"dtype": "bfloat16"}}) == " · computed in bfloat16"
    assert all(precision_note(r.manifest) == "" for r in SHIPPED)  # every shipped run: float32, said nowhere
