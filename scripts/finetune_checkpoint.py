"""How far a fine-tuning checkpoint has got, beyond its exact accuracy: on 512 seeded validation
questions, how many answers are within 2 and within 10 of the sum, and how often the parity and the
last digit of the answer are right (chance: 50% and 10%). A model that has only the magnitude
(the paper's low-frequency part) is often within 10 but at chance on parity.

    .venv/bin/python scripts/finetune_checkpoint.py models/smollm2-addition/checkpoint
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import numpy as np
import torch

torch.set_num_threads(int(os.environ.get("THREADS", "1")))
from safetensors.torch import load_file
from transformers import AutoTokenizer

from core.finetune import DEFAULT_TARGETS, FineTuneModel, _load_base, add_number_tokens
from core.tasks import build_examples, number_space, select_split
from core.train import AdditionBatches, _autocast, answer_logits

ckpt = Path(sys.argv[1])
progress = json.loads((ckpt / "progress.json").read_text())
recipe = progress["recipe"]
lora = recipe.get("lora") or {}
state = load_file(str(ckpt / "trainable.safetensors"))
p = number_space(recipe["task"], recipe["max_operand"])
base = _load_base(recipe["init_from"])
tok = AutoTokenizer.from_pretrained(recipe["init_from"])
ids = add_number_tokens(tok, p)
tuned = FineTuneModel(base, state["number_rows"].numpy(), lora.get("rank", 8), lora.get("alpha", 16), tuple(lora.get("targets", DEFAULT_TARGETS)), 0)
with torch.no_grad():
    for name, tensor in tuned.trainable().items():
        tensor.copy_(state[name])
val = select_split(build_examples(recipe["task"], recipe["max_operand"], recipe["dataset_seed"]), "val")
val = [val[i] for i in np.random.default_rng(1).permutation(len(val))[:512]]
data = AdditionBatches(tok, val, ids)
preds = []
tuned.model.eval()
with torch.no_grad(), _autocast(recipe["precision"]):
    for _, i, m, pos, _t in data.batches(128):
        preds.append(answer_logits(tuned.model, i, m, pos).float()[:, torch.as_tensor(ids)].argmax(-1).numpy())
pred = np.concatenate(preds)
err = pred - data.answers
print(json.dumps({"checkpoint": str(ckpt), "epoch": progress["epoch"], "step": progress["step"], "exact": float((err == 0).mean()),
                  "within2": float((abs(err) <= 2).mean()), "within10": float((abs(err) <= 10).mean()),
                  "parity_right": float((pred % 2 == data.answers % 2).mean()),
                  "last_digit_right": float((pred % 10 == data.answers % 10).mean())}))
