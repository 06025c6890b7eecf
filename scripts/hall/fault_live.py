"""The live stampede (scripts/hall/faults.py): a lecturer says "now everyone press Run live".

`presses` students open the Ablations page of a run whose model can be computed live, most with the lecturer's
settings (the MLP's low frequencies removed, tau 50) and some with their own, and press "Run the ... prompts" within
5 s; meanwhile `others` students click the Tour and the Spectra page. Measured for every pressing student: the
seconds until the page first answers (a place in the queue, a progress bar or the result), the longest the page
stays still while it waits, the places it shows (they must never go up), and whether the result comes; for the
server: how many computations ran (one per distinct request), its memory; for the others: their click p95.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import urllib.parse

from core.files import PROJECT_ROOT
from core.runs import cache as run_cache
from core.runs.live_model import live_model_folder
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

#: The lecturer's settings, and what some students pick instead (modules, band removed, tau).
LECTURER = ("mlp", "low", 50)
OWN = [("attn", "high", 50), ("mlp", "low", 30), ("both", "low", 40), ("mlp", "high", 60)]
SHARE_OWN = 0.2
#: Bounds: seconds until the page first answers, longest still page while waiting, a whole stampede.
FIRST_ANSWER_S = 2.0
STILL_S = 3.0
STAMPEDE_S = 240.0
#: Memory bounds: the live-computation process (torch, at most 2 models, the prompts' prefix caches up to
#: core.runs.live_ablation.LIVE_PREFIX_BYTES) and the growth of the dashboard processes (the sessions' state).
LIVE_MEMORY = 1.5 * 2**30
MEMORY_GROWTH = 1.0 * 2**30
PLACE = re.compile(r"number (\d+) in this server's queue")


def live_run(cache_dir) -> str:
    """A run whose model is on this machine and small enough to compute live (the Fourier-frozen demo first)."""
    found = []
    for r in run_cache.list_runs(cache_dir):
        if r.ok and live_model_folder(r.manifest)[0] is not None:
            found.append((0 if "fourier-frozen-tied" in r.name else 1, r.name))
    if not found:
        raise SystemExit("faults: no run in the cache can be computed live (no model of one is on this machine)")
    return sorted(found)[0][1]


class PressingStudent(Session):
    """Opens the Ablations page with its live settings in the URL, presses the button once and watches."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.pressed: float | None = None
        self.updates: list[float] = []  # when the waiting page changed (a new line, a progress step, the answer)
        self.places: list[int] = []
        self.answered: float | None = None
        self.accuracy: str | None = None

    def on_element(self, etype: str, el) -> None:
        if self.pressed is None:
            return
        now = time.monotonic()
        text = el.body if etype == "alert" else el.text if etype == "progress" else ""
        if etype == "metric" and el.label == "accuracy":
            self.answered, self.accuracy = now, el.body
            self.updates.append(now)
        elif etype in ("alert", "progress") and "so far" in text:
            self.updates.append(now)
            if m := PLACE.search(text):
                self.places.append(int(m.group(1)))

    def press(self):
        el = next((e for t, e in self.elements if t == "button" and e.label.endswith("with this filter")), None)
        if el is None:
            self.errors.append("no 'Run ... with this filter' button on the Ablations page")
            return None
        s = self.widget_state(el)
        s.trigger_value = True
        return self.rerun_msg(s)

    async def attend(self, press_at: float) -> None:
        try:
            if not await self.open():
                return
            await asyncio.sleep(max(0.0, press_at - time.monotonic()))
            msg = self.press()
            if msg is None:
                return
            self.pressed = time.monotonic()
            await self.ws.send(msg.SerializeToString())
            await self.until_finished("press")
            if self.answered is None:
                self.errors.append("the live result never came")
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            await self.close()

    @property
    def first_answer_s(self) -> float | None:
        return self.updates[0] - self.pressed if self.updates and self.pressed else None

    @property
    def longest_still_s(self) -> float | None:
        if not self.updates or self.pressed is None:
            return None
        marks = [self.pressed, *self.updates]
        return max(b - a for a, b in zip(marks, marks[1:]))


