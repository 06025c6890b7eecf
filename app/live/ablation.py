"""Live computation for the Ablations page: a request queued once for the machine (app/live/queue.py), computed by one
process at a time with a small local model it loads once, and followed on the page until its answer comes; and, for a
run whose model ships only its fine-tuning delta, the button that rebuilds its weights here (app/live/rebuild.py).

torch is imported only when a computation or a rebuild starts (the pages load without it)."""

from __future__ import annotations

import os
import threading
import time

import pandas as pd
import streamlit as st

from app.live.queue import LiveQueue, LiveRefused, LiveStatus, live_root, request_key
from app.live.rebuild import STARTING, RebuildStatus, rebuild_command, rebuild_status, start_rebuild
from core.errors import CoreError
from core.runs.live_model import live_model_folder
from core.runs.live_targets import warm_targets
from core.runs.reader import RunReader

#: Seconds a page follows one request before it says to come back (user clicks end the wait at once anyway).
MAX_WAIT_S = 600
#: How often a waiting page looks at the queue: often for the first FAST_POLL_FOR_S seconds (a warm filter answers in
#: one to three: a look every 0.4 s added up to 0.4 s to each), then less (each look reads a few small files).
POLL_S = 0.4
FAST_POLL_S = 0.05
FAST_POLL_FOR_S = 4.0
#: Seconds between two looks at a running rebuild (the page goes on meanwhile: only its progress bar runs again).
REBUILD_POLL_S = 1.0
#: Seconds a rebuild's end (its error, or that it is done) is shown to whoever opens the page.
REBUILD_SHOWN_S = 600
#: The rebuild button's label.
REBUILD_LABEL = "Rebuild the weights here (a few minutes; under one once the base model is here)"


@st.cache_resource(show_spinner=False, ttl=15, max_entries=64)
def _live_folder(name: str, created: str, rebuilt: float, _manifest: dict):
    return live_model_folder(_manifest)


def live_folder(run: RunReader):
    """`core.runs.live_model.live_model_folder` for a run, shared by all sessions for 15 s (it hashes the model's
    weights: a model rebuilt on disk is noticed within 15 s, one rebuilt from the page at once: the end of the
    machine's last rebuild is part of the answer's key)."""
    last = rebuild_status()
    return _live_folder(run.name, run.created, last.finished if last.state == "done" else 0.0, run.manifest)


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


def rebuild_weights(folder, progress, log):
    """core.training.delta.rebuild of `folder`, its digest checked. Imported here, like the live engine: this module
    is the dashboard's one door to torch (tests/test_architecture.py), and only the rebuilding process
    (app/live/rebuild_runner.py) walks through it."""
    from core.training.delta import rebuild

    return rebuild(folder, log=log, progress=progress)


def warm_run(cache_dir, target, folder, on_batch=None, threads=1) -> dict:
    """core.runs.live_warmup.warm_prefixes (imported here, like the live engine: the warm-up process,
    app/live/warmup_runner.py, walks through this module's door to torch)."""
    from core.runs.live_warmup import warm_prefixes

    return warm_prefixes(cache_dir, target, folder, on_batch=on_batch, threads=threads)


def preload_warmed(cache_dir, log=print) -> list[str]:
    """In the process that computes live requests, once the warm-up (app/live/warmup_runner.py) has written the
    prefixes: load the default run's model and the first demo's (as many as a process keeps,
    core.runs.live_ablation.MAX_LIVE_MODELS) and read their prefixes from disk into memory, so that the first click
    finds what a later one finds. Returns the runs preloaded; a run that cannot be is skipped (its click computes)."""
    from core.runs.live_ablation import MAX_LIVE_MODELS

    done = []
    for target in warm_targets(cache_dir)[:MAX_LIVE_MODELS]:
        folder, why = target.folder()
        if folder is None:
            continue
        try:
            out = warm_run(cache_dir, target, folder, threads=threads_for(1))
        except Exception as exc:  # noqa: BLE001 - a preload only saves time: its failure is said, never fatal
            log(f"live_runner: {target.label} not preloaded ({type(exc).__name__})")
            continue
        log(f"live_runner: {target.label} preloaded in {out['seconds']:.1f} s ({out['sources']['disk']} batches of "
            f"prefixes read from disk, {out['sources']['computed']} computed)")
        done.append(target.run)
    return done


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


def press_live(request: dict) -> None:
    """The live button's callback: queue `request` (the settings the button was drawn with) and follow it on this page
    (`follow_live`). A callback runs before the page's script, so the computation starts while the page above the
    button is drawn again; the page queues its own request too should a setting have changed with the click
    (`pressed_live`)."""
    submit_live(request)
    st.session_state["live_waiting"] = request["key"]
    st.session_state["live_pressed"] = True


