"""The shared sidebar: run, comparison run, basis, cutoff tau, split, presentation mode.

It is drawn once by main.py for all pages and returns the typed selection (`app.state.View`), which
main.py hands to the page; a page reads it with `page_view()`. Every control's value is mirrored into
the URL (app.guards.url_state).
"""

from __future__ import annotations

import re

import streamlit as st

from app.furniture import LARGE_CSS, PAGE_CSS, no_runs_message
from app.glossary import term
from app.guards.url_state import to_url, url_flag, url_state
from app.run_loading import open_run, valid_runs
from app.state import View, cache_dir, current_view
from core.runs.origin import seed_of_manifest, task_of_manifest, trained_short
from core.tasks import task_name

#: Pages that draw a second run beside the first (the sidebar offers "Compare with" only there).
COMPARING_PAGES = ("embeddings",)


def sidebar(page: str = "") -> View | None:
    """The shared sidebar; returns the selection (None when the cache holds no usable run). `page`: the url
    path of the page being shown (controls that only one page uses appear only there)."""
    good, broken = valid_runs(str(cache_dir()))
    with st.sidebar:
        st.markdown("### Choose what to look at")
        if not good:
            return None
        splits = sorted({r["manifest"]["task"]["split"] for r in good})
        linked = next((r["manifest"]["task"]["split"] for r in good if r["name"] == st.query_params.get("run")), None)
        url_state("split", linked or ("test" if "test" in splits else splits[0]), str, splits)  # a linked run's split
        if len(splits) > 1:  # one split: nothing to choose
            st.selectbox("Split", splits, key="split", help="Which part of the dataset the runs were computed on.")
        runs = [r for r in good if r["manifest"]["task"]["split"] == st.session_state["split"]]
        names = [r["name"] for r in runs]
        labels = picker_labels(runs)
        url_state("run", names[0], str, names)
        st.selectbox(
            "Model run",
            names,
            key="run",
            format_func=labels.get,
            help="One model on one dataset split, with its accuracy on that split. 'demo': a small model trained "
            "here on a CPU, not a pre-trained LLM.",
        )
        chosen = next(r for r in runs if r["name"] == st.session_state["run"])
        st.caption(chosen["label"] + precision_note(chosen["manifest"]))
        others = ["none"] + [n for n in names if n != st.session_state["run"]]
        default_cmp = _default_comparison(runs, st.session_state["run"])
        url_state("compare", default_cmp, str, others)
        if page in COMPARING_PAGES:
            st.selectbox(
                "Compare with",
                others,
                key="compare",
                format_func=lambda n: "no comparison" if n == "none" else labels[n],
                help="A second run shown beside the first.",
            )
        run = open_run(next(r for r in runs if r["name"] == st.session_state["run"]))
        url_state("basis", "paper", str, ["paper", "dft"])
        st.radio("Fourier basis", ["paper", "dft"], key="basis", horizontal=True, help=term("basis"))
        basis = run.basis(st.session_state["basis"])
        url_state("tau", run.default_tau(basis.name), int, bounds=(2, basis.k_max))
        st.session_state["tau"] = run.clamp_tau(st.session_state["tau"], basis.name)
        st.slider("Cutoff tau (frequency k)", 2, basis.k_max, key="tau", help=term("cutoff tau"))
        st.caption(f"tau = {st.session_state['tau']} ↔ period T = {basis.period(st.session_state['tau']):.3g}")
        url_state("large", False, url_flag)
        st.toggle("Presentation mode (large type)", key="large", help="Bigger text and charts for a projector.")
        if broken:
            with st.expander(f"{len(broken)} run(s) skipped"):
                for b in broken:
                    st.caption(f"**{b['name']}**: {'; '.join(b['problems'])}")
        to_url("split", "run", "compare", "basis", "tau", "large")
    compare = None
    if st.session_state["compare"] != "none":
        compare = open_run(next(r for r in runs if r["name"] == st.session_state["compare"]))
    view = View(
        run=run,
        compare=compare,
        split=st.session_state["split"],
        basis=basis.name,
        tau=int(st.session_state["tau"]),
        large=bool(st.session_state["large"]),
    )
    st.html(PAGE_CSS + (LARGE_CSS if view.large else ""))  # style only: it takes no room on the page
    return view