async def live_stampede(served: Served, presses: int, others: int, seed: int, cache_dir=None) -> FaultRow:
    rng = random.Random(seed)
    run = live_run(cache_dir or PROJECT_ROOT / "cache")
    settings = [
        random.Random(rng.random()).choice(OWN) if rng.random() < SHARE_OWN else LECTURER for _ in range(presses)
    ]
    students = []
    for modules, removed, tau in settings:
        query = urllib.parse.urlencode({"run": run, "tau": tau, "live_modules": modules, "live_removed": removed})
        students.append(
            PressingStudent(
                served.base,
                random.Random(rng.random()),
                (0, 0),
                STAMPEDE_S,
                link=f"/ablations?{query}",
                source=student_address(),
            )
        )
    clickers = [
        ClickingStudent(served.base, random.Random(rng.random()), (1.0, 3.0), 60.0, source=student_address())
        for _ in range(others)
    ]
    logged = len(served_log(served))
    live_start = live_peak = served.live_rss()
    rss_start = peak = served.rss()
    pages_start = pages_peak = rss_start - live_start  # the dashboard processes and the proxy
    t0 = time.monotonic()
    press_from = t0 + 10.0  # everyone has opened the page by then (they open within 5 s)
    done = asyncio.Event()

    async def sample():
        nonlocal peak, live_peak, pages_peak
        while not done.is_set():
            live, everything = served.live_rss(), served.rss()
            peak, live_peak = max(peak, everything), max(live_peak, live)
            pages_peak = max(pages_peak, everything - live)
            await asyncio.sleep(0.5)

    async def one(s, delay):
        await asyncio.sleep(delay)
        await s.attend(press_from + rng.uniform(0, 5.0))

    sampler = asyncio.create_task(sample())
    lecture = asyncio.create_task(attend_all(clickers, t0 + STAMPEDE_S, ramp=3.0, rng=rng))
    pressing = asyncio.gather(*(one(s, rng.uniform(0, 5.0)) for s in students))
    try:
        await asyncio.wait_for(pressing, STAMPEDE_S + 30)
    except asyncio.TimeoutError:
        pass
    finished = time.monotonic()
    for c in clickers:  # the others stop clicking once the stampede is over
        c.stopped = True
    await lecture
    done.set()
    await sampler
    await asyncio.sleep(5.0)
    rss_after = served.rss()

    computed = served_log(served)[logged:]
    distinct = len(set(settings))
    first = [s.first_answer_s for s in students if s.first_answer_s is not None]
    still = [s.longest_still_s for s in students if s.longest_still_s is not None]
    answered = [s for s in students if s.answered is not None]
    went_up = [s for s in students if any(b > a for a, b in zip(s.places, s.places[1:]))]
    by_request = {}
    for s, key in zip(students, settings):
        by_request.setdefault(key, set()).add(s.accuracy)
    differing = [k for k, v in by_request.items() if len(v - {None}) > 1]
    clicks = click_stats(clickers, press_from, finished)
    errors = [e for s in students + clickers for e in s.errors]
    longest_wait = max((s.answered - s.pressed for s in answered), default=float("nan"))
    problems = []
    if len(answered) != presses:
        problems.append(f"{presses - len(answered)} of {presses} students got no result")
    if len(first) != presses or max(first, default=0) > FIRST_ANSWER_S:
        problems.append(f"the page first answered after up to {max(first, default=float('nan')):.1f} s")
    if max(still, default=0) > STILL_S:
        problems.append(f"a waiting page stayed still for {max(still):.1f} s")
    if went_up:
        problems.append(f"{len(went_up)} students saw their place in the queue go up")
    if len(computed) > distinct:
        problems.append(f"{len(computed)} computations for {distinct} distinct requests")
    if differing:
        problems.append(f"students with the same request saw different results: {differing}")
    if clicks["p95"] > CLICK_P95_BOUND:
        problems.append(f"the other students' click p95 was {clicks['p95']:.2f} s")
    if live_peak > LIVE_MEMORY:
        problems.append(f"the live-computation process reached {live_peak / 2**30:.2f} GB")
    if pages_peak - pages_start > MEMORY_GROWTH:
        problems.append(f"the dashboard processes grew by {(pages_peak - pages_start) / 2**30:.2f} GB")
    if errors:
        problems.append(f"{len(errors)} errors, e.g. {errors[0]}")
    gb = lambda b: f"{b / 2**30:.2f} GB"  # noqa: E731
    return FaultRow(
        fault=f"{presses} students press 'Run live' within 5 s while {others} others click",
        bound=f"each: first answer (place or result) <= {FIRST_ANSWER_S:.0f} s, page never still > {STILL_S:.0f} s, "
        f"places only go down, result comes; identical requests computed once; others' click p95 <= "
        f"{CLICK_P95_BOUND:.0f} s; live process < {LIVE_MEMORY / 2**30:.1f} GB, dashboard processes grow < "
        f"{MEMORY_GROWTH / 2**30:.1f} GB",
        passed=not problems,
        measured=f"{len(answered)}/{presses} results, the last {longest_wait:.0f} s after its press; first answer "
        f"<= {max(first, default=float('nan')):.2f} s; page still <= {max(still, default=float('nan')):.1f} s; "
        f"{len(computed)} computations for {distinct} distinct requests; others' click p95 {clicks['p95']:.2f} s "
        f"({clicks['n']} clicks); memory: live process {gb(live_start)} -> peak {gb(live_peak)}, dashboard processes "
        f"{gb(pages_start)} -> peak {gb(pages_peak)}; all of serve {gb(rss_after)} 5 s after",
        student_saw="'number k in this server's queue, k-1 computations ahead; one runs at a time (n s so far)', "
        "counting down, then a progress bar, then the result (the same for everyone with the same settings)",
        recovery="-",
        lost="nothing",
        details={
            "run": run,
            "distinct_requests": distinct,
            "computations": computed,
            "first_answer_s": first,
            "longest_still_s": still,
            "others_clicks": clicks,
            "rss": {"start": rss_start, "peak": peak, "after": rss_after, "live": [live_start, live_peak]},
            "rss_pages": [pages_start, pages_peak],
            "errors": errors[:5],
        },
        problems=problems,
    )


def served_log(served: Served) -> list[str]:
    try:
        return (served.live_dir / "computed.log").read_text().splitlines()
    except OSError:
        return []
