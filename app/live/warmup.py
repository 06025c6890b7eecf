"""The live path warmed before the first click: where the warm-up stands, and its line on the Ablations page.

`bash run.sh app` and `bash run.sh serve` start `python -m app.live.warmup_runner` beside the dashboard, at the
lowest CPU priority with one thread: it rebuilds the default run's weights from the shipped delta when they are
missing (app/live/rebuild.py, the page's own rebuild), loads each live model, and writes the prompts' prefixes of
the default run's live sample and of every demo's split to the prefix store (core/runs/live_warmup.py), so that the
first live filter of a lecture costs what a later one costs. One warm-up at a time per models and cache folder;
its files, in a folder of the system's temporary directory (`warmup_root`):

    run.lock      flock()ed for as long as a warm-up runs (a second one started meanwhile leaves at once)
    status.json   its step, how far it is, and at the end what it did and what it could not do

No torch and no computation here: the page reads the status, the runner (its own process) computes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from app.live.job_files import job_root, lock_held, read_json_status, write_json_status
from app.state import cache_dir
from core.files import models_root

#: Seconds the warm-up's end is still said on the page.
WARMUP_SHOWN_S = 900
#: Seconds between two looks at a running warm-up (only its line runs again, not the page).
WARMUP_POLL_S = 2.0


@dataclass
class WarmStatus:
    """Where the warm-up stands. state: idle (none yet), running, done or failed."""

    state: str = "idle"
    #: what it does now, in a student's words ("rebuilding ...", "preparing the questions of ...")
    doing: str = ""
    #: the step (1-based) of `steps`: a rebuild, then one per run warmed
    step: int = 0
    steps: int = 0
    #: within the step: how far (questions or the rebuild's share), of `total`
    done: int = 0
    total: int = 0
    started: float = 0.0
    finished: float = 0.0
    #: runs warmed, and those whose prefixes the disk had no room for (their first click computes them: slower)
    warmed: int = 0
    no_room: list = field(default_factory=list)
    #: failed: why, in one line; done: what could not be warmed, if anything
    message: str = ""

    @property
    def running(self) -> bool:
        return self.state == "running"


def warmup_root(create: bool = False, cache: str | Path | None = None) -> Path:
    """The warm-up's files: one folder per user, models folder and cache folder on this machine."""
    return job_root("warmup", f"{models_root()}|{Path(cache or cache_dir()).resolve()}", create)


def write_warm_status(root: Path, status: WarmStatus) -> None:
    """status.json, whole or not at all."""
    write_json_status(root, status)


def read_warm_status(root: Path) -> WarmStatus:
    """The warm-up's status; one that says running while nobody holds run.lock (its process was killed) is failed."""
    status = read_json_status(root, WarmStatus)
    if status.running and not lock_held(root / "run.lock"):
        status.state, status.message = "failed", "its process stopped before it finished"
        status.finished = status.finished or time.time()
    return status


def warmup_line(status: WarmStatus, now: float | None = None) -> str | None:
    """The page's one line about the warm-up, from its status; None when there is nothing to say (no warm-up, or
    one that ended more than WARMUP_SHOWN_S ago)."""
    now = time.time() if now is None else now
    if status.state == "idle" or (not status.running and now - status.finished > WARMUP_SHOWN_S):
        return None
    if status.running:
        within = ""
        if status.total:
            unit = "%" if status.doing.startswith("rebuilding") else " questions"
            within = (f", {100 * status.done // status.total}%" if unit == "%" else
                      f", {status.done:,} of {status.total:,} questions")
        return (f"Getting live filters ready before the first click: {status.doing} (step {status.step} of "
                f"{status.steps}{within}; {now - status.started:.0f} s so far). You can press the button already: "
                "its first answer just takes a little longer until this is done.")
    if status.state == "failed":
        return (f"Getting live filters ready stopped ({status.message}): live filters still work, the first one "
                "of each model a little slower.")
    took = f"{status.finished - status.started:.0f} s"
    line = (f"Live filters were made ready when the dashboard started (the questions of {status.warmed} "
            f"model{'s' if status.warmed != 1 else ''} prepared in {took}): the first click is as quick as the next.")
    if status.no_room:
        line += (f" The disk had no room to keep the prepared questions of {len(status.no_room)} of them, so their "
                 "first click is slower (they are kept in memory after it).")
    if status.message:
        line += f" {status.message}"
    return line


def warmup_status() -> str | None:
    """The line for the dashboard's current models and cache folder (`warmup_line`)."""
    return warmup_line(read_warm_status(warmup_root()))


def warmup_note() -> None:
    """On the Ablations page, above the live controls: the warm-up's line, when there is one; while it runs, the
    line is looked at again every WARMUP_POLL_S seconds without running the page."""
    status = read_warm_status(warmup_root())
    if status.running:
        follow_warmup()
        return
    line = warmup_line(status)
    if line:
        st.caption(line)


@st.fragment(run_every=WARMUP_POLL_S)
def follow_warmup() -> None:
    """A running warm-up's line, again every WARMUP_POLL_S seconds; when it ends, the page runs once more (its live
    part then finds the model warm, or says why not)."""
    status = read_warm_status(warmup_root())
    if status.running:
        st.caption(warmup_line(status))
        return
    st.rerun()
