"""The live path warmed before the first click (app/live/warmup_runner.py, core/runs/live_warmup.py): on a tiny
Llama whose folder ships only its fine-tuning delta (test_live_rebuild's fixture), the warm-up rebuilds the
weights, loads the model and writes the prompts' prefixes, so that the first live filter afterwards computes no
prefix (every batch read from disk) and answers as a filter computed from nothing does; a disk without room
still answers, computing them; the page's line is derived from the status; one warm-up at a time."""

from __future__ import annotations

import fcntl
import threading
import time

import numpy as np
import pytest

from app.live import runner, warmup_runner
from app.live.ablation import preload_warmed
from app.live.queue import LiveQueue
from app.live.warmup import WARMUP_SHOWN_S, WarmStatus, read_warm_status, warmup_line, warmup_root, write_warm_status
from core.analysis.ablations import Ablation
from core.runs import prefix_store
from core.runs.live_ablation import answer_live_request, live_ablation, load_live_model
from core.runs.live_model import live_model_folder
from core.runs.live_targets import sidebar_order, warm_targets
from core.runs.reader import Table, read_run_table
from core.training.delta import DELTA_FILE
from tests.app import test_live_rebuild as rebuild_tests

#: test_live_rebuild's tiny delta-only model and its run (fixtures shared, built once per module)
delta_env, delta_only = rebuild_tests.delta_env, rebuild_tests.delta_only

pytestmark = pytest.mark.slow


def filter_from_nothing(env, cache_dir):
    """A live filter (MLP, low band removed) on a model loaded afresh (no prefix in memory): its evaluation."""
    run = env["run"]
    folder, why = live_model_folder(run.manifest)
    assert folder is not None, why
    examples = read_run_table(env["cache"], run.name, Table.EXAMPLES.value)
    return live_ablation(load_live_model(folder), examples, int(run.manifest["p"]), "paper",
                         Ablation("mlp", "low", 4), threads=1, cache_dir=cache_dir)


def test_the_warm_up_rebuilds_the_weights_and_writes_the_prefixes(delta_only):
    assert live_model_folder(delta_only["run"].manifest)[0] is None  # as a clone has it: the delta only
    seen = []
    status = warmup_runner.run_warmup(delta_only["cache"], lambda s: seen.append(WarmStatus(**vars(s))), threads=1)
    assert status.state == "done" and status.warmed == 1 and status.steps == 2 and not status.no_room, status
    assert status.message == ""
    doing = [s.doing for s in seen]
    assert any(d.startswith("rebuilding the weights of") for d in doing), doing
    assert any(d.startswith("loading the model of") for d in doing), doing
    assert [s.step for s in seen] == sorted(s.step for s in seen)
    assert rebuild_tests.wait_for_rebuild().state == "done"
    # the first filter afterwards, in a process that has not loaded the model: every prefix from disk
    warm = filter_from_nothing(delta_only, delta_only["cache"])
    sources = warm.extra["prefix_sources"]
    assert sources["computed"] == 0 and sources["disk"] >= 1 and warm.extra["prefix_on_disk"] == sources["disk"]
    cold = filter_from_nothing(delta_only, None)  # computed from nothing, no store
    assert cold.extra["prefix_sources"]["computed"] == sources["disk"]
    assert np.array_equal(warm.predictions, cold.predictions) and warm.accuracy == cold.accuracy
    assert abs(warm.loss - cold.loss) < 1e-5
    # the process that computes the clicks preloads: its first click finds the prefixes in memory
    run = delta_only["run"]
    assert preload_warmed(delta_only["cache"], log=lambda *_: None) == [run.name]
    request = {"cache_dir": str(delta_only["cache"]), "run": run.name, "p": int(run.manifest["p"]),
               "folder": str(live_model_folder(run.manifest)[0]), "modules": "mlp", "removed": "low", "tau": 4,
               "basis": "paper", "whole": False}
    first = answer_live_request(request, lambda *a: None, threads=1)
    assert first["prefix_sources"] == {"memory": sources["disk"], "disk": 0, "computed": 0}
    assert first["accuracy"] == warm.accuracy
    line = warmup_line(status, now=status.finished + 1)
    assert "the questions of 1 model prepared in" in line and "Not prepared" not in line


