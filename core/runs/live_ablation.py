"""Live ablations for runs whose model is small and on this machine.

The dashboard may compute any tau and module choice on the spot, but only for a model that: lives in
the project's models folder (or FOURIER_MODELS_DIR), has the weights fingerprint the run was
computed from, and is small enough for a CPU (MAX_LIVE_PARAMS). Anything else uses the cached grid,
and `live_model_folder` says why.

On a split larger than LIVE_SAMPLE questions and a model deep enough that every question takes
seconds (`reads_sample`), a live filter reads, by default, a fixed stratified sample
(`live_sample`), in batches of LIVE_SAMPLE_BATCH whose running estimate (with its Wilson interval)
reaches the page after every batch; the whole split is one choice away. The prompts' prefix
key/value caches are kept in memory with the model and, with a cache folder, on disk
(core.runs.prefix_store), so a filter after a restart skips the prefix too.
"""

from __future__ import annotations

import hashlib
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from core.analysis.ablations import Ablation, Condition
from core.analysis.evaluation import PrefixCache, evaluate, evaluate_conditions
from core.analysis.fourier import fourier_basis
from core.analysis.phase_shift import wilson_interval
from core.errors import CoreError
from core.files import models_root
from core.models.loading import load_model
from core.runs import summaries
from core.runs.ablation_grid import filter_key
from core.runs.live_sample import LIVE_SAMPLE, LIVE_SAMPLE_BATCH, live_sample, reads_sample, running_estimate
from core.runs.prefix_store import PrefixStore, model_stamp, prefix_key
from core.runs.reader import Table, read_run_table
from core.threads import use_threads

#: Memory kept for the prompts' prefix key/value caches of a live model (the next filter skips the prefix).
LIVE_PREFIX_BYTES = 768 * 2**20
#: One condition at a time: wide batches, so each answer-position call has many rows (few calls).
LIVE_BATCH = 512


def load_live_model(folder: Path):
    root = models_root()
    folder = Path(folder).resolve()
    if root not in folder.parents:
        raise CoreError(f"refusing to load a model from outside {root}")
    return load_model(str(folder), device="cpu", dtype="float32")


#: Models kept loaded in one process (the process that computes loads what its requests ask for).
MAX_LIVE_MODELS = 2
_LOADED: dict[str, object] = {}
_LOADED_LOCK = threading.Lock()


def live_model(folder: str | Path):
    """The model of `folder` (`load_live_model`), loaded once per process and kept for the next request; at most
    MAX_LIVE_MODELS are kept, the oldest let go first."""
    key = str(folder)
    with _LOADED_LOCK:
        if key not in _LOADED:
            while len(_LOADED) >= MAX_LIVE_MODELS:
                _LOADED.pop(next(iter(_LOADED)))
            _LOADED[key] = load_live_model(folder)
        return _LOADED[key]


def answer_live_request(request: dict, on_progress, threads=None) -> dict:
    """One request of the dashboard's live queue, straight down the layers: the run's questions (its examples
    table), the model (`live_model`), the filter, the questions read (the fixed sample or the whole split), the
    evaluation (`live_ablation`), and what the page shows of it (accuracy, the sample's 95% interval, the share of
    wrong answers off by a multiple of 10, the error histogram). `request`: cache_dir, run, p, folder, modules,
    removed, tau, basis, whole (app.live.ablation.live_request). `on_progress(done, total, estimate=None)` follows
    every batch. A CoreError says why the request cannot be computed."""
    ablation = Ablation(request["modules"], request["removed"], int(request["tau"]))
    examples = read_run_table(request["cache_dir"], request["run"], Table.EXAMPLES.value)
    ev = live_ablation(
        live_model(request["folder"]), examples, int(request["p"]), request["basis"], ablation,
        on_batch=on_progress, threads=threads, whole=bool(request.get("whole", False)),
        cache_dir=request["cache_dir"], on_estimate=lambda e: on_progress(e["done"], e["total"], e),
    )
    summary, hist = summaries.behaviour(ev.answers, ev.predictions)
    share = summary["share_multiple_of_10"]
    return {
        "run": request["run"],
        "label": ablation.label(),
        "n": int(ev.n),
        "accuracy": float(ev.accuracy),
        "loss": float(ev.loss),
        "erased": bool(ev.erased),
        "share10": None if share != share else float(share),
        "hist": hist.to_dict(orient="list"),
        "compute_s": ev.extra.get("compute_s"),
        "threads": ev.extra.get("threads"),
        "prefix_reused": bool(ev.extra.get("prefix_reused", False)),
        "prefix_sources": ev.extra.get("prefix_sources"),
        "sample": bool(ev.extra.get("sample", False)),
        "split_n": int(ev.extra.get("split_n", ev.n)),
        # a sample's accuracy estimates the split's: its 95% interval (the whole split is the split's accuracy)
        "interval": list(wilson_interval(float(ev.accuracy), int(ev.n))) if ev.extra.get("sample") else None,
        "unfiltered_accuracy": ev.extra.get("unfiltered_accuracy"),
    }


#: One live computation at a time in this process: a second request waits for the first instead of
#: both competing for the same cores (and, through `live_model`, for one model load).
_LIVE_LOCK = threading.Lock()


@contextmanager
def live_slot(on_wait=None):
    """Hold the live-computation slot; `on_wait()` is called once if another computation holds it."""
    if not _LIVE_LOCK.acquire(blocking=False):
        if on_wait is not None:
            on_wait()
        _LIVE_LOCK.acquire()
    try:
        yield
    finally:
        _LIVE_LOCK.release()


#: Prefix keys remembered per loaded model (one per set of prompts and batching: a few runs' splits and samples).
MAX_PREFIX_KEYS = 32


