"""A live filter on a large split: the fixed stratified sample, its running estimate, and the prefixes on disk
(core.runs.live_sample, core.runs.prefix_store, core.runs.live_ablation)."""

import os

import numpy as np
import pandas as pd
import pytest
import torch

from core.analysis.ablations import Ablation
from core.analysis.phase_shift import wilson_interval
from core.models.loading import prompt_texts
from core.runs import live_ablation as live
from core.runs import live_sample as sampling
from core.runs.live_sample import live_sample, reads_sample, running_estimate
from core.runs.prefix_store import PrefixStore, model_stamp, prefix_key
from core.tasks import build_examples, select_split

P = 101


def _split(loaded=None, n=None, max_operand=50):
    examples = select_split(build_examples("addition", max_operand), "test")[:n]
    prompts = prompt_texts(loaded, [e.prompt for e in examples]) if loaded is not None else [e.prompt for e in examples]
    return pd.DataFrame({"prompt": prompts, "answer": [e.answer for e in examples]})


def test_the_sample_is_fixed_stratified_and_every_prefix_is_too():
    frame = _split(max_operand=260)  # the paper's test split, 3,419 questions
    sample = live_sample(frame, 200)
    assert len(sample) == 200 and sample.index.is_unique and sample.index.isin(frame.index).all()
    assert sample.index.equals(live_sample(frame, 200).index)  # the same every time
    assert not sample.index.equals(live_sample(frame, 200, seed=1).index)
    bins = lambda a: np.minimum((a - frame.answer.min()) * 10 // (frame.answer.max() - frame.answer.min() + 1), 9)  # noqa: E731
    share = np.bincount(bins(frame.answer.to_numpy()), minlength=10) / len(frame)
    drawn = bins(sample.answer.to_numpy())
    assert np.abs(np.bincount(drawn, minlength=10) - 200 * share).max() < 1  # largest remainders: within one
    for k in (10, 32, 64, 100, 150):  # every prefix holds each stratum's share, within one or two
        assert np.abs(np.bincount(drawn[:k], minlength=10) - k * share).max() <= 2, k
    small = frame.iloc[:50]
    assert live_sample(small, 200).index.equals(small.index)  # a small split is read whole, in its order


def test_only_a_large_split_on_a_deep_model_reads_the_sample():
    assert reads_sample(3419, 30, 576)  # the default run's shape: about 11 s for every question
    assert not reads_sample(3419, 2, 640)  # the 2-layer demo models: every question in under a second
    assert not reads_sample(400, 30, 576)  # a split no larger than the sample is read whole
    assert reads_sample(400, 30, 576, sample_size=100)


def test_the_running_estimate_is_the_share_so_far_with_its_wilson_interval():
    e = running_estimate(30, 64, 512)
    assert e["accuracy"] == 30 / 64 and (e["low"], e["high"]) == wilson_interval(30 / 64, 64)
    assert e["done"] == 64 and e["total"] == 512 and e["low"] < 30 / 64 < e["high"]
    assert running_estimate(0, 0, 512)["accuracy"] is None


def _prefix(layers=2, rows=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(rows, 2, 5, 4, generator=g), torch.randn(rows, 2, 5, 4, generator=g)) for _ in range(layers)]


def test_prefixes_on_disk_read_back_exactly_and_a_bad_file_is_recomputed(tmp_path):
    store = PrefixStore(tmp_path, "abc")
    assert store.load(0) is None
    prefix = _prefix()
    assert store.save(0, prefix)
    back = store.load(0)
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(prefix, back))
    assert PrefixStore(tmp_path, "other").load(0) is None  # another key's folder is not read
    (store.folder / "batch-0000.safetensors").write_bytes(b"not a safetensors file")
    assert store.load(0) is None  # damaged: ignored, so the caller computes it again
    foreign = PrefixStore(tmp_path, "xyz")
    foreign.save(1, prefix)
    store.folder.joinpath("batch-0001.safetensors").write_bytes(foreign.folder.joinpath("batch-0001.safetensors").read_bytes())
    assert store.load(1) is None  # a file written under another key is not trusted
    assert store.save(2, prefix) and PrefixStore(tmp_path, "abc", n_layers=3).load(2) is None  # another layer count


