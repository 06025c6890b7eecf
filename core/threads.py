"""How many CPU threads torch uses for a computation.

On a machine where other work is running, torch's default (one thread per core) makes its
threads wait for each other: on the 2-core machines here, with another job busy, 2 threads ran
4.6 to 11 times slower than 1 (issue 11), while on an idle machine 2 threads were 1.75x faster.
So the default ("auto") counts the cores that are free right now: the cores this process may
use, less the 1-minute load average of the machine without this process's own part of it
(`own_load`: a process that computes click after click, the dashboard's live process, must not
count its own last computations as another job's), at least 1; and no more than OMP_NUM_THREADS
when the environment sets it (the usual way to say how many threads a process may take: the test
suite, two tests side by side, gives each one; the load average lags by a minute).
"""

from __future__ import annotations

import os
import time
from collections import deque

import torch

from core.errors import CoreError


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: The window of the load average `own_load` reads (seconds), and this process's CPU seconds at moments within about
#: two of them (monotonic time, process time), oldest first: the first taken when this module is imported.
LOAD_WINDOW_S = 60.0
_CPU_SAMPLES: deque = deque([(time.monotonic(), time.process_time())])


def own_load() -> float:
    """This process's own part of the 1-minute load average, roughly: its CPU seconds (every thread) over about the
    last minute, divided by the window's length (at least a minute). Measured from the latest moment it was asked
    at least a minute ago, else from the first."""
    now, cpu = time.monotonic(), time.process_time()
    while len(_CPU_SAMPLES) > 1 and _CPU_SAMPLES[1][0] <= now - LOAD_WINDOW_S:
        _CPU_SAMPLES.popleft()  # keep the latest sample at least a window old, and the ones after it
    then, cpu_then = _CPU_SAMPLES[0]
    _CPU_SAMPLES.append((now, cpu))
    return max(0.0, cpu - cpu_then) / max(LOAD_WINDOW_S, now - then)


def auto_threads() -> int:
    cores = available_cores()
    try:
        busy = max(0.0, os.getloadavg()[0] - own_load())
    except OSError:
        busy = 0.0
    free = max(1, min(cores, cores - int(round(busy))))
    try:
        cap = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:  # unset, or not a number: no cap
        return free
    return min(free, cap) if cap >= 1 else free


def parse_threads(value) -> int | None:
    """None or "auto" -> None (decide at run time); a whole number >= 1 -> itself."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise CoreError(f"threads must be a whole number >= 1 or 'auto', got {value!r}") from None
    if n < 1:
        raise CoreError(f"threads must be a whole number >= 1 or 'auto', got {n}")
    return n


def use_threads(value=None) -> int:
    """Set torch's intra-op thread count (None/"auto": `auto_threads()`); returns the count used."""

    n = parse_threads(value)
    n = auto_threads() if n is None else n
    torch.set_num_threads(n)
    return n
