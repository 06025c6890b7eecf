"""The live computations' queue (app/live/queue.py): one computation per distinct request for the whole machine,
one at a time, in order, with places that count down; bounded; a failure or a lost process answered, never hung."""

from __future__ import annotations

import json
import threading
import time

import pytest

from app.live.queue import MAX_ATTEMPTS, LiveQueue, request_key


def wait_for(queue, key, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = queue.status(key)
        if not status.waiting:
            return status
        time.sleep(0.02)
    raise AssertionError(f"{key} still waiting after {timeout} s")


class Gate:
    """A computation that waits until released, and counts its calls."""

    def __init__(self):
        self.calls, self.open = [], threading.Event()

    def __call__(self, request, on_progress):
        self.calls.append(request["tau"])
        on_progress(0, 2)
        assert self.open.wait(20)
        on_progress(2, 2)
        return {"accuracy": request["tau"] / 100, "compute_s": 0.01}


def test_identical_requests_from_two_processes_are_computed_once(tmp_path):
    gate = Gate()
    # two queues on one folder: two worker processes of `serve` (separate locks, separate runner threads)
    a, b = LiveQueue(tmp_path, gate), LiveQueue(tmp_path, gate)
    request = {"run": "r", "tau": 40, "threads": 1}
    first = a.submit(request)
    second = b.submit({**request, "threads": 4})  # the threads change the speed, not the answer: the same request
    assert first.waiting and second.waiting
    assert request_key(request) == request_key({**request, "threads": 4})
    gate.open.set()
    for q in (a, b):
        status = wait_for(q, request_key(request))
        assert status.state == "done" and status.result["accuracy"] == 0.4
    assert gate.calls == [40]
    assert b.submit(request).state == "done" and gate.calls == [40]  # answered from the stored result


def test_places_count_down_and_requests_run_in_order(tmp_path):
    gate = Gate()
    queue = LiveQueue(tmp_path, gate)
    keys = [request_key({"tau": t}) for t in (10, 20, 30)]
    for t in (10, 20, 30):
        queue.submit({"tau": t})
    deadline = time.monotonic() + 10
    while queue.status(keys[0]).total != 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert queue.status(keys[0]).state == "running" and queue.status(keys[0]).total == 2
    assert [queue.status(k).position for k in keys] == [1, 2, 3]
    assert queue.status(keys[2]).queued == 3
    seen = []
    gate.open.set()
    while queue.status(keys[2]).waiting:
        seen.append(queue.status(keys[2]).position)
        time.sleep(0.005)
    assert seen == sorted(seen, reverse=True)  # never goes up
    assert gate.calls == [10, 20, 30]


def test_the_queue_is_bounded_and_says_so(tmp_path):
    gate = Gate()
    queue = LiveQueue(tmp_path, gate, max_queued=2, max_results=2)
    assert queue.submit({"tau": 1}).waiting and queue.submit({"tau": 2}).waiting
    refused = queue.submit({"tau": 3})
    assert refused.state == "refused" and "2 live computations are waiting" in refused.message
    assert queue.submit({"tau": 1}).waiting  # an identical request joins the one queued
    gate.open.set()
    wait_for(queue, request_key({"tau": 2}))
    for t in (3, 4, 5):
        queue.submit({"tau": t})
        wait_for(queue, request_key({"tau": t}))
    assert len(list((tmp_path / "results").glob("*.json"))) == 2  # the oldest answers went


def test_an_answer_pruned_while_the_answers_are_listed_breaks_no_status(tmp_path):
    """A waiting request's status reads the typical time from the kept answers without the lock, while a worker may
    prune the oldest: an answer listed and gone before its age is read is left out, not an error."""
    gate = Gate()
    queue = LiveQueue(tmp_path, gate)
    queue.submit({"tau": 1})
    gate.open.set()
    wait_for(queue, request_key({"tau": 1}))
    gate.open.clear()
    (tmp_path / "results" / "gone.json").symlink_to(tmp_path / "nowhere.json")  # listed, then not there
    queue.submit({"tau": 2})
    status = queue.submit({"tau": 3})
    assert status.waiting and status.position == 2 and status.typical_s == pytest.approx(0.01)
    gate.open.set()
    assert wait_for(queue, request_key({"tau": 3})).state == "done"


def test_a_failure_is_answered_in_one_line(tmp_path):
    def broken(request, on_progress):
        raise MemoryError

    queue = LiveQueue(tmp_path, broken)
    queue.submit({"tau": 7})
    status = wait_for(queue, request_key({"tau": 7}))
    assert status.state == "failed" and status.message.startswith("The live computation failed (MemoryError)")
    assert "\n" not in status.message


def test_a_request_that_killed_its_processes_is_given_up(tmp_path):
    """A process that dies computing leaves its ticket: the next one takes it up, at most MAX_ATTEMPTS times."""
    calls = []
    queue = LiveQueue(tmp_path, lambda request, on_progress: calls.append(1) or {"ok": True})
    key = request_key({"tau": 9})
    ticket = tmp_path / "queue" / f"{time.time_ns():020d}-{key}.json"
    ticket.write_text(json.dumps({"request": {"tau": 9}, "attempts": MAX_ATTEMPTS}))  # started twice, lost twice
    queue.ensure_runner()
    status = wait_for(queue, key)
    assert status.state == "failed" and "stopped its dashboard process" in status.message and calls == []
    # a ticket left once by a dead process is simply computed again
    key2 = request_key({"tau": 10})
    (tmp_path / "queue" / f"{time.time_ns():020d}-{key2}.json").write_text(
        json.dumps({"request": {"tau": 10}, "attempts": 1})
    )
    (tmp_path / f"running-{key2}.json").write_text(json.dumps({"pid": 2**22 + 12345, "done": 5, "total": 9}))
    queue.ensure_runner()
    assert wait_for(queue, key2).state == "done" and calls == [1]


def test_under_serve_one_process_of_its_own_computes(tmp_path):
    """A dashboard worker of `serve` only asks and waits (external); the live-computation process computes."""
    gate = Gate()
    gate.open.set()
    worker = LiveQueue(tmp_path, lambda request, on_progress: pytest.fail("a worker computed"), external=True)
    key = request_key({"tau": 5})
    worker.submit({"tau": 5})
    time.sleep(0.3)
    assert worker.status(key).state == "queued"  # nobody computes in the worker
    runner, stop = LiveQueue(tmp_path, gate), threading.Event()
    thread = threading.Thread(target=runner.serve_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        assert wait_for(worker, key).result["accuracy"] == 0.05 and gate.calls == [5]
        assert [c["key"] for c in runner.computations()] == [key]
    finally:
        stop.set()
        thread.join(5)