def test_a_disk_that_refuses_is_a_miss_not_a_failure(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder should be")
    store = PrefixStore(blocked, "abc")  # every write and read under it fails
    assert store.save(0, _prefix()) is False and store.load(0) is None
    store.touch()  # nothing to touch: no error either


def test_the_model_stamp_changes_when_the_weights_file_does(tmp_path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"12345678")
    first = model_stamp("sha256:header-only", tmp_path)
    os.utime(weights, ns=(1, 1))
    assert model_stamp("sha256:header-only", tmp_path) != first  # same header fingerprint, rewritten file
    assert model_stamp("hub:abc", "gpt2") == "hub:abc"  # a hub model: its revision


def test_the_disk_budget_evicts_the_least_recently_used_key(tmp_path):
    probe = PrefixStore(tmp_path / "probe", "p")
    probe.save(0, _prefix())
    size = (probe.folder / "batch-0000.safetensors").stat().st_size  # one batch on disk, header included
    budget = int(3.5 * size)
    old, mid = PrefixStore(tmp_path, "old", max_bytes=budget), PrefixStore(tmp_path, "mid", max_bytes=budget)
    assert old.save(0, _prefix()) and mid.save(0, _prefix())
    os.utime(old.folder, (1, 1))  # used long ago
    os.utime(mid.folder, (2, 2))
    new = PrefixStore(tmp_path, "new", max_bytes=budget)
    assert new.save(0, _prefix())  # fits beside both
    assert new.save(1, _prefix())  # one more: the least recently used other key goes
    assert not old.folder.exists() and mid.folder.exists() and new.batches_on_disk() == 2
    assert not PrefixStore(tmp_path, "huge", max_bytes=size // 2).save(0, _prefix())  # larger than the whole budget


def test_prefix_keys_change_with_what_changes_the_prefixes():
    ids = [[1, 2, 3], [4, 5]]
    base = prefix_key("sha:1", ids, 32, False, "torch.float32")
    assert base == prefix_key("sha:1", [[1, 2, 3], [4, 5]], 32, False, "torch.float32")
    for other in (prefix_key("sha:2", ids, 32, False, "torch.float32"),
                  prefix_key("sha:1", [[1, 2, 3], [4, 6]], 32, False, "torch.float32"),
                  prefix_key("sha:1", [[1, 2], [3, 4, 5]], 32, False, "torch.float32"),
                  prefix_key("sha:1", ids, 16, False, "torch.float32"),
                  prefix_key("sha:1", ids, 32, True, "torch.float32"),
                  prefix_key("sha:1", ids, 32, False, "torch.float16")):
        assert other != base


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_large_split_is_read_on_the_sample_with_estimates_and_prefixes_from_disk(loaded_model, tmp_path,
                                                                                   monkeypatch, arch):
    monkeypatch.setattr(live, "LIVE_SAMPLE", 48)
    monkeypatch.setattr(live, "LIVE_SAMPLE_BATCH", 16)
    monkeypatch.setattr(sampling, "SAMPLE_FROM_PARAMS", 0)  # the tiny model counts as deep
    loaded = loaded_model(arch)
    frame = _split(loaded, 120)
    frame["correct"] = frame["answer"] < 30  # the run's table: the unfiltered model's answers (right on small sums)
    ablation = Ablation("mlp", "low", 10)
    estimates = []
    loaded.extra.pop("prefix_cache", None)
    first = live.live_ablation(loaded, frame, P, "paper", ablation, threads=1, cache_dir=tmp_path,
                               on_estimate=estimates.append)
    sample = live_sample(frame, 48)
    assert first.n == 48 and first.extra["sample"] and first.extra["split_n"] == 120
    assert np.array_equal(first.answers, sample.answer.to_numpy())
    assert first.extra["unfiltered_accuracy"] == sample["correct"].mean() != frame["correct"].mean()
    assert [e["done"] for e in estimates] == [16, 32, 48] and estimates[-1]["accuracy"] == first.accuracy
    assert first.extra["prefix_sources"]["computed"] == 3 and not first.extra["prefix_reused"]
    # a restart: the model loaded again has no prefix in memory, and reads every one from disk
    loaded.extra.pop("prefix_cache")
    again = live.live_ablation(loaded, frame, P, "paper", ablation, threads=1, cache_dir=tmp_path)
    assert again.extra["prefix_sources"] == {"memory": 0, "disk": 3, "computed": 0} and again.extra["prefix_reused"]
    assert np.array_equal(first.predictions, again.predictions) and np.allclose(first.losses, again.losses, atol=1e-6)
    # the sample agrees with the whole split's evaluation of the same questions
    said = []
    whole = live.live_ablation(loaded, frame, P, "paper", ablation, threads=1, whole=True, on_estimate=said.append)
    assert whole.n == 120 and not whole.extra["sample"] and said == []  # no running estimate of a sorted split
    assert loaded.extra["prefix_cache"].store is None  # the disk store does not outlive its call
    assert np.array_equal(whole.predictions[sample.index.to_numpy()], first.predictions)
