"""The Ablations page's last section: the neuron-level test (core.runs.neuron_run), its headline and its numbers in a
fold (core.claims.neurons) and its two figures (app.figures.neurons); for a run without the neuron tables, one line
saying how to make them."""

import streamlit as st

from app.figures.neurons import ablation_chart, fit_map_chart
from app.furniture import show_chart
from app.sidebar import short_label
from core.claims.neurons import neuron_headline, neuron_summary
from core.runs.reader import RunReader, Table


def neurons_section(run: RunReader) -> None:
    """The section (module docstring)."""
    st.subheader("Single neurons: a helix of a+b, or digit patterns? (Nikankin et al. 2024)", anchor="neurons")
    if not (run.has(Table.NEURON_FITS) and run.has(Table.NEURONS)):
        st.info(f"{run.label} has no neuron-level test. Where its model is on this machine, make it with "
                f"`python -m core neurons {run.name}`.")
        return
    st.markdown(
        "Another paper argues that language models add with a *bag of heuristics*: neurons that each fire on a "
        "pattern of the operands' digits, not waves of the sum. Each MLP neuron's activation at the answer position is "
        "predicted two ways: from waves of the sum a+b (a line plus circles of periods 2, 5, 10 and 100), and from "
        "which digits a, b and a+b have. Both are fitted on half the questions and scored on the other half (R², "
        "the share of a neuron's variance predicted; 1 is all of it). Waves of the sum's last digit fit both ways "
        "alike; a long wave of the sum fits only the first, a pattern of one operand's digit only the second. "
        "The paper reproduced here says nothing about single neurons, so there is no verdict, only the reading. "
        + neuron_headline(run)
    )
    with st.expander("All the numbers"):
        st.markdown(neuron_summary(run))
    label = short_label(run.label)
    show_chart(*fit_map_chart(run.table(Table.NEURON_FITS), label), key="neuron-fits")
    show_chart(*ablation_chart(run.table(Table.NEURONS), label), key="neuron-ablation")
