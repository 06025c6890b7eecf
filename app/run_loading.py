"""Loading runs for the dashboard: the cache folder's valid runs, their tables read once per process
and shared by every session, a run's claims and training logs.

A run is a `core.runs.reader.RunReader` whose tables come from `table`, one copy per process shared
by every session; this module only caches and shares, the reading is core's.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time

import pandas as pd
import streamlit as st

from app.state import cache_dir
from core.claims import registry
from core.claims.base import task_of
from core.claims.features import claim_training
from core.claims.seeds import seed_siblings, verdict_spread
from core.files import models_root
from core.runs import cache as run_cache
from core.runs import training_summaries
from core.runs.origin import built_control, display_label, run_origin, seed_of_manifest
from core.runs.reader import RunReader, Table, read_run_table
from core.tasks import task_name


def valid_runs(cache_dir: str) -> tuple[list[dict], list[dict]]:
    """(good runs, broken runs) of the cache folder: name, label, manifest / problems.

    Shared by every session and checked deeply (checksums, rows, columns) once per state of the
    cache: the key is every run file's size, modification time and inode, read again at most once
    a second, so a rerun pays a few stat calls, and a table rebuilt, changed or corrupted on disk is
    checked afresh on the next rerun after it changed."""
    return _listing(cache_dir, _cache_signature(cache_dir))


_SIGNATURES: dict[str, tuple[float, str]] = {}
_SIGNATURE_LOCK = threading.Lock()


def _cache_signature(cache_dir: str, max_age: float = 1.0) -> str:
    now = time.monotonic()
    with _SIGNATURE_LOCK:
        seen = _SIGNATURES.get(cache_dir)
        if seen is not None and now - seen[0] < max_age:
            return seen[1]
    sig = []
    try:
        entries = sorted(os.scandir(cache_dir), key=lambda e: e.name)
    except OSError:
        entries = []
    for e in entries:
        if e.name.startswith("."):
            continue
        try:
            if e.is_symlink():
                sig.append((e.name, "symlink"))
            elif e.is_dir():
                files = []
                for f in os.scandir(e.path):
                    s = f.stat(follow_symlinks=False)
                    files.append((f.name, s.st_size, s.st_mtime_ns, s.st_ino))
                sig.append((e.name, tuple(sorted(files))))
        except OSError as exc:  # a folder removed while we looked: listed again next time
            sig.append((e.name, type(exc).__name__))
    # its digest, not the tuple, keys the listing: Streamlit hashes a cached function's arguments on every call, and
    # the tuple (every file of every run) cost about 45 ms a call with the shipped runs, twice a script run
    digest = hashlib.sha256(repr(tuple(sig)).encode()).hexdigest()
    with _SIGNATURE_LOCK:
        _SIGNATURES[cache_dir] = (now, digest)
    return digest


@st.cache_resource(show_spinner=False, max_entries=8)
def _listing(cache_dir: str, signature: str) -> tuple[list[dict], list[dict]]:
    good, broken = [], []
    for r in run_cache.list_runs(cache_dir, deep=True):  # checksums too: a corrupt table never reaches a page
        # list_runs checks the manifest's shape too (keys the pages read, their types): a run lacking
        # `p` or with a wrongly shaped manifest is listed as broken, never handed to the sidebar
        if r.ok and isinstance(r.manifest, dict):
            good.append({"name": r.name, "label": display_label(r.manifest, r.label), "manifest": r.manifest})
        else:
            broken.append({"name": r.name, "problems": r.problems or ["unreadable manifest"]})
    good.sort(key=lambda r: (r["manifest"].get("display_order", 100), r["label"]))
    return good, broken


@st.cache_resource(show_spinner=False, max_entries=256)
def table(cache_dir: str, run: str, name: str, created: str) -> pd.DataFrame:
    """One table of a run (`created` keys the cache, so a rebuilt run is read afresh), read once
    per process and shared by every session: callers get it through `RunReader.table`, as a shallow copy."""
    return read_run_table(cache_dir, run, name)


def _shared_table(run: RunReader, name: Table) -> pd.DataFrame:
    # RunReader.table has already refused a table the run does not have (core's own error, so a claim the run
    # cannot answer is "not tested" instead of a stopped page): pages check with `needs(run, Table.X)` first.
    try:
        # a shallow copy of the shared frame: pandas copies on write, so a page that changes it changes its own
        return table(run.cache_dir, run.name, name.value, run.created).copy(deep=False)
    except Exception as exc:  # a table changed on disk after the run was listed
        st.error(
            f"Run {run.name} cannot be read ({name.value}: {type(exc).__name__}). Check it with "
            f"`python -m core verify {run.name}`; pick another run meanwhile."
        )
        st.stop()


def open_run(info: dict) -> RunReader:
    """A listed run (an entry of `valid_runs`) as a reader whose tables are shared by every session."""
    return RunReader(str(cache_dir()), info["name"], info["manifest"], label=info["label"], load=_shared_table)


@st.cache_resource(show_spinner=False, max_entries=64)
def _claims(cache: str, name: str, created: str, _run: RunReader) -> dict:
    return registry.run_claims(_run)


def run_claims(run: RunReader) -> dict:
    """The story's claims for one run (core.claims.registry), computed from its shared tables once per run
    version and shared by every session (read-only)."""
    return _claims(run.cache_dir, run.name, run.created, run)


@st.cache_resource(show_spinner=False, max_entries=16)
def _training_claim(cache: str, names: tuple[str, ...], created: tuple[str, ...], _runs: list[RunReader]):
    return claim_training(_runs)


def training_claim(runs: list[RunReader]):
    """The training claim over `runs` (those with training logs), once per their versions."""
    return _training_claim(str(cache_dir()), tuple(r.name for r in runs), tuple(r.created for r in runs), runs)


def runs_of_split(split: str) -> list[RunReader]:
    """Every valid run of one split, in display order."""
    good, _ = valid_runs(str(cache_dir()))
    return [open_run(r) for r in good if r["manifest"]["task"]["split"] == split]


def seed_spread_line(run: RunReader, step: str, runs: list[RunReader] | None = None) -> str | None:
    """`step`'s verdict over the seeds of `run`'s recipe (core.claims.seeds) in one sentence, or None when the
    run's recipe has one seed here. `runs`: the runs of `run`'s split where the caller has them already."""
    spread = verdict_spread(step, seed_siblings(run, runs or runs_of_split(run.split)), run_claims)
    return spread.line if spread else None


def _trained_runs(split: str, fine_tuned: bool) -> list[RunReader]:
    """Valid runs of `split` that carry a training log: of a real pre-trained model fine-tuned here
    (`fine_tuned`), or of the small models trained here; not the seed runs, whose logs are in their shipped
    model's run."""
    runs = [r for r in runs_of_split(split) if r.has(Table.TRAINING_LOG) and seed_of_manifest(r.manifest) is None]
    return [r for r in runs if (run_origin(r.manifest)["kind"] == "fine-tuned") == fine_tuned]


