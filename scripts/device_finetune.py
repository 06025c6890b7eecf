"""Train variants of a number-token fine-tuning recipe side by side on one GPU, within a deadline.

Each variant is the recipe with some fields replaced (JSON), trained by the ordinary command
(`python -m core train --recipe FILE --device cuda --out DIR`) in its own process; they share the
GPU (each step is small, so the processes overlap well). At the deadline the ones still running are
stopped (a checkpoint every `checkpoint_steps` steps keeps their progress, and the same command
resumes them). What each variant left is packed into OUT/NAME.tar: its delta, training log, summary
and recipe when it finished, its checkpoint's progress (the per-epoch log) when it did not.

    python scripts/device_finetune.py --recipe smollm2-addition --deadline 480 --runs /root/keep/runs \\
        --out "$OUT" 'a={}' 'b={"number_tokens": {"rows_lr_ratio": 1.0}}'

A dict value is merged into the recipe's dict one level deep ({"number_tokens": {...}} changes only
the keys it names). Used on a lent GPU machine for the smollm2-addition recipe (README).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PART = 15_000_000
KEEP = ("delta.safetensors", "training_log.parquet", "train_summary.json", "recipe.json", "train.log")


def variant(recipe: dict, changes: dict) -> dict:
    out = json.loads(json.dumps(recipe))
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", required=True)
    ap.add_argument("--deadline", type=float, required=True, help="seconds from now")
    ap.add_argument("--runs", required=True, help="folder for the variants' runs (kept between calls)")
    ap.add_argument("--out", required=True, help="folder for the packed results")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("variants", nargs="+", help="NAME=JSON")
    args = ap.parse_args()
    from core.train import Recipe

    base = Recipe.load(args.recipe).as_dict()
    runs, out = Path(args.runs), Path(args.out)
    runs.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    procs = {}
    t0 = time.time()
    for spec in args.variants:
        name, _, text = spec.partition("=")
        folder = runs / name
        folder.mkdir(exist_ok=True)
        recipe = variant(base, json.loads(text or "{}"))
        recipe.pop("threads", None)
        recipe.pop("device", None)
        path = runs / f"{name}.json"
        path.write_text(json.dumps(recipe, indent=1))
        log = open(folder / "train.log", "a")
        cmd = [sys.executable, "-m", "core", "train", "--recipe", str(path), "--out", str(folder), "--device", args.device,
               "--threads", str(args.threads), "--no-progress"]
        procs[name] = (subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=False), folder)
        print(f"started {name}: {json.dumps(json.loads(text or '{}'))}", flush=True)
    while time.time() - t0 < args.deadline and any(p.poll() is None for p, _ in procs.values()):
        time.sleep(5)
    for name, (p, folder) in procs.items():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        state = "finished" if p.returncode == 0 else f"stopped (exit {p.returncode})"
        with tarfile.open(out / f"{name}.tar", "w") as tar:
            for f in KEEP:
                if (folder / f).exists():
                    tar.add(folder / f, arcname=f)
            if (folder / "checkpoint" / "progress.json").exists():
                tar.add(folder / "checkpoint" / "progress.json", arcname="progress.json")
        packed = out / f"{name}.tar"
        if packed.stat().st_size > PART:  # what comes back from the device is at most 16 MiB a file
            data = packed.read_bytes()
            for k in range(0, len(data), PART):
                (out / f"{name}.tar.part{k // PART}").write_bytes(data[k : k + PART])
            packed.unlink()
        print(f"{name}: {state} after {time.time() - t0:.0f}s", flush=True)
        tail = (folder / "train.log").read_text().splitlines()[-6:]
        print("\n".join("   " + line[:300] for line in tail), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
