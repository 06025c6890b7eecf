"""The Tour's eight steps as data: what each step asks, the table it needs, and the figures it draws for a run.

The Tour page (app/views/tour.py) and the handout export both read this one definition, so a
step says the same on screen as on paper. Nothing here calls Streamlit: a step's `panels` returns the
figures (Altair chart, its data, its caption) and the page or the handout lays them out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import altair as alt
import pandas as pd

from app.figures import layer_spectra, logits, numbers, operations, recipes, training, wave_sum
from app.figures.phase import locking_heatmap, shift_bars
from app.tour.evidence import (
    Evidence,
    bars_questions,
    numbers_read,
    one_question,
    operation_evidence,
    over,
    phase_questions,
    questions,
    table_questions,
    training_runs,
)
from core.claims.base import VERDICT_LABELS, Claim, pct
from core.claims.helix import views_side_by_side
from core.claims.operations import (
    claim_operations,
    kind_name,
    missing_of_kind,
    model_kind,
    operation_runs,
)
from core.claims.periods import claim_periods, period_table
from core.claims.registry import TASK_STEPS, best_run, may_stand_in, run_claims
from core.claims.shift_rule import CAUSAL_SHARE, causal_test
from core.claims.siblings import recipe_bars, recipe_sentence, training_siblings
from core.claims.spectra import mean_bar_levels
from core.paper import TABLE1_TAU
from core.runs import summaries, training_summaries
from core.runs.cache import list_runs
from core.runs.origin import built_control, run_origin, seed_of_manifest, trained_part, trained_short
from core.runs.reader import RunReader, Table
from core.tasks import task_name


@dataclass(frozen=True)
class Panel:
    """One figure of a step: an Altair chart with its data and one-line caption, or (chart None) a table of
    numbers. `folded`: the label under which the page folds it away (None: shown at once). `key`: the
    widget key on the page and the file name of downloads. `evidence`: what it rests on (app shows its
    sentence after the caption)."""

    chart: alt.TopLevelMixin | None
    data: pd.DataFrame
    caption: str
    key: str
    evidence: Evidence
    folded: str | None = None
    #: number format of a table's columns ("%.1f"), by column
    formats: dict = field(default_factory=dict)

    @property
    def full_caption(self) -> str:
        """The figure's caption and what it rests on (split, count, run), as the page and the handout show it."""
        return f"{self.caption} {self.evidence.sentence()}".strip()

    @property
    def projector_caption(self) -> str:
        """The caption as the Tour shows it under a chart: what the figure rests on without the run, which the step and
        the chart's subtitle name (the handout, whose figures are apart from the page, keeps `full_caption`)."""
        return f"{self.caption} {self.evidence.sentence(name_runs=False)}".strip()


@dataclass(frozen=True)
class StepInputs:
    """What a step's figures need besides the run: the Fourier basis, the run's claims, and every run of the
    split (step 8 draws the training logs of those trained here)."""

    basis: str
    claims: dict
    runs: list
    #: a run's claims (the app's, computed once per run); None: computed here (core.claims.registry.run_claims)
    claims_of: Callable | None = None


@dataclass(frozen=True)
class Step:
    key: str
    title: str
    #: the step's question for a run (computed where it counts the run's questions)
    question: Callable[[RunReader], str]
    #: the table the step's figure reads (a run without it, a digit-splitting model's, cannot draw the step)
    table: Table | None
    panels: Callable[[RunReader, StepInputs], list[Panel]]
    #: predict, then reveal: what the class is asked before the measurement is shown, and the answers offered
    #: (the reveal shows the run's computed measurement and verdict, never a prepared answer)
    predict: str = ""
    choices: tuple[str, ...] = ()


def example_of(run: RunReader) -> pd.Series:
    """The run's running example (15 + 93 when cached)."""
    return summaries.running_example(run.table(Table.EXAMPLES))


def _panel(result, key: str, evidence: Evidence, folded: str | None = None) -> Panel:
    chart, data, caption = result[:3]
    return Panel(chart, data, caption, key, evidence, folded)


# ----------------------------------------------------------------------------- figures of each step


def locking_question(run: RunReader) -> str:
    """Step 3's question, over the questions the run's tables read (all of the split's, or a sample): the causal
    test (phase_shift) where the run has it, the locking (phase_locking) otherwise. The causal test's bars may each
    be over their own questions (a layer group over the whole split, a single layer over a sample): its question
    names no count, and the line under its figure says what each bar is over (`bars_questions`)."""
    locking = "does an attention or MLP layer's wave of period T peak at the answer mod T (locking R)?"
    if causal_test(run):
        return ("If one module's waves of periods 2, 2.5, 5 and 10 are shifted, does the answer's last digit follow, "
                "and do those waves peak at the answer mod T (locking R)?")
    if not run.has(Table.PHASE_LOCKING):
        return f"Across the questions, {locking}"
    return f"Over {over(phase_questions(run))}: {locking}"


