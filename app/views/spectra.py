import streamlit as st

from app import figures
from app.chart_export import show_chart
from app.furniture import intro, needs
from app.glossary import term
from app.sidebar import page_view
from app.url_state import to_url, url_state
from core.runs import summaries
from core.runs.reader import Table

view = page_view()
run, basis, tau = view.run, view.basis, view.tau
intro(
    "Spectra: which frequencies do the modules use?",
    "Take each module's logits over the number line and split them into Fourier components. Look for a few bright "
    "frequencies (a sparse spectrum), for which module carries the long periods (size) and which the short ones "
    "(last digit), and for bars above what the unembedding alone would give.",
    claim="spectra",
)
needs(run, Table.MODULE_SPECTRA)
modules = {"attn": "Attention", "mlp": "MLP", "resid": "Residual stream (logit lens)"}
url_state("module", "mlp", str, list(modules))
st.radio(
    "Module", list(modules), key="module", format_func=modules.get, horizontal=True, help=term("Fourier component")
)
to_url("module")
module = st.session_state["module"]
show_chart(*figures.top_periods_bars(run, basis), key="spec-top")
show_chart(*figures.spectrum_heatmap(run, basis, module, tau), key="spec-heat")

layers = summaries.module_layers(run.table(Table.MODULE_SPECTRA), module)
url_state("layer", layers[-1], int, layers)
if len(layers) > 1:
    st.select_slider("Layer", options=layers, key="layer")
to_url("layer")
layer = st.session_state["layer"]
chart, data, caption = figures.layer_spectrum(run, basis, module, layer, tau)
show_chart(chart, data, caption, key="spec-layer")
above = summaries.periods_above_baseline(data)
st.caption(
    f"{len(above)} of {len(data)} frequencies carry at least twice what W_U alone gives random vectors of the same "
    "energy"
    + (
        ": periods " + ", ".join(f"{t:.3g}" for t in above["period"].head(8)) + (" …" if len(above) > 8 else "")
        if len(above)
        else ""
    )
    + f". W_U's number rows have rank {run.unembedding_rank or '?'} of {run.width}: "
    "a low rank makes every spectrum read through it sparse, whatever the module learned."
)

energy = summaries.energy_by_band(run.table(Table.MODULE_SPECTRA), basis, tau)
row = summaries.band_energy_at(energy, module, layer)
c1, c2, c3 = st.columns(3)
c1.metric(
    f"Energy below tau = {tau}", f"{row['low']:.0%}", help="Share of the squared mean magnitude at frequencies k < tau."
)
c2.metric(
    f"Energy at or above tau = {tau}",
    f"{row['high']:.0%}",
    help=f"Share at k ≥ tau (periods shorter than {view.fourier.span}/tau).",
)
top = summaries.top_periods_by_module(run.table(Table.MODULE_SPECTRA), basis, module, last_layers=min(15, len(layers)))
c3.metric(
    "Top periods (last layers)",
    ", ".join(f"{t:.3g}" for t in top["period"]),
    help="Largest mean magnitudes averaged over the last layers.",
)
with st.expander("Energy split for every layer and module"):
    st.dataframe(energy.rename(columns={"low": f"share k < {tau}", "high": f"share k ≥ {tau}"}), hide_index=True)
