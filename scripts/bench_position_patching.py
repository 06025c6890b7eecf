"""Benchmark: position x layer patching (core.analysis.position_patching) as it runs now, against every token of the
prompt run again for every cell, in one process on the same pairs.

    .venv/bin/python scripts/bench_position_patching.py [RUN] [--pairs 32] [--rounds 1] [--threads 2]

RUN is a cached run whose model is here (default: the default run, its weights rebuilt with `python -m core rebuild
smollm2-addition-rows-blocks-18-29`); the pairs are the first of its running example's token layout
(core.runs.position_patch_run.layout_pairs). Three ways, interleaved round by round (medians):

* every token: each cell runs the whole prompt (the code before 2026-11-30: `edit_reach` answering "every token");
* last tokens: each call runs its cells' last tokens against the prefix of the others, every cell computed;
* now: last tokens, and the cells before the pairs' first differing token taken from the corrupted run.

It prints each one's seconds a pair, the ratios, and the largest difference of a patched gap from "every token".
docs/speed.md ("Patching a 30-layer model") has the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from unittest import mock

import numpy as np

import core.analysis.evaluation as evaluation
import core.analysis.position_patching as position_patching
from core.analysis.ablations import EVERY_TOKEN
from core.analysis.pairs import corrupted_text, pair_examples
from core.runs.ablate import open_target
from core.runs.position_patch_run import layout_pairs, question_start
from core.tasks import build_examples

DEFAULT_RUN = "smollm2-135m-fine-tuned-number-tokens-real-llm-rows-blocks-1-882bc8ee3b"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", default=DEFAULT_RUN)
    ap.add_argument("--cache-dir", default="cache")
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    target = open_target(args.run, args.cache_dir, threads=args.threads)
    loaded = target.loaded
    everything = {e.id: e for e in build_examples(target.task, target.max_operand, target.dataset_seed)}
    examples = [everything[i] for i in target.ids]
    text_of = {e.id: t for e, t in zip(examples, target.texts)}
    chosen = layout_pairs(loaded.tokenizer, pair_examples(examples, target.max_operand), text_of,
                          target.task)[: args.pairs]
    first = chosen[0][0]
    span = len(loaded.tokenizer([text_of[first.id]])["input_ids"][0]) - question_start(
        loaded.tokenizer, text_of[first.id], first.question)
    clean = [text_of[c.id] for c, _ in chosen]
    corrupt = [corrupted_text(text_of[c.id], c, k) for c, k in chosen]
    answers = ([c.answer for c, _ in chosen], [k.answer for _, k in chosen])

    def every_token():
        with mock.patch.object(evaluation, "edit_reach", lambda *a: EVERY_TOKEN), \
                mock.patch.object(position_patching, "differing_reach", lambda *a: EVERY_TOKEN):
            return position_patching.position_patch(loaded, clean, corrupt, *answers, target.p, span)

    def last_tokens():
        with mock.patch.object(position_patching, "differing_reach", lambda *a: EVERY_TOKEN):
            return position_patching.position_patch(loaded, clean, corrupt, *answers, target.p, span)

    def now():
        return position_patching.position_patch(loaded, clean, corrupt, *answers, target.p, span)

    ways = {"every token": every_token, "last tokens": last_tokens, "now": now}
    seconds = {name: [] for name in ways}
    results = {}
    for _ in range(args.rounds):
        for name, way in ways.items():
            t0 = time.perf_counter()
            results[name] = way()
            seconds[name].append(time.perf_counter() - t0)
    base = statistics.median(seconds["every token"])
    cells = len(results["now"].cells)
    print(f"{args.run}: {len(chosen)} pairs, {cells} cells ({span} tokens x {loaded.n_layers + 1} layers), "
          f"{args.threads} threads, median of {args.rounds}")
    for name in ways:
        s = statistics.median(seconds[name])
        gap = float(np.abs(results[name].patched_gap - results["every token"].patched_gap).max())
        print(f"  {name:12s} {s / len(chosen):7.3f} s a pair   {base / s:5.1f}x   largest gap difference {gap:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
