import streamlit as st

from app import figures
from app.common import intro, show_chart, view
from core import views
from core.behaviour import MAX_UPLOAD_ROWS, read_answers_csv
from core.errors import CoreError
from core.paper import MULTIPLE_OF_10

v = view()
run = v["run"]
intro(
    "Behaviour: how wrong are the wrong answers?",
    "A model that classifies the last digit with high frequencies and approximates the size with low ones would make "
    "a telling kind of mistake: right last digit, wrong tens, so errors are multiples of 10 (the paper: 93% of GPT-J's "
    "4-shot errors). Look at the share of such errors here, and upload any model's answers (an API model's, say) to "
    "test it the same way.",
)


def error_report(answers, given, what: str, key: str) -> None:
    """Accuracy, share of errors that are multiples of 10 / of size 1-2, and the error histogram."""
    summary, hist = views.behaviour(answers, given)
    c1, c2, c3 = st.columns(3)
    c1.metric("Accuracy", f"{summary['accuracy']:.2%}", help=f"{summary['n']} {what}")
    none = summary["n_wrong"] == 0
    c2.metric("Errors: multiples of 10", "–" if none else f"{summary['share_multiple_of_10']:.0%}",
              help="Share of the wrong answers whose error is a multiple of 10 (last digit right).")
    c3.metric("Errors: off by 1 or 2", "–" if none else f"{summary['share_within_2']:.0%}",
              help="Share of the wrong answers that are off by 1 or 2.")
    if none:
        n = summary["n"]
        st.success("The one answer is right: there are no errors to analyse." if n == 1 else f"All {n:,} answers are right: there are no errors to analyse.")
    else:
        show_chart(*figures.error_histogram(hist, f"Errors: {what}", "Red bars are errors that are multiples of 10 (last digit right, size wrong)."), key=key)


ex = run.table("examples")
error_report(ex["answer"], ex["prediction"], f"{run.manifest['task']['split']} prompts of {run.label}", "errors")
show_chart(*figures.accuracy_by_answer(run), key="by-answer")
st.caption("Paper (share of errors that are multiples of 10): " + "; ".join(f"{k} {v}%" for k, v in MULTIPLE_OF_10.items()) + ".")

st.subheader("Test another model's answers")
st.markdown(
    f"Upload a CSV with a header row `a,b,answer_given` (whole numbers, at most {MAX_UPLOAD_ROWS:,} rows): one line per "
    "question 'a + b', with the answer the model gave."
)
upload = st.file_uploader("CSV of answers", type=["csv"], accept_multiple_files=False)
if upload is not None:
    try:
        frame = read_answers_csv(upload.getvalue())
    except CoreError as exc:
        st.error(str(exc))
    else:
        error_report(frame["answer"], frame["answer_given"], f"answers in {upload.name}", "upload-errors")
