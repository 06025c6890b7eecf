"""The answer-position fast path (prefix once + last token per condition) against a full recompute.

For every supported architecture, with left-padded batches of mixed lengths, predictions and
losses of several filter conditions must equal those of running every position of every prompt
with the filter hooks on (the reference path, `core.analysis.evaluation.evaluate_by_full_recompute`).
"""

import threading
import time

import numpy as np
import pandas as pd
import pytest
import torch

from core import threads
from core.analysis.ablations import Ablation, Condition, FunctionEdit
from core.analysis.evaluation import (
    GridProgress,
    PrefixCache,
    evaluate,
    evaluate_by_full_recompute,
    evaluate_conditions,
    first_edited_layer,
)
from core.analysis.filter_hooks import edit_rows
from core.analysis.filters import high_pass, keep_frequency, low_pass
from core.analysis.fourier import fourier_basis
from core.analysis.phase_shift import PERIOD_SETS, phase_shift, random_direction
from core.cli import main
from core.errors import CoreError
from core.models.loading import prompt_texts
from core.models.sublayers import mlp_neurons_module
from core.runs.live_ablation import live_ablation, live_slot
from core.tasks import build_examples, select_split, with_shots
from core.threads import auto_threads, available_cores, parse_threads, use_threads

P = 101


def _prompts(loaded, n=40, shots=0):
    examples = select_split(build_examples("addition", 50), "test")[:n]
    pool = select_split(build_examples("addition", 50), "train")
    texts = prompt_texts(loaded, with_shots(examples, pool, shots, 0))
    return texts, np.array([e.answer for e in examples])


def _reference(loaded, texts, answers, cond, batch_size):
    """Every position recomputed, the filter at the answer position (the definition)."""
    return evaluate_by_full_recompute(loaded, texts, answers, P, cond.flt, cond.modules, batch_size)


def _conditions(loaded):
    basis = fourier_basis(P, "paper")
    W_U = loaded.unembedding(P)
    return [
        Condition(None),
        Condition(low_pass(W_U, basis, 10), "both"),
        Condition(high_pass(W_U, basis, 10), "attn"),
        Condition(high_pass(W_U, basis, 25), "mlp"),
        Condition(keep_frequency(W_U, basis, 50), "both"),
    ]


@pytest.mark.parametrize("arch", ["gpt2", "gptj", "gpt_neox", "phi", "llama", "mistral", "olmo2", "gemma2"])
def test_fast_path_equals_full_recompute(loaded_model, arch):
    loaded = loaded_model(arch)
    texts, answers = _prompts(loaded, shots=1)
    # batch 7: batches straddle prompts of different lengths, so rows are left-padded
    lengths = [len(x) for x in loaded.tokenizer(texts)["input_ids"]]
    assert len(set(lengths)) > 3
    conds = _conditions(loaded)
    # rows_per_call 16: conditions are split over several calls, and a call holds several conditions
    fast = evaluate_conditions(loaded, texts, answers, P, conds, "last", batch_size=7, rows_per_call=16, progress=False)
    near_ties = 0
    for cond, ev in zip(conds, fast):
        ref_pred, ref_loss = _reference(loaded, texts, answers, cond, batch_size=7)
        assert np.allclose(ev.losses, ref_loss, atol=1e-4, rtol=1e-4), arch
        differ = ev.predictions != ref_pred
        near_ties += int(differ.sum())
    # predictions may differ only on near-ties of random models' flat logits; report them
    assert near_ties <= 1, f"{arch}: {near_ties} predictions differ from the full recompute"


def test_single_condition_evaluate_uses_fast_path_and_matches_all_positions_filter_off(loaded_model):
    """With no filter, 'last' and 'all' must give identical results (nothing is filtered anywhere)."""
    loaded = loaded_model("llama")
    texts, answers = _prompts(loaded, n=20)
    a = evaluate(loaded, texts, answers, P, None, positions="last", batch_size=6, progress=False)
    b = evaluate(loaded, texts, answers, P, None, positions="all", batch_size=6, progress=False)
    assert np.array_equal(a.predictions, b.predictions)
    assert np.allclose(a.losses, b.losses, atol=1e-4)


