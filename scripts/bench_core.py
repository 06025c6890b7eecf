"""Benchmark: capture and ablated evaluation, each as a ratio to a plain batched forward pass.

    .venv/bin/python scripts/bench_core.py [--layers 4] [--width 256] [--batch-size 64] [--prompts 1024]

One run, same prompts, same batches: a random-init GPT-2-style model (word-level number
tokenizer, built on the fly), the paper's addition test prompts. The three measurements are
interleaved round by round and the medians compared, so a busy machine slows all of them alike.

* plain: tokenizing, batching and the model's forward pass on each batch (logits of the answer position only), no hooks;
* capture: the same passes keeping h(l), Attn(l), MLP(l) of every layer at the answer position;
* ablated: the evaluation under a Fourier filter on the attention and MLP outputs of every layer
  (loss of the answer token, predictions), with a filter that really projects (rank < width).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tau", type=int, default=50)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    from core.capture import forward_batch, iter_capture, prepare_batches
    from core.filters import evaluate, high_pass
    from core.fourier import fourier_basis
    from core.models import load_model, prompt_texts
    from core.random_models import save_random_model
    from core.tasks import build_examples, select_split

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        save_random_model(tmp, "gpt2", n_layers=args.layers, width=args.width, heads=8, max_number=600)
        lm = load_model(tmp)
    examples = select_split(build_examples("addition", 260), "test")[: args.prompts]
    texts = prompt_texts(lm, [e.prompt for e in examples])
    answers = np.array([e.answer for e in examples])
    p = 521
    flt = high_pass(lm.unembedding(p), fourier_basis(p, "paper"), args.tau)

    def plain():  # tokenizes and batches like the other two, then runs the bare model
        for b in prepare_batches(lm.tokenizer, texts, args.batch_size):
            forward_batch(lm, b)

    def capture():
        for _ in iter_capture(lm, texts, args.batch_size, progress=False):
            pass

    def ablated():
        evaluate(lm, texts, answers, p, flt, "both", "last", args.batch_size, progress=False)

    jobs = {"plain": plain, "capture": capture, "ablated": ablated}
    times = {k: [] for k in jobs}
    with torch.no_grad():
        for fn in jobs.values():  # warm-up
            fn()
        for _ in range(args.rounds):
            for name, fn in jobs.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"model: GPT-2-style, {args.layers} layers, width {args.width}; {len(texts)} prompts, batch {args.batch_size}; "
        f"torch threads {torch.get_num_threads()}; filter: high-pass tau={args.tau} on Attn+MLP of every layer "
        f"(rank {flt.rank} of {flt.width}, erased={flt.erased}); {args.rounds} interleaved rounds, medians"
    )
    for k in jobs:
        print(f"  {k:8s} {med[k] * 1000:8.1f} ms   ({len(texts) / med[k]:,.0f} prompts/s)")
    print(f"capture / plain forward = {med['capture'] / med['plain']:.3f}x   (target <= 1.15x)")
    print(f"ablated / plain forward = {med['ablated'] / med['plain']:.3f}x   (target <= 1.30x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
