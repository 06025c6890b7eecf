"""The guided tour: eight steps of the paper's story. Each step says what the paper found (its model,
its number), what the run on screen measures (computed from its tables by core.claims.registry) and a verdict.
Every step shows the sidebar's run; the toggle at the top lets a step switch to the shipped run that
shows it best, and a banner then says which and why."""

import streamlit as st

from app import figures, number_figures, training_figures
from app.chart_export import show_chart
from app.furniture import BADGE, claim_box
from app.glossary import step_terms
from app.phase_figure import locking_heatmap
from app.run_loading import run_claims, runs_of_split, training_claim, training_logs
from app.sidebar import page_view
from app.state import large
from app.url_state import to_url, url_state
from core.claims.registry import best_run
from core.paper import TABLE1_TAU
from core.runs import summaries, training_summaries
from core.runs.origin import describe_run, run_origin
from core.runs.reader import Table

view = page_view()
chosen, basis = view.run, view.basis
split = chosen.split
runs = runs_of_split(split)
by_name = {r.name: r for r in runs}


def example_of(r):
    return summaries.running_example(r.table(Table.EXAMPLES))


# ----------------------------------------------------------------------------- figures of each step


def draw_question(r):
    show_chart(*figures.final_logits(r, example_of(r)), key="tour-final")


def draw_logit_lens(r):
    show_chart(*figures.accuracy_by_layer(r, False), key="tour-lens")


def draw_locking(r):
    if r.has(Table.PHASE_LOCKING):
        show_chart(*locking_heatmap(r), key="tour-locking")
    else:
        show_chart(*figures.logit_heatmap(r, example_of(r)), key="tour-heat")


def draw_spectrum(r):
    show_chart(*figures.top_periods_bars(r, basis), key="tour-spec")


def draw_waves(r):
    chart, data, caption, _ = figures.waves(r, example_of(r), basis, 5, window=25)
    show_chart(chart, data, caption, key="tour-waves")


def draw_ablations(r):
    ab = r.table(Table.ABLATIONS)
    t = summaries.nearest_tau(ab, TABLE1_TAU)
    show_chart(*figures.table1_bars(r, t), key="tour-ablate")
    with st.expander("The numbers"):
        table = summaries.table1(ab, t)
        cols = ["filter", "accuracy %", "random control accuracy %", "paper GPT-2-XL accuracy %"]
        st.dataframe(
            table[[c for c in cols if c in table.columns]],
            hide_index=True,
            width="stretch",
            column_config={c: st.column_config.NumberColumn(format="%.1f") for c in cols[1:]},
        )


def draw_numbers(r):
    layer = int(run_claims(r)["numbers"].numbers.get("layer", 0))  # the layer the step's claim reads
    show_chart(*number_figures.number_spectrum(r, "paper", layer), key=f"tour-num-{r.name}")
    with st.expander("Linear probes by layer"):
        show_chart(*number_figures.probe_kappa(r, layer), key=f"tour-probes-{r.name}")


def draw_training(_r):
    logs = training_logs(split)
    if not logs:
        st.info("No run here carries a training log.")
        return
    show_chart(
        *training_figures.training_curves(training_summaries.training_curves(logs, "val"), "val"), key="tour-train"
    )