def live_prefix_key(loaded, prompts: list[str], batch_size: int, by_length: bool, dtype: str) -> str:
    """`core.runs.prefix_store.prefix_key` of these prompts on this loaded model, remembered with the model for the
    next filter: the key hashes the prompts' token ids, and tokenizing a demo's 3,419 prompts again took about 1 s of
    every warm click (a third of it). The memo's own key is the model's stamp (its weights files' sizes and times:
    a model rewritten on disk is keyed afresh), a digest of the prompts' texts and the batching; the tokenizer is the
    loaded model's own, so the same texts give the same token ids."""
    stamp = model_stamp(loaded.fingerprint, loaded.source)
    texts = hashlib.sha256("\0".join(prompts).encode()).hexdigest()
    memo = loaded.extra.setdefault("prefix_keys", {})
    known = (stamp, texts, len(prompts), batch_size, by_length, dtype)
    if known not in memo:
        if len(memo) >= MAX_PREFIX_KEYS:
            memo.pop(next(iter(memo)))
        memo[known] = prefix_key(stamp, loaded.tokenizer(prompts)["input_ids"], batch_size, by_length, dtype)
    return memo[known]


def live_filter(loaded, p: int, basis_name: str, ablation):
    """The ablation's filter, built once per loaded model (kept with it for the next request)."""

    if ablation.removed == "none":
        return None
    built = loaded.extra.setdefault("filters", {})
    key = (p, basis_name, filter_key(ablation))
    if key not in built:
        built[key] = ablation.build(loaded.unembedding(p), fourier_basis(p, basis_name))
    return built[key]


def live_ablation(
    loaded,
    examples,
    p: int,
    basis_name: str,
    ablation,
    positions: str = "last",
    on_batch=None,
    threads=None,
    whole: bool = False,
    cache_dir: str | Path | None = None,
    on_estimate=None,
):
    """Evaluate the run's prompts (examples table: prompt, answer) under one ablation.

    Unless `whole`, a split that `reads_sample` (a large split on a deep model) is read on `live_sample`,
    in batches of LIVE_SAMPLE_BATCH taken in the sample's order, and `on_estimate(running_estimate(...))`
    follows every batch (only then: batches of the whole split go by prompt length, and their running
    share would not estimate anything). `on_batch(done, total)` follows every batch either way. Filters
    at the answer position take the fast path (prefix once, the answer position against its key/value
    cache), keeping the prefixes with the model and, given `cache_dir`, on disk (core.runs.prefix_store).
    The result carries in `extra`: `compute_s` (seconds, model already loaded), `threads`,
    `prefix_reused` (every prefix came from memory or disk), `prefix_sources` (batches whose prefix came
    from memory, from disk, or was computed), `prefix_on_disk` (batches the prefix store holds for these
    prompts after the call: fewer than the batches when the disk had no room), `sample` (a sample was read),
    `split_n` (questions in the split) and, when `examples` has the run's `correct` column,
    `unfiltered_accuracy`: the unfiltered model's accuracy on the same questions, from the run's table (a
    paired comparison).
    """

    used = use_threads(threads)
    t0 = time.perf_counter()
    flt = live_filter(loaded, p, basis_name, ablation)
    modules = ablation.modules if ablation.modules != "none" else "both"
    split_n = len(examples)
    sample = not whole and reads_sample(split_n, loaded.n_layers, loaded.width, LIVE_SAMPLE)
    if sample:
        examples = live_sample(examples, LIVE_SAMPLE)
    prompts = list(examples["prompt"])
    answers = examples["answer"].to_numpy()
    batch_size = LIVE_SAMPLE_BATCH if sample else LIVE_BATCH
    if positions == "last":
        cache = loaded.extra.setdefault("prefix_cache", PrefixCache(LIVE_PREFIX_BYTES))
        store = None
        if cache_dir is not None:
            dtype = str(next(loaded.model.parameters()).dtype)
            key = live_prefix_key(loaded, prompts, batch_size, not sample, dtype)
            store = PrefixStore(cache_dir, key, n_layers=loaded.n_layers)

        def estimate(state):  # after every batch (checkpoint_every_s=0): the accuracy so far, on the sample
            done = state.done
            if sample and on_estimate is not None:
                correct = int((state.predictions[0, done] == answers[done]).sum())
                on_estimate(running_estimate(correct, int(done.sum()), len(answers)))

        before = dict(cache.counts)
        cache.store = store  # for this call only: the cache outlives it, the store belongs to these prompts
        try:
            (ev,) = evaluate_conditions(
                loaded,
                prompts,
                answers,
                p,
                [Condition(flt, modules)],
                "last",
                batch_size=batch_size,
                progress=False,
                on_batch=on_batch,
                on_checkpoint=estimate,
                checkpoint_every_s=0.0,
                prefix_cache=cache,
                in_order=sample,
            )
        finally:
            cache.store = None
        if store is not None:
            store.touch()
        on_disk = store.batches_on_disk() if store is not None else 0
        sources = {k: cache.counts[k] - before.get(k, 0) for k in cache.counts}
    else:
        sources, on_disk = {"memory": 0, "disk": 0, "computed": 0}, 0
        ev = evaluate(loaded, prompts, answers, p, flt, modules, positions, batch_size=LIVE_BATCH, progress=False,
                      on_batch=on_batch)
    ev.extra = {
        "compute_s": time.perf_counter() - t0,
        "threads": used,
        "prefix_reused": sources["computed"] == 0 and positions == "last",
        "prefix_sources": sources,
        "prefix_on_disk": on_disk,
        "sample": sample,
        "split_n": split_n,
        "unfiltered_accuracy": float(examples["correct"].mean()) if "correct" in examples else None,
    }
    return ev
