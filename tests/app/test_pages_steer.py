"""The Waves, Training and Ablations pages steered to what a class should see first (issue 66 items 5, 6, 7):
the heads' heatmap opens at the period where most heads lock, and says why, with one chance threshold in its
section; the Training page draws the shipped fine-tunings beside the ones they replaced; the Ablations page says its
cutoff once; the import's progress line is in plain words. Rules re-derived from their definitions, on synthetic
tables where a case must be made to happen and on the shipped runs."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from screen_text import shown_text
from streamlit.testing.v1 import AppTest

from app.figures import training as training_figures
from app.figures.heads import head_locking_heatmap, opening_reason
from app.glossary import JARGON, TERMS, jargon_in
from core.analysis.head_readings import head_locking_grid, periods_by_locking
from core.analysis.phase import MAX_CONSTANT_PHASE, MIN_LOCKING
from core.claims.heads import head_periods, heads_summary
from core.files import PROJECT_ROOT
from core.runs import training_summaries as ts
from core.runs.cache import list_runs
from core.runs.reader import RunReader, Table

CACHE = PROJECT_ROOT / "cache"
SHIPPED = [r for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []


def head_table(cells: dict[float, list[tuple[float, float]]]) -> pd.DataFrame:
    """A head_locking table: per period, one (R, offset) per head of one layer; null 0.05, phases that move."""
    rows = [{"layer": 1, "head": h, "period": T, "locking": r, "offset": off, "energy_share": 0.01, "null_95": 0.05,
             "n": 1000, "constant_phase": 0.1, "shuffles": 2000}
            for T, heads in cells.items() for h, (r, off) in enumerate(heads)]
    return pd.DataFrame(rows)


def by_definition(table: pd.DataFrame, T: float) -> tuple[int, int]:
    """(heads that lock, heads above chance) at period T, from the rule's words: R above the null, R at least
    MIN_LOCKING, a phase that moves, a peak within a quarter period of the answer."""
    sub = table[np.isclose(table["period"], T)]
    above = sub["locking"] > sub["null_95"]
    locks = (above & (sub["locking"] >= MIN_LOCKING) & (sub["constant_phase"] < MAX_CONSTANT_PHASE)
             & (np.cos(2 * np.pi * sub["offset"] / sub["period"]) > 0))
    return int(locks.sum()), int(above.sum())


def test_the_heads_open_at_the_period_where_most_heads_lock():
    strong, weak, none, trough = (0.8, 0.0), (0.1, 0.0), (0.01, 0.0), (0.9, 2.5)  # trough: peak half a period off
    table = head_table({2.0: [strong, weak, none], 2.5: [strong, strong, none], 5.0: [trough, weak, weak],
                        10.0: [none, none, none]})
    ranked = periods_by_locking(table, [2.0, 2.5, 5.0, 10.0])
    for row in ranked.itertuples():
        assert (row.locks, row.above_null) == by_definition(table, row.period)
    assert ranked["period"].tolist()[0] == 2.5  # two heads lock there; a wave with its trough on the answer does not
    assert opening_reason(ranked).startswith("Opens at period 2.5, where the most heads lock: 2 of 3")
    # a tie in heads that lock goes to the period with more heads above chance, then to the longer period
    tie = periods_by_locking(head_table({2.0: [strong, weak], 10.0: [strong, none], 5.0: [strong, none]}),
                             [2.0, 5.0, 10.0])
    assert tie["period"].tolist() == [2.0, 10.0, 5.0]
    assert "as at periods 10 and 5; of these it has the most heads above chance (2)" in opening_reason(tie)
    even = periods_by_locking(head_table({5.0: [strong], 10.0: [strong]}), [5.0, 10.0])
    assert even["period"].tolist()[0] == 10.0 and "and the longest period" in opening_reason(even)
    # no head locks: the period with most heads above chance; none above chance either: the longest
    above = periods_by_locking(head_table({2.0: [weak, none], 10.0: [none, none]}), [2.0, 10.0])
    assert opening_reason(above).startswith("No head locks at any period; opens at period 2, where the most heads "
                                            "are above chance: 1 of 2")
    flat = periods_by_locking(head_table({2.0: [none], 10.0: [none]}), [2.0, 10.0])
    assert flat["period"].tolist()[0] == 10.0 and opening_reason(flat).startswith("No head locks or is above chance")


def head_runs():
    runs = [RunReader(CACHE, r.name) for r in SHIPPED]
    return [r for r in runs if r.has(Table.HEAD_LOCKING)]


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
def test_every_shipped_run_opens_its_heads_where_most_lock_and_quotes_one_threshold():
    for run in head_runs():
        table = run.table(Table.HEAD_LOCKING)
        periods = head_periods(run)
        ranked = periods_by_locking(table, periods)
        most = max(by_definition(table, T)[0] for T in periods)
        assert ranked["locks"].iloc[0] == most, run.name
        first = float(ranked["period"].iloc[0])
        grid = head_locking_grid(table, first)
        _, _, caption = head_locking_heatmap(grid, first, "", float(ranked["null_95"].max()))
        # the section's one chance threshold: the caption's is the summary's, the largest over the periods shown
        said = set(re.findall(r"at most R = (\d\.\d\d)", heads_summary(run) + " " + caption))
        assert said == {f"{max(by_definition_null(table, T) for T in periods):.2f}"}, (run.name, said)


def by_definition_null(table: pd.DataFrame, T: float) -> float:
    return float(table.loc[np.isclose(table["period"], T), "null_95"].max())


def demo_with_heads() -> str | None:
    """A shipped 2-layer addition run whose heads lock somewhere but not at period 10 (the page's old opening)."""
    for run in head_runs():
        if run.n_layers == 2 and run.task == "addition":
            ranked = periods_by_locking(run.table(Table.HEAD_LOCKING), head_periods(run))
            if ranked["locks"].iloc[0] > 0 and ranked["period"].iloc[0] != 10.0:
                return run.name
    return None


@pytest.mark.skipif(demo_with_heads() is None, reason="no shipped 2-layer run whose heads lock away from period 10")
def test_the_waves_page_opens_the_heads_at_that_period_and_says_why():
    name = demo_with_heads()
    run = RunReader(CACHE, name)
    ranked = periods_by_locking(run.table(Table.HEAD_LOCKING), head_periods(run))
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"run": name})
    at.run()
    at.switch_page("views/waves.py")
    at.run()
    assert not at.exception, at.exception
    radio = next(r for r in at.radio if r.label.startswith("Period T of the heads"))
    assert radio.value == ranked["period"].iloc[0]
    assert opening_reason(ranked) in [c.value for c in at.caption]
    heatmap = next(c for c in at.get("vega_lite_chart") if "Which attention heads follow" in c.proto.spec)
    drawn = pd.concat([drawn_data(d) for d in heatmap.proto.datasets])
    assert int(drawn.drop_duplicates(["layer", "head"])["locks"].sum()) == ranked["locks"].iloc[0] > 0  # not flat


