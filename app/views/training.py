import streamlit as st

from app.figures import training
from app.figures.training import SPLIT_NAMES
from app.furniture import intro, show_chart
from app.guards.url_state import to_url, url_state
from app.run_loading import BUILT_CONTROLS, fine_tuned_training, fine_tuning_history, training_logs
from app.sidebar import page_view
from core.claims.accuracy import selection_note_of
from core.paper import ACCURACY
from core.runs import training_summaries
from core.tasks import task_name

view = page_view()
intro(
    "Training: how fast each model learns to add",
    "Two kinds of training. The demo models are small networks trained here from random init, with number embeddings "
    "frozen to Fourier features, or after pre-training on text about numbers: compare how fast and how high each goes "
    f"(the paper's figure 7b: GPT-2-small reaches {ACCURACY['GPT-2-small from scratch']:g}% from scratch and "
    f"{ACCURACY['GPT-2-small, frozen pre-trained embeddings']:g}% with GPT-2's pre-trained number embeddings "
    "frozen in). Below them, the real pre-trained LLM fine-tuned here on addition, and the earlier models and "
    "variants it replaced.",
)
url_state("curve_split", "val", str, ["train", "val", "test"])
st.radio(
    "Accuracy on",
    ["val", "train", "test"],
    key="curve_split",
    horizontal=True,
    format_func=SPLIT_NAMES.get,
    help="Which split the accuracy is counted on: validation (used to choose), training, or test.",
)
to_url("curve_split")
split = st.session_state["curve_split"]

st.subheader("Small models trained here")
by_task = training_logs(view.split)
if not by_task:
    st.info(
        "No run of a small model in the cache carries a training log. Runs of the demo models trained with `python -m "
        "core train` do."
    )
else:
    # one chart per task, each on its own epoch axis (multiplication trains for 120 epochs, addition for 8)
    names = [t if t.startswith(BUILT_CONTROLS) else task_name(t) for t in by_task]
    tabs = st.tabs(names) if len(by_task) > 1 else [st.container()]
    for tab, (task, logs) in zip(tabs, by_task.items()):
        with tab:
            if task.startswith(BUILT_CONTROLS):
                st.caption(f"{len(logs)} model{'s' if len(logs) > 1 else ''} trained here with each module held to "
                           "one band of frequencies (the paper's division of labour built in, or swapped), to show "
                           "what the Tour's rules say of each. Not the paper's models.")
            curves = training_summaries.training_curves(logs, split)
            show_chart(*training.training_curves(curves, split, height=360), key=f"training-{task}")  # a Tour step: 265
            final = training_summaries.final_accuracies(curves)
            st.dataframe(
                final.rename(columns={"mean": "final accuracy (mean)", "low": "lowest seed", "high": "highest seed"}),
                hide_index=True,
                column_config={
                    c: st.column_config.NumberColumn(format="percent")
                    for c in ["final accuracy (mean)", "lowest seed", "highest seed"]
                },
            )
    st.caption(
        "Paper, for scale: "
        + "; ".join(f"{k}: {v}%" for k, v in ACCURACY.items() if "small" in k or "scratch" in k)
        + ". The demo models are 2-layer GPT-2-style networks trained here on a CPU (640 wide; the seed studies 256 "
        "wide, "
        "named so in the legend)."
    )

st.subheader("A real pre-trained LLM fine-tuned here")
tuned = fine_tuned_training(view.split)
if not tuned:
    st.info(
        "No fine-tuned run of a real pre-trained model is in the cache (`python -m core train --recipe "
        "smollm2-addition-rows-blocks-18-29` makes the default one: about 3 hours on two CPU cores with "
        "`--precision float32`, 5 minutes on a GPU with `--device cuda`)."
    )
else:
    stages = training_summaries.fine_tuning_stages(tuned, split, earlier=fine_tuning_history(tuned))
    default = tuned[0][0]  # the split's runs come in display order: the first is the one the dashboard opens with
    roles = training_summaries.fine_tuning_roles(stages, default)
    finals = training_summaries.fine_tuning_finals(roles, tuned, default)
    paper = ACCURACY["GPT-2-XL fine-tuned"] / 100
    show_chart(*training.fine_tuning_finals(finals, split, paper), key="training-finals")
    show_chart(*training.fine_tuning_stages(roles, split, paper), key="training-stages")
    st.caption("Each model and stage above, from its training log (a later stage counts its epochs on from the "
               "stage it continues):")
    st.dataframe(training_summaries.stages_table(stages, split), hide_index=True, height="content")
    if once := training_summaries.scored_once(tuned):
        st.markdown(once)
    notes = [f"**{label}**: {note}." for label, manifest, log in tuned if (note := selection_note_of(manifest, log))]
    if notes:
        st.markdown(
            "**Which split chose the model.** A model is chosen on the validation split and scored once on the test "
            "split; "
            "where that did not hold, it says so here, and the Tour judges accuracy on validation.  \n"
            + "  \n".join(notes)
        )