def pressed_live(request: dict) -> None:
    """After a press of the live button (`press_live`), on the page's run: the request of the settings as they are now
    queued and followed, should they differ from those the button was drawn with."""
    if st.session_state.pop("live_pressed", False) and st.session_state.get("live_waiting") != request["key"]:
        submit_live(request)
        st.session_state["live_waiting"] = request["key"]


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
        time.sleep(FAST_POLL_S if time.monotonic() - start < FAST_POLL_FOR_S else POLL_S)
        status = queue.status(request["key"])
    box.empty()
    return status


def result_frame(result: dict) -> pd.DataFrame:
    """The error histogram of a live result (stored as columns of lists)."""
    return pd.DataFrame(result.get("hist") or {"error": [], "count": [], "multiple of 10": []})


# ----------------------------------------------------------------------------- the rebuild, on the page


def rebuild_line(status: RebuildStatus) -> str:
    """The line over a running rebuild's progress bar: its stage, what it does now, the seconds so far."""
    stage = "starting (loading the libraries)" if status.stage == STARTING else status.stage
    doing = f": {status.detail}" if status.detail and status.stage != STARTING else ""
    return (f"Rebuilding the weights, {stage}{doing} ({status.elapsed_s():.0f} s so far; one rebuild for everyone on "
            "this server)")


def offer_rebuild(folder) -> None:
    """For a run whose model ships only its fine-tuning delta: the button that rebuilds its weights here (in the
    background, one rebuild at a time on the machine: app/live/rebuild.py), the rebuild's progress while it runs, for
    every session that opens the page, and its error if it failed. When it is done, the page runs again and computes
    live."""
    status = rebuild_status()
    ours = status.is_for(folder)
    pressed = st.button(
        REBUILD_LABEL,
        key="rebuild_weights",
        disabled=ours and status.running,
        help=f"Does what `{rebuild_command(folder)}` does in a terminal: merges the shipped delta into the base model "
        "(imported first when it is not here) and checks the result bit for bit. The page stays usable meanwhile.",
    )
    if pressed:
        status = start_rebuild(folder)
        ours = status.is_for(folder)
        if status.running and not ours:
            st.warning(f"Another model ({status.folder}) is being rebuilt on this server: press again when it is done, "
                       "in a minute or two.")
    if ours and status.running:
        follow_rebuild(str(folder))
    elif ours and status.state == "failed" and time.time() - status.finished < REBUILD_SHOWN_S:
        st.error(f"The rebuild failed: {status.message}")


def rebuilt_note(folder) -> None:
    """Under the live controls, for a while after the weights were rebuilt from this page: when, and how long it
    took."""
    status = rebuild_status()
    if status.state == "done" and status.is_for(folder) and time.time() - status.finished < REBUILD_SHOWN_S:
        st.success(f"The weights were rebuilt here {time.time() - status.finished:.0f} s ago, in "
                   f"{status.elapsed_s():.0f} s; they are the ones this run was computed from: live computation is "
                   "open.",
                   icon=":material/check_circle:")


@st.fragment(run_every=REBUILD_POLL_S)
def follow_rebuild(folder: str) -> None:
    """A running rebuild's progress bar, looked at again every REBUILD_POLL_S seconds without running the page; when
    the rebuild ends, the whole page runs again (live computation, or the error); a page runs this only while the
    rebuild runs, so that is once."""
    status = rebuild_status()
    if status.running and status.is_for(folder):
        st.progress(status.fraction, text=rebuild_line(status))
        return
    st.rerun()  # it ended (done, failed, or another's started): the whole page, which follows a running one only


# ----------------------------------------------------------------------------- one patching pair, computed now

@st.cache_resource(show_spinner=False, max_entries=2)
def _patch_target(cache_dir: str, name: str, created: str, folder: str):
    """The run's model loaded once per server for the Patching page (torch and the model load only when a user asks
    for one pair); one question kept, as `python -m core patch --clean` keeps it."""
    from core.runs.ablate import open_target

    return open_target(name, cache_dir, limit=1, threads=threads_for("auto"), log=lambda *_: None, model=folder)


def live_patch(run: RunReader, folder, clean: str, corrupt: str, phrasing: int, direction: str,
               contrast: int) -> pd.DataFrame:
    """One pair patched now at every site, through the one-pair code of `python -m core patch`
    (core.runs.patch_command): its table (the patching table's columns, with each site's `hook` and `site` label;
    one pair has no interval: NaN). Kept per run version, pair and reading, so that the page's other controls do
    not patch it again."""
    return _patched(run.cache_dir, run.name, run.created, str(folder), clean, corrupt, phrasing, direction, contrast)


@st.cache_data(show_spinner=False, max_entries=64)
def _patched(cache_dir: str, name: str, created: str, folder: str, clean: str, corrupt: str, phrasing: int,
             direction: str, contrast: int) -> pd.DataFrame:
    from core.runs.patch_command import patch_command

    target = _patch_target(cache_dir, name, created, folder)
    report = patch_command(target, clean, corrupt, phrasing, progress=False, direction=direction, contrast=contrast)
    frame = pd.DataFrame(report.sites)
    for column in ("recovered", "recovered_low", "recovered_high"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame.drop(columns=["site"])
