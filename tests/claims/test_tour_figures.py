"""Each Tour step's figure against its sentence, on every shipped run: the peak step 5's caption names is the peak it
draws, over the whole number line 0..p-1, re-derived from the final_waves table; step 8's counts are the legend's,
re-counted from the training logs; step 3's line says what each bar is over, read from the bars drawn; step 9's first
words name the kind of model it shows, read from the manifests; and no step of any shipped run gives a circular
reason ("by the step's rule"): every reason states a measurement first, with brackets one level deep."""

from __future__ import annotations

import functools
import re

import pandas as pd
import pytest
import vl_convert as vlc

from app.figures import logits
from app.furniture import why_sentence
from app.tour.lines import TOUR_BASIS
from app.tour.steps import STEPS, StepInputs, choose_run, example_of, operation_question, training_logs_of
from core.claims.base import measured_clause, unnested
from core.claims.features import claim_training
from core.claims.operations import operation_runs
from core.claims.registry import run_claims
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs
from core.runs.origin import run_origin
from core.runs.reader import RunReader, Table

CACHE = PROJECT_ROOT / "cache"
SHIPPED = [r for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []
BY_KEY = {s.key: s for s in STEPS}
#: The words of a reason that names no evidence of its own: the verdict's rule standing in for the measurement.
CIRCULAR = re.compile(r"by (?:the|this) step's rule|shows what the paper found", re.I)
#: A measurement in a sentence: a number that is not part of a name (SmolLM2, GPT-2-XL, 15 + 93 are names or sums).
MEASURED = re.compile(r"(?<![\w\-.])\d+(?:[.,]\d+)*%?")

pytestmark = pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")


def reader(info) -> RunReader:
    return RunReader(CACHE, info.name)


@functools.cache
def claims_of_name(name: str) -> dict:
    return run_claims(RunReader(CACHE, name))


def claims_of(run: RunReader) -> dict:
    return claims_of_name(run.name)


def split_runs(run: RunReader) -> list[RunReader]:
    """The shipped runs of `run`'s split, `run` itself among them (the Tour's list holds the sidebar's run)."""
    return [run if i.name == run.name else reader(i) for i in SHIPPED if i.manifest["task"]["split"] == run.split]


# ----------------------------------------------------------------------------- reasons


def circular(reason: str) -> bool:
    return bool(CIRCULAR.search(reason))


def nested(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth > 1:
            return True
    return False


def test_the_reason_checks_can_fail():
    assert circular("This run shows what the paper found, by the step's rule (the Terms page gives each verdict's "
                    "meaning).")
    assert not circular("99.5% on test reaches the 99% that 'agrees' needs")
    assert nested("rows (a (b) c)") and not nested("rows (a) and (b)")
    assert not nested(unnested("tokens (only 0..9; 10 is 2 tokens ('1' + '0')), so")), "unnested keeps one level"
    assert measured_clause("It scores 99.5% of 3,419. Always answering 279 scores 0.6%.") == "It scores 99.5% of 3,419"


#: The steps whose reason words this brief owns: steps 1, 3, 5, 8 and 9 (step 2's reason is mechanism.py's).
OWN_REASONS = ("accuracy", "module_waves", "waves", "training", "operations")


@pytest.mark.parametrize("info", SHIPPED, ids=lambda r: r.name[:24])
def test_no_step_of_any_shipped_run_gives_a_circular_reason(info):
    """Every step the Tour shows for the run (steps 8 and 9 over their runs): the reason on screen (`why_sentence`) is
    never the circular "by the step's rule"; on the steps owned here, a decided verdict's reason quotes a measurement
    and nests no brackets."""
    run = reader(info)
    runs = split_runs(run)
    for step in STEPS:
        claim = choose_run(step, run, runs, claims_of, claim_training).claim
        said = why_sentence(claim)
        assert claim.reason.strip(), (step.key, claim.verdict)
        assert not circular(said), (step.key, said)
        if step.key in OWN_REASONS:
            assert not nested(claim.reason), (step.key, claim.reason)
            if claim.verdict in ("agrees", "partly", "does not"):
                assert MEASURED.search(claim.reason), (step.key, claim.reason)


# ----------------------------------------------------------------------------- step 5: the peak named is the peak drawn


def whole_line_sum(run: RunReader, example_id: str, top: int = 5) -> pd.Series:
    """The sum of the `top` strongest waves by number, straight from the final_waves table (paper basis)."""
    w = run.table(Table.FINAL_WAVES)
    w = w[(w["example_id"] == example_id) & (w["basis"] == TOUR_BASIS) & (w["rank"] <= top)]
    return w.groupby("number")["value"].sum()


def x_domains(spec: dict) -> list:
    """Every x-scale domain a (layered) chart spec sets."""
    out = []
    for layer in [spec, *spec.get("layer", [])]:
        x = (layer.get("encoding") or {}).get("x") or {}
        if "scale" in x and "domain" in x["scale"]:
            out.append(x["scale"]["domain"])
    return out


@pytest.mark.parametrize("info", [r for r in SHIPPED if "final_waves" in r.manifest["tables"]],
                         ids=lambda r: r.name[:24])
def test_step_5_draws_the_sum_over_the_whole_line_and_marks_the_peak_its_caption_names(info):
    run = reader(info)
    panels = BY_KEY["waves"].panels(run, StepInputs(TOUR_BASIS, claims_of(run), [run]))
    whole, zoom = panels[0], panels[1]
    total = whole_line_sum(run, example_of(run).name)
    peak, answer = int(total.idxmax()), int(example_of(run)["answer"])
    # the figure: the sum drawn over every number 0..p-1, on an x axis of 0..p-1
    drawn = whole.data[whole.data["wave"] == "sum of the waves"]
    assert sorted(drawn["number"]) == list(range(run.p))
    assert int(drawn.loc[drawn["value"].idxmax(), "number"]) == peak
    spec = whole.chart.to_dict()
    assert x_domains(spec) and all(d == [0, run.p - 1] for d in x_domains(spec)), x_domains(spec)
    # the marked peak: a layer whose data holds one point, at the peak, named with its number
    texts = [v.get("label") for v in sum(spec.get("datasets", {}).values(), []) if isinstance(v, dict)]
    assert f"sum peaks at {peak}" + (", the answer" if peak == answer else "") in texts, texts
    # the sentence: the whole line's peak, the same number
    said = re.search(r"sum over 0\.\.(\d+); it peaks at (?:the answer )?(\d+)", whole.caption)
    assert said and int(said.group(1)) == run.p - 1 and int(said.group(2)) == peak, whole.caption
    assert ("not at the answer" in whole.caption) == (peak != answer)
    # the zoom: folded, titled as a zoom, and its caption gives the whole line's peak too
    assert zoom.folded and "Zoom" in str(zoom.chart.to_dict()["title"])
    assert f"over the whole line 0..{run.p - 1} it peaks at {peak}" in zoom.caption


# ----------------------------------------------------------------------------- step 8: the counts are the legend's


def test_step_8_counts_the_training_runs_and_curves_its_legend_shows():
    runs = [reader(i) for i in SHIPPED if i.manifest["task"]["split"] == "test"]
    logs = training_logs_of(runs)
    if not logs:
        pytest.skip("no training logs shipped")
    run = runs[0]
    panel = BY_KEY["training"].panels(run, StepInputs(TOUR_BASIS, claims_of(run), runs))[0]
    # re-counted from the logs: a legend entry per model and width, a training run per seed of each
    entries = seeds = 0
    for log in logs.values():
        val = log[log["split"] == "val"]
        for _, part in val.groupby("width"):
            entries += 1
            seeds += part["seed"].nunique()
    legend = panel.data["run"].unique()
    assert len(legend) == entries
    assert sum(int(re.search(r"\((\d+) seeds?\)$", e).group(1)) for e in legend) == seeds
    said = panel.evidence.sentence()
    assert said.startswith(f"From {seeds:,} training runs ({entries} curves"), said


# ----------------------------------------------------------------------------- step 3: what each bar is over


@pytest.mark.parametrize("info", [r for r in SHIPPED if "phase_shift" in r.manifest["tables"]],
                         ids=lambda r: r.name[:24])
def test_step_3_says_what_each_bar_is_over(info):
    run = reader(info)
    panels = BY_KEY["module_waves"].panels(run, StepInputs(TOUR_BASIS, claims_of(run), [run], claims_of))
    bars = next((p for p in panels if p.key == "tour-shift"), None)
    if bars is None:
        pytest.skip("no causal figure on this run")
    said = bars.evidence.sentence()
    counts = bars.data.drop_duplicates("module").groupby("n")["module"].agg(list)
    for n, modules in counts.items():
        assert f"{int(n):,}" in said, (n, said)
        if len(counts) > 1:
            assert all(m in said for m in modules), (modules, said)
    assert not re.search(r"\bOver\b", BY_KEY["module_waves"].question(run)), "one statement of counts: the figure's"


# ----------------------------------------------------------------------------- step 9: which models it shows


def kind_of(run) -> tuple:
    """What kind of model a run's is, from its manifest: where it comes from, tied or not, its depth."""
    return (run_origin(run.manifest)["kind"], (run.manifest.get("model") or {}).get("tied_embeddings"),
            int(run.manifest["n_layers"]))


@pytest.mark.parametrize("info", SHIPPED, ids=lambda r: r.name[:24])
def test_step_9_names_the_models_it_shows_first(info):
    """The question's first words: how many runs, of which depth; "not this run's kind" exactly when the runs shown
    are not of the run's kind (the default SmolLM2 run is shown 2-layer demos); never "the same kind of model"."""
    run = reader(info)
    shown = operation_runs(split_runs(run), run)
    if not shown:
        pytest.skip("nothing to compare")
    question = operation_question(run)
    count = {1: "One", 2: "Two", 3: "Three"}[len(shown)]
    depths = sorted({kind_of(r)[2] for r in shown.values()})
    if len(depths) == 1:
        assert question.startswith(f"{count} {depths[0]}-layer "), question
    alike = all(kind_of(r) == kind_of(run) for r in shown.values())
    assert ("not this run's kind of model" in question) == (not alike), question
    assert "same kind of model" not in question


# ----------------------------------------------------------------------------- step 2: one legend


def test_the_logit_lens_figure_has_one_legend_in_the_handout_rendering():
    info = next(i for i in SHIPPED if "layer_accuracy" in i.manifest["tables"])
    chart = logits.accuracy_by_layer(reader(info), False)[0]
    svg = vlc.vegalite_to_svg(chart.to_dict())
    assert svg.count('class="mark-group role-legend"') == 1
