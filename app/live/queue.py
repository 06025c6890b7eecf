"""Live computations shared by every session and every dashboard process on this machine.

A request (a run and its version, modules, band, tau, basis) is computed once: the first session that asks puts it
in the queue, and every later one, in this process or in another worker of `serve`, waits for the same result. One
computation runs at a time on the machine, in the order asked, so a class pressing "run live" together queues
instead of filling every core; each waiting session reads its place in the queue as it counts down.

The queue lives in files, under FOURIER_LIVE_DIR (`serve` gives its workers one folder; a lone process gets a
fresh temporary folder):

    queue/<ns>-<key>.json   a waiting request, with its parameters; the names order the queue
    running-<key>.json      progress of the request being computed (process id, prompts done, prompts in all)
    results/<key>.json      the answer: a result, or an error that says why
    queue.lock              flock()ed while the queue changes
    runner.lock             flock()ed by the process that computes

A process that dies while it computes releases its lock with it, and another process takes the request up again,
at most MAX_ATTEMPTS times; after that the request is answered with an error instead of stopping a third process.
Bounded: at most `max_queued` requests wait (more are refused with a sentence that says so) and at most
`max_results` answers are kept (the oldest go first). No Streamlit and no torch here: the computation is a function
handed in (app/live/ablation.py's). Under `serve`, one process of its own computes (app/live/runner.py: a crash or a
large model there never takes a student's session with it), and the dashboard processes only ask and wait.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

#: Requests that may wait at once (distinct ones: identical requests share one place).
MAX_QUEUED = 12
#: Answers kept (a result is a few kB).
MAX_RESULTS = 64
#: Times a request is started before it is given up (each start that did not finish lost its process).
MAX_ATTEMPTS = 2
#: The computations' log rolls over beyond this size.
LOG_BYTES = 2**20
#: Seconds an error answer is kept (a later request tries again).
ERROR_KEPT_S = 60.0

#: compute(request, on_progress(done, total, estimate=None)) -> a JSON-able result
Compute = Callable[[dict, Callable[..., None]], dict]


class LiveRefused(Exception):
    """The computation failed in a way the page can say in one line (its message)."""


def request_key(request: dict) -> str:
    """What identifies a result: every parameter but the CPU threads (which change the speed, not the answer)."""
    fields = {k: v for k, v in sorted(request.items()) if k not in ("threads", "key")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:24]


@dataclass
class LiveStatus:
    """Where a request stands. state: done, failed, refused, queued, running or unknown (asked nowhere: submit it)."""

    state: str
    result: dict | None = None
    message: str = ""
    #: queued or running: 1 for the request being computed or next, 2 for the one after, ...
    position: int = 0
    #: requests in the queue, this one included
    queued: int = 0
    #: running: prompts done and in all
    done: int = 0
    total: int = 0
    #: running: the accuracy so far with its interval (core.runs.live_sample.running_estimate), when reported
    estimate: dict | None = None
    #: seconds the last computations took, on average (None before the first)
    typical_s: float | None = None

    @property
    def waiting(self) -> bool:
        return self.state in ("queued", "running")


def _write_json(path: Path, data: dict) -> None:
    """Whole or not at all: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, default=_plain))
    os.replace(tmp, path)


