"""Load test: a class opening one shared link at once, over Streamlit's own websocket protocol.

    .venv/bin/python -m scripts.hall loadtest [--start single|serve] [--workers N] [--sessions 1,10,25,50]
        [--url http://127.0.0.1:PORT] [--cache-dir cache] [--think 1-3] [--seed 0] [--json FILE]

Each simulated session does what a browser does when a student opens the link: fetches the page
(keeping the cookies it sets, as the sticky proxy needs), opens the websocket /_stcore/stream with
the link's query string and waits until the script has finished (Streamlit's ScriptFinished
message): that is "open". Then it makes 5 changes, 1-3 s apart (--think), each timed from the
message sent until the rerun has finished: Next on the Tour, the cutoff tau, the Spectra page,
its layer, its module. Widgets are found in the elements the server sent (by key or label) and
changed as the browser changes them (protobuf BackMsg with the widget's new state).

Errors: an exception element on the page, an error box (st.error), a script that did not finish
(compile error, no ScriptFinished within --change-timeout), a failed page fetch or a websocket
closed before the session ended. Memory: the resident set of the server's processes (the
Streamlit process, or the proxy and every worker), sampled every 0.2 s; "after" is 5 s after
the last session closed.

Bounded: at most 200 sessions, every round ends within --round-timeout, and only servers on this
machine (localhost, 127.0.0.0/8, ::1) are accepted. --start starts the server itself (a free
port; `single` = one `streamlit run`, `serve` = scripts/hall/serve.py with --workers) and stops it at
the end; --url uses a running one (memory then from --pid, if given).

Prints one row per round:  sessions | open p50 / p95 | change p50 / p95 / max | errors | server RSS peak
and, with --json, writes the figures. Exit status 1 when any session saw an error.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from app.launch.server import free_port, port_free, streamlit_command, wait_healthy
from core.files import PROJECT_ROOT
from scripts.hall.session_client import Session

MAX_SESSIONS = 200
LOCAL_HOSTS = ("localhost", "::1")


# ----------------------------------------------------------------------------- a round of sessions


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def process_tree(pids: list[int]) -> list[int]:
    seen, todo = [], list(pids)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo += _children(p)
    return seen


def _proc_sum(pids: list[int], name: str, read) -> int:
    """Sum of read(text of /proc/PID/name) over the process tree; a process gone meanwhile counts 0."""
    total = 0
    for p in process_tree(pids):
        try:
            with open(f"/proc/{p}/{name}") as f:
                total += read(f.read())
        except (OSError, IndexError, ValueError):
            pass
    return total


def rss_bytes(pids: list[int]) -> int:
    return _proc_sum(pids, "statm", lambda text: int(text.split()[1])) * os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) the server's processes have used so far."""
    fields = lambda text: text.rsplit(")", 1)[1].split()  # noqa: E731 (after the command name, which may hold spaces)
    return _proc_sum(pids, "stat", lambda text: int(fields(text)[11]) + int(fields(text)[12])) / os.sysconf(
        "SC_CLK_TCK"
    )


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def _round(base: str, n: int, args, pids: list[int]) -> dict:
    rng = random.Random(args.seed * 1000 + n)
    sessions = [Session(base, random.Random(rng.random()), args.think, args.change_timeout) for _ in range(n)]
    peak = [rss_bytes(pids)]
    start_rss = peak[0]
    done = asyncio.Event()

    async def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes(pids))
            try:
                await asyncio.wait_for(done.wait(), 0.2)
            except asyncio.TimeoutError:
                pass

    async def one(s: Session, delay: float):
        await asyncio.sleep(delay)
        await s.run()

    sampler = asyncio.create_task(sample())
    cpu0 = cpu_seconds(pids)
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(one(s, rng.uniform(0, args.ramp))) for s in sessions]
    _, pending = await asyncio.wait(tasks, timeout=args.round_timeout)
    for t in pending:
        t.cancel()
    for s, t in zip(sessions, tasks):
        if t in pending:
            s.errors.append(f"session still running after the round's {args.round_timeout:.0f} s")
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(pids) - cpu0
    done.set()
    await sampler
    await asyncio.sleep(args.settle)
    after = rss_bytes(pids)
    opens = [s.open_s for s in sessions if s.open_s is not None]
    changes = [c for s in sessions for c in s.changes]
    errors = [e for s in sessions for e in s.errors]
    return {
        "sessions": n,
        "wall_s": wall,
        "opened": len(opens),
        "changes": len(changes),
        "open_p50": pct(opens, 0.5),
        "open_p95": pct(opens, 0.95),
        "change_p50": pct(changes, 0.5),
        "change_p95": pct(changes, 0.95),
        "change_max": max(changes, default=float("nan")),
        "server_cpu_s": cpu,
        "server_cpu_per_run_ms": 1000 * cpu / max(1, len(opens) + len(changes)),
        "errors": len(errors),
        "error_examples": errors[:5],
        "sessions_with_errors": sum(1 for s in sessions if s.errors),
        "per_worker": dict(collections.Counter(s.worker for s in sessions if s.open_s is not None)),
        "rss_start": start_rss,
        "rss_peak": peak[0],
        "rss_after": after,
    }


def fmt_row(r: dict) -> str:
    gb = lambda b: f"{b / 2**30:.2f} GB"  # noqa: E731
    opens = f"{r['open_p50']:.2f} / {r['open_p95']:.2f} s"
    changes = f"{r['change_p50']:.2f} / {r['change_p95']:.2f} / {r['change_max']:.2f} s"
    memory = f"{gb(r['rss_peak'])} (start {gb(r['rss_start'])}, after {gb(r['rss_after'])})"
    return f"| {r['sessions']} | {opens} | {changes} | {r['errors']} | {memory} |"


