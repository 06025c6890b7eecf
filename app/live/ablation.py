"""Live computation for the Ablations page: a request queued once for the machine (app/live/queue.py), computed by one
process at a time with a small local model it loads once, and followed on the page until its answer comes.

torch is imported only when a computation starts (the pages load without it)."""

from __future__ import annotations

import os
import threading
import time

import pandas as pd
import streamlit as st

from app.live.queue import LiveQueue, LiveRefused, LiveStatus, live_root, request_key
from core.errors import CoreError
from core.runs.live_model import live_model_folder
from core.runs.reader import RunReader

#: Seconds a page follows one request before it says to come back (user clicks end the wait at once anyway).
MAX_WAIT_S = 600
#: How often a waiting page looks at the queue.
POLL_S = 0.4


@st.cache_resource(show_spinner=False, ttl=15, max_entries=64)
def _live_folder(name: str, created: str, _manifest: dict):
    return live_model_folder(_manifest)


def live_folder(run: RunReader):
    """`core.runs.live_model.live_model_folder` for a run, shared by all sessions for 15 s (it hashes the model's
    weights: a model rebuilt on disk is noticed within 15 s)."""
    return _live_folder(run.name, run.created, run.manifest)


# ----------------------------------------------------------------------------- the computation (the queue's thread)

def threads_for(asked) -> int | str | None:
    """The threads a computation uses: what the session asked ("auto" or a number), at most FOURIER_LIVE_MAX_THREADS
    (`serve` sets it, so that a computation leaves the other cores to the class's clicks)."""
    cap = os.environ.get("FOURIER_LIVE_MAX_THREADS")
    if not cap:
        return asked
    cap = int(cap)
    return cap if asked in (None, "auto") else min(int(asked), cap)


def compute_live(request: dict, on_progress) -> dict:
    """One request of the queue, computed by core.runs.live_ablation.answer_live_request (imported here: only the
    process that computes loads torch), with the threads this server allows; a request core refuses is LiveRefused."""
    from core.runs.live_ablation import answer_live_request

    try:
        result = answer_live_request(request, on_progress, threads=threads_for(request.get("threads")))
    except CoreError as exc:
        raise LiveRefused(str(exc)) from None
    return {**result, "pid": os.getpid()}


_QUEUES: dict[str, LiveQueue] = {}
_QUEUES_LOCK = threading.Lock()


def live_queue() -> LiveQueue:
    """The machine's queue (one per FOURIER_LIVE_DIR), computing with `compute_live`."""
    root = live_root()
    with _QUEUES_LOCK:
        if str(root) not in _QUEUES:
            # FOURIER_LIVE_RUNNER=external (serve): app/live/runner.py computes, this process only asks and waits
            external = os.environ.get("FOURIER_LIVE_RUNNER") == "external"
            _QUEUES[str(root)] = LiveQueue(root, compute_live, external=external)
        return _QUEUES[str(root)]


# ----------------------------------------------------------------------------- the page's side


def live_request(
    run: RunReader, folder, modules: str, removed: str, tau: int, basis: str, threads=None, whole: bool = False
) -> dict:
    """What the queue computes (and what identifies its answer: `key`); `whole`: every question of the split rather
    than the fixed sample (core.runs.live_sample.live_sample) a large split on a deep model is read on."""
    request = {
        "cache_dir": str(run.cache_dir),
        "run": run.name,
        "created": run.created,
        "p": int(run.p),
        "folder": str(folder),
        "modules": modules,
        "removed": removed,
        "tau": int(tau),
        "basis": basis,
        "threads": threads,
        "whole": bool(whole),
    }
    return {**request, "key": request_key(request)}


def submit_live(request: dict) -> LiveStatus:
    return live_queue().submit({k: v for k, v in request.items() if k != "key"})


def status_line(status: LiveStatus, label: str, waited_s: float) -> tuple[str, float | None]:
    """(one line for a waiting request, the progress bar's fraction or None). The seconds waited so far are in the
    line, so the page visibly moves every second while it waits."""
    waited = f"{waited_s:.0f} s so far"
    if status.state == "running" and status.total:
        so_far = ""
        e = status.estimate
        if e and e.get("done"):
            so_far = (
                f"; so far {e['accuracy']:.1%} correct (95% interval {e['low']:.1%} to {e['high']:.1%}, narrowing as "
                "questions come in)"
            )
        return (
            f"{label}: {status.done:,} of {status.total:,} questions{so_far}, computed live for everyone who asks "
            f"({waited})",
            status.done / status.total,
        )
    if status.state == "running" or status.position <= 1:
        return f"{label}: starting (the model loads the first time; {waited})", 0.0
    ahead = status.position - 1
    eta = f", about {ahead * status.typical_s:.0f} s" if status.typical_s else ""
    return (
        f"{label}: number {status.position} in this server's queue, {ahead} computation{'s' if ahead > 1 else ''} "
        f"ahead{eta}; one runs at a time ({waited}).",
        None,
    )


def follow_live(request: dict, label: str) -> LiveStatus:
    """Follow a submitted request on the page until it is answered: its place in the queue, counting down, then a
    progress bar. Returns the last status (done, failed, refused; or queued/running when the wait ran out)."""
    queue = live_queue()
    box = st.empty()
    shown = None
    start = time.monotonic()
    status = queue.status(request["key"])
    while time.monotonic() - start < MAX_WAIT_S:
        if status.state == "unknown":  # answered long ago and dropped, or never queued: ask again
            status = submit_live(request)
        if not status.waiting:
            break
        line, fraction = status_line(status, label, time.monotonic() - start)
        if (line, fraction) != shown:
            if fraction is None:
                box.info(line, icon=":material/hourglass_top:")
            else:
                box.progress(fraction, text=line)
            shown = (line, fraction)
        time.sleep(POLL_S)
        status = queue.status(request["key"])
    box.empty()
    return status


def result_frame(result: dict) -> pd.DataFrame:
    """The error histogram of a live result (stored as columns of lists)."""
    return pd.DataFrame(result.get("hist") or {"error": [], "count": [], "multiple of 10": []})