def drawn_data(dataset) -> pd.DataFrame:
    """One dataset of a chart as Streamlit sends it (Arrow)."""
    return pa.ipc.open_stream(dataset.data.data).read_all().to_pandas()


def fine_tuning(tmp_path, name, accuracies, start=None, history=False, test_score=None, read_test=False):
    """A fine-tuning's model folder (recipe, log, optional summary): (label, manifest, log)."""
    folder = tmp_path / name
    folder.mkdir()
    recipe = {"name": name, "label": f"SmolLM2 tuned (real LLM, {name})", "number_tokens": {"layer": 5},
              "lora": {"rank": 4, **({"init_delta": str(tmp_path / start / "delta.safetensors")} if start else {})}}
    (folder / "recipe.json").write_text(json.dumps(recipe))
    splits = ("val", "test") if read_test else ("val",)
    log = pd.DataFrame([{"epoch": e, "split": s, "accuracy": a, "loss": 1.0, "seed": 0}
                        for e, a in enumerate(accuracies, 1) for s in splits])
    if history:
        log.to_parquet(folder / "training_log.parquet")
    if test_score is not None:
        (folder / "train_summary.json").write_text(json.dumps({"rebuilt_test_accuracy_float32": test_score}))
    return recipe["label"], {"model": {"source": str(folder)}}, log


