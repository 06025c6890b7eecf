import pandas as pd
import streamlit as st

from app.figures import logits
from app.furniture import BADGE, intro, needs, scroll_into_view, show_chart, why_sentence
from app.glossary import jargon_in, term
from app.guards.url_state import to_url, url_state
from app.live.ablation import (
    follow_live,
    live_folder,
    live_request,
    offer_rebuild,
    press_live,
    pressed_live,
    rebuilt_note,
    result_frame,
)
from app.live.warmup import warmup_note
from app.run_loading import run_claims
from app.shared import shared_view
from app.sidebar import page_view
from app.state import large
from app.views.neurons_section import neurons_section
from core.analysis.ablations import Ablation
from core.claims.periods import claim_periods as period_claim
from core.claims.periods import period_caption, period_table
from core.paper import PARITY_KEEP_PERIOD_2, TABLE1_TAU
from core.runs import summaries
from core.runs.live_model import rebuildable_folder
from core.runs.live_sample import LIVE_SAMPLE, reads_sample
from core.runs.reader import Table
from core.runs.sampled_design import sampled_cells_note

view = page_view()
run, tau, basis = view.run, view.tau, view.basis
# the cutoff the figures show: the grid's nearest to the sidebar's, said once, in the line under the verdict
grid = run.table(Table.ABLATIONS) if run.has(Table.ABLATIONS) else None
shown_tau = summaries.nearest_tau(grid, tau) if grid is not None else tau
held = " and ".join(map(str, summaries.cached_taus(grid))) if grid is not None else ""
why_shown = (f"the cutoff nearest the sidebar's {tau} among the ones this run's precomputed grid holds ({held}); the "
             "live computation at the bottom takes any")
intro(
    "Ablations: which frequencies does the model need?",
    "Filter every layer's attention and/or MLP output so that the unembedding reads nothing in one band, and measure "
    "accuracy, next to a random-subspace control of the same size. Compare this run's table with the paper's.",
    claim="ablations",
    shown_tau=shown_tau,
    why_shown=why_shown,
)
needs(run, Table.ABLATIONS)
ablations = run.table(Table.ABLATIONS)
errors = run.table(Table.ABLATION_ERRORS)
run_basis = run.run_basis
if shown_tau != tau and run_claims(run)["ablations"].verdict == "does not apply":  # no verdict box: no line under it
    st.caption(f":material/tune: The figures below use tau = {shown_tau}, {why_shown}.")
if basis != run_basis:
    st.caption(
        f"The filters of this run were computed in the '{run_basis}' basis (the sidebar's basis changes the spectra "
        "only)."
    )

st.subheader(f"Table 1 for this run (tau = {shown_tau})", help=term("ablation"))
t1 = shared_view(run, summaries.table1, Table.ABLATIONS, shown_tau)  # the same for every session: computed once
if shown_tau != TABLE1_TAU:
    t1[["paper GPT-2-XL accuracy %", "paper GPT-2-XL loss"]] = None
# the paper's column next to the filter it belongs to: the comparison the table exists for stays in view at 1024 px
# with the sidebar open (the filter's column is pinned when the table scrolls sideways)
order = [
    "filter",
    "paper GPT-2-XL accuracy %",
    "accuracy %",
    "random control accuracy %",
    "loss",
    "paper GPT-2-XL loss",
    "Δ accuracy (points)",
    "within ±10 %",
    "rank",
    "energy removed %",
    "control energy removed %",
    "erased",
]
if large():  # a projector shows the accuracies whole; loss, change and rank are in the normal view and its CSV
    order = order[:4]
shown = t1[[c for c in order if c in t1.columns]].copy().rename(columns={"erased": "nothing left"})
# a column with an empty cell (no control for "none", no paper figure at another tau) is shown as text, so that the
# cell reads "—" (a number column shows "None")
formats = {
    "random control accuracy %": "{:.2f}",
    "paper GPT-2-XL accuracy %": "{:.2f}",
    "paper GPT-2-XL loss": "{:.4f}",
    "rank": "{:.0f}",
    "energy removed %": "{:.1f}",
    "control energy removed %": "{:.1f}",
}
for col, fmt in formats.items():
    if col in shown.columns and shown[col].isna().any():
        shown[col] = [("—" if v is None or v != v else fmt.format(v)) for v in shown[col]]