def said(text: str) -> Callable[[RunReader], str]:
    """A question that is the same for every run."""
    return lambda _run: text


def first_question(run: RunReader) -> str:
    """Step 1's question, from the run's running example: its prompt and its answer."""
    if not run.has(Table.EXAMPLES):
        return "A model reads a question and must emit the answer as one token."
    example = example_of(run)
    return f"A model reads “{example['prompt']}” and must emit {int(example['answer'])} as one token."


def question_panels(run: RunReader, _inputs: StepInputs) -> list[Panel]:
    example = example_of(run)
    return [_panel(logits.final_logits(run, example), "tour-final", one_question(run, example))]


def logit_lens_panels(run: RunReader, _inputs: StepInputs) -> list[Panel]:
    evidence = table_questions(run, run.table(Table.LAYER_ACCURACY))
    return [_panel(logits.accuracy_by_layer(run, False), "tour-lens", evidence)]


def locking_panels(run: RunReader, _inputs: StepInputs) -> list[Panel]:
    if causal_test(run):  # the causal test first, the correlation beside it
        shift = _panel(shift_bars(run), "tour-shift", questions(run, 0))
        bar = pct(CAUSAL_SHARE, 0)
        shift = replace(shift, evidence=bars_questions(run, shift.data), caption=(
            f"{shift.caption} Dashed: {bar}, the rule's line."))
        return [shift, _panel(locking_heatmap(run), "tour-locking", phase_questions(run),
                              "Phase locking: which waves follow the answer")]
    if run.has(Table.PHASE_LOCKING):
        return [_panel(locking_heatmap(run), "tour-locking", phase_questions(run))]
    example = example_of(run)
    return [_panel(logits.logit_heatmap(run, example), "tour-heat", one_question(run, example))]


def spectrum_panels(run: RunReader, inputs: StepInputs) -> list[Panel]:
    # module_spectra holds the mean over every question of the split (core.runs.measure): the examples table's rows
    evidence = questions(run, len(run.table(Table.EXAMPLES)))
    shares = inputs.claims["spectra"].numbers.get("low_share")  # the numbers the step's line quotes, in the legend
    # the bar the reason cites (W_U alone on random vectors of the same energy), drawn on each bar as a tick
    counted = run.has(Table.MODULE_SPECTRA_BASELINE) and run.task != "multiplication"  # the layers the verdict counts
    chart = logits.top_periods_bars(run, inputs.basis, low_share=shares, tau=TABLE1_TAU,
                                    bar_levels=mean_bar_levels(run, inputs.basis), slanted=counted)
    if not counted:
        return [_panel(chart, "tour-spec", evidence)]
    # the verdict counts layers, so its figure is the layers it counts; the mean spectrum, which the largest layers
    # dominate and which can hide a period one layer carries, is the second reading, folded
    # of its two counts, the one the verdict's reason rests on is drawn: the low band when only that test fails
    tests = inputs.claims["spectra"].numbers
    short = layer_spectra.layer_short_ratios(run, TABLE1_TAU)
    low = layer_spectra.layer_low_gaps(run, TABLE1_TAU)
    if tests.get("attn_short_holds") and not tests.get("mlp_low_holds", True):
        return [_panel(low, "tour-spec-gaps", evidence),
                _panel(short, "tour-spec-layers", evidence, "Layer by layer: periods 2, 2.5, 5, 10"),
                _panel(chart, "tour-spec", evidence, "The mean spectrum (a second reading)")]
    return [_panel(short, "tour-spec-layers", evidence),
            _panel(low, "tour-spec-gaps", evidence, "Layer by layer: the low band"),
            _panel(chart, "tour-spec", evidence, "The mean spectrum (a second reading)")]


#: How many of the strongest waves step 5's figure sums (the paper's 5; the claim's top-5 share counts the same).
WAVES_SHOWN = 5


def waves_panels(run: RunReader, inputs: StepInputs) -> list[Panel]:
    """The sum of the 5 strongest waves over the whole number line, its peak and the answer marked (the sentence
    names that peak), and folded beside it a zoom to the answer ± 25."""
    example = example_of(run)
    whole, zoom = wave_sum.waves_line(run, example, inputs.basis, WAVES_SHOWN, window=25)
    evidence = one_question(run, example)
    return [_panel(whole, "tour-waves", evidence), _panel(zoom, "tour-waves-zoom", evidence, "Zoom around the answer")]