def test_the_shipped_fine_tunings_are_drawn_beside_the_ones_they_replaced(tmp_path):
    default = fine_tuning(tmp_path, "rows", [0.5, 0.99, 0.996], test_score=0.9953)
    whole = fine_tuning(tmp_path, "whole", [0.6, 0.999], test_score=1.0)
    peeked = fine_tuning(tmp_path, "peeked", [0.7, 0.98], test_score=0.97, read_test=True)
    fine_tuning(tmp_path, "old", [0.4, 0.9], history=True)
    runs = [default, whole, peeked]
    stages = ts.fine_tuning_stages(runs, "val", earlier=ts.earlier_fine_tunings(tmp_path, runs))
    roles = ts.fine_tuning_roles(stages, default[0])
    role = roles.groupby("short")["role"].first().to_dict()
    assert role == {"rows": ts.ROLE_DEFAULT, "whole": ts.ROLE_SHIPPED, "peeked": ts.ROLE_SHIPPED,
                    "old": ts.ROLE_REPLACED}
    finals = ts.fine_tuning_finals(roles, runs).set_index("short")
    assert finals.loc["rows", "accuracy"] == pytest.approx(0.996) and finals.loc["old", "accuracy"] == 0.9
    assert finals.loc["rows", "test_once"] == 0.9953 and finals.loc["whole", "test_once"] == 1.0
    assert np.isnan(finals.loc["peeked", "test_once"])  # its log read the test split every epoch: no one-time score
    assert np.isnan(finals.loc["old", "test_once"]) and finals["accuracy"].is_monotonic_decreasing
    chart, data, caption = training_figures.fine_tuning_finals(ts.fine_tuning_finals(roles, runs), "val", 0.9974)
    spec = chart.to_dict()
    drawn = [v for d in spec["datasets"].values() for v in d if "short" in v]
    # the default's validation accuracy and its one test score are both drawn, each named with its split
    assert {(v["short"], v["score"], v["value"]) for v in drawn if v["short"] == "rows"} == {
        ("rows", "validation, last epoch", 0.996), ("rows", "test, scored once after training", 0.9953)}
    assert "validation 99.6% · test 99.53%" in {v["label"] for v in drawn}
    assert "The best of the replaced ones reached 90.0% (old)" in caption
    low = spec["layer"][0]["encoding"]["x"]["scale"]["domain"][0]
    assert low <= min(v["value"] for v in drawn) - 0.03  # every dot inside the plot, with room for its label
    _, stage_data, _ = training_figures.fine_tuning_stages(roles, "val", 0.9974)
    assert set(stage_data["role"]) == set(role.values())


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
def test_the_training_page_draws_the_shipped_default_and_the_whole_model():
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at.run()
    at.switch_page("views/training.py")
    at.run()
    assert not at.exception, at.exception
    finals = next((c for c in at.get("vega_lite_chart") if "Where each fine-tuning" in c.proto.spec), None)
    if finals is None:
        pytest.skip("no fine-tuned run of a real model in the cache")
    frames = [drawn_data(d) for d in finals.proto.datasets]
    drawn = pd.concat([f for f in frames if "role" in f]).to_dict("records")
    shipped = {v["short"] for v in drawn if v["role"] in (ts.ROLE_DEFAULT, ts.ROLE_SHIPPED)}
    replaced = {v["short"] for v in drawn if v["role"] == ts.ROLE_REPLACED}
    assert shipped and replaced and not shipped & replaced
    # each shipped run's one test score is the one its training summary holds
    for run in [RunReader(CACHE, r.name) for r in SHIPPED]:
        source = (run.manifest.get("model") or {}).get("source", "")
        summary = PROJECT_ROOT / source / "train_summary.json" if source else None
        if summary is None or not summary.is_file() or run.split != "test":
            continue
        score = json.loads(summary.read_text()).get("rebuilt_test_accuracy_float32")
        short = ts.short_name(run.manifest.get("label", ""))
        if score is not None and short in shipped:
            assert score in {v["value"] for v in drawn if v["short"] == short}, short


def test_the_built_controls_have_a_tab_of_their_own():
    """Their 30 epochs would squeeze the demos' 8 on a shared axis, and they are not the paper's models: every run
    built with its modules held to bands is under the controls' tab, none of them under a task's."""
    from app.run_loading import BUILT_CONTROLS, training_logs
    from core.runs.origin import built_control, seed_of_manifest

    runs = [RunReader(CACHE, r.name) for r in SHIPPED]  # as the page picks them: test split, logged, not a seed run
    controls = {r.manifest.get("label", r.label) for r in runs if r.split == "test" and r.has(Table.TRAINING_LOG)
                and seed_of_manifest(r.manifest) is None and built_control(r.manifest)}
    if not controls:
        pytest.skip("no built control in the cache")
    by_task = training_logs("test")
    grouped = [t for t in by_task if t.startswith(BUILT_CONTROLS)]
    assert set().union(*(by_task[t] for t in grouped)) == controls and list(by_task)[-len(grouped):] == grouped
    assert not any(set(logs) & controls for task, logs in by_task.items() if task not in grouped)