# ----------------------------------------------------------------------------- servers


def start_server(kind: str, workers: int, cache_dir: str | None, per_address: int | None = None):
    """Start `single` (one streamlit run) or `serve` on free local ports; (process, base URL). `per_address`: serve's
    limit of sessions from one client address (its default when None)."""
    env = dict(os.environ, STREAMLIT_CLIENT_SHOW_ERROR_DETAILS="full")  # an error names its cause in the report
    if cache_dir:
        env["FOURIER_CACHE_DIR"] = str(Path(cache_dir).resolve())
    port = free_port()
    if kind == "single":
        cmd = streamlit_command(port)
        wait_for_workers = 0
    else:
        wport = free_port()
        while any(not port_free(wport + i) for i in range(workers)):
            wport = free_port()
        cmd = [
            sys.executable,
            "-m",
            "scripts.hall",
            "serve",
            "--workers",
            str(workers),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--worker-port",
            str(wport),
            *(["--per-address", str(per_address)] if per_address else []),
            "--out",
            tempfile.mkdtemp(prefix="loadtest-serve-"),
        ]
        wait_for_workers = workers
    proc = subprocess.Popen(
        cmd, cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    proc.out_dir = cmd[-1] if kind == "serve" else None
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, proc)
    if wait_for_workers:  # serve.py starts the proxy once every worker is up and warm: give HAProxy a moment
        time.sleep(0.5)
    return proc, base


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    if getattr(proc, "out_dir", None):
        shutil.rmtree(proc.out_dir, ignore_errors=True)


def check_local(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme != "http" or not (host in LOCAL_HOSTS or host.startswith("127.")):
        raise SystemExit(f"loadtest: only http servers on this machine (localhost, 127.x, ::1), not {url!r}")
    return f"{parts.scheme}://{parts.netloc}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group()
    where.add_argument(
        "--start", choices=["single", "serve"], default="single", help="start this server (default single)"
    )
    where.add_argument("--url", help="use a running server on this machine instead")
    ap.add_argument(
        "--workers", type=int, default=(os.cpu_count() or 2) + 1, help="with --start serve: workers (default cores + 1)"
    )
    ap.add_argument(
        "--pid", type=int, action="append", default=[], help="with --url: server process(es) whose memory to sample"
    )
    ap.add_argument(
        "--sessions", default="1,10,25,50", help="comma-separated rounds (default 1,10,25,50; at most 200 each)"
    )
    ap.add_argument("--cache-dir", default=None, help="run cache for a started server (default: the project's cache/)")
    ap.add_argument("--think", default="1-3", help="seconds between a session's changes, min-max (default 1-3)")
    ap.add_argument("--ramp", type=float, default=1.0, help="sessions open within this many seconds (default 1)")
    ap.add_argument("--change-timeout", type=float, default=60.0, help="seconds a page may take to answer (default 60)")
    ap.add_argument("--round-timeout", type=float, default=300.0, help="seconds a round may take (default 300)")
    ap.add_argument(
        "--settle", type=float, default=5.0, help="seconds after a round before memory is read again (default 5)"
    )
    ap.add_argument(
        "--cold",
        action="store_true",
        help="no warm-up: by default the link is opened once before the first "
        "round (not counted), as the lecturer does before the class opens it",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the rounds to this JSON file")
    args = ap.parse_args(argv)
    rounds = [int(x) for x in args.sessions.split(",") if x.strip()]
    if not rounds or any(not 1 <= n <= MAX_SESSIONS for n in rounds):
        ap.error(f"--sessions: rounds of 1 to {MAX_SESSIONS} sessions")
    lo, _, hi = args.think.partition("-")
    args.think = (float(lo), float(hi or lo))

    proc = None
    if args.url:
        base, pids = check_local(args.url), args.pid
        what = f"running server {base}"
    else:
        # every simulated student comes from 127.0.0.1: serve's per-address limit (100 sessions) is raised to the
        # test's largest round, as for a class behind one NAT address (docs/serving.md)
        proc, base = start_server(args.start, args.workers, args.cache_dir, per_address=MAX_SESSIONS + 10)
        pids = [proc.pid]
        what = (
            "one `streamlit run` process"
            if args.start == "single"
            else f"`serve` with {args.workers} workers behind HAProxy"
        )
    load = os.getloadavg()
    print(
        f"loadtest: {what}; {os.cpu_count()} cores; load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        flush=True,
    )
    print("| sessions | open p50 / p95 | change p50 / p95 / max | errors | server RSS peak |", flush=True)
    print("| --- | --- | --- | --- | --- |", flush=True)
    results = []
    try:
        if not args.cold:
            asyncio.run(_round(base, 1, argparse.Namespace(**{**vars(args), "settle": 0}), pids))
        for n in rounds:
            r = asyncio.run(_round(base, n, args, pids))
            results.append(r)
            print(fmt_row(r), flush=True)
            print(
                f"    server CPU {r['server_cpu_s']:.1f} s over {r['wall_s']:.0f} s, "
                f"{r['server_cpu_per_run_ms']:.0f} ms a script run ({r['opened']} opens + {r['changes']} changes)",
                flush=True,
            )
            if set(r["per_worker"]) != {"-"}:
                print(f"    sessions per worker: {dict(sorted(r['per_worker'].items()))}", flush=True)
            for e in r["error_examples"]:
                print(f"    error: {e}", flush=True)
    finally:
        if proc is not None:
            stop_server(proc)
    if args.json:
        Path(args.json).write_text(json.dumps({"server": what, "load_before": load, "rounds": results}, indent=1))
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