def beside_siblings(step: str, panels_of: Callable[[RunReader, StepInputs], list[Panel]]):
    """`panels_of` for `step`, followed, where the run's pre-trained model was also fine-tuned another way
    (`core.claims.siblings`), by one figure folded under one label: the bars `step`'s verdict rests on, one panel a
    run under its own verdict (app.figures.recipes), and one sentence saying where they differ."""
    def panels(run: RunReader, inputs: StepInputs) -> list[Panel]:
        own = panels_of(run, inputs)
        others = training_siblings(run, inputs.runs)
        if not own or not others:
            return own
        bars = recipe_bars(step, [run, *others], inputs.claims_of or run_claims)
        if bars.empty:
            return own
        model = run.label.split(" (")[0]  # the model both recipes trained, as the chart's subtitle
        chart, data, caption = recipes.recipe_chart(step, bars, subtitle=f"{model}: {1 + len(others)} recipes")
        names = "; ".join(trained_short(r.manifest) for r in [run, *others])
        ways = Panel(chart, data, f"{recipe_sentence(step, bars)} {caption}".strip(), f"tour-{step}-siblings",
                     Evidence(1 + len(others), "runs", run.split, names),
                     folded=f"Trained another way: {trained_part(others[0].manifest)}")
        return [*own, ways]
    return panels


#: The columns of step 6's table of numbers, as the page and the handout show them.
ABLATION_COLUMNS = ["filter", "paper GPT-2-XL accuracy %", "accuracy %", "random control accuracy %"]


def ablation_panels(run: RunReader, inputs: StepInputs) -> list[Panel]:
    ab = run.table(Table.ABLATIONS)
    tau = summaries.nearest_tau(ab, TABLE1_TAU)
    table = summaries.table1(ab, tau)
    table = table[[c for c in ABLATION_COLUMNS if c in table.columns]]
    evidence = table_questions(run, ab)
    numbers = Panel(
        None,
        table,
        f"Accuracy (%) with each band filtered out at tau = {tau}, and a random control of the same size.",
        "tour-ablate-table",
        evidence,
        folded="The numbers",
        formats={c: "%.1f" for c in ABLATION_COLUMNS[1:] if c in table.columns},
    )
    narrow = period_table(run)
    claim = claim_periods(run)
    periods = [] if narrow.empty or claim is None else [Panel(
        None, narrow, f"Narrow test, {claim.verdict}: {claim.headline}".strip(), "tour-periods",
        questions(run, len(run.table(Table.EXAMPLES))),
        folded="Only the paper's periods removed")]
    table1_panel = _panel(logits.table1_bars(run, tau), "tour-ablate", evidence)
    if periods and inputs.claims["ablations"].numbers.get("decided_by") == "the narrow test":
        # the badge is the narrow test's (Table 1 has no power here): its table first and open, Table 1 beside it
        # Table 1 folded beside it: the step stays one screen
        return [replace(periods[0], folded=None), replace(table1_panel, folded="Table 1: one whole band removed"),
                numbers]
    return [table1_panel, numbers, *periods]


def number_panels(run: RunReader, inputs: StepInputs) -> list[Panel]:
    layer = int(inputs.claims["numbers"].numbers.get("layer", 0))  # the layer the step's claim reads
    evidence = numbers_read(run)
    helix = []
    if run.has(Table.HELIX_FIT):
        table, sentence = views_side_by_side(run, inputs.claims["numbers"].numbers)
        helix = [Panel(None, table, sentence, f"tour-helix-{run.name}", evidence, folded="The helix view")]
    return [
        _panel(numbers.number_spectrum(run, "paper", layer), f"tour-num-{run.name}", evidence),
        _panel(numbers.probe_kappa(run, layer), f"tour-probes-{run.name}", evidence, "Linear probes by layer"),
        *helix,
    ]


def operation_panels(run: RunReader, inputs: StepInputs) -> list[Panel]:
    shown = operation_runs(inputs.runs, run)
    if not shown:
        return []
    runs, evidence = tuple(shown.values()), operation_evidence(shown)
    return [
        _panel(operations.carrier_bars(runs), "tour-ops-modules", evidence),
        _panel(operations.operation_accuracy_bars(runs), "tour-ops-accuracy", evidence, "How often each run is right"),
        _panel(operations.period_ratio_bars(runs), "tour-ops-periods", evidence,
               "The periods against what W_U alone gives"),
    ]


