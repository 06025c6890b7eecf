"""Live computation for the Ablations page: load a small local model once, evaluate with a progress bar."""

from __future__ import annotations

import streamlit as st

from app.common import Run
from core import views
from core.filters import Ablation


@st.cache_resource(show_spinner="Loading the model…", max_entries=2)
def _model(folder: str):
    from core.live import load_live_model

    return load_live_model(folder)


def run_live(run: Run, folder, modules: str, removed: str, tau: int, basis: str) -> dict:
    from core.live import live_ablation

    loaded = _model(str(folder))
    ablation = Ablation(modules, removed, int(tau))
    examples = run.table("examples")
    bar = st.progress(0.0, text=f"{ablation.label()}: 0 of {len(examples)} prompts")

    def on_batch(done, total):
        bar.progress(done / total, text=f"{ablation.label()}: {done} of {total} prompts")

    ev = live_ablation(loaded, examples, run.p, basis, ablation, on_batch=on_batch)
    bar.empty()
    summary, hist = views.behaviour(ev.answers, ev.predictions)
    return {
        "run": run.name,
        "label": ablation.label(),
        "n": ev.n,
        "accuracy": ev.accuracy,
        "loss": ev.loss,
        "erased": ev.erased,
        "share10": summary["share_multiple_of_10"],
        "hist": hist,
    }
