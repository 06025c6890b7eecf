import streamlit as st

from app.figures import logits
from app.furniture import intro, needs, origin_note, show_chart
from app.guards.csv_safety import spreadsheet_safe
from app.guards.literal_text import literal
from app.guards.uploads import MAX_UPLOAD_MB, read_upload
from app.guards.url_state import to_url, url_state
from app.sidebar import page_view
from core.analysis.behaviour import MAX_UPLOAD_ROWS
from core.claims.accuracy import selection_note
from core.errors import CoreError
from core.paper import MULTIPLE_OF_10
from core.runs import summaries
from core.runs.reader import Table

view = page_view()
run = view.run
intro(
    "Behaviour: how wrong are the wrong answers?",
    "A model that classifies the last digit with high frequencies and approximates the size with low ones would make "
    "a telling kind of mistake: right last digit, wrong tens, so errors are multiples of 10 (the paper: 93% of GPT-J's "
    "4-shot errors). Look at the share of such errors here, and upload any model's answers (an API model's, say) to "
    "test it the same way.",
    claim="behaviour",
)


def error_metrics(summary: dict, none: bool, accuracy_help: str, wrong: str) -> None:
    """Accuracy, and the shares of `wrong` (the wrong answers counted) that are multiples of 10 / off by 1 or 2."""
    c1, c2, c3 = st.columns(3)
    c1.metric("Accuracy", f"{summary['accuracy']:.2%}", help=accuracy_help)
    c2.metric(
        "Errors: multiples of 10",
        "–" if none else f"{summary['share_multiple_of_10']:.0%}",
        help=f"Of {wrong}, the share whose error is a multiple of 10 (last digit right).",
    )
    c3.metric(
        "Errors: off by 1 or 2",
        "–" if none else f"{summary['share_within_2']:.0%}",
        help=f"Of {wrong}, the share off by 1 or 2.",
    )


def error_report(answers, given, what: str, key: str) -> None:
    """Accuracy, share of errors that are multiples of 10 / of size 1-2, and the error histogram."""
    summary, hist = summaries.behaviour(answers, given)
    none = summary["n_wrong"] == 0
    error_metrics(summary, none, f"{summary['n']} {what}", "the wrong answers")
    if none:
        n = summary["n"]
        st.success(
            "The one answer is right: there are no errors to analyse."
            if n == 1
            else f"All {n:,} answers are right: there are no errors to analyse."
        )
    else:
        show_chart(
            *logits.error_histogram(
                hist, f"Errors: {what}", "Red bars are errors that are multiples of 10 (last digit right, size wrong)."
            ),
            key=key,
        )


if run.has(Table.GENERATIONS):  # a model that writes numbers digit by digit: its k-shot answers
    origin_note(run)
    gens = run.table(Table.GENERATIONS)
    shots = sorted(int(k) for k in gens["shots"].unique())
    url_state("shots", max(shots), int, shots)
    st.radio(
        "Solved examples before each question (k-shot)",
        shots,
        key="shots",
        horizontal=True,
        format_func=lambda k: f"{k}-shot",
        help="Drawn from the training split; the model writes its answer greedily.",
    )
    to_url("shots")
    k = st.session_state["shots"]
    summary, hist = summaries.generation_summary(gens, k)
    n_nan = summary["n_not_a_number"]
    st.markdown(
        f"{run.label} wrote its answer digit by digit after {k} solved example(s), for {summary['n']:,} {run.split} "
        f"questions (a seeded sample). "
        + (f"{n_nan:,} of its answers did not start with a number and count as wrong. " if n_nan else "")
        + "By shot count: "
        + "; ".join(f"{s}-shot {summaries.generation_summary(gens, s)[0]['accuracy']:.1%} right" for s in shots)
        + "."
    )
    none = hist.empty
    error_metrics(summary, none, f"{summary['n']} prompts, {k}-shot", "the wrong answers that are numbers")
    if not none:
        show_chart(
            *logits.error_histogram(
                hist,
                f"Errors of {run.label}, {k}-shot",
                "Red bars are errors that are multiples of 10 (last digit right, size wrong).",
            ),
            key="kshot-errors",
        )
    with st.expander("What the model wrote (first 50 questions)"):
        sub = gens[gens["shots"] == k].sort_values(["a", "b"]).head(50)
        st.dataframe(  # what the model wrote is untrusted text: the table's CSV export must not run it as a formula
            spreadsheet_safe(sub[["a", "b", "answer", "generated", "prediction", "correct"]]),
            hide_index=True,
            column_config={"generated": st.column_config.TextColumn("what it wrote")},
        )
else:
    needs(run, Table.EXAMPLES)
    ex = run.table(Table.EXAMPLES)
    error_report(ex["answer"], ex["prediction"], f"{run.split} prompts of {run.label}", "errors")
    if run.split == "test" and (note := selection_note(run)):  # a test score that is not a clean held-out figure
        st.warning(f"**Not a clean test score:** {note}.", icon=":material/info:")
    show_chart(*logits.accuracy_by_answer(run), key="by-answer")
st.caption(
    "Paper (share of errors that are multiples of 10): "
    + "; ".join(f"{k} {v}%" for k, v in MULTIPLE_OF_10.items())
    + "."
)

st.subheader("Test another model's answers")
st.markdown(
    f"Upload a CSV with a header row `a,b,answer_given` (whole numbers, at most {MAX_UPLOAD_ROWS:,} rows, "
    f"{MAX_UPLOAD_MB} MB): one line per question 'a + b', with the answer the model gave."
)
upload = st.file_uploader("CSV of answers", type=["csv"], accept_multiple_files=False)
st.caption(  # the browser refuses a larger file itself, before sending it, and says why only when pointed at
    f"A file over {MAX_UPLOAD_MB} MB is refused before it is sent: the uploader marks it with a red ! (point at it "
    "to read why)."
)
if upload is not None:
    try:
        frame = read_upload(upload.getvalue())  # size, kind of file, encoding, shape, columns, numbers: one line
    except CoreError as exc:
        st.error(literal(str(exc)), icon=":material/block:")
    else:
        error_report(frame["answer"], frame["answer_given"], f"answers in {upload.name}", "upload-errors")