def test_the_small_models_legend_is_one_column_so_a_projector_column_holds_it(monkeypatch):
    curves = pd.DataFrame({"run": ["Fourier-frozen, untied control (1 seed)", "scratch, 256 wide (3 seeds)"],
                           "width": [640, 256], "epoch": [1, 1], "mean": [0.5, 0.2], "low": [0.4, 0.1],
                           "high": [0.6, 0.3], "seeds": [1, 3]})
    monkeypatch.setattr("app.figures.style.large", lambda: True)
    chart, _, _ = training_figures.training_curves.unshared(curves, "val")
    legend = chart.to_dict()["layer"][0]["encoding"]["color"]["legend"]
    assert legend.get("columns", 1) == 1 and legend["labelLimit"] == 0  # whole labels, one under the other


def test_the_new_words_are_explained():
    assert jargon_in("at least 3 sd, with 95% Wilson intervals") == ["sd", "95% interval"]
    assert {"sd", "95% interval"} <= set(TERMS) and set(JARGON.values()) <= set(TERMS)


def test_the_import_says_how_the_weights_are_stored_in_plain_words():
    importer = pytest.importorskip("core.models.importer")
    line = importer.stored_weights({"Q8_0": 1, "F32": 61, "Q4_1": 210})
    assert line == ("272 weight tensors, 211 stored compressed (210 at 4 bits a weight, 1 at 8), 61 at full "
                    "precision; unpacking them to 32-bit numbers")
    assert "{" not in line and "Q4_1" not in line
    assert importer.stored_weights({"F32": 3}) == "3 weight tensors, 3 at full precision"


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
def test_the_ablations_page_says_its_cutoff_once():
    """With the sidebar at a cutoff the run's grid does not hold, one line names the verdict's cutoff and the one the
    figures use, and no line says the figures use the sidebar's."""
    run = next((RunReader(CACHE, r.name) for r in SHIPPED if "ablations" in r.manifest["tables"]
                and r.manifest.get("n_layers") == 2), None)
    if run is None:
        pytest.skip("no 2-layer run with an ablation grid")
    held = sorted(int(t) for t in run.table(Table.ABLATIONS)["tau"].dropna().unique())
    sidebar = next(t for t in range(2, 60) if t not in held)
    nearest = min(held, key=lambda t: (abs(t - sidebar), t))
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"run": run.name, "tau": str(sidebar)})
    at.run()
    at.switch_page("views/ablations.py")
    at.run()
    assert not at.exception, at.exception
    text = shown_text(at)
    lines = [t for t in text if f"tau = {nearest}," in t and "the figures below use" in t.lower()]
    assert len(lines) == 1, text
    assert f"sidebar's {sidebar}" in lines[0]
    assert not any(f"sidebar's tau = {sidebar}" in t for t in text)
    assert not any("showing the nearest" in t for t in text)


def test_on_the_test_split_the_shipped_runs_keep_their_one_test_score(tmp_path):
    """A shipped run's log never read the test split: on that split it has no line, but its row of the finals chart
    keeps its one test score."""
    default = fine_tuning(tmp_path, "rows", [0.5, 0.996], test_score=0.9953)
    fine_tuning(tmp_path, "old", [0.4, 0.9], history=True, read_test=True)
    runs = [default]
    stages = ts.fine_tuning_stages(runs, "test", earlier=ts.earlier_fine_tunings(tmp_path, runs))
    roles = ts.fine_tuning_roles(stages, default[0])
    assert set(roles["short"]) == {"old"}
    finals = ts.fine_tuning_finals(roles, runs, default[0]).set_index("short")
    assert finals.loc["rows", "role"] == ts.ROLE_DEFAULT and finals.loc["rows", "test_once"] == 0.9953
    assert np.isnan(finals.loc["rows", "accuracy"]) and finals.index.tolist() == ["rows", "old"]
    _, _, caption = training_figures.fine_tuning_stages(roles, "test", 0.9974)
    assert caption.startswith("The shipped runs' logs never read the test split")
    chart, _, _ = training_figures.fine_tuning_finals(ts.fine_tuning_finals(roles, runs, default[0]), "test", 0.9974)
    labels = {v["label"] for d in chart.to_dict()["datasets"].values() for v in d if "label" in v}
    assert "test 99.53%" in labels