#: the key under which `training_logs` puts the controls built with their modules held to bands
BUILT_CONTROLS = "built controls"


def training_logs(split: str) -> dict[str, dict[str, pd.DataFrame]]:
    """Training logs of the small models trained here (valid runs of `split`), by task (addition first: each
    task's epochs get their own axis) and short model name; the controls built with their modules held to bands come
    last, under BUILT_CONTROLS (with the task's name after it for a task other than addition): their 30 epochs would
    squeeze the demos' 8 on a shared axis, and they are not the paper's models. The fine-tuned real LLM's logs are
    `fine_tuned_training`'s."""
    by_task: dict[str, dict[str, pd.DataFrame]] = {}
    runs = [(built_control(r.manifest), task_of(r), r) for r in _trained_runs(split, False)]
    for control, task, r in sorted(runs, key=lambda c: (c[0], c[1] != "addition")):
        label = r.manifest.get("label", r.label).replace(" (demo, trained here)", "")
        group = (task if not control
                 else BUILT_CONTROLS if task == "addition" else f"{BUILT_CONTROLS} ({task_name(task)})")
        by_task.setdefault(group, {})[label] = r.table(Table.TRAINING_LOG)
    return by_task


def fine_tuning_history(tuned: list[tuple[str, dict, pd.DataFrame]]) -> list:
    """Model folders of earlier fine-tunings (their recipe and training log, no cached run) beside the runs
    `tuned` (`fine_tuned_training`), shown on the Training page as history."""
    return training_summaries.earlier_fine_tunings(models_root(), tuned)


def fine_tuned_training(split: str) -> list[tuple[str, dict, pd.DataFrame]]:
    """(label, manifest, training log) of every valid run of `split` whose model is a real
    pre-trained model fine-tuned here (`core.training.finetune`), for `training_summaries.fine_tuning_stages`."""
    return [
        (r.manifest.get("label", r.label), r.manifest, r.table(Table.TRAINING_LOG)) for r in _trained_runs(split, True)
    ]
