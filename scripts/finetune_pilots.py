"""Short fine-tuning pilots for the smollm2-addition recipe: N steps of each config, then the answer
loss and accuracy on 512 seeded validation questions, how far off the answers are (within 2, within
10) and whether their parity and last digit are right (how the recipe's settings were chosen; needs
models/smollm2-135m).

    .venv/bin/python scripts/finetune_pilots.py '[{"lr": 0.003, "rows_lr": 0.0}, {"lr": 0.001, "centre": true}]' 400

Config keys: lr (LoRA factors, or every weight in mode "full"), rows_lr (the new rows; default lr),
b_lr (LoRA+: the B factors' own rate), centre, layer, rank, alpha, rows ("rep+digits": the digits'
mean embedding plus half the centred representation; "last-digit+rep": the last digit's embedding plus
w (default 0.5) times the centred representation), mode ("lora" or "full": every weight of the
30 blocks and the final norm trained, no LoRA), precision, total (schedule length in steps).
THREADS=1 (the default) runs on one core, so two pilots can run side by side.
"""
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import numpy as np
import torch

torch.set_num_threads(int(os.environ.get("THREADS", "1")))
from transformers import AutoTokenizer

import core.finetune as finetune_module
from core.finetune import DEFAULT_TARGETS, FineTuneModel, _load_base, add_number_tokens, scaled_rows
from core.models import load_model
from core.numbers import number_representations
from core.tasks import build_examples, select_split
from core.train import AdditionBatches, _autocast, _schedule, answer_logits, answer_loss, evaluate_split

cfgs = json.loads(sys.argv[1])
steps = int(sys.argv[2])
base_folder = "models/smollm2-135m"
reps = number_representations(load_model(base_folder), 521, "The number {n}", progress=False)
ex = build_examples("addition", 260, 0)
train, val = select_split(ex, "train"), select_split(ex, "val")
val = [val[i] for i in np.random.default_rng(1).permutation(len(val))[:512]]
lora_targets = finetune_module._lora_targets
for cfg in cfgs:
    base = _load_base(base_folder)
    tok = AutoTokenizer.from_pretrained(base_folder)
    base_rows = base.get_input_embeddings().weight.detach().numpy()
    layer = cfg.get("layer", 5)
    rows = scaled_rows(reps.vectors[layer], base_rows, cfg.get("centre", False))
    if cfg.get("rows") == "rep+digits":  # centred representation (half scale) on top of the mean of the number's digit embeddings
        digits = [tok(str(n), add_special_tokens=False)["input_ids"] for n in range(521)]
        rows = np.stack([base_rows[d].mean(0) for d in digits]) + 0.5 * scaled_rows(reps.vectors[layer], base_rows, True)
    if cfg.get("rows") == "last-digit+rep":  # the last digit's embedding (the layer-0 representation) plus w x the centred layer-5 one
        last = [tok(str(n), add_special_tokens=False)["input_ids"][-1] for n in range(521)]
        rows = base_rows[last] + cfg.get("w", 0.5) * scaled_rows(reps.vectors[layer], base_rows, True)
    ids = add_number_tokens(tok, 521)
    full = cfg.get("mode", "lora") == "full"
    finetune_module._lora_targets = (lambda model, targets: []) if full else lora_targets
    tuned = FineTuneModel(base, rows, cfg.get("rank", 8), cfg.get("alpha", 16), DEFAULT_TARGETS, 0)
    params = tuned.trainable()
    groups = [{"params": [params["number_rows"]], "weight_decay": 0.0, "lr": cfg.get("rows_lr", cfg["lr"])}]
    if full:
        body = list(base.model.layers.parameters()) + list(base.model.norm.parameters())
        for w in body:
            w.requires_grad_(True)
        groups.append({"params": body, "weight_decay": 0.0, "lr": cfg["lr"]})
    else:
        groups += [{"params": [v for k, v in params.items() if k.endswith(".A")], "weight_decay": 0.0, "lr": cfg["lr"]},
                   {"params": [v for k, v in params.items() if k.endswith(".B")], "weight_decay": 0.0, "lr": cfg.get("b_lr", cfg["lr"])}]
    trained = [w for g in groups for w in g["params"]]
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(0.9, 0.98), eps=1e-8)
    sched = _schedule(opt, cfg.get("total", 3420), 50, 0.0)
    precision = cfg.get("precision", "bfloat16")
    data = AdditionBatches(tok, train, ids)
    order = np.random.default_rng((0, 0)).permutation(len(data))[: steps * 32]
    t0 = time.time()
    losses = []
    for _, i, m, p, t in data.batches(32, order):
        loss = answer_loss(tuned.model, i, m, p, t, precision)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    seconds = time.time() - t0
    vdata = AdditionBatches(tok, val, ids)
    acc, vl = evaluate_split(tuned.model, vdata, ids, 32, precision)
    preds = []
    tuned.model.eval()
    with torch.no_grad(), _autocast(precision):
        for _, i, m, p, _t in vdata.batches(128):
            preds.append(answer_logits(tuned.model, i, m, p).float()[:, torch.as_tensor(ids)].argmax(-1).numpy())
    pred = np.concatenate(preds)
    err = pred - vdata.answers
    print(json.dumps({**cfg, "steps": steps, "train_loss_last50": round(float(np.mean(losses[-50:])), 3), "val_loss": round(vl, 3),
                      "val_acc": acc, "within2": float((abs(err) <= 2).mean()), "within10": float((abs(err) <= 10).mean()),
                      "parity_right": float((pred % 2 == vdata.answers % 2).mean()), "last_digit_right": float((pred % 10 == vdata.answers % 10).mean()),
                      "s_per_step": round(seconds / steps, 2)}), flush=True)
