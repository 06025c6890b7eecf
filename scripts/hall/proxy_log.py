"""HAProxy's log as `serve` keeps it (serve/haproxy.log, scripts/hall/serve.py): which workers its health checks marked
down and why, which `serve` took out to restart, and when no worker was left. The load test and the kill fault read
it for their reports (loadtest.py, faults.py); docs/serving.md, "A busy worker is not a dead one".

No project imports: the tests load this file by its path.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

#: HAProxy's log lines (its raw log on stdout, which serve.py copies to serve/haproxy.log) when a health check takes a
#: worker out, when serve.py takes one out for a restart, and when no worker is left. The same words also go to
#: HAProxy's stderr after "[WARNING]  (pid) : " or "[ALERT]": anchored at the line's start, each event counts once.
MARKED_DOWN = re.compile(r"^Server workers/(\w+) is DOWN, reason: ([^,]+)")
MAINTENANCE = re.compile(r"^Server workers/(\w+) is going DOWN for maintenance")
NONE_LEFT = re.compile(r"^backend workers has no server available")


def proxy_events(text: str) -> dict:
    """What HAProxy's log says happened to the workers: `marked_down`, one (worker, reason) per worker a health check
    took out (reason: "Layer7 timeout", "Layer4 connection problem", ...); `maintenance`, the workers serve.py took
    out to restart them; `none_left`, how often no worker was left."""
    lines = text.splitlines()
    return {
        "marked_down": [m.groups() for m in map(MARKED_DOWN.match, lines) if m],
        "maintenance": [m.group(1) for m in map(MAINTENANCE.match, lines) if m],
        "none_left": sum(1 for line in lines if NONE_LEFT.match(line)),
    }


def read_proxy_log(path: Path, offset: int = 0) -> tuple[str, int]:
    """serve/haproxy.log from byte `offset` on, and the offset of its end ("" and `offset` while it is missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return "", offset
    return data.decode(errors="replace"), offset + len(data)


def describe_events(events: dict) -> str:
    """One line for a report: how often a health check took a worker out, which, why; no worker left; restarts."""
    down = events["marked_down"]
    if down:
        by_worker = ", ".join(f"{w} {n}" for w, n in sorted(collections.Counter(w for w, _ in down).items()))
        reasons = ", ".join(f"{r} {n}" for r, n in collections.Counter(r for _, r in down).most_common())
        text = f"HAProxy marked a worker down {times(len(down))} ({by_worker}; {reasons})"
    else:
        text = "HAProxy marked no worker down"
    if events["none_left"]:
        text += f"; no worker left {times(events['none_left'])}"
    if events["maintenance"]:
        text += f"; serve took {', '.join(events['maintenance'])} out to restart"
    return text


def times(n: int) -> str:
    return f"{n} time" if n == 1 else f"{n} times"