def test_a_disk_without_room_still_answers(delta_only, monkeypatch):
    warmup_runner.run_warmup(delta_only["cache"], lambda s: None, threads=1)  # rebuilds the weights
    monkeypatch.setattr(prefix_store, "PREFIX_DISK_BYTES", 1)  # no batch fits
    run = delta_only["run"]
    for old in (delta_only["cache"] / prefix_store.PREFIX_FOLDER).glob("*"):
        for f in old.glob("*"):
            f.unlink()
    status = warmup_runner.run_warmup(delta_only["cache"], lambda s: None, threads=1)
    assert status.state == "done" and status.no_room == [run.name] and status.warmed == 1
    assert "no room" in warmup_line(status, now=status.finished)
    ev = filter_from_nothing(delta_only, delta_only["cache"])  # works, computing every prefix
    assert ev.extra["prefix_sources"]["disk"] == 0 and ev.extra["prefix_sources"]["computed"] >= 1
    assert ev.extra["prefix_on_disk"] == 0 and 0 <= ev.accuracy <= 1


def test_a_run_that_cannot_be_rebuilt_is_said_and_skipped(delta_only):
    folder = delta_only["folder"]
    (folder / DELTA_FILE).write_bytes(b"not a delta")
    status = warmup_runner.run_warmup(delta_only["cache"], lambda s: None, threads=1)
    assert status.state == "done" and status.warmed == 0
    assert status.message == f"Not prepared: {warm_targets(delta_only['cache'])[0].label}."
    assert "Not prepared" in warmup_line(status, now=status.finished)


def test_the_default_comes_first_as_the_sidebar_lists_it():
    manifests = {
        "b": {"task": {"split": "test"}, "display_order": 2, "label": "b"},
        "a": {"task": {"split": "validation"}, "display_order": 0, "label": "a"},
        "c": {"task": {"split": "test"}, "display_order": 1, "label": "z"},
        "d": {"task": {"split": "test"}, "display_order": 1, "label": "y"},
    }
    assert sidebar_order(manifests) == ["d", "c", "b", "a"]


def test_the_page_line_follows_the_status(tmp_path):
    now = 1000.0
    running = WarmStatus("running", "loading the model of scratch and preparing its questions", 3, 9, 512, 3419,
                         started=now - 42)
    line = warmup_line(running, now=now)
    assert "step 3 of 9, 512 of 3,419 questions; 42 s so far" in line and "You can press the button" in line
    rebuilding = WarmStatus("running", "rebuilding the weights of x from the shipped delta", 1, 9, 37, 100,
                            started=now - 5)
    assert "step 1 of 9, 37%; 5 s so far" in warmup_line(rebuilding, now=now)
    done = WarmStatus("done", started=now - 95, finished=now - 10, warmed=9)
    assert "the questions of 9 models prepared in 85 s" in warmup_line(done, now=now)
    assert warmup_line(done, now=done.finished + WARMUP_SHOWN_S + 1) is None
    assert warmup_line(WarmStatus(), now=now) is None
    # a status that says running while no process holds the lock: its process died
    write_warm_status(tmp_path, WarmStatus("running", "x", 1, 2, started=time.time()))
    dead = read_warm_status(tmp_path)
    assert dead.state == "failed" and "stopped before it finished" in warmup_line(dead)
    (tmp_path / "status.json").write_text("[1]")
    assert read_warm_status(tmp_path).state == "idle"


def test_one_warm_up_at_a_time(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(tmp_path))
    root = warmup_root(create=True, cache=tmp_path)
    with open(root / "run.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert warmup_runner.main(["--cache-dir", str(tmp_path)]) == 0  # leaves at once, before any nice or work
    assert "another warm-up" in capsys.readouterr().out
    assert not (root / "status.json").exists()
    assert warmup_runner.main(["--cache-dir", str(tmp_path / "missing")]) == 2


def test_the_computing_process_preloads_once_when_the_warm_up_is_done(tmp_path, monkeypatch):
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(runner, "preload_warmed", lambda cache, log: calls.append(str(cache)))
    monkeypatch.setattr(runner, "WARM_LOOK_S", 0.0)
    preload = runner.Preloader()
    root = warmup_root(create=True, cache=tmp_path)
    preload()
    assert calls == []  # no warm-up yet: nothing to preload
    with open(root / "run.lock", "a") as held:  # a warm-up running
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        write_warm_status(root, WarmStatus("running", "x", 1, 2, started=time.time()))
        preload()
    assert calls == []
    write_warm_status(root, WarmStatus("done", started=time.time() - 5, finished=time.time()))
    preload()
    preload()
    assert calls == [str(tmp_path)]  # once


def test_an_idle_queue_calls_its_idle_step(tmp_path):
    """serve_forever runs `idle` while no request waits (the preload), and computes requests as they come."""
    stop = threading.Event()
    seen = []

    def idle():
        seen.append("idle")
        if len(seen) >= 3:
            stop.set()

    queue = LiveQueue(tmp_path, lambda request, on_progress: {"x": 1}, external=True)
    queue.serve_forever(stop, poll_s=0.0, idle=idle)
    assert seen == ["idle"] * 3