STEPS = [
    (
        "accuracy",
        "1. The question",
        "A model reads “Put together 15 and 93. Answer:” and must emit 108 as one token.",
        draw_question,
    ),
    (
        "logit_lens",
        "2. Does the answer build up layer by layer?",
        "Read each layer through the unembedding (the logit lens).",
        draw_logit_lens,
    ),
    (
        "module_waves",
        "3. Which module tracks the last digit?",
        "Over every question: does an attention or MLP layer's wave of period T peak at the answer mod T (locking R)?",
        draw_locking,
    ),
    (
        "spectra",
        "4. Few frequencies, split between MLP and attention?",
        "The module logits split into Fourier components.",
        draw_spectrum,
    ),
    (
        "waves",
        "5. Approximate, then classify?",
        "The strongest components of the final logits, and their sum.",
        draw_waves,
    ),
    (
        "ablations",
        "6. Take the frequencies away",
        "Filter one band out of every layer's attention or MLP output.",
        draw_ablations,
    ),
    (
        "numbers",
        "7. Where do the features come from?",
        "How the model represents the numbers 0..520, transformed along the number line.",
        draw_numbers,
    ),
    (
        "training",
        "8. Give a model the features, and it learns?",
        "The same small network trained from scratch, with sinusoids planted in its number rows, and with a real "
        "pre-trained model's number representations frozen in.",
        draw_training,
    ),
]
#: The table each step's figure reads (a run without it, a digit-splitting model's, cannot draw the step).
STEP_TABLES = {
    "accuracy": Table.EXAMPLES,
    "logit_lens": Table.LAYER_ACCURACY,
    "module_waves": Table.PHASE_LOCKING,
    "spectra": Table.MODULE_SPECTRA,
    "waves": Table.FINAL_WAVES,
    "ablations": Table.ABLATIONS,
    "numbers": Table.NUMBER_SPECTRUM,
}
url_state("step", 1, int, list(range(1, len(STEPS) + 1)))
url_state("best", False, lambda t: str(t).lower() in ("1", "true", "yes", "on"))


def move(delta):
    st.session_state["step"] = min(len(STEPS), max(1, st.session_state["step"] + delta))


if not large():
    st.title("How a language model adds: a guided tour")
key, title, what, draw = STEPS[st.session_state["step"] - 1]
left, mid, right = st.columns([1.2, 4, 1.2], vertical_alignment="center")
left.button("◀ Back", on_click=move, args=(-1,), disabled=st.session_state["step"] == 1, width="stretch")
right.button("Next ▶", on_click=move, args=(1,), disabled=st.session_state["step"] == len(STEPS), width="stretch")
mid.progress(st.session_state["step"] / len(STEPS), text=f"Step {st.session_state['step']} of {len(STEPS)}")
st.toggle(
    "Show each step on the shipped run that shows it best",
    key="best",
    help="Off (the default): every step uses the run chosen in the sidebar. On: each step may switch to another "
    "shipped run, "
    "and a banner says which and why.",
)

if key == "training":
    claim = training_claim([r for r in runs if r.has(Table.TRAINING_LOG)])
    shown, others = chosen, ""
else:
    per_run = {r.name: run_claims(r)[key] for r in runs}
    drawable = {n: c for n, c in per_run.items() if by_name[n].has(STEP_TABLES[key])} or per_run
    order = [r.name for r in runs]
    if key == "numbers":  # where the features come from: a model that learned from text first, on a tie
        order.sort(key=lambda n: run_origin(by_name[n].manifest)["kind"] != "external")
    pick = best_run(drawable, preferred=chosen.name, order=order) if st.session_state["best"] else chosen.name
    shown, claim, others = by_name[pick], per_run[pick], ""
    if pick != chosen.name:
        mine = per_run[chosen.name]
        st.warning(
            f"**This step shows {shown.label}**, not the run chosen in the sidebar: it is the shipped run that shows "
            "this "
            f"step best ({claim.verdict}; yours: {mine.verdict}). Switch off the toggle above to stay on your run.",
            icon=":material/swap_horiz:",
        )
        others = f"On your choice, {chosen.label}: {BADGE[mine.verdict]} {mine.measured}"

text, figure = st.columns([2, 3], gap="medium")
with text:
    st.subheader(title)

    def details():
        if others:
            st.caption(others)
        if key in ("accuracy", "numbers"):
            st.markdown(describe_run(shown.manifest))

    claim_box(claim, "These runs" if key == "training" else shown.label, details)
    st.caption(step_terms(key))
with figure:
    st.caption(what)
    if key in STEP_TABLES and not shown.has(STEP_TABLES[key]):
        why = shown.not_applicable(STEP_TABLES[key])
        st.info(
            f"{shown.label} cannot show this step"
            + (f": {why}." if why else f" (no {STEP_TABLES[key].value} table).")
            + " Switch on the toggle above to see it on the shipped run that shows it best."
        )
    else:
        draw(shown)
to_url("step", "best")
