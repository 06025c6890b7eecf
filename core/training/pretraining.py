"""Optional pre-training of a demo model on a synthetic corpus about numbers that holds no addition
(counting, spelling numbers into digits, comparisons), with the ordinary next-token loss."""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from core.tasks import number_space
from core.training.answers import autocast, model_device
from core.training.optimiser import lr_schedule, step_bar, whole_model_optimizer
from core.training.recipe import Recipe

#: the corpus's words, which a demo model's tokenizer gets besides the numbers
PRETRAIN_WORDS = ("count", "digits", "of", "is", "more", "less", "than", "the", "same", "as", "from", "to")


def pretraining_corpus(max_number: int, n_sequences: int, seed: int = 0) -> list[str]:
    """Texts about numbers with no addition in them: counting, spelling into digits, comparisons.

    "count : 37 38 39 40 41"; "digits of 108 : 1 0 8"; "93 is less than 108 ."; "7 is the same as 7 ."
    """
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(n_sequences):
        kind = rng.integers(3)
        if kind == 0:
            start = int(rng.integers(0, max_number - 7))
            n = int(rng.integers(4, 9))
            texts.append("count : " + " ".join(str(i) for i in range(start, min(start + n, max_number + 1))))
        elif kind == 1:
            n = int(rng.integers(0, max_number + 1))
            texts.append(f"digits of {n} : " + " ".join(str(n)))
        else:
            a, b = (int(v) for v in rng.integers(0, max_number + 1, size=2))
            rel = "more than" if a > b else ("less than" if a < b else "the same as")
            texts.append(f"{a} is {rel} {b} .")
    return texts


def pretrain(model, tokenizer, recipe: Recipe, log, progress):
    """Next-token pre-training on the number corpus (all positions, pads masked)."""
    cfg = recipe.pretrain_config()
    texts = pretraining_corpus(number_space(recipe.task, recipe.max_operand) - 1, cfg.n_sequences, recipe.seed)
    enc = tokenizer(texts)["input_ids"]
    bs = cfg.batch_size or recipe.batch_size
    steps = cfg.epochs * math.ceil(len(enc) / bs)
    opt = whole_model_optimizer(model, cfg.lr or recipe.lr, recipe.weight_decay)
    sched = lr_schedule(opt, steps, recipe.warmup_steps, 0.0)
    pad = tokenizer.pad_token_id
    device = model_device(model)
    bar = step_bar(steps, "pre-train", progress)
    t0 = time.time()
    for epoch in range(cfg.epochs):
        order = np.random.default_rng((recipe.seed, 1000 + epoch)).permutation(len(enc))
        total, count = 0.0, 0
        for start in range(0, len(order), bs):
            seqs = [enc[i] for i in order[start : start + bs]]
            width = max(len(s) for s in seqs)
            ids = torch.full((len(seqs), width), pad, dtype=torch.long)
            labels = torch.full((len(seqs), width), -100, dtype=torch.long)
            for r, s in enumerate(seqs):  # right padding: positions start at 0 for every row
                ids[r, : len(s)] = torch.tensor(s)
                labels[r, : len(s)] = torch.tensor(s)
            mask = (labels != -100).long()
            ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)
            with autocast(recipe.precision, device.type):
                loss = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            total += loss.item()
            count += 1
            bar.update(1)
        log(f"pre-train epoch {epoch + 1}/{cfg.epochs}: loss {total / count:.4f} ({time.time() - t0:.0f}s)")
    bar.close()
