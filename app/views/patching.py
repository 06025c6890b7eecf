import streamlit as st

from app.figures.attribution import attribution_scatter
from app.figures.patching import head_heatmap, position_heatmap, site_heatmap
from app.furniture import intro, not_measured_here, show_chart
from app.sidebar import page_view
from core.claims.attribution import attribution_summary
from core.claims.patching import example_pair, patching_summary, position_summary
from core.runs.reader import Table

view = page_view()
run = view.run
intro(
    "Patching: which layer carries the difference between two questions",
    "Run a question and the same question with its second operand one more: their answers differ by one, in their "
    "last digit. Now run the second question again, but copy one piece of the first run into it, at the position "
    "where the answer is read: the stream after one layer, one attention or MLP output, or one attention head. If the "
    "answer moves back toward the first one's, that piece carried the difference. The share that comes back is read "
    "on the logit difference (the first answer's logit minus the second's), over every question of the split paired "
    "the same way. The paper does not patch: this is the field's standard test of where information sits (Meng et "
    "al. 2022), shown beside its story, not as a verdict.",
)
if not_measured_here(run, Table.PATCHING, "Activation patching"):
    st.stop()
clean, clean_answer, corrupt, corrupt_answer = example_pair(run)
st.markdown(f"For example: *{clean}* ({clean_answer}) against *{corrupt}* ({corrupt_answer}).")
show_chart(*site_heatmap(run), key="patching-sites")
st.markdown(patching_summary(run))
if (run.table(Table.PATCHING)["kind"] == "head").any():
    with st.expander("Head by head"):
        show_chart(*head_heatmap(run), key="patching-heads")
if run.has(Table.POSITION_PATCHING):  # the stream patched at every token and layer
    st.subheader("Token by token: where the operands move into the answer position")
    show_chart(*position_heatmap(run), key="patching-positions")
    st.markdown(position_summary(run))
if run.has(Table.ATTRIBUTION):  # attribution patching beside the exact patching it approximates
    st.subheader("The gradient estimate against exact patching")
    show_chart(*attribution_scatter(run), key="patching-attribution")
    st.markdown(attribution_summary(run))
st.caption("Recompute one pair or a split's pairs from the command line: `python -m core patch RUN --clean "
           "\"15 + 93\" --corrupt \"15 + 94\"` (every site's numbers with `--json`).")
