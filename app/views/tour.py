import streamlit as st

from app import figures
from app.common import show_chart, to_url, training_logs, url_state, view
from core import views
from core.paper import ACCURACY

v = view()
run, compare, basis, tau = v["run"], v["compare"], st.session_state["basis"], st.session_state["tau"]
ex = run.table("examples")
running = ex[ex["id"] == "15+93"]
example = views.sampled_examples(ex).set_index("id").iloc[0] if running.empty else running.set_index("id").iloc[0]


def step_question():
    st.markdown(f"#### Prompt: `{example['prompt'].splitlines()[-1]}`")
    c2, c3 = st.columns(2)
    c2.metric("Model answers", int(example["prediction"]), "right" if example["correct"] else f"wrong (answer {example['answer']})",
              delta_color="normal" if example["correct"] else "inverse")
    c3.metric("Test accuracy", f"{ex['correct'].mean():.1%}", help=f"{len(ex)} prompts; the paper's fine-tuned GPT-2-XL: {ACCURACY['GPT-2-XL fine-tuned']}%")
    show_chart(*figures.final_logits(run, example), key="tour-final")


def step_logit_lens():
    show_chart(*figures.accuracy_by_layer(run, False), key="tour-lens")


def step_heatmap():
    show_chart(*figures.logit_heatmap(run, example), key="tour-heat")


def step_spectrum():
    show_chart(*figures.spectrum_heatmap(run, basis, "mlp", tau), key="tour-spec-mlp")
    show_chart(*figures.spectrum_heatmap(run, basis, "attn", tau), key="tour-spec-attn")


def step_waves():
    chart, data, caption, _ = figures.waves(run, example, basis, 5, window=25)
    show_chart(chart, data, caption, key="tour-waves")


def step_ablations():
    ab = run.table("ablations")
    t = views.nearest_tau(ab, tau)
    table = views.table1(ab, t)
    st.dataframe(
        table[["filter", "accuracy %", "loss", "paper GPT-2-XL accuracy %", "paper GPT-2-XL loss", "erased"]],
        hide_index=True,
        column_config={"accuracy %": st.column_config.NumberColumn(format="%.2f"), "loss": st.column_config.NumberColumn(format="%.4f")},
    )
    st.caption(f"Filters on every layer at tau = {t}; paper numbers are GPT-2-XL's at tau = 50.")
    show_chart(*figures.table1_chart(run, t), key="tour-ablate")


def step_embeddings():
    runs = [run] + ([compare] if compare is not None else [])
    cols = st.columns(len(runs))
    for col, r in zip(cols, runs):
        with col:
            show_chart(*figures.embedding_spectrum(r, basis, "input"), key=f"tour-emb-{r.name}")


def step_training():
    logs = training_logs(run.manifest["task"]["split"])
    if not logs:
        st.info("No run here carries a training log.")
        return
    curves = views.training_curves(logs, "val")
    show_chart(*figures.training_curves(curves, "val"), key="tour-train")


STEPS = [
    ("1. The question", "A model reads 'Put together 15 and 93. Answer:' and must emit 108 as one token. How good is it, and how are its mistakes shaped?", step_question),
    ("2. The answer builds up layer by layer", "Read each layer through the unembedding (the logit lens): the model is near the answer before it is exact.", step_logit_lens),
    ("3. Every module writes a wave", "Each attention and MLP output, read through W_U, favours a pattern of numbers: some every 2nd, 5th or 10th number, some a broad region.", step_heatmap),
    ("4. Few frequencies, used everywhere", "Split the module logits into Fourier components: the spectrum is sparse. MLPs carry low frequencies (size), attention high ones (last digit).", step_spectrum),
    ("5. Approximate, then classify", "The strongest components of the final logits: long waves put a bump near the answer, short waves pick the exact number.", step_waves),
    ("6. Take the frequencies away", "Filter a band out of every layer: without the MLPs' low frequencies answers drift by tens; without attention's high ones the last digit goes.", step_ablations),
    ("7. The features live in the embeddings", "Number embeddings of pre-trained models carry the same periods; models trained from scratch do not.", step_embeddings),
    ("8. Give a model the features, and it learns", "The same small network learns addition far faster with Fourier-featured number embeddings.", step_training),
]

url_state("step", 1, int, list(range(1, len(STEPS) + 1)))


def move(delta):
    st.session_state["step"] = min(len(STEPS), max(1, st.session_state["step"] + delta))


st.title("How a language model adds: a guided tour")
st.markdown(
    f"Eight steps through the paper's story, drawn from **{run.label}**. Use the buttons to move; "
    "switch on presentation mode in the sidebar for a projector."
)
left, mid, right = st.columns([1, 4, 1])
left.button("◀ Previous", on_click=move, args=(-1,), disabled=st.session_state["step"] == 1, width="stretch")
right.button("Next ▶", on_click=move, args=(1,), disabled=st.session_state["step"] == len(STEPS), width="stretch")
mid.progress(st.session_state["step"] / len(STEPS), text=f"Step {st.session_state['step']} of {len(STEPS)}")
to_url("step")
title, text, draw = STEPS[st.session_state["step"] - 1]
st.header(title)
st.markdown(text)
draw()
