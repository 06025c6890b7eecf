"""The Tour as a handout: every step's words and figures for one run, gathered once (`build_handout`), then
written as one self-contained HTML file (`handout_html`: figures as inline SVG, no server, no network; it is
also a slide show with predict-then-reveal) or as a PDF (app/tour/handout_pdf.py).

The steps are app/tour/steps.py's, the sentences core.claims.registry's: the handout says what the Tour says.
Nothing here calls Streamlit, so the Tour's button and scripts/handout.py make the same files.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import datetime, timezone

import pandas as pd
import vl_convert as vlc

from app.furniture import file_spec, why_sentence
from app.glossary import TERMS, step_term_names
from app.sidebar import short_label
from app.state import projector_sizes
from app.tour.handout_style import HANDOUT_CSS, HANDOUT_SCRIPT
from app.tour.lines import run_line, who_line
from app.tour.steps import NOTHING_TO_COMPARE, OVER_RUNS, STEPS, Step, StepInputs, choose_run, why_shown
from core import SCHEMA_VERSION
from core.claims.base import VERDICT_LABELS, VERDICTS, Claim
from core.runs.origin import describe_run
from core.runs.reader import RunReader, Table
from core.tasks import task_name, task_verb

#: The verdicts, as the title page lists them
VERDICTS_SAID = ", ".join(VERDICT_LABELS[v] for v in VERDICTS)
#: Width (px) the handout gives a single-view figure (the Tour's figures stretch to their column instead).
FIGURE_WIDTH = 560


@dataclass(frozen=True)
class Figure:
    """One figure of a step: its Vega-Lite spec (None for a table of numbers), caption, and the table's rows."""

    spec: dict | None
    caption: str
    label: str = ""
    table: pd.DataFrame | None = None
    formats: dict | None = None
    #: the same figure in presentation mode's type (app.state.projector_sizes), for the slides and the PDF
    large_spec: dict | None = None


@dataclass(frozen=True)
class HandoutStep:
    number: int
    key: str
    title: str
    question: str
    predict: str
    choices: tuple[str, ...]
    #: the claim: the paper's finding, this run's measurement (every number), verdict and reason
    claim: Claim
    #: the line beside the verdict, as the Tour says it: whom it speaks of ("This run") and what it measured
    who: str
    line: str
    #: why the verdict is what it is (the rule's reason, else what the verdict means), and whose numbers these are
    why: str
    measured_by: str
    #: a line when the step shows another run than the chosen one, or why the run cannot show the step
    note: str
    missing: str
    figures: tuple[Figure, ...]
    terms: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Handout:
    """The title page's facts (computed from the run's manifest and examples table) and the steps."""

    run_label: str
    run_name: str
    model: str
    split: str
    task: str
    accuracy: float
    n_questions: int
    created: str
    schema_version: int | None
    accuracy_source: str
    exported: str
    basis: str
    best: bool
    steps: tuple[HandoutStep, ...]

    @property
    def accuracy_line(self) -> str:
        return f"{100 * self.accuracy:.1f}% of the {self.n_questions:,} {self.split} questions answered right"

    @property
    def title(self) -> str:
        return f"How a language model {task_verb(self.task)}"

    @property
    def questions_line(self) -> str:
        return f"{self.n_questions:,} {task_name(self.task)} questions of the {self.split} split"

    @property
    def version_line(self) -> str:
        version = f"cache schema {self.schema_version}" if self.schema_version is not None else "cache schema unknown"
        current = "" if self.schema_version == SCHEMA_VERSION else f" (this code reads schema {SCHEMA_VERSION})"
        return f"Run {self.run_name}, computed {self.created}; {version}{current}"


def run_accuracy(run: RunReader) -> tuple[float, int, str]:
    """(share right, questions, where from) on the run's split: the examples table's answers (the model's
    highest number logit), or for a model that writes digits, its generated answers at the run's number of shots."""
    if run.has(Table.EXAMPLES):
        examples = run.table(Table.EXAMPLES)
        return float(examples["correct"].mean()), len(examples), "the run's examples table"
    shots = int(run.manifest["task"].get("shots", 0))
    answers = run.table(Table.GENERATIONS)
    answers = answers[answers["shots"] == shots]
    source = f"its written answers, {shots}-shot, from the generations table"
    return float(answers["correct"].mean()), len(answers), source


