import streamlit as st

from app.figures import numbers
from app.figures.helix import helix_fit_chart, helix_view_chart
from app.figures.style import task_periods
from app.furniture import intro, measured_section, origin_note, show_chart
from app.glossary import term
from app.guards.url_state import to_url, url_state
from app.sidebar import page_view, short_label
from core.analysis.embeddings import top_periods
from core.claims.helix import chosen_patch_layer, helix_layers, helix_patch_frame, helix_summary
from core.runs import summaries
from core.runs.reader import Table

view = page_view()
run, compare, basis = view.run, view.compare, view.basis
intro(
    "Numbers: how a model represents them, layer by layer",
    "Each number 0..520 is read in the context *The number n* (or alone, for the demo models' small vocabulary), and "
    "its vector at the last token is kept at every layer. Two questions per layer: does the spectrum along the number "
    "line have a few frequencies far above the shuffled-numbers threshold (periods 2, 2.5, 5, 10 in pre-trained "
    "models)? And can a linear probe read n mod 2, 5, 10, 100 on numbers it never saw (Cohen's kappa; mod 3 and 7 are "
    "controls)? A spike counts for the verdict only where the probe of its modulus separates the numbers: spikes at "
    "2, 5 and 10 appear in models of every kind and in raw counts of how often numbers occur (Fu et al. 2026), so a "
    "spike alone is not yet a mechanism. No frequency null is drawn: no package here ships real counts of each "
    "number in text (wordfreq bins them; GPT-2's merge order is a rank, not a count). Pick a second run in the "
    "sidebar to compare: it is drawn under the first.",
    claim="numbers",
)
runs = [run] + ([compare] if compare is not None else [])
runs = [r for r in runs if r.has(Table.NUMBER_SPECTRUM)]
if not runs:
    left = run.not_computed(Table.NUMBER_SPECTRUM)
    st.info(f"**This page was not computed for {run.label}.** Its number tables were {left}." if left else
            f"{run.label} has no number tables (a run from before schema 3): run its precompute again to add them.")
    st.stop()
top_layers = max(r.n_layers for r in runs)
url_state("nlayer", summaries.best_probe_layer(runs[0].table(Table.NUMBER_PROBES)), int, bounds=(0, top_layers))
st.session_state["nlayer"] = max(0, min(int(st.session_state["nlayer"]), top_layers))
st.slider(
    "Layer (0 = embedding)",
    0,
    top_layers,
    key="nlayer",
    help="Runs with fewer layers show their last layer when the slider goes past it.",
)
to_url("nlayer")
chosen = st.session_state["nlayer"]

# a compared run goes under the first, each chart the page's full width: two columns at 1024 px left each plot
# about 110 px wide
for col, r in zip([st.container(border=len(runs) > 1) for _ in runs], runs):
    with col:
        layer = min(chosen, r.n_layers)
        st.markdown(f"**{r.label}**" + (f" (layer {layer}: its last)" if layer != chosen else ""))
        origin_note(r)
        show_chart(*numbers.number_spectrum(r, basis, layer), key=f"num-spec-{r.name}")
        marked = task_periods(r.task)
        s = summaries.number_summary(r.table(Table.NUMBER_SPECTRUM), r.table(Table.NUMBER_PROBES), layer, basis,
                                     marked)
        periods = ", ".join(f"{t:.3g}" for t in s["outlier_periods"][:8])
        kap = s["kappa"]
        reads = ", ".join(f"mod {t}: {kap[t]:.2f}" for t in sorted(kap) if t not in s["controls"])
        ctl = ", ".join(f"mod {t}: {kap[t]:.2f}" for t in s["controls"])
        st.caption(
            f"Layer {layer}: {s['n_outliers']} of {s['n_frequencies']} frequencies above the threshold"
            + (f" (periods {periods}{' …' if s['n_outliers'] > 8 else ''})" if s["n_outliers"] else "")
            + f"; of {', '.join(f'{t:.3g}' for t in marked)}: "
            + f"{', '.join(f'{t:.3g}' for t in s['short_periods']) or 'none'}. "
            + f"Probe kappa {reads}; controls {ctl}."
        )
        show_chart(*numbers.probe_kappa(r, layer), key=f"probes-{r.name}")

single = [r for r in runs if r.has(Table.EMBEDDING_SPECTRUM)]
if single:
    with st.expander("The embedding rows themselves (single-token models): W_E and W_U, t-SNE"):
        url_state("matrix", "input", str, ["input", "output"])
        st.radio(
            "Which number rows",
            ["input", "output"],
            key="matrix",
            horizontal=True,
            format_func={"input": "input embedding W_E", "output": "unembedding W_U"}.get,
            help="With tied embeddings (GPT-2) both are the same matrix.",
        )
        to_url("matrix")
        matrix = st.session_state["matrix"]
        for r in single:
            with st.container():
                show_chart(*numbers.embedding_spectrum(r, basis, matrix), key=f"emb-spec-{r.name}")
                spec = summaries.embedding_rows(r.table(Table.EMBEDDING_SPECTRUM), basis, matrix)
                st.markdown(
                    f"**Top periods:** {', '.join(f'{t:.3g}' for t in top_periods(spec, 5))}", help=term("period")
                )
        url_state("colour", "last digit", str, ["last digit", "magnitude"])
        st.radio("Colour the t-SNE map by", ["last digit", "magnitude"], key="colour", horizontal=True)
        to_url("colour")
        for r in single:
            with st.container():
                show_chart(*numbers.embedding_map(r, matrix, st.session_state["colour"]), key=f"tsne-{r.name}")

if measured_section(run, Table.HELIX_FIT, "The helix view (Kantamneni & Tegmark 2025)"):
    st.markdown(
        "A later paper reads the same vectors another way: each number sits on a **helix**, a straight line plus "
        "circles that turn once every few numbers (here every "
        + ", ".join(f"{T:g}" for T in (run.manifest.get("helix") or {}).get("periods", ()))
        + " numbers). Fitted on half the numbers, how much of the other "
        "half's vectors does it explain? And put in for an operand inside a question, does the fit carry what the "
        "model uses? " + helix_summary(run)
    )
    fit_chart = helix_fit_chart(run.table(Table.HELIX_FIT), short_label(run.label))
    show_chart(*fit_chart, key="helix-fit")
    url_state("turn", 30, int, bounds=(0, 359))
    st.slider("Turn the helix (degrees)", 0, 359, key="turn", help="Turns the 3-D view around its vertical axis.")
    to_url("turn")
    points = run.table(Table.HELIX_POINTS)
    view_period = 10 if (points["period"] == 10).any() else float(points["period"].iloc[0])
    show_chart(*helix_view_chart(points, view_period, st.session_state["turn"], 20.0, short_label(run.label)),
               key="helix-view", downloads=False)
    if run.has(Table.HELIX_PATCHING):
        layers = helix_layers(run)
        # opens at the layer the summary reads (chosen from the fit, before any outcome)
        url_state("helixlayer", chosen_patch_layer(run.table(Table.HELIX_FIT), run.table(Table.HELIX_PATCHING)), int,
                  layers)
        st.select_slider("Layer the operand is replaced at", layers, key="helixlayer")
        to_url("helixlayer")
        st.dataframe(helix_patch_frame(run, st.session_state["helixlayer"]), hide_index=True)
        st.caption("Each row: the first operand's vector at that layer replaced by what the row names, in the question "
                   "whose first operand is one more; the share of the score gap that comes back "
                   f"({run.split} split, operands the fit never saw). The phrasing's mean vector holds no number: it "
                   "gives the floor.")
