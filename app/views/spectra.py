import streamlit as st

from app.figures import layer_spectra, logits
from app.figures.style import task_periods
from app.furniture import intro, needs, rank_sentence, show_chart
from app.glossary import term
from app.guards.url_state import to_url, url_state
from app.run_loading import run_claims
from app.shared import shared_view
from app.sidebar import page_view
from core.claims.spectra import mean_bar_levels
from core.paper import TABLE1_TAU, paper_findings
from core.runs import summaries
from core.runs.reader import Table
from core.runs.tau_choice import same_split_sentence
from core.tasks import task_name


def paper_periods_sentence(task: str, above) -> str:
    """Which of the periods the paper finds for the run's task this layer carries above the baseline."""
    found = paper_findings(task).found_among(above)
    return (f"Of the periods the paper finds for {task_name(task)} "
            f"({', '.join(f'{t:.3g}' for t in task_periods(task))}): {', '.join(f'{t:.3g}' for t in found) or 'none'}"
            " here. ")


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
spectra_claim = run_claims(run)["spectra"]  # the box above quotes its shares: the legend shows them too
show_chart(
    *logits.top_periods_bars(run, basis, low_share=spectra_claim.numbers.get("low_share"), tau=TABLE1_TAU,
                             bar_levels=mean_bar_levels(run, basis)),
    key="spec-top",
)
if run.has(Table.MODULE_SPECTRA_BASELINE) and run.task != "multiplication":  # what step 4's verdict counts
    show_chart(*layer_spectra.layer_low_gaps(run, TABLE1_TAU), key="spec-gaps")
    show_chart(*layer_spectra.layer_short_ratios(run, TABLE1_TAU), key="spec-layers")
show_chart(*logits.spectrum_heatmap(run, basis, module, tau), key="spec-heat")

layers = summaries.module_layers(run.table(Table.MODULE_SPECTRA), module)
url_state("layer", layers[-1], int, layers)
if len(layers) > 1:
    st.select_slider("Layer", options=layers, key="layer")
to_url("layer")
layer = st.session_state["layer"]
chart, data, caption = logits.layer_spectrum(run, basis, module, layer, tau)
show_chart(chart, data, caption, key="spec-layer")
above = summaries.periods_above_baseline(data)
st.caption(
    f"{len(above)} of {len(data)} frequencies carry at least twice what W_U alone gives random vectors of the same "
    "energy"
    + (f" (or {data['bar'].min():.2f}x where W_U leaves less room)" if "bar" in data and data["bar"].min() < 2
       else "")
    + (
        ": periods " + ", ".join(f"{t:.3g}" for t in above["period"].head(8)) + (" …" if len(above) > 8 else "")
        if len(above)
        else ""
    )
    + ". "
    + paper_periods_sentence(run.task, above["period"])
)
st.caption(rank_sentence(run))

energy = shared_view(run, summaries.energy_by_band, Table.MODULE_SPECTRA, basis, tau)  # once for every session
row = summaries.band_energy_at(energy, module, layer)
if same := same_split_sentence(run.table(Table.MODULE_SPECTRA), basis, tau):
    st.caption(f":material/straighten: {same}")
who = f"{modules[module]} layer {layer} alone"
st.caption(
    f"The three numbers below are for {who}, at the sidebar's tau = {tau}; the box at the top and the legend of the "
    f"first chart average the last layers at the paper's tau = {TABLE1_TAU}."
)
c1, c2, c3 = st.columns(3)
c1.metric(
    f"{who}: energy below tau = {tau}",
    f"{row['low']:.1%}",
    help="Share of the squared mean magnitude at frequencies k < tau.",
)
c2.metric(
    f"{who}: energy at or above tau = {tau}",
    f"{row['high']:.1%}",
    help=f"Share at k ≥ tau (periods shorter than {view.fourier.span}/tau).",
)
n_last = min(15, len(layers))
top = shared_view(run, summaries.top_periods_by_module, Table.MODULE_SPECTRA, basis, module, last_layers=n_last)
c3.metric(
    f"{modules[module]}: top periods, mean of the last {n_last} layers",
    ", ".join(f"{t:.3g}" for t in top["period"]),
    help="Largest mean magnitudes averaged over the last layers.",
)
with st.expander("Energy split for every layer and module"):
    st.dataframe(energy.rename(columns={"low": f"share k < {tau}", "high": f"share k ≥ {tau}"}), hide_index=True)
