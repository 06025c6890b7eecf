"""What the cut to rank r costs a full fine-tuning: validation accuracy of the uncut trained model (its
checkpoint) and of the model rebuilt from its change cut to each rank, with the delta's size.

    .venv/bin/python scripts/delta_ranks.py smollm2-addition-cpu [--ranks 128,160,192] [--threads 2]

Reads the recipe's checkpoint (left in its model folder after training; not shipped), so it runs only
on the machine that trained it, while the trained weights exist. It is a diagnostic, not a choice: the
shipped rank is the recipe's, fixed before training, because `train` scores the test split of the model
it ships as soon as it has rebuilt it, and a rank picked afterwards would be picked with that score known.
Everything is scored in float32 on the validation split (the test split is never read). Each rank's
model is built the way `rebuild` builds it: the change's best rank-r approximation (SVD, as
`FineTuneModel.compressed_delta`), stored in float16, merged into the base model
(`core.training.delta.merged_model`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from core.tasks import build_examples, number_space, select_split
from core.training.answers import AdditionBatches, evaluate_split
from core.training.checkpoint import CHECKPOINT, load_checkpoint
from core.training.delta import add_number_tokens, load_base, merged_model
from core.training.finetune import TRAINABLE_FILE
from core.training.lora import FineTuneModel, delta_tensors
from core.training.recipe import Recipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", help="a full fine-tuning recipe whose checkpoint is in its model folder")
    parser.add_argument("--ranks", default="128,160,192", help="ranks to try, comma-separated")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    recipe = Recipe.load(args.recipe)
    spec, lora = recipe.number_token_config(), recipe.lora_config()
    if not lora.full:
        raise SystemExit(f"{recipe.name} trains LoRA factors: its delta is exact, there is no rank to choose")
    if lora.init_delta:
        raise SystemExit(f"{recipe.name} starts from an earlier delta, whose factors this script does not load")
    folder = Path(recipe.out)
    saved, progress = load_checkpoint(folder / CHECKPOINT, TRAINABLE_FILE)
    p = number_space(recipe.task, recipe.max_operand)
    base = load_base(recipe.init_from)
    tokenizer = AutoTokenizer.from_pretrained(recipe.init_from)
    number_ids = add_number_tokens(tokenizer, p)
    tuned = FineTuneModel(base, saved["number_rows"].float().numpy(), lora.rank, lora.alpha, lora.targets, recipe.seed,
                          first_block=spec.frozen_blocks, full=True)
    with torch.no_grad():
        for name, tensor in tuned.trainable().items():
            tensor.copy_(saved[name])
    val = AdditionBatches(tokenizer, select_split(build_examples(recipe.task, recipe.max_operand,
                                                                 recipe.dataset_seed), "val"), number_ids)
    print(f"{recipe.name}: checkpoint after epoch {progress['epoch']}, validation split ({len(val)} questions), "
          "float32")
    t0 = time.time()
    acc, _ = evaluate_split(tuned.model, val, number_ids, recipe.batch_size, "float32")
    print(f"  uncut (the trained maps themselves): {acc:.2%} ({time.time() - t0:.0f} s)")
    for rank in (int(r) for r in args.ranks.split(",")):
        t0 = time.time()
        tuned.rank = rank
        tensors = delta_tensors(tuned, log=lambda *_: None)
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        model, rebuilt_tok = merged_model(recipe.init_from, tensors, {"p": p, "alpha": lora.alpha, "rank": rank})
        ids = np.asarray(rebuilt_tok.convert_tokens_to_ids(tokenizer.convert_ids_to_tokens(list(number_ids))))
        rebuilt_acc, _ = evaluate_split(model, val, ids, recipe.batch_size, "float32")
        print(f"  rank {rank}: {rebuilt_acc:.2%}, {rebuilt_acc - acc:+.2%} against uncut, delta {size / 1e6:.1f} MB "
              f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