def test_resume_skips_done_batches_and_gives_same_results(loaded_model):
    loaded = loaded_model("gpt2")
    texts, answers = _prompts(loaded, n=30)
    conds = _conditions(loaded)[:3]
    whole = evaluate_conditions(loaded, texts, answers, P, conds, batch_size=8, progress=False)
    saved = []
    evaluate_conditions(
        loaded,
        texts,
        answers,
        P,
        conds,
        batch_size=8,
        progress=False,
        on_checkpoint=lambda s: saved.append(GridProgress(s.predictions.copy(), s.losses.copy(), s.done.copy())),
        checkpoint_every_s=0.0,
    )
    partial = saved[0]
    assert 0 < partial.done.sum() < len(texts)
    # poison the rows not done: a resume must recompute them, and must not recompute the done ones
    partial.predictions[:, ~partial.done] = -1
    n_done = int(partial.done.sum())
    calls = []
    resumed = evaluate_conditions(
        loaded,
        texts,
        answers,
        P,
        conds,
        batch_size=8,
        progress=False,
        resume=partial,
        on_batch=lambda d, t: calls.append(d),
    )
    assert calls[0] > n_done  # the first batch reported is past the done rows
    for a, b in zip(whole, resumed):
        assert np.array_equal(a.predictions, b.predictions)
        assert np.allclose(a.losses, b.losses)


def _one_layer_reference(loaded, texts, answers, cond, batch_size):
    """Every position recomputed, the one layer's output edited at the answer position (the definition of an
    edit of one layer), with plain forward hooks of this test's own."""
    module = loaded.parts.blocks[cond.layer - 1] if cond.modules == "resid" else loaded.parts.outputs(cond.modules)[
        cond.layer - 1]

    def hook(mod, args, out):
        t = out[0] if isinstance(out, tuple) else out
        edit_rows(t[:, -1, :], cond.flt)
        return out

    handle = module.register_forward_hook(hook)
    try:
        return evaluate_by_full_recompute(loaded, texts, answers, P, None, "both", batch_size)
    finally:
        handle.remove()


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_edits_of_one_layer_share_the_blocks_below_them(loaded_model, arch):
    """A call of one-layer edits runs the blocks below its lowest edited layer on one copy (ConditionHooks.shared):
    every condition's answers are those of the condition run alone and of the definition (a full recompute)."""
    loaded = loaded_model(arch, n_layers=4)
    texts, answers = _prompts(loaded, n=24, shots=1)
    W_U = loaded.unembedding(P).double().numpy()
    basis = fourier_basis(P, "paper")
    shift = phase_shift(W_U, basis, PERIOD_SETS["all"], 2)
    control = shift.control(random_direction(W_U, 5))
    edited = [("mlp", 3), ("attn", 3), ("resid", 4), ("attn", 2), ("mlp", 4), ("attn", 4), ("mlp", 1)]
    conds = [Condition(None)] + [Condition(e, kind, layer) for kind, layer in edited for e in (shift, control)]
    conds += [Condition(None)] * 6
    # calls of 6 conditions: lowest edited layers 3, 2, 1 and none (5)
    assert [first_edited_layer(conds[i:i + 6], 4) for i in range(0, 21, 6)] == [3, 2, 1, 5]
    rows_at_block_1 = []  # the rows layer 1's MLP runs on in each call: one copy when block 1 is shared
    spy = loaded.parts.outputs("mlp")[0].register_forward_hook(
        lambda mod, args, out: rows_at_block_1.append((out[0] if isinstance(out, tuple) else out).shape[:2]))
    try:
        shared = evaluate_conditions(loaded, texts, answers, P, conds, "last", batch_size=8, rows_per_call=48,
                                     progress=False)
    finally:
        spy.remove()
    answer_calls = [rows for rows, length in rows_at_block_1 if length == 1]
    assert answer_calls == [8, 8, 48, 8] * 3, answer_calls  # only the call that edits layer 1 runs it on every copy
    alone = evaluate_conditions(loaded, texts, answers, P, conds, "last", batch_size=8, rows_per_call=8,
                                progress=False)
    moved = 0
    for cond, a, b in zip(conds, shared, alone):
        np.testing.assert_allclose(a.losses, b.losses, rtol=1e-4, atol=1e-4)
        assert (a.predictions == b.predictions).all(), (cond.modules, cond.layer)
        if cond.flt is not None:
            ref_pred, ref_loss = _one_layer_reference(loaded, texts, answers, cond, 8)
            np.testing.assert_allclose(a.losses, ref_loss, rtol=1e-4, atol=1e-4)
            assert (a.predictions == ref_pred).all(), (cond.modules, cond.layer)
            moved += int((a.predictions != shared[0].predictions).sum())
    assert moved > 0, "no edit moved any answer: the comparison would not see an edit lost or misplaced"


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_conditions_that_give_an_mlp_the_same_input_run_it_once(loaded_model, arch):
    """The grid's filters (a band on attention, on the MLPs, on both) give layer 1's MLP one of three inputs: the
    unedited stream (no filter, or the MLPs' filter, which acts after it), or attention's output under one of the two
    bands. A call of all seven runs that MLP on three copies (`mlp_sharing`), layer 2's on all seven, and every
    condition answers as it does alone and as the definition (a full recompute) says."""
    loaded = loaded_model(arch, n_layers=2)
    texts, answers = _prompts(loaded, n=24, shots=1)
    W_U = loaded.unembedding(P)
    basis = fourier_basis(P, "paper")
    low, high = high_pass(W_U, basis, 10), low_pass(W_U, basis, 10)  # each removes one band
    conds = [Condition(None)] + [Condition(f, m) for m in ("both", "attn", "mlp") for f in (low, high)]
    down = [mlp_neurons_module(loaded.parts, layer) for layer in (1, 2)]
    rows = {1: [], 2: []}
    spies = [d.register_forward_pre_hook(lambda mod, args, layer=layer: rows[layer].append(args[0].shape[:2]))
             for layer, d in zip((1, 2), down)]
    try:
        together = evaluate_conditions(loaded, texts, answers, P, conds, "last", batch_size=8, rows_per_call=56,
                                       progress=False)
    finally:
        for spy in spies:
            spy.remove()
    assert [r for r, length in rows[1] if length == 1] == [24] * 3  # 3 inputs x 8 rows, in each of 3 batches
    assert [r for r, length in rows[2] if length == 1] == [56] * 3
    alone = evaluate_conditions(loaded, texts, answers, P, conds, "last", batch_size=8, rows_per_call=8,
                                progress=False)
    moved = 0
    for cond, a, b in zip(conds, together, alone):
        assert (a.predictions == b.predictions).all(), cond.modules
        np.testing.assert_allclose(a.losses, b.losses, rtol=1e-4, atol=1e-4)
        if cond.flt is not None:
            ref_pred, ref_loss = _reference(loaded, texts, answers, cond, 8)
            assert (a.predictions == ref_pred).all(), cond.modules
            np.testing.assert_allclose(a.losses, ref_loss, rtol=1e-4, atol=1e-4)
            moved += int((a.predictions != together[0].predictions).sum())
    assert moved > 0, "no filter moved any answer: a copy given another's MLP output would go unseen"


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_neuron_edit_in_the_call_keeps_its_mlp_whole(loaded_model, arch):
    """A condition that edits layer 1's neurons acts inside that MLP, on its own rows of the whole call: beside
    conditions that would share the MLP, the MLP runs on every copy and each condition answers as it does alone."""
    loaded = loaded_model(arch, n_layers=2)
    texts, answers = _prompts(loaded, n=16, shots=1)
    flt = high_pass(loaded.unembedding(P), fourier_basis(P, "paper"), 10)
    neuron = FunctionEdit(lambda rows: torch.full_like(rows, 5.0), 1)
    conds = [Condition(None), Condition(flt, "mlp"), Condition(neuron, "post", 1, unit=3), Condition(flt, "attn"),
             Condition(flt, "both")]
    together = evaluate_conditions(loaded, texts, answers, P, conds, "last", batch_size=8, rows_per_call=40,
                                   progress=False)
    alone = evaluate_conditions(loaded, texts, answers, P, conds, "last", batch_size=8, rows_per_call=8,
                                progress=False)
    for cond, a, b in zip(conds, together, alone):
        assert (a.predictions == b.predictions).all(), cond.modules
        np.testing.assert_allclose(a.losses, b.losses, rtol=1e-4, atol=1e-4)
    assert not np.allclose(together[2].losses, together[0].losses), "the neuron edit changed nothing: no test"