def legends_beside(spec):
    """`spec` with every legend the page lays under or over its plot (a narrow column has no width to spare) put
    beside it in one column: a slide has the width, not the height those rows would add. The printed copy keeps them
    under the plot: beside, they would widen the figure and shrink its print."""
    if isinstance(spec, list):
        return [legends_beside(x) for x in spec]
    if not isinstance(spec, dict):
        return spec
    out = {k: legends_beside(v) for k, v in spec.items()}
    legend = out.get("legend")
    if isinstance(legend, dict) and legend.get("orient") in ("bottom", "top"):
        out["legend"] = {**{k: v for k, v in legend.items() if k not in ("columns", "direction")},
                         "orient": "right", "direction": "vertical"}
    return out


def sized(chart) -> dict:
    """A figure's Vega-Lite spec as the handout draws it: its plot FIGURE_WIDTH wide, laid out around it (the page
    stretches figures to their column; a file cannot: `app.furniture.file_spec`)."""
    return file_spec(chart, FIGURE_WIDTH)


def step_words(step: Step, shown: RunReader, claim, figures: tuple, extra: str = "") -> str:
    """Every word a handout step prints (question, claim, line, reason, captions), for the terms beside it."""
    line = claim.short if step.key in OVER_RUNS else run_line(step, claim, shown)
    return " ".join([step.title, step.question(shown), claim.paper, step.predict, *step.choices, line,
                     why_sentence(claim), claim.measured, extra, *(f.caption for f in figures)])


def step_figures(step: Step, shown: RunReader, inputs: StepInputs) -> tuple[Figure, ...]:
    """The step's figures as the Tour draws them, each also in presentation mode's type (built a second time inside
    app.state.projector_sizes: the slides and the PDF read them from the back of a room)."""
    with projector_sizes():
        large = [None if panel.chart is None else sized(panel.chart) for panel in step.panels(shown, inputs)]
    out = []
    for panel, large_spec in zip(step.panels(shown, inputs), large):
        spec = None if panel.chart is None else sized(panel.chart)
        out.append(Figure(spec, panel.full_caption, panel.folded or "", panel.data if spec is None else None,
                          panel.formats, large_spec))
    return tuple(out)