def numeric(col, fmt, **kw):
    """A number column, or a text column where the cells were written as text above."""
    if col not in shown.columns:
        return None
    if pd.api.types.is_numeric_dtype(shown[col]):
        return st.column_config.NumberColumn(format=fmt, **kw)
    return st.column_config.TextColumn(**kw)


st.dataframe(
    shown,
    hide_index=True,
    column_config={
        "filter": st.column_config.TextColumn(pinned=True),
        "accuracy %": st.column_config.NumberColumn(format="%.2f"),
        "loss": st.column_config.NumberColumn(format="%.4f"),
        "Δ accuracy (points)": st.column_config.NumberColumn(format="%+.2f"),
        "within ±10 %": st.column_config.NumberColumn(format="%.1f"),
        "rank": numeric("rank", "%d", help="Dimensions of the module output the filter removes."),
        "random control accuracy %": numeric(
            "random control accuracy %",
            "%.2f",
            help="Accuracy with a random subspace removed instead (directions W_U reads, no frequency chosen), "
            "as many as the band's rank and, where the run says 'rank and energy', taking away as much of the "
            "module outputs' energy as the band does; the mean over its draws.",
        ),
        "energy removed %": numeric("energy removed %", "%.1f",
                                    help="Share of the module outputs' energy (answer position, every layer) the "
                                         "filter takes away."),
        "control energy removed %": numeric("control energy removed %", "%.1f",
                                            help="The same share for the random control (mean over its draws)."),
        "paper GPT-2-XL accuracy %": numeric("paper GPT-2-XL accuracy %", "%.2f"),
        "paper GPT-2-XL loss": numeric("paper GPT-2-XL loss", "%.4f"),
        "nothing left": st.column_config.CheckboxColumn(
            help="The filter removes every direction of the module outputs: nothing of the modules is left, so the "
                 "row measures the modules switched off, not a frequency filter."),
    },
)
matched_on = "rank and energy" if (t1["control matched on"] == "rank and energy").any() else "rank"
st.caption(
    "'low removed' keeps only k ≥ tau; 'high removed' keeps only k < tau. The random control removes as many "
    "random directions W_U reads"
    + (", carrying as much of the modules' energy as the band" if matched_on == "rank and energy"
       else " (matched on rank only, not energy)")
    + ": a band matters only where it is well below its control. "
    f"Paper: GPT-2-XL validation, tau = {TABLE1_TAU}, no control."
)
ctrl, specific = summaries.costly_filters(t1)
if not ctrl.empty:
    st.caption(
        f"In this run, {len(specific)} of {len(ctrl)} band filters cost at least {summaries.COSTLY_MARGIN:g} "
        "points more "
        "than their random "
        "control"
        + (
            ": "
            + "; ".join(
                f"{r['filter']} {r['accuracy %']:.1f}% vs {r['random control accuracy %']:.1f}%"
                for _, r in specific.iterrows()
            )
            if len(specific)
            else ""
        )
        + "."
    )
if t1["erased"].any():
    st.warning(
        f"Some filters erase the module output entirely: this model is {run.width} wide, and the removed "
        "Fourier rows span all of it. Those rows measure a model with the modules switched off, not a frequency filter."
    )
sampled_note = sampled_cells_note(ablations, run.manifest)
if sampled_note:
    st.info(sampled_note)
show_chart(*logits.table1_chart(run, shown_tau), key="acc-by-tau")

narrow = period_claim(run)
if narrow is not None:
    st.subheader("Only the paper's periods removed", help=term("ablation"))
    st.markdown(
        "At tau = 50 a filter removes most of what a narrow model's W_U reads, so even random directions of that size "
        "break it. This narrow test removes only the waves of period 2, 2.5, 5 and 10 (or as many low or high "
        "frequencies) and compares each with random directions that take away as much of the modules' energy."
    )
    st.markdown(f"{BADGE[narrow.verdict]} **This run:** {narrow.headline}  \n**Why:** {why_sentence(narrow)}")
    st.dataframe(period_table(run), hide_index=True, height="content", column_config={
        "what": st.column_config.TextColumn(pinned=True),
        "accuracy %": st.column_config.TextColumn(
            "accuracy % (95% interval)",
            help="Accuracy with the removal; in brackets, lowest-highest, the range it lies in with 95% confidence "
                 "(a 95% interval)."),
        "random, same energy %": st.column_config.TextColumn(
            help="The random directions' mean accuracy ± their sd (standard deviation over the draws): how far one "
                 "draw typically lies from that mean."),
    })
    caption = period_caption(run)
    # the statistics' words it uses, in plain words right under it (a class reads no tooltip on a projector)
    st.caption(caption)
    for name in [n for n in jargon_in(caption) if n in ("sd", "95% interval")]:
        st.caption(f"**{name}**: {term(name)}")