def runs_beside(run: RunReader) -> list[RunReader]:
    """The valid runs of `run`'s cache and split (manifests only: the step's question reads what each run is), `run`
    itself among them: the runs step 9 chooses from."""
    infos = [i for i in list_runs(run.cache_dir) if i.ok and i.manifest["task"]["split"] == run.split]
    return [run if i.name == run.name else RunReader(run.cache_dir, i.name, i.manifest) for i in infos]


#: How many runs step 9's question names, in words.
COUNT_WORDS = {1: "One", 2: "Two", 3: "Three", 4: "Four"}


def operation_question(run: RunReader) -> str:
    """Step 9's question, whose first words say which models it shows, computed from the runs it shows
    (`operation_runs` over the run's split): how many, of which kind (`kind_name`), and, where that is not the run's
    own kind, the run's kind and the operations it has no run of here."""
    runs = runs_beside(run)
    shown = operation_runs(runs, run)
    ask = "Do their module logits carry the same waves?"
    if not shown:
        return f"One run per operation. {ask}"
    kinds = list(dict.fromkeys(kind_name(r) for r in shown.values()))
    count = COUNT_WORDS.get(len(shown), str(len(shown)))
    what = (f"{count} {kinds[0]} run{'s' if len(shown) > 1 else ''}" if len(kinds) == 1
            else f"{count} runs ({'; '.join(kinds)})")
    ops = ", ".join(task_name(t) for t in shown)
    each = f"one per operation ({ops})" if len(shown) > 1 else f"of {ops} only"
    if all(model_kind(r) == model_kind(run) for r in shown.values()):
        return f"{what}, {each}, this run's kind of model. {ask}"
    missing = " or ".join(task_name(t) for t in missing_of_kind(runs, run))
    return (f"{what}, {each}: not this run's kind of model ({kind_name(run)}), which has no run of {missing} "
            f"here. {ask}")


def training_panels(_run: RunReader, inputs: StepInputs) -> list[Panel]:
    logs = training_logs_of(inputs.runs)
    if not logs:
        return []
    curves = training_summaries.training_curves(logs, "val")
    return [_panel(training.training_curves(curves, "val"), "tour-train", training_runs(curves, logs))]


STEPS = [
    Step(
        "accuracy",
        "1. The question",
        first_question,
        Table.EXAMPLES,
        question_panels,
        "How often will this model answer right?",
        ("almost always (above 95%)", "most of the time (50 to 95%)", "rarely (below 50%)"),
    ),
    Step(
        "logit_lens",
        "2. Does the answer build up layer by layer?",
        said("Read each layer through the unembedding (the logit lens)."),
        Table.LAYER_ACCURACY,
        logit_lens_panels,
        "Reading each layer through W_U: when does the answer appear?",
        (
            "roughly (within ±10) layers before it is exact",
            "roughly and exactly at the same layer",
            "only at the last layer, all at once",
        ),
    ),
    Step(
        "module_waves",
        "3. Which module tracks the last digit?",
        locking_question,
        Table.PHASE_LOCKING,
        beside_siblings("module_waves", locking_panels),
        "Which kind of module computes the answer's last digit (its waves of period 2, 5 and 10 follow the answer)?",
        ("an attention layer", "an MLP layer", "both kinds", "neither"),
    ),
    Step(
        "spectra",
        "4. Few frequencies, split between MLP and attention?",
        said("The module logits split into Fourier components."),
        Table.MODULE_SPECTRA,
        beside_siblings("spectra", spectrum_panels),
        "Which module's logits keep more of their energy in the low frequencies (k < tau)?",
        ("the MLPs", "attention", "about the same"),
    ),
    Step(
        "waves",
        "5. Approximate, then classify?",
        said("The strongest components of the final logits, and their sum."),
        Table.FINAL_WAVES,
        waves_panels,
        "Does the sum of the 5 strongest waves of the final logits peak at the answer?",
        ("for most questions", "for about half", "for few questions"),
    ),
    Step(
        "ablations",
        "6. Take the frequencies away",
        said("Filter one band out of every layer's attention or MLP output."),
        Table.ABLATIONS,
        beside_siblings("ablations", ablation_panels),
        "Removing the MLPs' low band from every layer will hurt accuracy ...",
        ("more than removing a random band of the same size", "less than a random band", "the same as a random band"),
    ),
    Step(
        "numbers",
        "7. Where do the features come from?",
        said("How the model represents the numbers 0..520, transformed along the number line."),
        Table.NUMBER_SPECTRUM,
        number_panels,
        "Do the model's number representations carry waves of period 2, 5 and 10?",
        ("yes, all well above chance", "some of them", "none above chance"),
    ),
    Step(
        "training",
        "8. Give a model the features, and it learns?",
        said(
            "The same small network trained from scratch, with sinusoids planted in its number rows, and with a "
            "real pre-trained model's number representations frozen in."
        ),
        None,
        training_panels,
        "Which network learns addition better: from scratch, or with pre-trained number features frozen in?",
        ("with the features, by far", "about the same", "from scratch"),
    ),
    Step(
        "operations",
        "9. The same waves, another operation?",
        operation_question,
        None,
        operation_panels,
        "A model trained to multiply instead of add: will its module logits carry the same short periods?",
        ("yes, the same periods", "the same and a new one (3.33)", "no short periods at all"),
    ),
]
#: The steps whose claim is over several runs, not the one shown (the sidebar's run is not what they judge), and
#: what they say when no run can be compared.
OVER_RUNS = ("training", "operations")
NOTHING_TO_COMPARE = {
    "training": "No run here carries a training log.",
    "operations": "No run here has single-token numbers (module spectra) to compare across operations.",
}
STEP_KEYS = [s.key for s in STEPS]


