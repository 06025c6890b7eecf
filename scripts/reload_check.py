"""Independent reload: a rebuilt model folder read with plain transformers (its own tokenizer,
float32, left padding, greedy next token over the whole vocabulary), scored on a cached run's test
prompts, against the accuracy that run recorded. Nothing of core's evaluation code is used.

    .venv/bin/python scripts/reload_check.py models/smollm2-addition-stage3 [--run RUN_NAME] [--threads 2]

Prints the count right, the cached count and whether they agree; exits 1 if they do not.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from core.files import PROJECT_ROOT
from core.runs.reader import RunReader, Table


def cached_run(folder: Path) -> str:
    """The cached run computed from `folder` (the manifest's model source)."""

    def where(path) -> Path:
        path = Path(path)
        return (path if path.is_absolute() else PROJECT_ROOT / path).resolve()

    for m in sorted((PROJECT_ROOT / "cache").glob("*/manifest.json")):
        data = json.loads(m.read_text())
        if (
            where(data.get("model", {}).get("source", "")) == folder.resolve()
            and data.get("task", {}).get("split") == "test"
        ):
            return m.parent.name
    sys.exit(f"no cached run of the test split was computed from {folder}; name it with --run")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--run", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    folder = Path(args.folder)
    run = args.run or cached_run(folder)
    examples = RunReader(PROJECT_ROOT / "cache", run).table(Table.EXAMPLES)
    examples = examples[examples["split"] == "test"].reset_index(drop=True)
    if examples.empty:
        sys.exit(f"run {run} holds no test-split questions: name a test-split run with --run")
    tok = AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    t0, right, words = time.time(), 0, []
    with torch.no_grad():
        for s in range(0, len(examples), args.batch):
            part = examples.iloc[s : s + args.batch]
            enc = tok(list(part["prompt"]), return_tensors="pt", padding=True)
            logits = model(**enc).logits[:, -1]
            words += tok.batch_decode(logits.argmax(-1)[:, None])
    said = pd.Series([w.strip() for w in words])
    right = int((said == examples["answer"].astype(str)).sum())
    cached = int(examples["correct"].sum())
    print(
        f"{folder}: {right} of {len(examples)} right ({right / len(examples):.2%}) "
        f"on reload in {time.time() - t0:.0f}s; "
        f"cached run {run}: {cached} ({cached / len(examples):.2%}) -> {'same' if right == cached else 'DIFFERENT'}"
    )
    sys.exit(0 if right == cached else 1)


if __name__ == "__main__":
    main()