st.subheader("Errors under one filter")
cells = {
    f"{summaries.ABLATION_MODULES[m]}: {r} removed": (m, r) for r in ("low", "high") for m in ("both", "attn", "mlp")
}
cell_names = ["no filter", *cells]
url_state("cell", "MLP: low removed", str, cell_names)
st.selectbox("Filter", cell_names, key="cell")
to_url("cell")
cell = st.session_state["cell"]
modules, removed = cells.get(cell, ("none", "none"))
dist = summaries.error_distribution(errors, modules, removed, None if removed == "none" else shown_tau)
if dist.empty:
    st.success("No wrong answers under this filter.")
else:
    shares = summaries.error_shares(dist)
    c1, c2 = st.columns(2)
    c1.metric(
        "Errors: multiples of 10",
        f"{shares['multiple_of_10']:.0%}",
        help="Paper: with the MLPs' low frequencies removed, errors are off by 10, 50, 100.",
    )
    c2.metric(
        f"Errors: smaller than {summaries.CLOSE_ERROR}",
        f"{shares['below_6']:.0%}",
        help=f"Paper: with attention's high frequencies removed, all errors are below {summaries.CLOSE_ERROR}.",
    )
    show_chart(
        *logits.error_histogram(
            dist,
            f"Error distribution, {cell} (tau = {shown_tau}) — {run.label}",
            "Red bars are errors that are multiples of 10: the last digit is right, the size is off.",
        ),
        key="err-hist",
    )

st.subheader("Keep one frequency")
keep = summaries.keep_one_results(ablations)
keep_view = keep.rename(columns={"keep_k": "k kept", "keep_period": "period T", "parity_match": "right parity",
                                 "erased": "nothing left"})
st.dataframe(
    keep_view,
    hide_index=True,
    column_config={
        "period T": st.column_config.NumberColumn(format="%.3g"),
        "loss": st.column_config.NumberColumn(format="%.4f"),
        "accuracy": st.column_config.ProgressColumn(format="percent", min_value=0, max_value=1),
        "within_10": st.column_config.ProgressColumn("within ±10", format="percent", min_value=0, max_value=1),
        "right parity": st.column_config.ProgressColumn(format="percent", min_value=0, max_value=1),
    },
)
st.caption(
    "Every frequency but one removed from attention and MLP outputs. Paper: keeping only period 2 gives the right "
    "parity "
    f"{PARITY_KEEP_PERIOD_2}% of the time; keeping period 520 gives answers spread around the right one."
)

st.subheader("Compute a filter live", anchor="live-result")  # app.live.ablation imports torch only when one starts
warmup_note()  # the live path warmed when the dashboard started: its progress while it runs
folder, why = live_folder(run)
rebuildable = rebuildable_folder(run.manifest) if folder is None else None
if folder is None:
    then = "Or rebuild them here with the button below." if rebuildable else "The cached grid above is what there is."
    st.info(f"Live computation is not available for this run: {why}. {then}")
    if rebuildable is not None:  # only a delta ships: its weights are one merge away (never a model to train again)
        offer_rebuild(rebuildable)