def _plain(value):
    """numpy scalars as Python numbers (json cannot write them)."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LiveQueue:
    def __init__(
        self,
        root: Path,
        compute: Compute,
        max_queued: int = MAX_QUEUED,
        max_results: int = MAX_RESULTS,
        external: bool = False,
    ):
        """`external`: a process of its own computes (`serve_forever`, started by `serve`), so this one only asks and
        waits (it never loads a model)."""
        self.root, self.compute = Path(root), compute
        self.max_queued, self.max_results, self.external = max_queued, max_results, external
        for sub in ("queue", "results"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()

    # ------------------------------------------------------------------------- files

    @contextlib.contextmanager
    def _locked(self, name: str = "queue.lock", block: bool = True):
        with open(self.root / name, "a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _tickets(self) -> list[Path]:
        return sorted((self.root / "queue").glob("*.json"))

    def _ticket(self, key: str) -> Path | None:
        return next((t for t in self._tickets() if t.stem.endswith(f"-{key}")), None)

    def _result_path(self, key: str) -> Path:
        return self.root / "results" / f"{key}.json"

    def _answer(self, key: str) -> LiveStatus | None:
        path = self._result_path(key)
        found = _read_json(path)
        if found is None:
            return None
        if "error" in found:
            if time.time() - found.get("at", 0) > ERROR_KEPT_S:
                path.unlink(missing_ok=True)
                return None
            return LiveStatus("failed", message=found["error"])
        return LiveStatus("done", result=found)

    def _typical_s(self) -> float | None:
        recent = _answers_by_age(self.root / "results")[-5:]
        took = [r["compute_s"] for p in recent if (r := _read_json(p)) and r.get("compute_s")]
        return sum(took) / len(took) if took else None

    # ------------------------------------------------------------------------- asking

    def submit(self, request: dict) -> LiveStatus:
        """Queue `request` (a JSON-able dict the compute function understands) unless it is answered or queued
        already; its status."""
        key = request_key(request)
        with self._locked():
            answer = self._answer(key)
            if answer is not None:
                return answer
            if self._ticket(key) is None:
                waiting = len(self._tickets())
                if waiting >= self.max_queued:
                    return LiveStatus(
                        "refused",
                        message=f"{waiting} live computations are waiting on this server already: try again in a "
                        "minute (the cached table above answers at once).",
                    )
                _write_json(self.root / "queue" / f"{time.time_ns():020d}-{key}.json", {"request": request})
        self.ensure_runner()
        return self.status(key)

    def status(self, key: str) -> LiveStatus:
        answer = self._answer(key)
        if answer is not None:
            return answer
        tickets = self._tickets()
        names = [t.stem.split("-", 1)[1] for t in tickets]
        if key not in names:  # answered between the two looks (the answer is written before the ticket goes)?
            return self._answer(key) or LiveStatus("unknown")
        self.ensure_runner()  # a waiting session keeps a runner alive in its process, should the computing one die
        status = LiveStatus("queued", position=names.index(key) + 1, queued=len(names), typical_s=self._typical_s())
        progress = _read_json(self.root / f"running-{key}.json")
        if progress and _alive(progress.get("pid", -1)):
            status.state, status.done, status.total = "running", progress["done"], progress["total"]
            status.estimate = progress.get("estimate")
        return status

    # ------------------------------------------------------------------------- computing

    def ensure_runner(self) -> None:
        """A thread of this process that computes the queue whenever no other process does (none where a process
        of its own computes)."""
        if self.external:
            return
        with self._thread_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="live-queue", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while self._tickets():
            with self._locked("runner.lock", block=False) as mine:
                if mine:
                    while (ticket := self._next()) is not None:
                        self._compute(*ticket)
                    continue
            time.sleep(0.5)  # another process computes; take over if it dies

    def serve_forever(self, stop: threading.Event | None = None, poll_s: float = 0.05, idle=None) -> None:
        """Compute the queue as requests come, until `stop` (the live-computation process of `serve`); `idle()`, when
        given, is called whenever the queue is empty (one short step of work a request may wait for: a preload)."""
        stop = stop or threading.Event()
        while not stop.is_set():
            if self._tickets():
                self._run()
            elif idle is not None:
                idle()
            stop.wait(poll_s)

    def _next(self) -> tuple[Path, dict] | None:
        """The oldest waiting request, its start counted; one started too often is answered with an error."""
        with self._locked():
            for path in self._tickets():
                ticket = _read_json(path)
                key = path.stem.split("-", 1)[1]
                if ticket is None or self._answer(key) is not None:
                    path.unlink(missing_ok=True)
                    continue
                ticket["attempts"] = ticket.get("attempts", 0) + 1
                if ticket["attempts"] > MAX_ATTEMPTS:
                    self._finish(
                        path,
                        key,
                        {
                            "error": f"This live computation stopped its dashboard process {MAX_ATTEMPTS} times, so "
                            "it is not tried again: use the cached table above."
                        },
                    )
                    continue
                _write_json(path, ticket)
                return path, ticket
        return None

    def _compute(self, path: Path, ticket: dict) -> None:
        key = path.stem.split("-", 1)[1]
        progress = self.root / f"running-{key}.json"

        def on_progress(done: int, total: int, estimate: dict | None = None) -> None:
            _write_json(progress, {"pid": os.getpid(), "done": int(done), "total": int(total), "estimate": estimate})

        on_progress(0, 0)
        # when the request was queued (its ticket's name) and when its computation began, for a click's split into
        # queue, compute and redraw (scripts/bench_click.py)
        times = {"submitted_at": int(path.stem.split("-", 1)[0]) / 1e9, "started_at": time.time()}
        t0 = time.perf_counter()
        try:
            result = {**dict(self.compute(ticket["request"], on_progress)), **times}
            result.setdefault("compute_s", time.perf_counter() - t0)
        except LiveRefused as exc:
            result = {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - any failure is answered, never left waiting
            result = {"error": f"The live computation failed ({type(exc).__name__}): use the cached table above."}
        with self._locked():  # the log line first: whoever sees the answer (it reads without the lock) sees it logged
            self._log(
                {"key": key, "pid": os.getpid(), "s": round(time.perf_counter() - t0, 3), "ok": "error" not in result}
            )
            self._finish(path, key, result)
        progress.unlink(missing_ok=True)

    def _log(self, entry: dict) -> None:
        """One line per computation in computed.log (what the fault runs count), kept under LOG_BYTES."""
        log = self.root / "computed.log"
        if log.exists() and log.stat().st_size > LOG_BYTES:
            os.replace(log, log.with_suffix(".log.1"))
        with open(log, "a") as fh:
            fh.write(json.dumps(entry) + "\n")

    def computations(self) -> list[dict]:
        """Every computation logged (since the log last rolled over)."""
        try:
            return [json.loads(line) for line in (self.root / "computed.log").read_text().splitlines() if line]
        except OSError:
            return []

    def _finish(self, ticket: Path, key: str, result: dict) -> None:
        """Store the answer, drop the ticket, keep at most max_results answers (call with the queue locked)."""
        kept = _answers_by_age(self.root / "results")
        for old in kept[: max(0, len(kept) - self.max_results + 1)]:  # room for this one first: never over the bound
            old.unlink(missing_ok=True)
        _write_json(self._result_path(key), {**result, "key": key, "at": time.time()})
        ticket.unlink(missing_ok=True)


def _answers_by_age(folder: Path) -> list[Path]:
    """The answers kept in `folder`, oldest first. One removed while they are listed (a worker pruning the oldest, as
    `_finish` does, while another process reads the typical time without the lock) is left out, not an error."""
    dated = []
    for path in folder.glob("*.json"):
        try:
            dated.append((path.stat().st_mtime, path.name, path))
        except FileNotFoundError:
            continue
    return [path for _, _, path in sorted(dated)]


def live_root() -> Path:
    """FOURIER_LIVE_DIR (one folder for every worker of `serve`), else a fresh temporary folder of this process."""
    given = os.environ.get("FOURIER_LIVE_DIR")
    if given:
        return Path(given)
    global _PRIVATE_ROOT
    with _ROOT_LOCK:
        if _PRIVATE_ROOT is None:
            _PRIVATE_ROOT = Path(tempfile.mkdtemp(prefix="fourier-live-"))
            atexit.register(shutil.rmtree, _PRIVATE_ROOT, ignore_errors=True)
    return _PRIVATE_ROOT


_PRIVATE_ROOT: Path | None = None
_ROOT_LOCK = threading.Lock()