#: The tail of a run's label that names its task and split ("addition test", "test 4-shot"), as `display_label`
#: writes it.
_TASK_AND_SPLIT = re.compile(
    r" ((?:addition|multiplication|reverse-Polish addition) )?(train|val|test|all)((?: k-shot| \d+-shot)?)$"
)


def precision_note(manifest: dict) -> str:
    """What the run picker's caption adds when the run's model ran in another dtype than float32 (its manifest's
    model.dtype), since its activations were computed at that precision."""
    dtype = (manifest.get("model") or {}).get("dtype")
    if not dtype or dtype == "float32":
        return ""
    held = "the dtype its files store" if dtype == "auto" else dtype
    return f" · computed in {held}"


def short_label(label: str) -> str:
    """A run's label as the narrow sidebar shows it: 'Fourier-frozen, tied · demo · addition test'."""
    return _TASK_AND_SPLIT.sub(r" · \1\2\3", label.replace(" (demo, trained here)", " · demo"))


def picker_labels(runs: list[dict]) -> dict[str, str]:
    """{run name: its picker label} for the runs listed (dicts with name, manifest, label); two runs whose labels
    come out alike (one model precomputed twice) are told apart by their ids."""
    labels = {r["name"]: picker_label(r["manifest"], r["label"]) for r in runs}
    return {name: f"{label} · {name[-10:]}" if list(labels.values()).count(label) > 1 else label
            for name, label in labels.items()}


#: The characters the closed run picker shows of its choice in presentation mode at 1024 x 768 (measured in Chromium:
#: "SmolLM2-135M fine-tuned" and no more); the picker's labels differ within them.
PICKER_SHOWS = 22


def picker_label(manifest: dict, label: str) -> str:
    """A run as the run picker lists it: what tells it from the other runs first (the stage of a fine-tuned
    model, the seed of a recipe trained again, "demo", the shots of a prompted model), then its task (unless the name
    says it), then its accuracy on its split, so that labels differ within their first PICKER_SHOWS characters (what
    the closed picker shows in presentation mode); the full label is the caption under the picker."""
    base, _, detail = label.partition(" (")
    shots = int((manifest.get("task") or {}).get("shots") or 0)
    stage = re.search(r"stage (\d+)", detail)
    if stage:
        name = f"{base.split('-')[0]} stage {stage.group(1)}, {base.split(',')[0].split()[-1]}"
    elif "demo" in detail:
        seed = seed_of_manifest(manifest)  # a recipe trained again: the seed early, inside 32 characters
        name = f"{base} (demo)" if seed is None else f"Seed {seed}: {base} (demo)"
    elif shots:
        name = f"{base}{' pre-trained' if 'pre-trained' in detail else ''}, {shots}-shot"
    elif part := trained_short(manifest):  # one model fine-tuned two ways: what was trained, early (no size)
        name = f"{base.split()[0].split('-')[0]} fine-tuned, {part}"
    else:
        name = base
    task = task_name(task_of_manifest(manifest))
    if task.lower() not in name.lower():
        name = f"{name} · {task}"
    accuracy = manifest.get("accuracy")
    split = (manifest.get("task") or {}).get("split", "")
    return f"{name} · {accuracy:.1%} {split}" if isinstance(accuracy, (int, float)) else name


def _default_comparison(runs, chosen: str) -> str:
    """Compare a demo run with its natural partner (scratch <-> Fourier) of the same task if there is one, else
    nothing."""
    mine = next(r for r in runs if r["name"] == chosen)
    label, task = mine["label"].lower(), task_of_manifest(mine["manifest"])
    want = "scratch" if "fourier" in label or "pre-trained" in label else "fourier-frozen"
    partners = [r for r in runs if r["name"] != chosen and want in r["label"].lower()]
    partners.sort(key=lambda r: task_of_manifest(r["manifest"]) != task)  # the same task first, in display order
    return partners[0]["name"] if partners else "none"


def page_view() -> View:
    """The sidebar's selection for this page (main.py hands it over); with no run, an explanation and the page stops."""
    v = current_view()
    if v is None:
        no_runs_message()
        st.stop()
    return v