def test_bad_conditions_are_refused(loaded_model):
    loaded = loaded_model("gpt2")
    texts, answers = _prompts(loaded, n=4)
    with pytest.raises(CoreError, match="modules"):
        Condition(None, "heads")
    with pytest.raises(CoreError, match="no conditions"):
        evaluate_conditions(loaded, texts, answers, P, [])
    other = loaded_model("gpt2", width=32)
    flt = low_pass(other.unembedding(P), fourier_basis(P, "paper"), 10)
    with pytest.raises(CoreError, match="width"):
        evaluate_conditions(loaded, texts, answers, P, [Condition(flt)])


def test_second_live_request_waits_for_the_first():
    order, waited = [], []
    first_in = threading.Event()

    def first():
        with live_slot():
            first_in.set()
            time.sleep(0.3)
            order.append("first done")

    t = threading.Thread(target=first)
    t.start()
    first_in.wait()
    with live_slot(on_wait=lambda: waited.append(True)):
        order.append("second runs")
    t.join()
    assert waited == [True] and order == ["first done", "second runs"]
    with live_slot(on_wait=lambda: waited.append(True)):  # a free slot: no waiting
        pass
    assert waited == [True]


def test_threads_option(monkeypatch):
    assert parse_threads("auto") is None and parse_threads(None) is None and parse_threads("2") == 2
    for bad in ("0", "-1", "two", 1.5j):
        with pytest.raises(CoreError, match="threads"):
            parse_threads(bad)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    free = auto_threads()
    assert 1 <= free <= available_cores()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the environment's cap holds
    assert auto_threads() == 1
    for above in ("64", "many", "0"):  # a cap above the free cores, or none readable: the free cores
        monkeypatch.setenv("OMP_NUM_THREADS", above)
        assert auto_threads() == free, above
    before = torch.get_num_threads()
    try:
        assert use_threads(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_auto_threads_leave_out_this_process_own_load(monkeypatch):
    """The live process computes click after click: its own last computations raise the load average, and 'auto'
    must not read them as another job's (two cores, load 1.4 of which this process made 0.9: two threads, not one)."""
    clock = {"t": 1000.0, "cpu": 50.0}
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(threads.time, "process_time", lambda: clock["cpu"])
    monkeypatch.setattr(threads, "_CPU_SAMPLES", threads.deque([(1000.0, 50.0)]))
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    clock.update(t=1070.0, cpu=50.0 + 0.9 * 70)  # 70 s later, 63 CPU seconds used: 0.9 of the load
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (1.4, 1.0, 1.0))
    assert threads.own_load() == pytest.approx(0.9)
    assert threads.auto_threads() == 2  # busy 1.4 - 0.9 = 0.5 rounds to 0 ... both cores free
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (2.0, 1.0, 1.0))
    assert threads.auto_threads() == 1  # another job's load of about 1.1 remains: one core left
    clock.update(t=1200.0)  # idle for two minutes: nothing of its own in the last window
    assert threads.own_load() == pytest.approx(0.0)


