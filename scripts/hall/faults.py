"""Faults a lecture hall meets, tried against `serve` on this machine, each bounded in time and count and checked.

    .venv/bin/python -m scripts.hall faults [--faults links,uploads,live,kill,flood] [--sessions 50] [--workers N]
        [--quick] [--json FILE] [--url http://127.0.0.1:PORT --serve-out DIR --serve-pid PID]

By default it starts `serve` itself (scripts/hall/serve.py, proxy and workers on 127.0.0.1, free ports), runs the faults
one after the other against it and stops it. Only servers on this machine are accepted.

  links    every URL parameter of every page given a value out of range, of the wrong type, 5,000 characters
           long, or with markup: the page opens with a one-line note naming the parameter and shows its default;
           never an exception or an error box (scripts/hall/fault_inputs.py)
  uploads  the Behaviour page's upload given an oversize, binary, Excel, malformed or wrong-column file: one line
           each in plain words, no exception (scripts/hall/fault_inputs.py)
  live     50 students press "Run live" on the Ablations page within 5 s (most with the lecturer's settings), while
           20 others click other pages: each gets an answer or a place in the queue that counts down within 2 s
           and sees the page move at least every 3 s, identical requests are computed once, the others' clicks
           keep p95 <= 2 s, memory stays bounded (scripts/hall/fault_live.py)
  kill     50 students click for 55 s; at 25 s the worker with most of them is killed (SIGKILL, by its process
           id): its students are back on their view (page and URL) within 10 s, the others' click p95 after the
           kill stays within 0.5 s of before (and <= 2 s), the worker is out of the proxy's rotation within 5 s
           and back within 60 s, and no other worker (busier now) is marked down by the health checks
  flood    500 connections opened at once from one other address on this machine (127.0.0.2: a misbehaving
           laptop) while 30 students click: the workers stay up, the students' click p95 stays <= 2 s, the flood
           gets the proxy's one-line 429 page or is closed

Prints one row per fault (fault | bound | measured | what a student saw | recovery | lost | passed) and the
machine's load; --json writes every figure. Exit status 1 when a fault broke its bound. --quick runs the short
versions (the test suite's).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

from scripts.hall.fault_class import (
    CLICK_P95_BOUND,
    ClickingStudent,
    FaultRow,
    Served,
    attend_all,
    click_stats,
    load_now,
    student_address,
)
from scripts.hall.fault_flood import connection_flood
from scripts.hall.fault_inputs import hostile_links, hostile_uploads
from scripts.hall.fault_live import live_stampede
from scripts.hall.loadtest import check_local, start_server, stop_server
from scripts.hall.proxy_log import describe_events, proxy_events, read_proxy_log
from scripts.hall.session_client import Session

FAULTS = ["links", "uploads", "live", "kill", "flood"]
#: Seconds a killed worker's students may take to be back on their view.
BACK_BOUND_S = 10.0
#: Seconds the killed worker may take to be back in the proxy's rotation.
WORKER_BACK_BOUND_S = 60.0
#: How much the other students' click p95 may grow after the kill (seconds).
OTHERS_GROWTH_S = 0.5
#: Seconds the killed worker may stay in the proxy's rotation (serve.py takes it out within about a second, the
#: health checks 2-3 s after its death).
OUT_BOUND_S = 5.0


# ----------------------------------------------------------------------------- a worker killed mid-lecture


async def killed_worker(served: Served, sessions: int, duration: float, kill_at: float, seed: int) -> FaultRow:
    rng = random.Random(seed)
    students = [
        ClickingStudent(served.base, random.Random(rng.random()), (1.0, 3.0), 60.0, source=student_address())
        for _ in range(sessions)
    ]
    t0 = time.monotonic()
    until = t0 + duration
    lecture = asyncio.create_task(attend_all(students, until, ramp=5.0, rng=rng))
    await asyncio.sleep(kill_at)
    on = collections.Counter(s.worker for s in students if s.open_s is not None)
    victim = on.most_common(1)[0][0]
    port = served.worker_ports()[victim]
    pid = served.worker_pid(port)
    victims = [s for s in students if s.open_s is not None and s.worker == victim]
    others = [s for s in students if s.open_s is not None and s.worker != victim]
    _, log_at = read_proxy_log(served.proxy_log)
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    back_in = out_in = None
    while back_in is None and time.monotonic() < killed + WORKER_BACK_BOUND_S + 10:
        state = served.states().get(victim, "")
        if out_in is None and state and not state.startswith("UP"):  # "UP 1/3": still in rotation, one check failed
            out_in = time.monotonic() - killed
        new = served.worker_pid(port)
        if new is not None and new != pid and state == "UP" and out_in is not None:
            back_in = time.monotonic() - killed
            break
        await asyncio.sleep(0.1 if out_in is None else 0.25)
    await lecture
    # new students after the restart: the restarted worker takes its share again
    late = [
        Session(served.base, random.Random(i), (0, 0), 60.0, source=student_address())
        for i in range(2 * len(served.worker_ports()))
    ]
    for s in late:
        await s.open()
        await s.close()
    late_on = collections.Counter(s.worker for s in late if s.open_s is not None)

    drops = [d for s in victims for d in s.drops]
    recovered = [d["back_at"] - killed for d in drops if d["back_at"] is not None]
    missing = [s for s in victims if not any(d["back_at"] for d in s.drops)]
    kept = sum(1 for d in drops if d["view_kept"])
    in_flight = sum(1 for d in drops if d["click_in_flight"])
    page_changes = sum(1 for d in drops if d.get("page_change_in_flight"))
    before = click_stats(others, t0 + kill_at / 2, killed)  # steady clicking: the openings are over
    after = click_stats(others, killed, killed + 20.0)
    errors = [e for s in students for e in s.errors]
    other_drops = [d for s in others for d in s.drops]
    # from the kill on: a busy worker (the others take the victim's students) is never marked down
    events = proxy_events(read_proxy_log(served.proxy_log, log_at)[0])
    others_down = [(w, why) for w, why in events["marked_down"] if w != victim]
    problems = []
    if missing:
        problems.append(f"{len(missing)} of the killed worker's {len(victims)} students never came back")
    if recovered and max(recovered) > BACK_BOUND_S:
        problems.append(f"a student was back only after {max(recovered):.1f} s (bound {BACK_BOUND_S:.0f} s)")
    if kept != len(drops):
        problems.append(f"{len(drops) - kept} students came back to another view than the one they had")
    if after["p95"] > max(before["p95"] + OTHERS_GROWTH_S, 0) or after["p95"] > CLICK_P95_BOUND:
        problems.append(f"the others' click p95 went from {before['p95']:.2f} s to {after['p95']:.2f} s")
    if other_drops:
        problems.append(f"{len(other_drops)} students of other workers lost their connection")
    if out_in is None or out_in > OUT_BOUND_S:
        problems.append(f"the killed worker was not out of the proxy's rotation within {OUT_BOUND_S:.0f} s")
    if back_in is None or back_in > WORKER_BACK_BOUND_S:
        problems.append("the killed worker was not back in rotation within 60 s")
    if others_down:
        problems.append(f"workers that were not killed were marked down: {others_down}")
    if errors:
        problems.append(f"{len(errors)} errors, e.g. {errors[0]}")
    if late_on.get(victim, 0) == 0:
        problems.append(f"no new student landed on the restarted worker ({dict(late_on)})")
    worst = max(recovered, default=float("nan"))
    return FaultRow(
        fault=f"worker killed (SIGKILL) while {sessions} students click",
        bound=f"its students back on their view <= {BACK_BOUND_S:.0f} s; others' click p95 within "
        f"{OTHERS_GROWTH_S} s of before and <= {CLICK_P95_BOUND:.0f} s; worker out of rotation <= "
        f"{OUT_BOUND_S:.0f} s and back <= {WORKER_BACK_BOUND_S:.0f} s; no other worker marked down",
        passed=not problems,
        measured=f"{len(victims)} students on {victim}: back after {min(recovered, default=float('nan')):.1f}-"
        f"{worst:.1f} s, {kept}/{len(drops)} on the same view; others' click p95 {before['p95']:.2f} s before, "
        f"{after['p95']:.2f} s after ({after['n']} clicks); {victim} out of rotation after "
        f"{'-' if out_in is None else f'{out_in:.1f}'} s, back after {'-' if back_in is None else f'{back_in:.1f}'} "
        f"s; {describe_events(events)}",
        student_saw="the page greys for a moment ('Connecting') and comes back on the same page, run, tau, layer "
        "and module; the others see nothing",
        recovery=f"{worst:.1f} s (students), {'-' if back_in is None else f'{back_in:.1f}'} s (worker)",
        lost=f"what the URL does not carry (an uploaded file, a live result on screen); {in_flight} click(s) in "
        f"flight at the kill went unanswered (the view came back as the URL had it before them), {page_changes} of "
        "them a page change (that page opened at its defaults: the URL carries no values during a page change)",
        details={
            "victim": victim,
            "students_on_victim": len(victims),
            "recovery_s": recovered,
            "others_before": before,
            "others_after": after,
            "worker_out_s": out_in,
            "worker_back_s": back_in,
            "proxy_events": events,
            "late_sessions_per_worker": dict(late_on),
            "errors": errors[:5],
            "others_clicks": sorted(
                (round(t - killed, 2), round(took, 3), w) for s in others for (t, took, w) in s.timed
            ),
        },
        problems=problems,
    )


# ----------------------------------------------------------------------------- the report


def print_row(row: FaultRow) -> None:
    cells = [row.fault, row.bound, row.measured, row.student_saw, row.recovery, row.lost]
    print("| " + " | ".join(cells) + f" | {'yes' if row.passed else '**no**'} |", flush=True)
    for p in row.problems:
        print(f"    problem: {p}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)} (default all)")
    ap.add_argument("--sessions", type=int, default=50, help="students in the killed-worker and live runs (default 50)")
    ap.add_argument("--workers", type=int, default=(os.cpu_count() or 2) + 1, help="workers of the started serve")
    ap.add_argument(
        "--start",
        choices=["serve", "single"],
        default="serve",
        help="start `serve` (default) or one `streamlit run` process (links and uploads only)",
    )
    ap.add_argument("--quick", action="store_true", help="the short versions (the test suite's)")
    ap.add_argument("--cache-dir", default=None, help="run cache for the started server (default: the project's)")
    ap.add_argument("--url", help="a running serve on this machine instead (needs --serve-out, --serve-pid)")
    ap.add_argument("--serve-out", help="with --url: that serve's --out folder")
    ap.add_argument("--serve-pid", type=int, help="with --url: that serve.py's process id")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write every figure to this JSON file")
    args = ap.parse_args(argv)
    chosen = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = [f for f in chosen if f not in FAULTS]
    if unknown:
        ap.error(f"--faults: unknown {', '.join(unknown)} (choose from {', '.join(FAULTS)})")
    if not 1 <= args.sessions <= 200:
        ap.error("--sessions: between 1 and 200")
    if args.url and not (args.serve_out and args.serve_pid):
        ap.error("--url needs --serve-out and --serve-pid (the serve's folder and process)")
    if args.start == "single" and set(chosen) - {"links", "uploads"}:
        ap.error("--start single: only the links and uploads faults (the others need serve's proxy and workers)")

    proc = None
    if args.url:
        served = Served(check_local(args.url), Path(args.serve_out), args.serve_pid)
    else:
        proc, base = start_server(args.start, args.workers, args.cache_dir)
        served = Served(base, Path(proc.out_dir or "/nonexistent"), proc.pid)
    what = "one streamlit process" if args.start == "single" else f"serve with {len(served.worker_ports())} workers"
    print(f"faults: {what} at {served.base}; {load_now()}", flush=True)
    print("| fault | bound | measured | what a student saw | recovery | lost | passed |", flush=True)
    print("| --- | --- | --- | --- | --- | --- | --- |", flush=True)
    n = args.sessions
    quick = args.quick
    runs = {
        "links": lambda: hostile_links(served, quick=quick),
        "uploads": lambda: hostile_uploads(served),
        "live": lambda: live_stampede(served, presses=n, others=5 if quick else 20, seed=args.seed),
        "kill": lambda: killed_worker(
            served, n, duration=20.0 if quick else 55.0, kill_at=8.0 if quick else 25.0, seed=args.seed
        ),
        "flood": lambda: connection_flood(
            served,
            10 if quick else 30,
            100 if quick else 500,
            duration=25.0 if quick else 40.0,
            flood_at=10.0,
            seed=args.seed,
        ),
    }
    rows = []
    try:
        for name in chosen:
            t, cpu = time.monotonic(), time.process_time()
            row = asyncio.run(runs[name]())
            row.details["took_s"] = time.monotonic() - t
            row.details["load_generator_cpu_s"] = time.process_time() - cpu  # this process: the students' side
            row.details["load_after"] = load_now()
            rows.append(row)
            print_row(row)
    finally:
        if proc is not None:
            stop_server(proc)
    print(f"faults: {sum(r.passed for r in rows)} of {len(rows)} within their bounds; {load_now()}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in rows], indent=1, default=str))
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