def build_handout(
    chosen: RunReader,
    runs: list[RunReader],
    claims_of,
    training_claim,
    basis: str = "paper",
    best: bool = False,
    exported: datetime | None = None,
) -> Handout:
    """Every Tour step for `chosen` (each on the best shipped run instead, with `best`, as the Tour's toggle),
    with the claims `claims_of(run)` gives (core.claims.registry.run_claims, or the dashboard's shared copy)."""
    computed: dict[str, dict] = {}

    def claims_once(run):  # every step compares the runs' claims: compute each run's once for the whole handout
        if run.name not in computed:
            computed[run.name] = claims_of(run)
        return computed[run.name]

    steps = []
    for number, step in enumerate(STEPS, start=1):
        choice = choose_run(step, chosen, runs, claims_once, training_claim, best)
        shown, note, missing, figures = choice.shown, "", "", ()
        if choice.switched_from is not None:
            mine = choice.switched_from
            note = f"This step shows {shown.label}. {why_shown(step, choice)} On {chosen.label}: {mine.measured}"
        if step.table is not None and not shown.has(step.table):
            why = shown.why_absent(step.table)
            missing = f"{shown.label} cannot show this step" + (f": {why}." if why else f" (no {step.table} table).")
        else:
            figures = step_figures(step, shown, StepInputs(basis, claims_once(shown), runs, claims_once))
            if step.key in OVER_RUNS and not figures:
                missing = NOTHING_TO_COMPARE[step.key]
        steps.append(
            HandoutStep(
                number,
                step.key,
                step.title,
                step.question(shown),
                step.predict,
                step.choices,
                choice.claim,
                who_line(step, choice, short_label(shown.label)),
                choice.claim.short if step.key in OVER_RUNS else run_line(step, choice.claim, shown, basis),
                why_sentence(choice.claim),
                "These runs" if step.key in OVER_RUNS else shown.label,
                note,
                missing,
                figures,
                tuple((t, TERMS[t]) for t in step_term_names(step.key, step_words(step, shown, choice.claim, figures,
                                                                                   note + missing))),
            )
        )
    accuracy, n_questions, source = run_accuracy(chosen)
    return Handout(
        run_label=chosen.label,
        run_name=chosen.name,
        model=describe_run(chosen.manifest),
        split=chosen.split,
        task=chosen.task,
        accuracy=accuracy,
        n_questions=n_questions,
        accuracy_source=source,
        created=chosen.created,
        schema_version=chosen.manifest.get("schema_version"),
        exported=(exported or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M UTC"),
        basis=basis,
        best=best,
        steps=tuple(steps),
    )


# ----------------------------------------------------------------------------- HTML


def inline_markdown(text: str) -> str:
    """The little markdown the claims and run descriptions use (**bold**, `code`), as escaped HTML."""
    out = html.escape(text, quote=False)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", out)


def plain(text: str) -> str:
    """The same text without its markdown marks (for the PDF)."""
    return re.sub(r"`(.+?)`", r"\1", re.sub(r"\*\*(.+?)\*\*", r"\1", text))


def figure_svg(spec: dict, prefix: str) -> str:
    """A figure as inline SVG, its ids (gradients, clip paths) prefixed so that figures on one page do not share
    them, sized to its column."""
    svg = vlc.vegalite_to_svg(spec)
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', svg)
    svg = svg.replace("url(#", f"url(#{prefix}-").replace('href="#', f'href="#{prefix}-')
    return re.sub(r"<svg ", '<svg role="img" ', svg, count=1)


def table_html(figure: Figure) -> str:
    frame = figure.table
    formats = figure.formats or {}
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for _, row in frame.iterrows():
        cells = []
        for c in frame.columns:
            v = row[c]
            text = "" if pd.isna(v) else (formats[c] % v if c in formats else str(v))
            cells.append(f"<td>{html.escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def step_html(step: HandoutStep) -> str:
    c = step.claim
    choices = "".join(f"<li>{html.escape(x)}</li>" for x in step.choices)
    figures = []
    verdict = VERDICT_LABELS[c.verdict]
    # a slide that shows a figure without the step's words carries the verdict above it (hidden elsewhere), so that
    # the claim and its evidence are seen together
    beside = (f'<p class="slide-verdict"><span class="verdict verdict-{c.verdict.replace(" ", "-")}">{verdict}'
              f'</span> <strong>{html.escape(step.who)}:</strong> {inline_markdown(step.line)}</p>')
    for i, f in enumerate(step.figures, start=1):
        if f.spec is None:
            body = table_html(f)
        else:  # the printed size, and presentation mode's type for the slides (the style sheet shows one of them)
            large = legends_beside(f.large_spec if f.large_spec is not None else f.spec)
            body = (f'<div class="print-size">{figure_svg(f.spec, f"s{step.number}f{i}")}</div>'
                    f'<div class="projector-size">{figure_svg(large, f"s{step.number}f{i}L")}</div>')
        figure = f"<figure>{body}<figcaption>{html.escape(f.caption)}</figcaption></figure>"
        if f.label:  # folded away on the Tour: open in the handout, folded on a slide
            figure = f'<details class="folded" open><summary>{html.escape(f.label)}</summary>{figure}</details>'
        figure = (beside if i == 1 else "") + figure  # outside any fold: the Slides button closes every fold
        figures.append(f'<div class="block">{figure}</div>')  # a slide that cannot hold the step shows it alone
    missing = f'<p class="missing">{html.escape(step.missing)}</p>' if step.missing else ""
    note = f'<p class="note">{inline_markdown(step.note)}</p>' if step.note else ""
    # the terms fold into one block: open in the handout and the PDF, one click away on a slide (the Slides button
    # closes every fold), so that a slide holds the step's claim and its figure together
    terms = "".join(f"<dt>{html.escape(t)}</dt><dd>{html.escape(d)}</dd>" for t, d in step.terms)
    words = ", ".join(html.escape(t) for t, _ in step.terms)
    return f"""
<section class="step" id="step-{step.number}" data-step="{step.number}">
  <h2>{html.escape(step.title)}</h2>
  <div class="block words">
  <p class="question">{inline_markdown(step.question)}</p>
  <div class="predict">
    <p><strong>Predict first:</strong> {html.escape(step.predict)}</p>
    <ol type="A">{choices}</ol>
  </div>
  <p class="paper"><strong>The paper:</strong> {inline_markdown(c.paper)}</p>
  <button class="reveal-button" type="button">Reveal this run's measurement</button>
  <div class="revealed">
    <p class="verdict verdict-{c.verdict.replace(" ", "-")}">{verdict}</p>
    <p class="headline"><strong>{html.escape(step.who)}:</strong> {inline_markdown(step.line)}</p>
    <p class="why"><strong>Why “{verdict}”:</strong> {inline_markdown(step.why)}</p>
    <details class="measured" open><summary>All the numbers</summary>
      <p><strong>{html.escape(step.measured_by)}:</strong> {inline_markdown(c.measured)}</p></details>
    {note}{missing}
  </div>
  </div>
  <details class="block terms-fold" open><summary>Words on this step: {words}</summary>
    <dl class="terms">{terms}</dl></details>
  <div class="figures revealed">{"".join(figures)}</div>
</section>"""


def handout_html(h: Handout) -> str:
    """The handout as one HTML file: a title page, then one section per step. Opened as it is, it reads as a
    handout (and prints one step a page); its Slides button shows one step a screen (arrow keys move), and its
    Predict-then-reveal switch hides each step's measurement, verdict and figures until Reveal is pressed."""
    title = f"{h.title}: the Tour on {h.run_label}"
    best = (
        "Each step shows the shipped run that shows it best (the Tour's toggle was on): a note says where that is "
        "not this run."
        if h.best
        else "Every step shows this run."
    )
    steps = "".join(step_html(s) for s in h.steps)
    made = f"{h.exported}, Fourier basis '{h.basis}'. {best}"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{HANDOUT_CSS}</style>
</head>
<body>
<nav class="controls">
  <button type="button" id="slides-button">Slides</button>
  <label><input type="checkbox" id="reveal-mode"> Predict, then reveal</label>
  <span class="slide-nav"><button type="button" id="prev">◀ Back</button>
  <span id="position"></span><button type="button" id="next">Next ▶</button></span>
</nav>
<section class="step title-page" id="step-0" data-step="0">
  <h1>{html.escape(h.title)}</h1>
  <p class="subtitle">Zhou et al., <em>Pre-trained Large Language Models Use Fourier Features to Compute
  Addition</em> (NeurIPS 2024), step by step on one model.</p>
  <table class="facts">
    <tr><th>Model</th><td>{html.escape(h.run_label)}</td></tr>
    <tr><th>Questions</th><td>{html.escape(h.questions_line)}</td></tr>
    <tr><th>Accuracy</th><td>{html.escape(h.accuracy_line)}</td></tr>
  </table>
  <p class="how">Each step: the question, the paper's finding (its model, its number), this run's measurement
  computed from its tables, a verdict ({VERDICTS_SAID}) with its reason, the
  figure, and the terms it uses. Every figure's caption says how many questions it rests on, from which split.
  Where the model and these numbers come from is on the last page, "About this handout".</p>
</section>
{steps}
<section class="about" id="about">
  <h2>About this handout</h2>
  <table class="facts">
    <tr><th>Model</th><td>{inline_markdown(h.model)}</td></tr>
    <tr><th>Accuracy</th><td>{html.escape(h.accuracy_line)}, from {html.escape(h.accuracy_source)}</td></tr>
    <tr><th>Cache</th><td>{html.escape(h.version_line)}</td></tr>
    <tr><th>Made</th><td>{html.escape(made)}</td></tr>
  </table>
</section>
<script>{HANDOUT_SCRIPT}</script>
</body>
</html>
"""
