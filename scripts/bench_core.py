"""Benchmark: capture, ablated evaluation and the ablation grid, as ratios to a plain forward pass.

    .venv/bin/python scripts/bench_core.py [--quick] [--threads N] [--compare-threads]

Everything is measured in one run, on the same prompts and batches, with the measurements
interleaved round by round and their medians compared, so a busy machine slows all of them alike.

Models:
* demo: the shipped demo model models/fourier-frozen (2 layers, width 640), 1,024 test prompts;
* gpt2-12x768: a random-init GPT-2-style model with 12 layers, width 768 (GPT-2 small's shape,
  with the project's word-level number tokenizer), 256 test prompts.

Measurements (each as a multiple of `plain`, one batched forward pass over the prompts):
* plain: tokenizing, batching and the model's forward pass (logits of the answer position only);
* capture: the same passes keeping h(l), Attn(l), MLP(l) of every layer at the answer position;
* ablated: one evaluation under a Fourier filter on the attention and MLP outputs of every layer;
* grid: the paper's ablation grid (63 conditions: no filter, 10 taus x 3 module sets x 2 bands,
  keep-one for two frequencies) through `evaluate_conditions`, filters included; next to it, the
  ideal: one plain pass plus one last-token pass per condition, that is 1 + conditions / (mean
  prompt length in tokens);
* grid + controls: the precompute's whole grid (123 conditions: the above plus a random-subspace
  control for each band filter);
* full recompute: what the grid cost before (every position of every prompt for each condition),
  measured on 3 conditions and given per condition (demo model only, with --full).
--compare-threads also times the plain pass with 1 thread and with all cores.
--live times the dashboard's live filter on the demo model over its whole test split (3,419
prompts): the first filter (prefixes computed) and the next ones (prefixes kept with the model).
--standin times the live filter on the 30-layer stand-in (`python -m core standin`: SmolLM2-135M
with its 521 number tokens as the fine-tune starts them) over its fixed 512-question sample of the
test split, each from the click: the first running estimate and the whole sample from nothing
(model loaded from the page cache, no prefix anywhere), the whole sample with the prefixes on disk
(model loaded again), and further filters with the prefixes in memory; the disk's prefixes give the
same predictions as computed ones (checked).
--standin-stages projects a full precompute of the stand-in stage by stage from each stage's unit,
measured: one layer's number spectra and probes, the prefix and one pass over the 512-question sample,
one more filter condition (the grid and the phase shift whole would take hours).
--standin-precompute runs the stand-in's full precompute (the sampled design of docs/method.md, 'Deep
models') into a temporary cache, after one plain pass over its test split, and prints each stage's
seconds and its ratio to that plain pass, with every log line of the precompute timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from core.analysis.ablations import Ablation, Condition
from core.analysis.evaluation import PrefixCache, evaluate, evaluate_by_full_recompute, evaluate_conditions
from core.analysis.filter_hooks import filtered
from core.analysis.filters import high_pass
from core.analysis.fourier import fourier_basis
from core.analysis.numbers import number_probes_table, number_representations, number_spectrum_table
from core.files import PROJECT_ROOT
from core.models.capture import forward_batch, iter_capture, prepare_batches
from core.models.loading import load_model, prompt_texts
from core.models.random_models import save_random_model
from core.runs.ablate import open_target
from core.runs.ablation_grid import (
    GRID_ROWS_PER_CALL,
    ablation_specs,
    build_filters,
    filter_key,
    module_second_moments,
)
from core.runs.live_ablation import LIVE_SAMPLE, live_ablation, live_filter
from core.runs.live_sample import live_sample
from core.runs.precompute import PrecomputeOptions, precompute
from core.runs.shift_run import shift_specs
from core.tasks import build_examples, select_split
from core.threads import use_threads

TAUS = (10, 20, 30, 40, 50, 75, 100, 150, 200, 250)


def _medians(jobs: dict, rounds: int) -> dict:
    times = {k: [] for k in jobs}
    for fn in jobs.values():  # warm-up
        fn()
    for _ in range(rounds):
        for name, fn in jobs.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def bench_model(name: str, lm, n_prompts: int, batch_size: int, rounds: int, full: bool, compare_threads: bool):
    p = 521
    examples = select_split(build_examples("addition", 260), "test")[:n_prompts]
    texts = prompt_texts(lm, [e.prompt for e in examples])
    answers = np.array([e.answer for e in examples])
    basis = fourier_basis(p, "paper")
    W_U = lm.unembedding(p)
    all_specs = ablation_specs(basis, TAUS)
    filters = build_filters(all_specs, W_U, basis, module_second_moments(lm, texts, batch_size, False))
    all_conditions = [
        Condition(filters[filter_key(s)], s.modules if s.modules != "none" else "both") for s in all_specs
    ]
    specs = ablation_specs(basis, TAUS, controls=False)
    conditions = [Condition(filters[filter_key(s)], s.modules if s.modules != "none" else "both") for s in specs]
    n_distinct = len({filter_key(s) for s in specs}) - 1
    flt = high_pass(W_U, basis, 50)
    mean_tokens = float(np.mean([len(x) for x in lm.tokenizer(texts)["input_ids"]]))

    def plain():
        for b in prepare_batches(lm.tokenizer, texts, batch_size):
            forward_batch(lm, b)

    def capture():
        for _ in iter_capture(lm, texts, batch_size, progress=False):
            pass

    def ablated():
        evaluate(lm, texts, answers, p, flt, "both", "last", batch_size, progress=False)

    def grid():  # as the precompute runs it (GRID_ROWS_PER_CALL)
        evaluate_conditions(lm, texts, answers, p, conditions, "last", batch_size, GRID_ROWS_PER_CALL, progress=False)

    def grid_with_controls():
        evaluate_conditions(lm, texts, answers, p, all_conditions, "last", batch_size, GRID_ROWS_PER_CALL,
                            progress=False)

    def full_recompute_3():  # the old grid: every position recomputed, one condition after another
        for cond in conditions[1:4]:
            with filtered(lm, cond.flt, cond.modules, "last"):
                plain()

    jobs = {"plain": plain, "capture": capture, "ablated": ablated, "grid": grid, "grid + controls": grid_with_controls}
    if full:
        jobs["full recompute (3 conditions)"] = full_recompute_3
    cores = torch.get_num_threads()
    if compare_threads:

        def plain_1_thread():
            torch.set_num_threads(1)
            try:
                plain()
            finally:
                torch.set_num_threads(cores)

        jobs["plain, 1 thread"] = plain_1_thread
    with torch.no_grad():
        med = _medians(jobs, rounds)
    base = med["plain"]
    ideal = 1 + len(conditions) / mean_tokens
    print(
        f"\n{name}: {lm.n_layers} layers, width {lm.width}; "
        f"{len(texts)} prompts of {mean_tokens:.1f} tokens on average, "
        f"batch {batch_size}; torch threads {cores}; {rounds} interleaved rounds, medians"
    )
    for k, v in med.items():
        print(f"  {k:32s} {v * 1000:9.1f} ms   {v / base:6.2f} plain passes")
    print(f"  capture / plain                  {med['capture'] / base:.3f}x   (target <= 1.15x)")
    print(f"  ablated / plain                  {med['ablated'] / base:.3f}x   (target <= 1.30x)")
    print(
        f"  grid of {len(conditions)} conditions ({n_distinct} distinct filters): "
        f"{med['grid'] / base:.2f} plain passes; "
        f"ideal 1 + {len(conditions)}/{mean_tokens:.1f} = {ideal:.2f}"
    )
    print(
        f"  grid + controls, {len(all_conditions)} conditions ({len(filters) - 1} distinct filters): "
        f"{med['grid + controls'] / base:.2f} plain passes; ideal {1 + len(all_conditions) / mean_tokens:.2f}"
    )
    if full:
        per = med["full recompute (3 conditions)"] / 3 / base
        print(f"  full recompute: {per:.2f} plain passes per condition, so {per * len(conditions):.1f} for the grid")
        agreement(lm, texts, answers, p, conditions, batch_size)
    if compare_threads:
        print(f"  plain with 1 thread / with {cores}: {med['plain, 1 thread'] / base:.2f}")


def agreement(lm, texts, answers, p, conditions, batch_size) -> None:
    """Do the grid's answer-position path and the full recompute agree? Every condition of the grid,
    predictions and answer-token losses, on the same prompts."""

    fast = evaluate_conditions(lm, texts, answers, p, conditions, "last", batch_size, progress=False)
    differ, worst_loss, near = 0, 0.0, []
    for c, (cond, ev) in enumerate(zip(conditions, fast)):
        preds, losses = evaluate_by_full_recompute(lm, texts, answers, p, cond.flt, cond.modules, batch_size)
        d = int((preds != ev.predictions).sum())
        differ += d
        if d:
            near.append(f"condition {c} (accuracy {ev.accuracy:.1%}): {d}")
        worst_loss = max(worst_loss, float(np.abs(losses - ev.losses).max()))
    print(
        f"  agreement with the full recompute over all {len(conditions)} conditions x {len(texts)} prompts: "
        f"{differ} predictions differ{' (' + '; '.join(near) + ')' if near else ''}; "
        f"largest loss difference {worst_loss:.1e}"
    )


def bench_live(lm, rounds: int) -> None:
    examples = select_split(build_examples("addition", 260), "test")
    frame = pd.DataFrame(
        {"prompt": prompt_texts(lm, [e.prompt for e in examples]), "answer": [e.answer for e in examples]}
    )
    lm.extra.pop("prefix_cache", None)
    t = time.perf_counter()
    first = live_ablation(lm, frame, 521, "paper", Ablation("mlp", "low", 50), threads="auto")
    first_s = time.perf_counter() - t
    later = []
    for i in range(rounds):
        ab = Ablation(["mlp", "attn", "both"][i % 3], ["low", "high"][i % 2], [50, 20, 100][i % 3])
        ev = live_ablation(lm, frame, 521, "paper", ab, threads="auto")
        later.append(ev.extra["compute_s"])
    t = time.perf_counter()
    for b in prepare_batches(lm.tokenizer, list(frame["prompt"]), 64):
        forward_batch(lm, b)
    plain_s = time.perf_counter() - t
    print(
        f"\nlive filter on the demo model, {len(frame)} prompts, {first.extra['threads']} thread(s): "
        f"first filter {first_s:.2f} s "
        f"(prefixes computed), next filters median {statistics.median(later):.2f} s (prefixes kept); "
        f"a plain forward pass over the same prompts {plain_s:.2f} s"
    )


def bench_standin(folder: Path, rounds: int, threads) -> None:
    """The live filter on the 30-layer stand-in, each figure from the click (see the module doc)."""
    if not any(folder.glob("model*.safetensors")):
        raise SystemExit(f"no stand-in in {folder}: make it with `python -m core standin` (needs import-model first)")
    filters = [Ablation("mlp", "low", 50), Ablation("attn", "high", 50), Ablation("both", "low", 20),
               Ablation("mlp", "high", 100), Ablation("attn", "low", 10), Ablation("both", "high", 150)]
    with tempfile.TemporaryDirectory() as disk:

        def from_click(target=None):
            marks = {}
            t = time.perf_counter()
            if target is None:
                target = open_target(str(folder), threads=threads, log=lambda _: None)
            marks["load"] = time.perf_counter() - t
            frame = pd.DataFrame({"prompt": target.texts, "answer": target.answers})
            ev = live_ablation(
                target.loaded, frame, target.p, "paper", filters[0], threads=threads, cache_dir=disk,
                on_estimate=lambda e: marks.setdefault("first", (time.perf_counter() - t, e)),
            )
            marks["all"] = time.perf_counter() - t
            return target, ev, marks

        target, cold, cold_marks = from_click()
        layers, n = target.loaded.n_layers, cold.n
        store_mb = sum(f.stat().st_size for f in Path(disk).rglob("*.safetensors")) / 2**20
        del target
        target, disk_ev, disk_marks = from_click()
        same = bool(np.array_equal(cold.predictions, disk_ev.predictions))
        warm = []
        for i in range(rounds):
            ab = filters[1 + i % (len(filters) - 1)]
            t = time.perf_counter()
            live_ablation(target.loaded, pd.DataFrame({"prompt": target.texts, "answer": target.answers}),
                          target.p, "paper", ab, threads=threads, cache_dir=disk)
            warm.append(time.perf_counter() - t)
    first_s, first = cold_marks["first"]
    print(
        f"\nlive filter on the stand-in ({folder}, {layers} layers), {n} of {cold.extra['split_n']} test questions "
        f"(stratified sample of {LIVE_SAMPLE}), {cold.extra['threads']} thread(s), each from the click:\n"
        f"  first running estimate, from nothing: {first_s:.1f} s (model load {cold_marks['load']:.1f} s; "
        f"{first['done']} questions)   target <= 5 s\n"
        f"  whole sample from nothing: {cold_marks['all']:.1f} s   target <= 25 s\n"
        f"  whole sample, prefixes on disk ({store_mb:.0f} MB), model loaded again: {disk_marks['all']:.1f} s "
        f"(load {disk_marks['load']:.1f} s; same predictions as computed: {same})   target <= 10 s\n"
        f"  each further filter, prefixes in memory: median {statistics.median(warm):.2f} s, "
        f"max {max(warm):.2f} s over {rounds}   target <= 3 s"
    )


def bench_standin_stages(folder: Path, threads) -> None:
    """What a full precompute of the stand-in would cost, stage by stage, from each stage's unit measured here:
    one layer's number spectra (both bases, 1,000 shuffles) and probes, the prefix of 512 test prompts and
    one filter condition's answer-position pass over them, scaled to every layer, every test question and
    every condition of today's stages with the shipped runs' 10 taus (not run whole: the grid and the phase
    shift alone would take hours). The per-layer units carry their fixed setup 31 times, a slight overstatement;
    stages not projected make the total a lower bound."""
    target = open_target(str(folder), threads=threads, log=lambda _: None)
    lm, p, n_split = target.loaded, target.p, len(target.texts)
    layers = lm.n_layers + 1  # the embedding and every block
    t = time.perf_counter()
    reps = number_representations(lm, p, None, 64, False)
    rep_s = time.perf_counter() - t
    t = time.perf_counter()
    number_spectrum_table(reps.vectors[lm.n_layers // 3 : lm.n_layers // 3 + 1])
    spectrum_s = time.perf_counter() - t
    t = time.perf_counter()
    number_probes_table(reps.vectors[lm.n_layers // 3 : lm.n_layers // 3 + 1])
    probes_s = time.perf_counter() - t
    frame = live_sample(pd.DataFrame({"prompt": target.texts, "answer": target.answers}))
    texts, answers = list(frame["prompt"]), frame["answer"].to_numpy()
    cache = PrefixCache(2**31)
    t = time.perf_counter()
    evaluate_conditions(lm, texts, answers, p, [Condition(None)], "last", 32, progress=False, prefix_cache=cache)
    first_s = time.perf_counter() - t
    basis = fourier_basis(p, "paper")
    filters = [Ablation("attn", "low", 50), Ablation("mlp", "low", 50), Ablation("both", "high", 50),
               Ablation("both", "low", 20)]
    conds = [Condition(live_filter(lm, p, "paper", a), a.modules) for a in filters]
    t = time.perf_counter()
    evaluate_conditions(lm, texts, answers, p, conds, "last", 32, progress=False, prefix_cache=cache)
    condition_s = (time.perf_counter() - t) / len(conds)
    scale = n_split / len(texts)
    grid_n = len(ablation_specs(basis, TAUS))  # the shipped runs' 10 taus; its unfiltered condition is in first_s
    shift_n = len(shift_specs(p, lm.n_layers))  # every shift and control; the unedited pass is in first_s
    stages = {
        "number representations": rep_s,
        f"number spectra ({layers} layers x 2 bases x 1,000 shuffles)": spectrum_s * layers,
        f"number probes ({layers} layers x 6 moduli x 5 splits)": probes_s * layers,
        f"measurements (one capture pass, {n_split:,} questions)": first_s * scale,
        f"ablation grid ({grid_n} conditions)": (first_s + (grid_n - 1) * condition_s) * scale,
        f"phase shift ({shift_n} conditions)": (first_s + shift_n * condition_s) * scale,
    }
    print(f"\nfull precompute of the stand-in ({lm.n_layers} layers), {n_split:,} test questions, "
          f"{use_threads(threads)} thread(s), projected from each stage's unit: prefix + one pass over "
          f"{len(texts)} prompts {first_s:.1f} s, one more condition {condition_s:.2f} s")
    for name, seconds in stages.items():
        print(f"  {name}: {seconds:,.0f} s")
    print(f"  total: {sum(stages.values()):,.0f} s, a lower bound (without embeddings, phase locking and the grid's "
          "capture of the module outputs' energy)   target <= 600 s")


def bench_standin_precompute(folder: Path, threads) -> None:
    """The stand-in's full precompute, timed stage by stage (the module doc), against one plain pass."""
    target = open_target(str(folder), threads=threads, log=lambda _: None)
    lm, texts = target.loaded, list(target.texts)
    t = time.perf_counter()
    with torch.no_grad():
        for b in prepare_batches(lm.tokenizer, texts, 32):
            forward_batch(lm, b)
    plain_s = time.perf_counter() - t
    del target, lm
    print(f"plain pass over the {len(texts):,} test prompts: {plain_s:.1f} s")
    start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"  [{time.perf_counter() - start:7.1f} s] {msg}", flush=True)

    with tempfile.TemporaryDirectory() as cache:
        run = precompute(PrecomputeOptions(model=str(folder), cache_dir=cache, threads=threads, progress=False), log)
        total = time.perf_counter() - start
        manifest = json.loads((Path(run) / "manifest.json").read_text())
    timings, design = manifest["timings"], manifest.get("design")
    print(f"\nfull precompute of the stand-in ({manifest['n_layers']} layers), {len(texts):,} test questions, "
          f"{timings['threads']} thread(s)"
          + (f", sampled design: {design['sample']}-question sample, {design['screen']}-question screen, "
             f"{len(design['every_question'])} grid conditions on every question" if design else ""))
    for key, seconds in timings.items():
        if key.endswith("_s"):
            print(f"  {key[:-2]}: {seconds:,.0f} s = {seconds / plain_s:.1f} plain passes")
    print(f"  total: {total:,.0f} s = {total / plain_s:.1f} plain passes   target <= 600 s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer prompts and rounds (a smoke run)")
    ap.add_argument("--threads", default=None, help="torch threads (default: auto, see core.threads)")
    ap.add_argument("--compare-threads", action="store_true", help="also time the plain pass with 1 thread")
    ap.add_argument("--full", action="store_true", help="also time the old full-recompute grid on the demo model")
    ap.add_argument("--skip-large", action="store_true", help="only the demo model")
    ap.add_argument("--only-large", action="store_true", help="only the 12-layer model")
    ap.add_argument("--live", action="store_true", help="only the live filter on the demo model")
    ap.add_argument("--standin", action="store_true", help="only the live filter on the 30-layer stand-in")
    ap.add_argument("--standin-stages", action="store_true",
                    help="a full precompute of the stand-in, projected stage by stage from measured units")
    ap.add_argument("--standin-precompute", action="store_true",
                    help="the stand-in's full precompute, timed stage by stage against a plain pass")
    ap.add_argument(
        "--prompts", type=int, default=None, help="prompts for the demo model (default 1,024; large: a quarter)"
    )
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5 demo, 3 large)")
    args = ap.parse_args(argv)

    n = use_threads(args.threads)
    print(f"torch threads: {n}")
    demo = PROJECT_ROOT / "models" / "fourier-frozen"
    prompts = args.prompts or (256 if args.quick else 1024)
    if args.standin_precompute:
        bench_standin_precompute(PROJECT_ROOT / "models" / "smollm2-standin", n)
        return 0
    if args.standin_stages:
        with torch.no_grad():
            bench_standin_stages(PROJECT_ROOT / "models" / "smollm2-standin", n)
        return 0
    if args.standin:
        with torch.no_grad():
            bench_standin(PROJECT_ROOT / "models" / "smollm2-standin", args.rounds or 5, n)
        return 0
    if args.live:
        with torch.no_grad():
            bench_live(load_model(str(demo)), args.rounds or 5)
        return 0
    if not args.only_large:
        rounds = args.rounds or (2 if args.quick else 5)
        bench_model(
            "demo model (models/fourier-frozen)",
            load_model(str(demo)),
            prompts,
            64,
            rounds,
            args.full,
            args.compare_threads,
        )
    if not args.skip_large:
        with tempfile.TemporaryDirectory() as tmp:
            save_random_model(tmp, "gpt2", n_layers=12, width=768, heads=12, max_number=600)
            big = load_model(tmp)
        rounds = args.rounds or (1 if args.quick else 3)
        bench_model(
            "gpt2-12x768 (random init)", big, max(64, prompts // 4), 64, rounds, args.full, args.compare_threads
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
