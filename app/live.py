"""Live computation for the Ablations page: a small local model loaded once per process, one computation at a time."""

from __future__ import annotations

import streamlit as st

from core.analysis.ablations import Ablation
from core.runs import summaries
from core.runs.reader import RunReader, Table


@st.cache_resource(show_spinner="Loading the model (once; later computations reuse it)…", max_entries=2)
def _model(folder: str):
    from core.runs.live_ablation import load_live_model

    return load_live_model(folder)


@st.cache_resource(show_spinner=False, ttl=15, max_entries=64)
def _live_folder(name: str, created: str, _manifest: dict):
    from core.runs.live_ablation import live_model_folder

    return live_model_folder(_manifest)


def live_folder(run: RunReader):
    """`core.runs.live_ablation.live_model_folder` for a run, shared by all sessions for 15 s (it hashes the model's
    weights: a model rebuilt on disk is noticed within 15 s)."""
    return _live_folder(run.name, run.created, run.manifest)


def run_live(run: RunReader, folder, modules: str, removed: str, tau: int, basis: str, threads=None) -> dict:
    from core.runs.live_ablation import live_ablation, live_slot

    ablation = Ablation(modules, removed, int(tau))
    examples = run.table(Table.EXAMPLES)
    waiting = st.empty()
    with live_slot(
        on_wait=lambda: waiting.info(
            "Another live computation is running on this server; this one starts when it ends."
        )
    ):
        waiting.empty()
        loaded = _model(str(folder))
        bar = st.progress(0.0, text=f"{ablation.label()}: 0 of {len(examples)} prompts")

        def on_batch(done, total):
            bar.progress(done / total, text=f"{ablation.label()}: {done} of {total} prompts")

        ev = live_ablation(loaded, examples, run.p, basis, ablation, on_batch=on_batch, threads=threads)
        bar.empty()
    summary, hist = summaries.behaviour(ev.answers, ev.predictions)
    return {
        "run": run.name,
        "label": ablation.label(),
        "n": ev.n,
        "accuracy": ev.accuracy,
        "loss": ev.loss,
        "erased": ev.erased,
        "share10": summary["share_multiple_of_10"],
        "hist": hist,
        "compute_s": ev.extra.get("compute_s"),
        "threads": ev.extra.get("threads"),
        "prefix_reused": ev.extra.get("prefix_reused", False),
    }
