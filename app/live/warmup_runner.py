"""The dashboard's warm-up process, started beside it by `bash run.sh app` and `bash run.sh serve`:

    .venv/bin/python -m app.live.warmup_runner [--cache-dir DIR] [--parent PID]

At the lowest CPU priority (nice 19) and on one thread, so that a click, a page or a class's sessions always go
first: it rebuilds the default run's weights from the shipped delta when they are missing (the Ablations page's own
rebuild, app/live/rebuild.py: one for the machine, a press of the button joins it), then, run by run
(core/runs/live_warmup.py: the default first, then every demo), loads the live model and writes its prompts'
prefixes to the prefix store. Its progress goes to the terminal ("warm-up: ...") and to the status the Ablations
page shows (app/live/warmup.py). A run it cannot warm (no weights here, a failed rebuild, a disk without room) is
said and skipped: the dashboard works as it did, that run's first live filter only slower. With --parent it stops
when that process (the dashboard) has ended.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
import threading
import time
from pathlib import Path

from app.live.ablation import warm_run
from app.live.rebuild import rebuild_status, start_rebuild
from app.live.warmup import WarmStatus, warmup_root, write_warm_status
from app.state import cache_dir
from core.runs.live_targets import warm_targets

#: The warm-up's CPU priority: the lowest.
WARMUP_NICE = 19
#: Seconds between two looks at the rebuild it started.
REBUILD_POLL_S = 1.0
#: Seconds between two looks at the dashboard process (--parent).
PARENT_POLL_S = 1.0


def say(line: str) -> None:
    print(f"warm-up: {line}", flush=True)


def rebuild_default(target, folder: Path, status: WarmStatus, report) -> bool:
    """Rebuild the default run's weights (or join the rebuild running), following it until it ends; True when the
    weights are here."""
    status.doing = f"rebuilding the weights of {target.label} from the shipped delta"
    status.done, status.total = 0, 100
    report(status)
    say(f"{status.doing} (the Ablations page's rebuild, in a process of its own)")
    rebuild = start_rebuild(folder)
    while rebuild.running and rebuild.is_for(folder):
        status.done = int(100 * rebuild.fraction)
        report(status)
        time.sleep(REBUILD_POLL_S)
        rebuild = rebuild_status()
    if rebuild.state == "done" and rebuild.is_for(folder):
        say(f"weights rebuilt in {rebuild.elapsed_s():.0f} s")
        return True
    say(f"the rebuild did not finish ({rebuild.message or rebuild.state}): {target.label} is not warmed")
    return False


def run_warmup(cache: str | Path, report, threads: int = 1) -> WarmStatus:
    """The whole warm-up of `cache` (module doc), its status handed to `report` at every step and batch; returns the
    last status (done, with what it could not warm in `message` and `no_room`)."""
    status = WarmStatus("running", "finding the runs", started=time.time())
    report(status)
    targets = warm_targets(cache)
    default = next((t for t in targets if t.default), None)
    to_rebuild = default.rebuildable() if default is not None else None
    status.steps = len(targets) + (to_rebuild is not None)
    skipped = []
    if to_rebuild is not None:
        status.step += 1
        if not rebuild_default(default, to_rebuild, status, report):
            skipped.append(default.label)
    for target in targets:
        status.step += 1
        folder, why = target.folder()
        if folder is None:
            if target.default and target.label not in skipped:
                skipped.append(target.label)
                say(f"{target.label}: not warmed ({why})")
            continue
        status.doing = f"loading the model of {target.label} and preparing its questions"
        status.done = status.total = 0
        report(status)

        def on_batch(done, total, *_):
            status.done, status.total = int(done), int(total)
            report(status)

        try:
            out = warm_run(cache, target, folder, on_batch=on_batch, threads=threads)
        except Exception as exc:  # noqa: BLE001 - a run that cannot be warmed is said and skipped, never fatal
            skipped.append(target.label)
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            say(f"{target.label}: not warmed ({type(exc).__name__}: {first})")
            continue
        status.warmed += 1
        kept = "kept on disk"
        if out["on_disk"] < out["batches"]:
            status.no_room.append(target.run)
            kept = f"only {out['on_disk']} of them kept on disk (no room)"
        which = "its live sample" if out["sample"] else "its whole split"
        say(f"{target.label}: {out['n']:,} questions ({which}) prepared in {out['seconds']:.1f} s, {out['batches']} "
            f"batches ({out['sources']['computed']} computed, {out['sources']['disk']} read from disk), {kept}")
    status.state, status.finished, status.doing = "done", time.time(), ""
    if skipped:
        status.message = f"Not prepared: {', '.join(skipped)}."
    report(status)
    say(f"done in {status.finished - status.started:.0f} s: the questions of {status.warmed} "
        f"model{'s' if status.warmed != 1 else ''} prepared"
        + (f"; {status.message}" if skipped else ""))
    return status


def watch_parent(pid: int) -> None:
    """End this process when the dashboard process `pid` has ended (a thread)."""
    def watch():
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(0)
            except PermissionError:
                pass
            time.sleep(PARENT_POLL_S)

    threading.Thread(target=watch, name="warm-up-parent", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m app.live.warmup_runner", description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", default=None, help="the cache folder the dashboard reads (default: its own)")
    ap.add_argument("--parent", type=int, default=None, help="stop when this process (the dashboard) has ended")
    args = ap.parse_args(argv)
    cache = Path(args.cache_dir) if args.cache_dir else cache_dir()
    if not cache.is_dir():
        print(f"warm-up: no cache folder at {cache}: give --cache-dir an existing folder", file=sys.stderr)
        return 2
    root = warmup_root(create=True, cache=cache)
    with open(root / "run.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another warm-up of this cache folder runs already; leaving it to that one")
            return 0
        if args.parent:
            watch_parent(args.parent)
        os.nice(WARMUP_NICE)  # the lowest priority, for this process and the rebuild it starts
        status = run_warmup(cache, lambda s: write_warm_status(root, s), threads=1)
    return 0 if status.state == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
