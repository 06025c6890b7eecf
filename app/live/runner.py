"""The process that computes every live request of a `serve` (scripts/hall/serve.py starts it and restarts it):

    FOURIER_LIVE_DIR=serve/live .venv/bin/python -m app.live.runner

It takes the queue's requests one at a time (app/live/queue.py) with the models it loads (app/live/ablation.py's
`compute_live`), so the dashboard workers never load torch or a model: their memory stays what the pages need, and
a computation that crashes or runs out of memory stops this process only (`serve` starts it again; a request that
stopped it twice is answered with an error instead of being tried a third time). `bash run.sh app` starts one too
(`--parent`: it ends with the dashboard).

While the queue is empty and once the dashboard's warm-up has written the prefixes (app/live/warmup_runner.py), it
preloads the default run's model and the first demo's with their prefixes in memory (app/live/ablation.py's
`preload_warmed`), once: the first click of a lecture then costs what a later one costs.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from app.live.ablation import compute_live, preload_warmed
from app.live.queue import LiveQueue, live_root
from app.live.warmup import read_warm_status, warmup_root
from app.state import cache_dir

#: Seconds between two looks at the warm-up's status while the queue is idle.
WARM_LOOK_S = 2.0


class Preloader:
    """The queue's idle step: once the warm-up is done, `preload_warmed` once."""

    def __init__(self):
        self.done = False
        self.looked = 0.0

    def __call__(self) -> None:
        if self.done or time.monotonic() - self.looked < WARM_LOOK_S:
            return
        self.looked = time.monotonic()
        if read_warm_status(warmup_root()).state != "done":
            return
        self.done = True
        preload_warmed(cache_dir(), log=lambda line: print(line, flush=True))


def watch_parent(pid: int, stop: threading.Event) -> None:
    """Stop when the dashboard process `pid` has ended (a thread)."""

    def watch():
        while not stop.is_set():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                stop.set()
            except PermissionError:
                pass
            stop.wait(1.0)

    threading.Thread(target=watch, name="live-runner-parent", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    parent = int(args[1]) if len(args) == 2 and args[0] == "--parent" and args[1].isdigit() else None
    if args and parent is None:
        print("live_runner: the one option is --parent PID (stop when that process ends)", file=sys.stderr)
        return 2
    if not os.environ.get("FOURIER_LIVE_DIR"):
        print("live_runner: set FOURIER_LIVE_DIR to the queue's folder (scripts/hall/serve.py does)", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if parent:
        watch_parent(parent, stop)
    queue = LiveQueue(live_root(), compute_live)
    print(f"live_runner: process {os.getpid()} computes the requests queued in {queue.root}", flush=True)
    queue.serve_forever(stop, idle=Preloader())
    return 0


if __name__ == "__main__":
    sys.exit(main())
