import streamlit as st

from app.figures import logits
from app.figures.heads import head_bands_figure, head_locking_figure, one_head_figure, opening_reason
from app.figures.phase import locking_heatmap
from app.furniture import BADGE, example_picker, intro, measured_section, needs, show_chart, why_sentence
from app.guards.url_state import to_url, url_state
from app.run_loading import run_claims
from app.shared import shared_on_run, shared_view
from app.sidebar import page_view, short_label
from core.analysis.head_readings import periods_by_locking
from core.claims.heads import head_periods, heads_summary, one_head_locking
from core.claims.last_digit import (
    group_shift_caption,
    group_shift_table,
    module_lock_note,
    module_lock_table,
    module_shift_caption,
    module_shift_table,
)
from core.runs.reader import Table

view = page_view()
run, basis = view.run, view.basis
intro(
    "Waves: how a handful of frequencies spell out the answer",
    "Write the final logits as a sum of Fourier components and keep the strongest few. Look for long waves that put "
    "a broad bump near the answer and short waves (periods 2, 5, 10) that put peaks on every number with the right "
    "last digit, and for where their sum peaks.",
    claim="waves",
)
needs(run, Table.FINAL_WAVES)
example = example_picker(run)
url_state("k", 5, int, list(range(1, 11)))
st.slider("Number of components k", 1, 10, key="k", help="How many of the strongest Fourier components to add up.")
to_url("k")
chart, data, caption, final = logits.waves(run, example, basis, st.session_state["k"])
show_chart(chart, data, caption, key="waves")
url_state("window", 25, int, [10, 25, 50, 100])
st.select_slider("Zoom: numbers either side of the answer", [10, 25, 50, 100], key="window")
to_url("window")
chart, data, caption, _ = logits.waves(run, example, basis, st.session_state["k"], window=st.session_state["window"])
show_chart(chart, data, caption, key="waves-zoom")
st.caption(
    f"The waves above are read in the {basis} basis (the sidebar's Fourier basis). The model's final logits themselves "
    f"peak at {int(final.loc[final['logit'].idxmax(), 'number'])}."
)

st.subheader("Over every example: which module's wave follows the answer?")
st.markdown(
    "One example cannot tell a module that **computes** the answer mod T from one that writes the same wave for every "
    "question. **Locking R** measures, over all examples, how often a module's wave of period T peaks at the answer "
    "mod T: 1 = always, about 0 = never more than chance."
)
if run.has(Table.PHASE_LOCKING):
    show_chart(*locking_heatmap(run), key="locking")
    claim = run_claims(run)["module_waves"]
    st.markdown(f"{BADGE[claim.verdict]} **This run:** {claim.short}  \n**Why:** {why_sentence(claim)}")
    groups = shared_on_run(group_shift_table, run)
    if len(groups):
        st.markdown("**Groups of modules shifted together** (the paper's claim is about attention as a whole):")
        st.dataframe(groups, hide_index=True, height="content",
                     column_config={"shifted together": st.column_config.TextColumn(pinned=True),
                                    "decides the last digit": st.column_config.TextColumn(width="large")})
        st.caption(shared_on_run(group_shift_caption, run))
    shifted = shared_on_run(module_shift_table, run)
    if len(shifted):
        if len(groups):
            st.markdown("**One module at a time:**")
        st.dataframe(shifted, hide_index=True)
        st.caption(shared_on_run(module_shift_caption, run))
    st.dataframe(shared_on_run(module_lock_table, run), hide_index=True)
    st.caption(module_lock_note(run))
    with st.expander("The whole measurement in words"):
        st.markdown(claim.measured)

if measured_section(run, Table.HEAD_LOCKING, "Attention, head by head"):
    st.markdown(
        "The paper reads each layer's attention as a whole. Each **head** writes its own share of it, so a head can "
        "follow the answer mod T while its layer's sum does not (or the reverse). "
        + shared_on_run(heads_summary, run, basis)
    )
    tau = run.default_tau(basis)
    label = short_label(run.label)
    periods = head_periods(run)
    ranked = shared_view(run, periods_by_locking, Table.HEAD_LOCKING, periods)
    url_state("hperiod", float(ranked["period"].iloc[0]), float, periods)
    st.radio("Period T of the heads' waves", periods, key="hperiod", horizontal=True, format_func="{:g}".format)
    to_url("hperiod")
    st.caption(opening_reason(ranked))
    chart, grid, caption = head_locking_figure(run, st.session_state["hperiod"], label,
                                               float(ranked["null_95"].max()))
    show_chart(chart, grid, caption, key="head-locking")
    show_chart(*head_bands_figure(run, basis, tau, label), key="head-bands")
    with st.expander("One head's spectrum"):
        left, right = st.columns(2)
        url_state("headlayer", run.n_layers, int, bounds=(1, run.n_layers))
        url_state("headnumber", 0, int, bounds=(0, int(grid["head"].max())))
        left.number_input("Layer", 1, run.n_layers, key="headlayer")
        right.number_input("Head (from 0)", 0, int(grid["head"].max()), key="headnumber")
        to_url("headlayer", "headnumber")
        layer, head = st.session_state["headlayer"], st.session_state["headnumber"]
        show_chart(*one_head_figure(run, basis, layer, head, tau, label), key="head-spectrum")
        st.dataframe(shared_on_run(one_head_locking, run, layer, head), hide_index=True, column_config={
            "chance threshold": st.column_config.NumberColumn("chance threshold at this period", format="%.3f")})
        st.caption(f"Head {head} of layer {layer}: does its wave of each period follow the answer over every "
                   f"{run.split} question (the modules' rule, the chance threshold over all heads)?")