else:
    rebuilt_note(folder)
    c1, c2, c3 = st.columns(3)
    url_state("live_modules", "mlp", str, ["both", "attn", "mlp"])
    url_state("live_removed", "low", str, ["low", "high"])
    c1.selectbox("Modules", ["both", "attn", "mlp"], key="live_modules", format_func=summaries.ABLATION_MODULES.get)
    c2.selectbox(
        "Band removed", ["low", "high"], key="live_removed", format_func=summaries.BAND_NAMES.get, help=term("low-pass")
    )
    c3.metric("Cutoff tau (sidebar)", tau)
    with st.expander("Advanced: CPU threads"):
        st.caption(
            "How many processor cores the live computation may use. Leave it on auto (the cores not busy with other "
            "work right now); on a machine shared with other work, 1 thread is often faster."
        )
        st.selectbox("CPU threads", ["auto", 1, 2, 4], key="live_threads")
    to_url("live_modules", "live_removed")
    whole = True
    if reads_sample(run.n_examples, run.n_layers, run.width or 0):  # a deep model: a fixed sample answers in seconds
        whole = st.toggle(
            f"Every question ({run.n_examples:,}) instead of a fixed sample of {LIVE_SAMPLE}",
            key="live_whole",
            help="The sample is the same every time, and small, middle and large answers appear in it in the same "
            "proportions as in the whole split. Its accuracy comes with a 95% interval, shown as it narrows while "
            "the questions come in. "
            f"Every question takes about {run.n_examples / LIVE_SAMPLE:.0f} times as long.",
        )
    settings = (run.name, st.session_state["live_modules"], st.session_state["live_removed"], int(tau), run_basis,
                whole)
    request = live_request(run, folder, *settings[1:5], threads=st.session_state["live_threads"], whole=whole)
    label = Ablation(*settings[1:4]).label()
    asked = f"all {run.n_examples:,} questions" if whole else f"the {LIVE_SAMPLE}-question sample"
    # submitted by the button's callback, before the page above is drawn again: the computation runs meanwhile. One
    # queue for the whole server: the same request from many students is computed once (app/live/queue.py)
    st.button(f"Run {asked} with this filter", type="primary", on_click=press_live, args=(request,))
    pressed_live(request)
    if st.session_state.get("live_waiting") == request["key"]:
        status = follow_live(request, label)  # its place in the queue, counting down, then the progress bar
        if status.state == "done":
            st.session_state["live_result"] = status.result
            st.session_state["live_settings"] = settings
            st.session_state["live_just_computed"] = True
            del st.session_state["live_waiting"]
        elif status.state in ("failed", "refused"):
            del st.session_state["live_waiting"]
            st.error(status.message)
        else:
            st.info("Still waiting for the live computation: press the button again in a while to see its result.")
    elif "live_waiting" in st.session_state:  # the settings changed while waiting: that request goes on, unfollowed
        del st.session_state["live_waiting"]
    result = st.session_state.get("live_result")
    if result and result["run"] == run.name and st.session_state.get("live_settings") != settings:
        st.warning(
            f"Stale: the last live result ({result['label']}) was computed with other settings than the ones above "
            "(modules, band, tau or basis). Press the button to compute these.",
            icon=":material/history:",
        )
    elif result and result["run"] == run.name:
        took = ""
        if result.get("compute_s"):
            took = f" in {result['compute_s']:.2f} s with {result['threads']} CPU thread(s)"
            kept = result.get("prefix_sources") or {}
            if result.get("prefix_reused"):
                took += "; the prompts' prefixes were kept " + (
                    "on disk from an earlier computation" if kept.get("disk") else "from the previous filter"
                )
        which = (
            f"a fixed sample of {result['n']:,} of the {result['split_n']:,} {run.split} questions"
            if result.get("sample") else f"all {result['n']:,} {run.split} questions"
        )
        st.markdown(f"**{result['label']}** on {which} (computed live{took}):")
        if st.session_state.pop("live_just_computed", False):  # the button was just pressed: show its answer
            scroll_into_view("live-result")
        c1, c2, c3 = st.columns(3)
        base = result.get("unfiltered_accuracy")
        if base is None:
            base = summaries.unfiltered(ablations)["accuracy"]
        c1.metric(
            "accuracy",
            f"{result['accuracy']:.2%}",
            f"{100 * (result['accuracy'] - base):+.2f} points vs no filter on the same questions",
        )
        if result.get("interval"):
            low, high = result["interval"]
            c1.caption(f"From these {result['n']:,} questions, the accuracy over every question most likely lies "
                       f"between {low:.1%} and {high:.1%} (a 95% interval).")
        c2.metric("loss", f"{result['loss']:.4f}")
        c3.metric(
            "errors that are multiples of 10",
            "–" if result["share10"] is None else f"{result['share10']:.0%}",
        )
        if result["erased"]:
            st.warning("This filter erases the module outputs entirely (the removed rows span the model's width).")
        if len(result_frame(result)):
            show_chart(
                *logits.error_histogram(
                    result_frame(result),
                    f"Error distribution, {result['label']} — {run.label}",
                    "Errors of the live run; red bars are multiples of 10.",
                ),
                key="live-hist",
            )

neurons_section(run)
