"""The guided tour: eight steps of the paper's story. Each step says what the paper found (its model,
its number), what the run on screen measures (computed from its tables by core.claims.registry) and a verdict.
Every step shows the sidebar's run; the toggle at the top lets a step switch to the shipped run that
shows it best, and a banner then says which and why.

The steps themselves (title, question, table, figures) are app/tour/steps.py's, shared with the handout."""

import streamlit as st

from app.furniture import BADGE, claim_box, code_spans, show_chart, why_sentence
from app.glossary import new_step_terms, step_terms, term_name
from app.guards.url_state import to_url, url_flag, url_state
from app.run_loading import run_claims, runs_of_split, seed_spread_line, training_claim
from app.sidebar import page_view, short_label
from app.state import large
from app.tour.classroom import ask_first, handout_button, prediction_note, reveal_switch, waiting
from app.tour.lines import TOUR_BASIS, run_line, settings_note, unclean_test, who_line
from app.tour.steps import NOTHING_TO_COMPARE, OVER_RUNS, STEPS, Panel, StepInputs, choose_run, why_shown
from core.claims.base import pct
from core.paper import ACCURACY
from core.runs.origin import describe_run
from core.tasks import task_name, task_verb

view = page_view()
chosen = view.run
runs = runs_of_split(view.split)

url_state("step", 1, int, list(range(1, len(STEPS) + 1)))
url_state("best", False, url_flag)
url_state("reveal", False, url_flag)


def move(delta):
    st.session_state["step"] = min(len(STEPS), max(1, st.session_state["step"] + delta))


def draw(panel: Panel) -> None:
    if panel.chart is None:
        st.dataframe(
            panel.data,
            hide_index=True,
            width="stretch",
            column_config={c: st.column_config.NumberColumn(format=f) for c, f in panel.formats.items()},
        )
        st.caption(panel.projector_caption if large() else panel.full_caption)  # a table's caption says what it is
    elif large():  # on a projector: the run is named on the step, the downloads are on the normal pages
        show_chart(panel.chart, panel.data, panel.projector_caption, key=panel.key, downloads=False)
    else:  # the chart's subtitle names its run (a comparison's headers, its recipes): the caption need not again
        show_chart(panel.chart, panel.data, panel.projector_caption, key=panel.key)


if not large():
    st.title(f"How a language model {task_verb(chosen.task)}: a guided tour")
step = STEPS[st.session_state["step"] - 1]


def tour_switches() -> None:
    st.toggle(
        "Show each step on the shipped run that shows it best",
        key="best",
        help="Off (the default): every step uses the run chosen in the sidebar. On: each step may switch to another "
        "shipped run of the same operation, and a banner says which and why.",
    )
    reveal_switch()


# on a projector the switches and the handout fold into one Options button on the Back / Next row: the step's
# claim and figure get the screen
left, mid, *options, right = st.columns([1.2, 3.7, 1.6, 1.2] if large() else [1.2, 4, 1.2], vertical_alignment="center")
left.button("◀ Back", on_click=move, args=(-1,), disabled=st.session_state["step"] == 1, width="stretch")
right.button("Next ▶", on_click=move, args=(1,), disabled=st.session_state["step"] == len(STEPS), width="stretch")
mid.progress(
    st.session_state["step"] / len(STEPS),
    text=f"Step {st.session_state['step']} of {len(STEPS)} · {task_name(chosen.task)} run",
)
if large():
    with options[0].popover("Options", icon=":material/tune:", width="stretch"):
        tour_switches()
        handout_button(chosen, runs, TOUR_BASIS, st.session_state["best"])
else:
    switches, files = st.columns([4, 1.3], vertical_alignment="center")
    with switches:
        tour_switches()
    with files:
        handout_button(chosen, runs, TOUR_BASIS, st.session_state["best"])

choice = choose_run(step, chosen, runs, run_claims, training_claim, st.session_state["best"])
shown, claim, others = choice.shown, choice.claim, ""
hidden = waiting(step, shown, st.session_state["best"])  # predict-then-reveal: not yet revealed
if choice.switched_from is not None and not hidden:
    mine = choice.switched_from
    st.warning(
        f"**This step shows {shown.label}**, not the sidebar's run. {why_shown(step, choice)} Switch off the toggle "
        "above to stay on your run.",
        icon=":material/swap_horiz:",
    )
    others = f"On your choice, {chosen.label}: {BADGE[mine.verdict]} {mine.measured}"

