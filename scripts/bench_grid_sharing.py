"""Benchmark: the ablation grid with and without the MLPs shared across a call's conditions, as plain passes.

    .venv/bin/python scripts/bench_grid_sharing.py [--rounds 3] [--threads 1]

On the demo model (models/fourier-frozen), 1,024 test prompts, batch 64, in one process with the runs interleaved
round by round (medians): a plain pass; the paper's 63-condition grid and the precompute's 177-condition grid (with
its random controls), each with the MLP sharing off (`core.analysis.evaluation.mlp_sharing` replaced by one that
shares nothing: the grid as it ran before), on at 512 rows a call, and on at the precompute's GRID_ROWS_PER_CALL.
First checks that sharing changes no prediction and no loss beyond 1e-4 on the 63 conditions. docs/speed.md
("Layer 1's MLP shared") has the figures.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import core.analysis.evaluation as evaluation
from core.analysis.ablations import Condition
from core.analysis.evaluation import ROWS_PER_CALL, evaluate_conditions
from core.analysis.fourier import fourier_basis
from core.models.capture import forward_batch, prepare_batches
from core.models.loading import load_model, prompt_texts
from core.runs.ablation_grid import GRID_ROWS_PER_CALL, ablation_specs, build_filters, filter_key, module_second_moments
from core.tasks import build_examples, select_split
from core.threads import use_threads

TAUS = (10, 20, 30, 40, 50, 75, 100, 150, 200, 250)
P, BATCH = 521, 64


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1")
    args = ap.parse_args(argv)
    use_threads(args.threads)
    lm = load_model("models/fourier-frozen")
    examples = select_split(build_examples("addition", 260), "test")[:1024]
    texts, answers = prompt_texts(lm, [e.prompt for e in examples]), np.array([e.answer for e in examples])
    basis, W_U = fourier_basis(P, "paper"), lm.unembedding(P)
    every = ablation_specs(basis, TAUS)
    filters = build_filters(every, W_U, basis, module_second_moments(lm, texts, BATCH, False))

    def conditions(specs):
        return [Condition(filters[filter_key(s)], s.modules if s.modules != "none" else "both") for s in specs]

    grids = {"63 conditions": conditions(ablation_specs(basis, TAUS, controls=False)),
             "177 conditions": conditions(every)}
    sharing = evaluation.mlp_sharing

    def grid(conds, shared: bool, rows: int):
        evaluation.mlp_sharing = sharing if shared else (lambda *a, **k: {})
        try:
            return evaluate_conditions(lm, texts, answers, P, conds, "last", BATCH, rows, progress=False)
        finally:
            evaluation.mlp_sharing = sharing

    def plain():
        for b in prepare_batches(lm.tokenizer, texts, BATCH):
            forward_batch(lm, b)

    jobs = {"plain pass": plain}
    for name, conds in grids.items():
        jobs[f"{name}, sharing off, {ROWS_PER_CALL} rows"] = lambda c=conds: grid(c, False, ROWS_PER_CALL)
        jobs[f"{name}, sharing on, {ROWS_PER_CALL} rows"] = lambda c=conds: grid(c, True, ROWS_PER_CALL)
        jobs[f"{name}, sharing on, {GRID_ROWS_PER_CALL} rows"] = lambda c=conds: grid(c, True, GRID_ROWS_PER_CALL)
    with torch.no_grad():
        off, on = grid(grids["63 conditions"], False, ROWS_PER_CALL), grid(grids["63 conditions"], True, ROWS_PER_CALL)
        same = all((a.predictions == b.predictions).all() and np.allclose(a.losses, b.losses, atol=1e-4)
                   for a, b in zip(off, on))
        print(f"63 conditions, sharing on against off: {'the same' if same else 'DIFFERENT'} predictions and losses")
        times = {k: [] for k in jobs}
        for _ in range(args.rounds):
            for name, job in jobs.items():
                start = time.perf_counter()
                job()
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["plain pass"])
    for name, spent in times.items():
        ratio = statistics.median(spent) / base
        per63 = f"  ({ratio * 63 / 177:.2f} per 63 conditions)" if name.startswith("177") else ""
        print(f"{name:40s} {statistics.median(spent):7.2f} s  {ratio:6.2f} plain passes{per63}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