def test_cli_rejects_bad_threads(model_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:  # refused by the argument parser, before anything loads
        main(["precompute", "--model", str(model_dir("gpt2")), "--cache-dir", str(tmp_path), "--threads", "zero"])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and "expected a whole number >= 1 or 'auto', got 'zero'" in err and "\n" not in err


def test_prefix_cache_reuses_prefixes_and_changes_nothing(loaded_model, monkeypatch):
    loaded = loaded_model("llama")
    texts, answers = _prompts(loaded, n=24)
    conds = _conditions(loaded)
    cache = PrefixCache()
    first = evaluate_conditions(loaded, texts, answers, P, conds[:2], batch_size=8, progress=False, prefix_cache=cache)
    assert len(cache.entries) == 3 and cache.bytes > 0
    calls = []
    real = loaded.model.forward

    def counting(*a, **kw):
        calls.append(kw["input_ids"].shape[1])
        return real(*a, **kw)

    monkeypatch.setattr(loaded.model, "forward", counting)
    again = evaluate_conditions(loaded, texts, answers, P, conds[:2], batch_size=8, progress=False, prefix_cache=cache)
    assert calls and all(width == 1 for width in calls)  # no prefix pass: only answer-position passes
    for a, b in zip(first, again):
        assert np.array_equal(a.predictions, b.predictions) and np.allclose(a.losses, b.losses, atol=1e-6)
    # other prompts: the cache starts over; a tiny budget keeps nothing but still computes
    small = PrefixCache(max_bytes=1)
    other = evaluate_conditions(
        loaded, texts[:10], answers[:10], P, conds[:1], batch_size=8, progress=False, prefix_cache=small
    )
    assert small.entries == {} and small.key[1] == tuple(texts[:10])
    assert np.allclose(other[0].losses, first[0].losses[:10], atol=1e-4)


def test_live_ablation_reports_time_and_reuses_the_prefix(loaded_model):
    loaded = loaded_model("gpt2")
    texts, answers = _prompts(loaded, n=16)
    examples = pd.DataFrame({"prompt": texts, "answer": answers})
    a = live_ablation(loaded, examples, P, "paper", Ablation("mlp", "low", 10), threads=1)
    b = live_ablation(loaded, examples, P, "paper", Ablation("mlp", "low", 10), threads=1)
    assert a.extra["prefix_reused"] is False and b.extra["prefix_reused"] is True
    assert a.extra["threads"] == 1 and a.extra["compute_s"] > 0
    assert np.array_equal(a.predictions, b.predictions)
