"""One machine opens 500 connections at once (faults.py's flood): a script, or a browser tab stuck reloading.

From 127.0.0.2, a second loopback address standing for another machine (the server listens on 127.0.0.1 only),
all at once: 40% dashboard sessions (a websocket and a script run each, held open), 40% page requests, 20%
requests that never finish; meanwhile students click from 127.0.0.1. The flood runs in a process of its own, so
that its thousands of messages do not delay the students' timing in this one (both share the machine's cores, as
a real flood and class would share the server's).
"""

from __future__ import annotations

import asyncio
import collections
import multiprocessing
import random
import time

import websockets

from scripts.hall.fault_class import (
    CLICK_P95_BOUND,
    ClickingStudent,
    FaultRow,
    Served,
    attend_all,
    click_stats,
    student_address,
)
from scripts.hall.session_client import Session

FLOOD_SOURCE = "127.0.0.2"


async def _flood_session(base: str, outcome: collections.Counter, held: list, stop: asyncio.Event) -> None:
    """A websocket session from the flood's address, without the page (a script can skip it); held until the end."""
    s = Session(base, random.Random(0), (0, 0), 30.0, source=FLOOD_SOURCE)
    s.query = "step=2&tau=50"
    try:
        await s.connect()
        if await s.until_finished("flood"):
            outcome["session opened (a script run)"] += 1
            held.append(s)
            await stop.wait()
        else:
            outcome["session without an answer"] += 1
    except websockets.InvalidStatus as exc:
        outcome[f"refused with HTTP {exc.response.status_code}"] += 1
    except (OSError, websockets.InvalidHandshake, asyncio.TimeoutError):
        outcome["connection refused or reset"] += 1
    finally:
        await s.close()


async def _flood_get(host: str, port: int, outcome: collections.Counter) -> None:
    """A plain page request from the flood's address."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, local_addr=(FLOOD_SOURCE, 0)), 15.0)
        writer.write(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 30.0)
        status = line.split()[1].decode() if len(line.split()) > 1 else "nothing"
        outcome[f"page request answered {status}"] += 1
        writer.close()
    except (OSError, asyncio.TimeoutError, IndexError):
        outcome["connection refused or reset"] += 1


async def _flood_idle(host: str, port: int, outcome: collections.Counter, stop: asyncio.Event) -> None:
    """A connection that starts a request and never finishes it (what a stuck client does)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, local_addr=(FLOOD_SOURCE, 0)), 15.0)
        writer.write(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())
        await writer.drain()
        done, _ = await asyncio.wait(
            [asyncio.create_task(reader.read(200)), asyncio.create_task(stop.wait())],
            return_when=asyncio.FIRST_COMPLETED,
        )
        outcome["idle connection closed by the proxy" if not stop.is_set() else "idle connection held"] += 1
        writer.close()
    except (OSError, asyncio.TimeoutError):
        outcome["connection refused or reset"] += 1


async def _flood(base: str, flood: int, hold_s: float) -> collections.Counter:
    """`flood` connections at once from FLOOD_SOURCE, held `hold_s` seconds; what became of them."""
    host, port = base.split("//", 1)[1].split(":")
    outcome, held, stop = collections.Counter(), [], asyncio.Event()
    n_ws, n_get = int(flood * 0.4), int(flood * 0.4)
    tasks = (
        [_flood_session(base, outcome, held, stop) for _ in range(n_ws)]
        + [_flood_get(host, int(port), outcome) for _ in range(n_get)]
        + [_flood_idle(host, int(port), outcome, stop) for _ in range(flood - n_ws - n_get)]
    )
    flooding = asyncio.gather(*tasks)
    await asyncio.sleep(hold_s)
    stop.set()
    await flooding
    return outcome


def _flood_process(base: str, flood: int, hold_s: float, answer) -> None:
    answer.put(dict(asyncio.run(_flood(base, flood, hold_s))))


def flood_from_another_process(base: str, flood: int, hold_s: float) -> collections.Counter:
    context = multiprocessing.get_context("spawn")
    answer = context.Queue()
    proc = context.Process(target=_flood_process, args=(base, flood, hold_s, answer), daemon=True)
    proc.start()
    try:
        return collections.Counter(answer.get(timeout=hold_s + 120))
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


async def connection_flood(served: Served, sessions: int, flood: int, duration: float, flood_at: float, seed: int):
    rng = random.Random(seed)
    students = [
        ClickingStudent(served.base, random.Random(rng.random()), (1.0, 3.0), 60.0, source=student_address())
        for _ in range(sessions)
    ]
    pids = served.worker_pids()
    t0 = time.monotonic()
    lecture = asyncio.create_task(attend_all(students, t0 + duration, ramp=5.0, rng=rng))
    await asyncio.sleep(flood_at)
    started = time.monotonic()
    outcome = await asyncio.to_thread(flood_from_another_process, served.base, flood, t0 + duration - 2 - started)
    await lecture
    during = click_stats(students, started, started + 20.0)
    before = click_stats(students, t0 + 6.0, started)
    errors = [e for s in students for e in s.errors]
    drops = [d for s in students for d in s.drops]
    after_pids = served.worker_pids()
    states = served.states()
    problems = []
    if after_pids != pids:
        problems.append(f"a worker was restarted: {pids} -> {after_pids}")
    if any(v != "UP" for v in states.values()):
        problems.append(f"workers not all up after the flood: {states}")
    if during["p95"] > CLICK_P95_BOUND:
        problems.append(f"the students' click p95 during the flood was {during['p95']:.2f} s")
    if errors or drops:
        problems.append(f"{len(errors)} errors and {len(drops)} dropped connections among the students")
    accepted = outcome["session opened (a script run)"]
    return FaultRow(
        fault=f"{flood} connections at once from one address while {sessions} students click",
        bound=f"workers stay up; students' click p95 <= {CLICK_P95_BOUND:.0f} s; no student error",
        passed=not problems,
        measured=f"students' click p95 {before['p95']:.2f} s before, {during['p95']:.2f} s during the flood "
        f"({during['n']} clicks, max {during['max']:.2f} s); flood: "
        + ", ".join(f"{v} {k}" for k, v in sorted(outcome.items(), key=lambda kv: -kv[1])),
        student_saw=f"nothing; the flooding machine gets at most {accepted} sessions, then the one-line page "
        "'Too many connections from your network address at once'",
        recovery="none needed (no worker restarted)",
        lost="nothing",
        details={"before": before, "during": during, "flood": dict(outcome), "states": states, "errors": errors[:5]},
        problems=problems,
    )
