"""The process that computes every live request of a `serve` (scripts/hall/serve.py starts it and restarts it):

    FOURIER_LIVE_DIR=serve/live .venv/bin/python -m app.live.runner

It takes the queue's requests one at a time (app/live/queue.py) with the models it loads (app/live/ablation.py's
`compute_live`), so the dashboard workers never load torch or a model: their memory stays what the pages need, and
a computation that crashes or runs out of memory stops this process only (`serve` starts it again; a request that
stopped it twice is answered with an error instead of being tried a third time).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from app.live.ablation import compute_live
from app.live.queue import LiveQueue, live_root


def main() -> int:
    if not os.environ.get("FOURIER_LIVE_DIR"):
        print("live_runner: set FOURIER_LIVE_DIR to the queue's folder (scripts/hall/serve.py does)", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    queue = LiveQueue(live_root(), compute_live)
    print(f"live_runner: process {os.getpid()} computes the requests queued in {queue.root}", flush=True)
    queue.serve_forever(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
