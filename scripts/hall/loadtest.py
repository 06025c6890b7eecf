"""Load test: a class opening one shared link at once, over Streamlit's own websocket protocol.

    .venv/bin/python -m scripts.hall loadtest [--start single|serve] [--workers N] [--sessions 1,10,25,50]
        [--think 1-3] [--ramp 1] [--duration S] [--per-address N] [--url http://127.0.0.1:PORT [--serve-out DIR]]
        [--cache-dir cache] [--seed 0] [--json FILE]

Each simulated session does what a browser does when a student opens the link: fetches the page
(keeping the cookies it sets, as the sticky proxy needs), opens the websocket /_stcore/stream with
the link's query string and waits until the script has finished (Streamlit's ScriptFinished
message): that is "open". Then it makes 5 changes, 1-3 s apart (--think), each timed from the
message sent until the rerun has finished: Next on the Tour, the cutoff tau, the Spectra page,
its layer, its module. With --duration S it goes on after them (back to the Tour, its next step,
tau, Spectra, layer, module, round and round) until S seconds after the round began: a class
clicking through a lecture. Widgets are found in the elements the server sent (by key or label) and
changed as the browser changes them (protobuf BackMsg with the widget's new state).

Every session comes from 127.0.0.1, one client address: a class behind one NAT address. `serve`'s
per-address limits then apply to the whole class (scripts/hall/serve.py: by default 200 sessions open, 200
opened per 10 s, 50 per second); sessions open within --ramp seconds, so give a round of more than 50 a ramp
of a few seconds (a class opening a link over ten seconds: --ramp 10), or its sessions past the per-second
limit are refused (429; counted as refused and as errors: a real browser's page would retry by itself).
--per-address sets the limit of the `serve` the test starts (its default otherwise).

Errors: an exception element on the page, an error box (st.error), a script that did not finish
(compile error, no ScriptFinished within --change-timeout), a failed page fetch or a websocket
closed before the session ended. Memory: the resident set of the server's processes (the
Streamlit process, or the proxy and every worker), sampled every 0.2 s; "after" is 5 s after
the last session closed. Health: behind `serve`, how often HAProxy's health checks marked a worker down during
the round, which and why, and whether no worker was left (from the proxy's log, serve/haproxy.log; with --url,
give that serve's --out folder as --serve-out).

Bounded: at most 200 sessions, every round ends within --round-timeout, and only servers on this
machine (localhost, 127.0.0.0/8, ::1) are accepted. --start starts the server itself (a free
port; `single` = one `streamlit run`, `serve` = scripts/hall/serve.py with --workers) and stops it at
the end; --url uses a running one (memory then from --pid, if given).

Prints one row per round:  sessions | open p50 / p95 | change p50 / p95 / max | errors | server RSS peak
then the sessions opened and refused, the server's CPU, the workers marked down, and, with --json, writes the
figures. Exit status 1 when any session saw an error.
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
from scripts.hall.proxy_log import describe_events, proxy_events, read_proxy_log
from scripts.hall.serve import PER_ADDRESS, per_address_limits
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


#: How a refusal by serve's per-address limit reads in a session's errors (the websocket's HTTP 429).
REFUSED = "HTTP 429"


async def _round(base: str, n: int, args, pids: list[int], proxy_log: Path | None = None) -> dict:
    rng = random.Random(args.seed * 1000 + n)
    sessions = [Session(base, random.Random(rng.random()), args.think, args.change_timeout) for _ in range(n)]
    _, log_at = read_proxy_log(proxy_log) if proxy_log else ("", 0)
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
        await s.run(until)

    sampler = asyncio.create_task(sample())
    cpu0 = cpu_seconds(pids)
    t0 = time.perf_counter()
    until = time.monotonic() + args.duration if args.duration else None
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
    events = proxy_events(read_proxy_log(proxy_log, log_at)[0]) if proxy_log else None
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
        "refused": sum(1 for s in sessions if any(REFUSED in e for e in s.errors)),
        # behind serve: the health checks' verdicts during the round (None: no proxy, or its log unknown)
        "marked_down": None if events is None else len(events["marked_down"]),
        "marked_down_events": None if events is None else events["marked_down"],
        "no_worker_left": None if events is None else events["none_left"],
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


def describe_round_events(r: dict) -> str:
    """The round's health line: how often HAProxy marked a worker down, which and why, and no worker left."""
    events = {"marked_down": r["marked_down_events"], "none_left": r["no_worker_left"], "maintenance": []}
    return describe_events(events)