# ----------------------------------------------------------------------------- which run a step shows


@dataclass(frozen=True)
class StepChoice:
    """The run a step shows and its claim. `switched_from`: the sidebar's claim when the step shows another
    run (the "best run" toggle), else None."""

    shown: RunReader
    claim: Claim
    switched_from: Claim | None = None


def trained_here(runs: list[RunReader]) -> list[RunReader]:
    """The runs with a training log (step 8's claim is over those of the paper's task, addition), less the seed
    runs, whose logs are in their shipped model's run."""
    return [r for r in runs if r.has(Table.TRAINING_LOG) and seed_of_manifest(r.manifest) is None]


def training_logs_of(runs: list[RunReader]) -> dict[str, pd.DataFrame]:
    """Training logs of the small models trained here on addition (not of a fine-tuned real LLM, nor of a control
    built with its modules held to bands), by short model name: step 8 is the paper's addition experiment, pre-trained
    against from-scratch number embeddings; the other tasks' runs are compared in step 9."""
    return {
        r.manifest.get("label", r.label).replace(" (demo, trained here)", ""): r.table(Table.TRAINING_LOG)
        for r in trained_here(runs)
        if run_origin(r.manifest)["kind"] != "fine-tuned" and r.task == "addition"
        and not built_control(r.manifest)
    }


def choose_run(
    step: Step,
    chosen: RunReader,
    runs: list[RunReader],
    claims_of: Callable[[RunReader], dict],
    training_claim: Callable[[list[RunReader]], Claim],
    best: bool = False,
) -> StepChoice:
    """The run `step` shows: the sidebar's (`chosen`), or with `best` the shipped run that shows the step best among
    those that may stand in for it (`core.claims.registry.may_stand_in`: the same task, and on a step about doing
    the task, a model that does it; never a built control, `core.runs.origin.built_control`) and can draw it; with
    its claim. Step 8's claim is over every run with a
    training log."""
    if step.key == "training":
        return StepChoice(chosen, training_claim(trained_here(runs)))
    if step.key == "operations":
        return StepChoice(chosen, claim_operations(operation_runs(runs, chosen), claims_of))
    if best:
        runs = [r for r in runs if r.name == chosen.name
                or (not built_control(r.manifest)
                    and may_stand_in(step.key, r.task, chosen.task, claims_of(r)["accuracy"]))]
    by_name = {r.name: r for r in runs}
    per_run = {r.name: claims_of(r)[step.key] for r in runs}
    drawable = {n: c for n, c in per_run.items() if step.table is None or by_name[n].has(step.table)} or per_run
    order = [r.name for r in runs]
    if step.key == "numbers":  # where the features come from: a model that learned from text first, on a tie
        order.sort(key=lambda n: run_origin(by_name[n].manifest)["kind"] != "external")
    pick = best_run(drawable, preferred=chosen.name, order=order) if best else chosen.name
    if pick == chosen.name:
        return StepChoice(chosen, per_run[chosen.name])
    return StepChoice(by_name[pick], per_run[pick], per_run[chosen.name])


def why_shown(step: Step, choice: StepChoice) -> str:
    """Why a step shows another run than the sidebar's ("best run"): among which runs it was chosen, and both
    verdicts. Empty when the step shows the sidebar's run."""
    if choice.switched_from is None:
        return ""
    among = f"the shipped {task_name(choice.shown.task)} runs"
    if step.key in TASK_STEPS:
        among += " that do the task (step 1 at least Partly agrees)"
    return (f"Of {among}, it shows this step best ({VERDICT_LABELS[choice.claim.verdict]}; the sidebar's run: "
            f"{VERDICT_LABELS[choice.switched_from.verdict]}).")