drawable = not hidden and (step.table is None or shown.has(step.table))
inputs = StepInputs(TOUR_BASIS, run_claims(shown), runs, run_claims)
panels = step.panels(shown, inputs) if drawable else []
line = run_line(step, claim, shown) if step.key not in OVER_RUNS else None
seeds = seed_spread_line(shown, step.key, runs) if step.key not in OVER_RUNS else None
# the words this screen shows, for the terms beside it: every listed word it uses gets its definition here
note = settings_note(step, shown, view.tau, view.basis, runs)
cannot = "" if drawable or hidden else (shown.why_absent(step.table) or "")
words = " ".join([step.title, step.question(shown), claim.paper, step.predict, *step.choices, note or ""] + (
    [] if hidden else [line or claim.short, why_sentence(claim), seeds or "", others, cannot,
                       *(p.full_caption for p in panels)]))
def accuracy_metrics() -> None:
    """Step 1's two numbers: the paper's test figure beside this run's (under the claim on a projector, above the
    figure otherwise)."""
    if step.key != "accuracy" or "accuracy" not in claim.numbers or hidden:
        return
    paper, mine_now = st.columns(2)
    said_split = "validation" if claim.numbers.get("paper_split") == "validation" else "test"
    paper.metric(f"Paper: GPT-2-XL, {said_split} split",
                 f"{claim.numbers.get('paper_accuracy', ACCURACY['GPT-2-XL fine-tuned'])}%")
    unclean = " (not a clean test score)" if unclean_test(shown) else ""
    mine_now.metric(f"This run: {claim.numbers['n']} {shown.split} prompts{unclean}", pct(claim.numbers["accuracy"]))


# on a projector the claim's column is wider (its large type wraps less) and its details and words fold into one
# button, so that the claim, the verdict with its reason and the figure share one 1024x768 screen
text, figure = st.columns([9, 11] if large() else [2, 3], gap="medium")
fresh, more = new_step_terms(step.key, words) if large() else ([], step_terms(step.key, words))
with text, st.container(key="tour-claim"):
    st.subheader(step.title)

    def details():
        if others:
            st.caption(others)
        if note and large() and step.key in OVER_RUNS:
            st.caption(f":material/tune: {note}")
        if step.key in ("accuracy", "numbers"):
            st.markdown(code_spans(describe_run(shown.manifest)))
        if large():  # the words this step introduces first, then the others its screen uses
            for term_line in fresh + more:
                st.caption(term_line)

    new_words = f" · new words: {', '.join(term_name(t) for t in fresh)}" if fresh else " and words"
    who = who_line(step, choice, short_label(shown.label))
    if hidden:
        ask_first(step, shown, claim, st.session_state["best"])
    else:
        claim_box(claim, who, line, details, seeds, more=f"All the numbers{new_words}" if large() else None)
        prediction_note(step)
        if large():
            accuracy_metrics()
    if hidden and large():
        with st.expander(f"Words{new_words}"):
            for term_line in fresh + more:
                st.caption(term_line)
    if not large():
        for term_line in more:
            st.caption(term_line)
with figure, st.container(key="tour-figure"):
    st.caption(step.question(shown))
    if note and not (large() and step.key in OVER_RUNS):  # on a projector, which runs a step compares is a detail
        st.caption(f":material/tune: {note}")
    if hidden:
        st.info("This run's measurement, its verdict and the figure appear when you press **Reveal**.")
    elif step.table is not None and not shown.has(step.table):
        why = shown.why_absent(step.table)
        st.info(
            f"{shown.label} cannot show this step"
            + (f": {why}." if why else f" (no {step.table.value} table).")
            + " Switch on the toggle above to see it on the shipped run that shows it best."
        )
    else:
        if not large():
            accuracy_metrics()
        if step.key in OVER_RUNS and not panels:
            st.info(NOTHING_TO_COMPARE[step.key])
        for panel in (p for p in panels if not p.folded):
            draw(panel)
        folds: dict[str, list[Panel]] = {}  # the folded panels by label: panels that share one open with one click
        for panel in (p for p in panels if p.folded):
            folds.setdefault(panel.folded, []).append(panel)
        if large() and len(folds) > 1:  # on a projector, one click for every detail keeps the step one screen
            with st.expander(f"More on this step ({len(folds)})"):
                for label, group in folds.items():
                    st.markdown(f"**{label}**")
                    for panel in group:
                        draw(panel)
        else:
            for label, group in folds.items():
                with st.expander(label):
                    for panel in group:
                        draw(panel)
to_url("step", "best", "reveal")
