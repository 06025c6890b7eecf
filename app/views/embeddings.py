import streamlit as st

from app import figures
from app.common import intro, show_chart, term, to_url, url_state, view
from core.embeddings import top_periods

v = view()
run, compare, basis = v["run"], v["compare"], st.session_state["basis"]
intro(
    "Embeddings: where the Fourier features come from",
    "Transform the number embeddings along the number line and look for a few frequencies that stand far above the "
    "shuffled-numbers threshold (a level that pure chance passes anywhere in only 5% of shuffles). Pick a second run "
    "in the sidebar to compare side by side.",
    claim="embeddings",
)
url_state("matrix", "input", str, ["input", "output"])
st.radio(
    "Which number rows", ["input", "output"], key="matrix", horizontal=True,
    format_func={"input": "input embedding W_E", "output": "unembedding W_U"}.get,
    help="With tied embeddings (GPT-2) both are the same matrix.",
)
to_url("matrix")
matrix = st.session_state["matrix"]
runs = [run] + ([compare] if compare is not None else [])
cols = st.columns(len(runs))
for col, r in zip(cols, runs):
    with col:
        st.markdown(f"**{r.label}**")
        show_chart(*figures.embedding_spectrum(r, basis, matrix), key=f"emb-spec-{r.name}")
        spec = r.table("embedding_spectrum")
        spec = spec[(spec["basis"] == basis) & (spec["matrix"] == matrix)]
        outliers = spec[spec["outlier"]].sort_values("magnitude", ascending=False)
        st.markdown(f"**Top periods:** {', '.join(f'{t:.3g}' for t in top_periods(spec, 5))}", help=term("period"))
        periods = ", ".join(f"{t:.3g}" for t in outliers["period"].head(8))
        st.caption(
            f"{len(outliers)} of {len(spec)} frequencies stand above the shuffled-numbers threshold (family-wise 5%)"
            + (f": periods {periods}" + (" …" if len(outliers) > 8 else "") + "." if len(outliers) else ".")
        )

url_state("colour", "last digit", str, ["last digit", "magnitude"])
st.radio("Colour the t-SNE map by", ["last digit", "magnitude"], key="colour", horizontal=True)
to_url("colour")
cols = st.columns(len(runs))
for col, r in zip(cols, runs):
    with col:
        show_chart(*figures.embedding_map(r, matrix, st.session_state["colour"]), key=f"tsne-{r.name}")
