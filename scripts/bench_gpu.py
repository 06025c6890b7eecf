"""Benchmark: a full precompute of a GPT-2-XL-shaped random-init model on a GPU, stage by stage, vs a plain pass.

    python3 scripts/bench_gpu.py --out bench-gpu [--dtype float32] [--batch-size 128]

The model has GPT-2-XL's shape (GPT-2 architecture, 48 layers, width 1,600, 25 heads, 1.5 billion parameters
with the project's word-level number tokenizer), random init: what a user who brings the paper's own model
pays per run. Everything is measured in one run, on the GPU, over every test question of the addition task
(3,419), with the shipped runs' 10 taus:

1. versions and the GPU's name;
2. a smoke precompute of a 2-layer model on the same device with --limit 64 (a bug on the GPU's path fails
   in seconds, not after minutes);
3. the big model built and saved (timed);
4. the denominator: one plain forward pass over every test prompt (tokenizing, batching, the model's forward
   pass, answer position only), the median of 3 after a warm-up;
5. `core.runs.precompute.precompute` whole, into a temporary cache; each stage's seconds from the run's
   manifest, and each as a multiple of the plain pass.

The grid's and the phase shift's progress is logged every minute, so a run cut off by a time limit still
says its rate. All figures go to OUT/bench_gpu.json (written again after each step).
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
import torch
import transformers

from core.models.capture import forward_batch, prepare_batches
from core.models.loading import load_model, prompt_texts
from core.models.random_models import save_random_model
from core.runs import ablation_grid, shift_run
from core.runs.precompute import PrecomputeOptions, precompute
from core.tasks import build_examples, select_split
from core.threads import available_cores

TAUS = (10, 20, 30, 40, 50, 75, 100, 150, 200, 250)
START = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - START:7.1f} s] {message}", flush=True)


def options(model: Path, cache: Path, args, limit: int | None = None) -> PrecomputeOptions:
    return PrecomputeOptions(
        model=str(model), device=args.device, dtype=args.dtype, batch_size=args.batch_size, threads=args.threads,
        taus=TAUS, cache_dir=str(cache), limit=limit, progress=False,
    )


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def plain_pass(folder: Path, args, rounds: int = 3) -> dict:
    """One forward pass over every test prompt, answer position only: the median of `rounds` after a warm-up."""
    lm = load_model(str(folder), device=args.device, dtype=args.dtype)
    examples = select_split(build_examples("addition", 260), "test")
    texts = prompt_texts(lm, [e.prompt for e in examples])
    times = []
    with torch.no_grad():
        for _ in range(rounds + 1):
            synchronize(args.device)
            t = time.perf_counter()
            for batch in prepare_batches(lm.tokenizer, texts, args.batch_size):
                forward_batch(lm, batch)
            synchronize(args.device)
            times.append(time.perf_counter() - t)
    figures = {
        "plain_pass_s": round(statistics.median(times[1:]), 3),
        "plain_rounds_s": [round(x, 3) for x in times],
        "prompts": len(texts),
        "mean_tokens": float(np.mean([len(x) for x in lm.tokenizer(texts)["input_ids"]])),
        "parameters": sum(p.numel() for p in lm.model.parameters()),
    }
    del lm
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return figures


def log_progress(every_s: float = 60.0) -> None:
    """The ablation grid and the phase shift say how many prompts they have done, every `every_s` seconds."""
    for module in (ablation_grid, shift_run):
        evaluate_conditions = module.evaluate_conditions

        def with_progress(*a, _evaluate=evaluate_conditions, desc="evaluate", **kw):
            last = [time.perf_counter()]

            def on_batch(done: int, n: int) -> None:
                if done == n or time.perf_counter() - last[0] >= every_s:
                    last[0] = time.perf_counter()
                    log(f"{desc}: {done:,} of {n:,} prompts")

            return _evaluate(*a, desc=desc, on_batch=on_batch, **kw)

        module.evaluate_conditions = with_progress


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for bench_gpu.json")
    ap.add_argument("--work", default=None, help="folder for the models and the cache (default: a temporary one)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=available_cores(), help="torch's CPU threads (default: every core)")
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--heads", type=int, default=25)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    on_cuda = args.device.startswith("cuda")
    figures = {
        "device": torch.cuda.get_device_name() if on_cuda else "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
        "dtype": args.dtype, "batch_size": args.batch_size, "threads": args.threads, "taus": list(TAUS),
        "shape": {"architecture": "gpt2", "layers": args.layers, "width": args.width, "heads": args.heads},
    }

    def save() -> None:
        (out / "bench_gpu.json").write_text(json.dumps(figures, indent=1))

    log(f"{figures['device']}; torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"transformers {transformers.__version__}; {args.dtype}, batch {args.batch_size}, {args.threads} threads")

    t = time.perf_counter()
    tiny = save_random_model(work / "tiny", "gpt2", n_layers=2, width=64, heads=4, max_number=600)
    precompute(options(tiny, work / "cache-smoke", args, limit=64), log=lambda _: None)
    figures["smoke_s"] = round(time.perf_counter() - t, 2)
    log(f"smoke precompute (2 layers, 64 questions) on {args.device}: {figures['smoke_s']:.1f} s")
    save()

    t = time.perf_counter()
    big = save_random_model(work / "big", "gpt2", n_layers=args.layers, width=args.width, heads=args.heads,
                            max_number=600)
    figures["build_s"] = round(time.perf_counter() - t, 2)
    log(f"built and saved the {args.layers}x{args.width} model: {figures['build_s']:.1f} s")
    figures.update(plain_pass(big, args))
    plain = figures["plain_pass_s"]
    log(f"{figures['parameters']:,} parameters; plain pass over {figures['prompts']:,} prompts of "
        f"{figures['mean_tokens']:.1f} tokens: {plain:.2f} s (rounds {figures['plain_rounds_s']})")
    save()

    log_progress()
    t = time.perf_counter()
    run = precompute(options(big, work / "cache", args), log=log)
    figures["precompute_s"] = round(time.perf_counter() - t, 2)
    manifest = json.loads((run / "manifest.json").read_text())
    stages = {k: v for k, v in manifest["timings"].items() if k.endswith("_s")}
    figures["stages_s"] = stages
    figures["accuracy"] = manifest["accuracy"]
    rows = [(k.removesuffix("_s"), v, "measured") for k, v in stages.items()]
    rows.append(("whole precompute (with error analysis and publish)", figures["precompute_s"], "measured"))
    save()

    print(f"\n{figures['device']}, {args.dtype}, batch {args.batch_size}; {figures['parameters']:,} parameters; "
          f"{figures['prompts']:,} test prompts; plain pass {plain:.2f} s; accuracy {figures['accuracy']:.2%}")
    for name, seconds, how in rows:
        print(f"  {name:52s} {seconds:9.1f} s {seconds / plain:9.1f} plain passes  ({how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
