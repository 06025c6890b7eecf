import streamlit as st

from app.figures import logits
from app.furniture import example_picker, intro, needs, show_chart
from app.glossary import term
from app.guards.url_state import to_url, url_flag, url_state
from app.sidebar import page_view
from core.runs.reader import Table

view = page_view()
run = view.run
intro(
    "Logit lens: when does the model know the answer?",
    "Read every layer's residual stream through the unembedding and ask which number it would answer. "
    "Look for layers that are already close (within ±10) long before they are exact: that is what approximating the "
    "size first, then pinning down the last digit, looks like.",
    claim="logit_lens",
)
needs(run, Table.LAYER_ACCURACY)
url_state("norm", False, url_flag)
st.toggle(
    "Apply the final layer norm before W_U (usual logit lens; the paper applies W_U directly)",
    key="norm",
    help=term("logit lens"),
)
to_url("norm")
show_chart(*logits.accuracy_by_layer(run, st.session_state["norm"]), key="acc-by-layer")

st.subheader("What each module writes", help=term("module logits"))
example = example_picker(run)
show_chart(*logits.logit_heatmap(run, example), key="heatmap")

layers = list(range(1, run.n_layers + 1))
url_state("layer", layers[-1], int, layers)
if len(layers) > 1:
    st.select_slider(
        "Layer",
        options=layers,
        key="layer",
        help="Which layer's attention and MLP output to draw over the whole number line.",
    )
to_url("layer")
show_chart(*logits.module_wave(run, example, st.session_state["layer"]), key="wave")
