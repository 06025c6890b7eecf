import streamlit as st

from app.figures.attribution import attribution_scatter
from app.figures.patching import group_bars, head_heatmap, position_heatmap, site_heatmap
from app.furniture import intro, not_measured_here, show_chart
from app.live.ablation import live_folder, live_patch
from app.shared import shared_on_run
from app.sidebar import page_view
from core.analysis.patch_table import DENOISE
from core.claims.attribution import attribution_summary
from core.claims.patching import (
    groups_summary,
    name_sites,
    pair_words,
    patching_summary,
    position_summary,
    reading,
    reading_summary,
    readings,
    short_form,
    site_kinds,
    split_pairs,
)
from core.errors import CoreError
from core.runs.reader import Table
from core.tasks import task_name

#: The site kinds the page draws, by the label of its control.
KINDS = {"Stream, attention and MLP": "sites", "Heads": "heads", "Layers together": "groups"}
#: Each reading in the control's words.
DIRECTION_LABELS = {DENOISE: "restore", "noise": "take away"}  # short: a third of the page beside the sidebar
CACHED, ONE_PAIR = "every pair of the split (cached)", "one pair, computed now"

view = page_view()
run = view.run
intro(
    "Patching: which layer carries the difference between two questions",
    "Run a question a + b and the same question with b one more: their answers differ by one, in their "
    "last digit (or b ten more: they differ in the tens digit). Now run the second question again, but copy one piece "
    "of the first run into it, at the position where the answer is read: the stream after one layer, one attention "
    "or MLP output, one attention head, or a group of layers at once. If the answer moves back toward the first "
    "one's, that piece carried the difference (denoising); copying the other way, from the second run into the "
    "first, shows what the first answer cannot do without (noising). What comes back is read on the logit "
    "difference: how much higher the model scores the first answer than the second, in logits (the scores before "
    "they are turned into probabilities). The paper does not patch: this is the field's standard test of where "
    "information sits (Meng et al. 2022), shown beside its story, not as a verdict.",
)
if not_measured_here(run, Table.PATCHING, "Activation patching"):
    st.stop()
table = run.table(Table.PATCHING)
folder, why_not = live_folder(run)
left, middle, right = st.columns(3)
direction, contrast = left.selectbox(
    "Reading", readings(table), key="patching-reading",
    format_func=lambda dc: f"{DIRECTION_LABELS[dc[0]]}, b ± {dc[1]}",
    help="restore (denoising): a piece of the first question's run copied into the second's, read as the share of "
         "the gap between the two runs it closes; take away (noising): the second's piece copied into the first's, "
         "the share of that gap it opens; b ± 1 or b ± 10: the second question's second number is one (or ten) more "
         "than the first's, or less where more would leave the number line")
present = site_kinds(table)  # in any reading: the choices stay while the reading changes (a reading without the
kinds = [k for k, v in KINDS.items() if v in present]  # kind chosen says so below)
kind = KINDS[middle.radio("Sites", kinds, key="patching-kind")]
source = right.radio("Pairs", [CACHED, ONE_PAIR], key="patching-pairs", disabled=folder is None,
                     help=None if folder is None else "one pair, patched now at every site with the run's model")
if folder is None:
    right.markdown(f"One pair computed now needs the model: {why_not}.")

live, pair = None, None
if source == ONE_PAIR and folder is not None:
    pairs = shared_on_run(split_pairs, run, contrast)
    chosen = st.selectbox(f"The pair ({len(pairs):,} questions of the {run.split} split have a partner)", list(pairs),
                          key=f"patching-pair-{contrast}",
                          format_func=lambda i: f"{short_form(pairs[i][0])} against {short_form(pairs[i][1])}")
    clean, other = pairs[chosen]
    pair = pair_words(clean, other)
    try:
        with st.spinner(f"Patching {pair} at every site (a few seconds)…"):
            live = live_patch(run, folder, short_form(clean), short_form(other), clean.phrasing, direction, contrast)
    except CoreError as exc:
        st.error(str(exc))
        st.stop()
    st.markdown(f"The pair: {pair}.")
else:
    clean, other = next(iter(shared_on_run(split_pairs, run, contrast).values()))
    st.markdown(f"For example: {pair_words(clean, other)}.")

if kind not in site_kinds(reading(live if live is not None else table, direction, contrast)):
    st.info("This reading holds none of these sites: the heads are read restoring (denoising) with b one more "
            "over all pairs; one pair computed now reads them in every reading.")
elif kind == "sites":
    show_chart(*site_heatmap(run, direction, contrast, live, pair), key="patching-sites")
elif kind == "heads":
    show_chart(*head_heatmap(run, direction, contrast, live, pair), key="patching-heads")
else:
    show_chart(*group_bars(run, live, pair), key="patching-groups")
if live is not None:
    over = f"{task_name(run.task)} questions (computed now"
    st.markdown(reading_summary(name_sites(live), direction, contrast, over))
elif kind == "groups":
    st.markdown(shared_on_run(groups_summary, run))
else:
    st.markdown(shared_on_run(patching_summary, run, direction, contrast, extras=False))

if run.has(Table.POSITION_PATCHING):  # the stream patched at every token and layer
    st.subheader("Token by token: where the operands move into the answer position")
    show_chart(*position_heatmap(run), key="patching-positions")
    st.markdown(shared_on_run(position_summary, run))
if run.has(Table.ATTRIBUTION):  # attribution patching beside the exact patching it approximates
    st.subheader("The gradient estimate against exact patching")
    show_chart(*attribution_scatter(run), key="patching-attribution")
    st.markdown(shared_on_run(attribution_summary, run))
st.caption("Recompute one pair or a split's pairs from the command line: `python -m core patch RUN --clean "
           "\"15 + 93\" --corrupt \"15 + 94\"` (`--direction noise`, `--contrast 10`; every site's numbers with "
           "`--json`; it counts layers from 1, as this page does, each hook's block number, from 0, beside).")
