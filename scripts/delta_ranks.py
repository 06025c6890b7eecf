"""What the cut to rank r, and keeping the factors in 8 bits, cost a full fine-tuning: validation accuracy of the
model rebuilt from its change cut to each rank, its factors in float16 or int8, with the delta's size.

    .venv/bin/python scripts/delta_ranks.py smollm2-addition-cpu [--ranks 128,160,192] [--factors float16,int8]
    .venv/bin/python scripts/delta_ranks.py smollm2-addition-rows-blocks-18-29 --from-delta --ranks 192,96,64

By default it reads the recipe's checkpoint (left in its model folder after training; not shipped), so it runs
only on the machine that trained it, while the trained weights exist, and scores the uncut model too. With
--from-delta it reads the shipped delta instead (any clone has it): its factors are the change's SVD ordered by
singular value, so cutting them to rank r is the best rank-r approximation of the shipped change, and rank = the
delta's own with float16 is the shipped model itself where alpha = rank, as in every recipe here (its score
checks the training's record). It is a diagnostic, not a choice: the shipped rank and precision are the recipe's,
fixed before training, because `train` scores the test split of the model it ships as soon as it has rebuilt it,
and a rank picked afterwards would be picked with that score known. Everything is scored in float32 on the
validation split (the test split is never read). Each model is built the way `rebuild` builds it: the factors
encoded as the delta would keep them (`core.training.delta.encode_factors`), decoded, merged into the base model
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
from core.training.delta import (
    DELTA_FILE,
    add_number_tokens,
    decode_factors,
    encode_factors,
    load_base,
    merged_model,
    read_delta,
)
from core.training.finetune import TRAINABLE_FILE
from core.training.lora import FineTuneModel
from core.training.recipe import FACTOR_PRECISIONS, Recipe


def change_factors(args, recipe, lora, spec, number_ids, val):
    """(cut, top): cut(rank) gives the delta's tensors before encoding (the number rows and each map's rank-r
    factors, for a merge whose scale alpha / rank is 1), for ranks up to `top`: from the shipped delta (--from-delta)
    or from the checkpoint's trained maps (whose uncut model is scored here first)."""
    folder = Path(recipe.out)
    if args.from_delta:
        tensors, meta = read_delta(folder / DELTA_FILE)
        if not str(meta.get("trained", "")).startswith("full"):
            raise SystemExit(f"{recipe.name}'s delta holds trained LoRA factors, not an SVD: cutting them is no "
                             "best approximation")
        top = int(meta["rank"])
        scale = float(meta["alpha"]) / top  # the cut keeps the shipped factors, so the merge's scale stays alpha/rank

        def cut(rank):
            return {k: (v[:rank] if k.endswith(".A") else v[:, :rank] if k.endswith(".B") else v).float() * (
                scale if k.endswith(".B") else 1.0) for k, v in tensors.items()}

        print(f"{recipe.name}: its shipped delta (rank {top}, {meta.get('factors', 'float16')}), validation split "
              f"({len(val)} questions), float32")
        return cut, top
    saved, progress = load_checkpoint(folder / CHECKPOINT, TRAINABLE_FILE)
    base = load_base(recipe.init_from)
    tuned = FineTuneModel(base, saved["number_rows"].float().numpy(), lora.rank, lora.alpha, lora.targets, recipe.seed,
                          first_block=spec.frozen_blocks, full=True)
    with torch.no_grad():
        for name, tensor in tuned.trainable().items():
            tensor.copy_(saved[name])
    print(f"{recipe.name}: checkpoint after epoch {progress['epoch']}, validation split ({len(val)} questions), "
          "float32")
    t0 = time.time()
    acc, _ = evaluate_split(tuned.model, val, number_ids, recipe.batch_size, "float32")
    print(f"  uncut (the trained maps themselves): {acc:.2%} ({time.time() - t0:.0f} s)")

    def cut(rank):
        tuned.rank, tuned.alpha = rank, float(rank)  # the merge's scale alpha / rank is 1: B holds U S
        return tuned.compressed_delta()[0]

    return cut, min(min(linear.weight.shape) for linear, _ in tuned.full.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", help="a full fine-tuning recipe: its checkpoint in its model folder, or its delta")
    parser.add_argument("--ranks", default="128,160,192", help="ranks to try, comma-separated")
    parser.add_argument("--factors", default="float16", help="precisions to try for each rank: float16, int8 or both")
    parser.add_argument("--from-delta", action="store_true", help="cut the shipped delta, not the checkpoint's maps")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    unknown = [f for f in args.factors.split(",") if f not in FACTOR_PRECISIONS]
    if unknown:
        raise SystemExit(f"--factors {unknown[0]!r}: choose from {', '.join(FACTOR_PRECISIONS)}")
    torch.set_num_threads(args.threads)
    recipe = Recipe.load(args.recipe)
    spec, lora = recipe.number_token_config(), recipe.lora_config()
    if not lora.full:
        raise SystemExit(f"{recipe.name} trains LoRA factors: its delta is exact, there is no rank to choose")
    if lora.init_delta and not args.from_delta:
        raise SystemExit(f"{recipe.name} starts from an earlier delta, whose factors this script does not load: "
                         "use --from-delta")
    p = number_space(recipe.task, recipe.max_operand)
    tokenizer = AutoTokenizer.from_pretrained(recipe.init_from)
    number_ids = add_number_tokens(tokenizer, p)
    val = AdditionBatches(tokenizer, select_split(build_examples(recipe.task, recipe.max_operand,
                                                                 recipe.dataset_seed), "val"), number_ids)
    cut, top = change_factors(args, recipe, lora, spec, number_ids, val)
    for rank in (int(r) for r in args.ranks.split(",")):
        if rank > top:
            print(f"  rank {rank}: above the delta's own rank {top}, skipped")
            continue
        tensors = cut(rank)
        for factors in args.factors.split(","):
            t0 = time.time()
            encoded = encode_factors(tensors, factors)
            size = sum(t.numel() * t.element_size() for t in encoded.values())
            model, rebuilt_tok = merged_model(recipe.init_from, decode_factors(encoded),
                                              {"p": p, "alpha": rank, "rank": rank})
            ids = np.asarray(rebuilt_tok.convert_tokens_to_ids(tokenizer.convert_ids_to_tokens(list(number_ids))))
            rebuilt_acc, _ = evaluate_split(model, val, ids, recipe.batch_size, "float32")
            print(f"  rank {rank}, {factors}: {rebuilt_acc:.2%} ({round(rebuilt_acc * len(val))} of {len(val)}), "
                  f"delta {size / 1e6:.1f} MB ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