# ----------------------------------------------------------------------------- servers


def start_server(kind: str, workers: int, cache_dir: str | None, per_address: int | None = None):
    """Start `single` (one streamlit run) or `serve` on free local ports; (process, base URL). `per_address`: serve's
    limit of sessions from one client address (its default, 200, when None: a class of 150 on one address fits).
    The process's `out_dir` is serve's --out folder (its config, logs and proxy socket; None for `single`)."""
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
    # the server's own output to a file (a pipe that nobody reads would stop the server once full): in serve's
    # folder, or one of its own for `single`; stop_server removes both
    out_dir = cmd[-1] if kind == "serve" else tempfile.mkdtemp(prefix="loadtest-single-")
    with open(Path(out_dir) / "server-output.log", "ab") as output:
        proc = subprocess.Popen(
            cmd, cwd=PROJECT_ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    proc.out_dir = out_dir if kind == "serve" else None
    proc.own_dir = out_dir
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
    if getattr(proc, "own_dir", None):
        shutil.rmtree(proc.own_dir, ignore_errors=True)


def check_local(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme != "http" or not (host in LOCAL_HOSTS or host.startswith("127.")):
        raise SystemExit(f"loadtest: only http servers on this machine (localhost, 127.x, ::1), not {url!r}")
    return f"{parts.scheme}://{parts.netloc}"


def parse_think(text: str) -> tuple[float, float]:
    """--think "5-15" (or "2": always 2 s) -> (5.0, 15.0)."""
    lo, _, hi = text.partition("-")
    think = (float(lo), float(hi or lo))
    if not 0 <= think[0] <= think[1]:
        raise ValueError(text)
    return think


def limit_warnings(rounds: list[int], ramp: float, per_address: int) -> list[str]:
    """What serve's per-address limits will refuse of these rounds, all from one address (this test's 127.0.0.1)."""
    limits = per_address_limits(per_address)
    found = []
    for n in sorted(set(rounds)):
        if n > limits["sessions"]:
            found.append(
                f"{n} sessions from one address are more than serve's {limits['sessions']} (--per-address): "
                f"about {n - limits['sessions']} will be refused (429)"
            )
        if n > limits["per_second"] and n / max(ramp, 1.0) > 0.8 * limits["per_second"]:
            found.append(
                f"{n} sessions opening within {ramp:g} s from one address come near or past serve's "
                f"{limits['per_second']} new sessions a second (a quarter of --per-address): some may be refused "
                f"(429); --ramp {max(2, int(n / (0.6 * limits['per_second'])) + 1)} spreads them"
            )
    return found


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
        "--per-address",
        type=int,
        default=None,
        help=f"with --start serve: serve's --per-address (default its own, {PER_ADDRESS}; every session of this test "
        "comes from one address)",
    )
    ap.add_argument(
        "--pid", type=int, action="append", default=[], help="with --url: server process(es) whose memory to sample"
    )
    ap.add_argument(
        "--serve-out",
        help="with --url of a serve: its --out folder (its haproxy.log says when a worker was marked down)",
    )
    ap.add_argument(
        "--sessions", default="1,10,25,50", help="comma-separated rounds (default 1,10,25,50; at most 200 each)"
    )
    ap.add_argument("--cache-dir", default=None, help="run cache for a started server (default: the project's cache/)")
    ap.add_argument(
        "--think", default="1-3", help="seconds between a session's changes, min-max (default 1-3; e.g. 5-15)"
    )
    ap.add_argument("--ramp", type=float, default=1.0, help="sessions open within this many seconds (default 1)")
    ap.add_argument(
        "--duration",
        type=float,
        default=0.0,
        help="seconds each round's sessions keep clicking, round and round after their 5 changes (default 0: the 5 "
        "changes only)",
    )
    ap.add_argument("--change-timeout", type=float, default=60.0, help="seconds a page may take to answer (default 60)")
    ap.add_argument(
        "--round-timeout",
        type=float,
        default=300.0,
        help="seconds a round may take (default 300, and at least --ramp + --duration + --change-timeout + 30)",
    )
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
    try:
        args.think = parse_think(args.think)
    except ValueError:
        ap.error(f"--think: seconds min-max, such as 1-3 or 5-15, not {args.think!r}")
    if args.duration < 0 or args.ramp < 0:
        ap.error("--duration and --ramp: seconds, 0 or more")
    if args.per_address is not None and not 1 <= args.per_address <= 10_000:
        ap.error("--per-address: between 1 and 10000")
    args.round_timeout = max(args.round_timeout, args.ramp + args.duration + args.change_timeout + 30)

    proc = None
    proxy_log = None
    if args.url:
        base, pids = check_local(args.url), args.pid
        what = f"running server {base}"
        proxy_log = Path(args.serve_out) / "haproxy.log" if args.serve_out else None
    else:
        # every simulated student comes from 127.0.0.1, a class behind one NAT address: serve's own default limit
        # (200 sessions) fits the rounds of up to 150 that docs/serving.md measures; --per-address sets another
        proc, base = start_server(args.start, args.workers, args.cache_dir, per_address=args.per_address)
        pids = [proc.pid]
        what = (
            "one `streamlit run` process"
            if args.start == "single"
            else f"`serve` with {args.workers} workers behind HAProxy"
        )
        if args.start == "serve":
            proxy_log = Path(proc.out_dir) / "haproxy.log"
            what += f", per-address limit {args.per_address or PER_ADDRESS}"
    load = os.getloadavg()
    print(
        f"loadtest: {what}; {os.cpu_count()} cores; load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        flush=True,
    )
    print(
        f"loadtest: rounds of {args.sessions} sessions from one address, opening within {args.ramp:g} s, "
        f"{args.think[0]:g}-{args.think[1]:g} s between changes"
        + (f", clicking for {args.duration:g} s" if args.duration else ", 5 changes each"),
        flush=True,
    )
    if args.start == "serve" and not args.url:
        for warning in limit_warnings(rounds, args.ramp, args.per_address or PER_ADDRESS):
            print(f"loadtest: warning: {warning}", flush=True)
    print("| sessions | open p50 / p95 | change p50 / p95 / max | errors | server RSS peak |", flush=True)
    print("| --- | --- | --- | --- | --- |", flush=True)
    results = []
    try:
        if not args.cold:
            asyncio.run(_round(base, 1, argparse.Namespace(**{**vars(args), "settle": 0, "duration": 0}), pids))
            if proxy_log is not None:
                time.sleep(2.0)  # the warm-up's session out of the proxy's per-second count before the class opens
        for n in rounds:
            r = asyncio.run(_round(base, n, args, pids, proxy_log))
            results.append(r)
            print(fmt_row(r), flush=True)
            print(
                f"    opened {r['opened']} of {n}"
                + (f", {r['refused']} refused by the per-address limit (429)" if r["refused"] else "")
                + f"; server CPU {r['server_cpu_s']:.1f} s over {r['wall_s']:.0f} s, "
                f"{r['server_cpu_per_run_ms']:.0f} ms a script run ({r['opened']} opens + {r['changes']} changes)",
                flush=True,
            )
            if set(r["per_worker"]) != {"-"}:
                print(f"    sessions per worker: {dict(sorted(r['per_worker'].items()))}", flush=True)
            if r["marked_down"] is not None:
                print(f"    health: {describe_round_events(r)}", flush=True)
            elif args.url:
                print("    health: not known (give --serve-out, the serve's folder, to read its proxy's log)")
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
