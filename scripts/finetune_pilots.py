"""Short fine-tuning pilots for the smollm2-addition recipe: N steps of each config, then the answer
loss and accuracy on 512 seeded validation questions (how the recipe's learning rate and centring
were chosen; needs models/smollm2-135m).

    .venv/bin/python scripts/finetune_pilots.py '[{"lr": 0.003, "centre": false}, {"lr": 0.001, "centre": true}]' 150
"""
import sys, time, json
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import numpy as np, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from core.finetune import FineTuneModel, add_number_tokens, scaled_rows, _load_base, DEFAULT_TARGETS
from core.models import load_model
from core.numbers import number_representations
from core.tasks import build_examples, select_split
from core.train import AdditionBatches, answer_loss, evaluate_split, _schedule

cfgs = json.loads(sys.argv[1]); steps = int(sys.argv[2])
base_folder = "models/smollm2-135m"
reps = number_representations(load_model(base_folder), 521, "The number {n}", progress=False)
ex = build_examples("addition", 260, 0)
train, val = select_split(ex, "train"), select_split(ex, "val")
val = [val[i] for i in np.random.default_rng(1).permutation(len(val))[:512]]
for cfg in cfgs:
    base = _load_base(base_folder); tok = AutoTokenizer.from_pretrained(base_folder)
    base_rows = base.get_input_embeddings().weight.detach().numpy()
    rows = scaled_rows(reps.vectors[cfg.get("layer", 5)], base_rows, cfg.get("centre", True))
    if cfg.get("rows") == "rep+digits":  # centred representation (half scale) on top of the mean of the number's digit embeddings
        digits = [tok(str(n), add_special_tokens=False)["input_ids"] for n in range(521)]
        rows = np.stack([base_rows[d].mean(0) for d in digits]) + 0.5 * scaled_rows(reps.vectors[cfg.get("layer", 5)], base_rows, True)
    ids = add_number_tokens(tok, 521)
    tuned = FineTuneModel(base, rows, cfg.get("rank", 8), cfg.get("alpha", 16), DEFAULT_TARGETS, 0)
    params = tuned.trainable()
    groups = [{"params": [params["number_rows"]], "weight_decay": 0.0, "lr": cfg.get("rows_lr", cfg["lr"])},
              {"params": [v for k, v in params.items() if k.endswith(".A")], "weight_decay": 0.0, "lr": cfg["lr"]},
              {"params": [v for k, v in params.items() if k.endswith(".B")], "weight_decay": 0.0, "lr": cfg.get("b_lr", cfg["lr"])}]
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(0.9, 0.98), eps=1e-8)
    sched = _schedule(opt, cfg.get("total", 1710), 50, 0.0)
    data = AdditionBatches(tok, train, ids)
    order = np.random.default_rng((0, 0)).permutation(len(data))[: steps * 32]
    t0 = time.time(); losses = []
    for _, i, m, p, t in data.batches(32, order):
        loss = answer_loss(tuned.model, i, m, p, t, "bfloat16")
        opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0); opt.step(); sched.step()
        losses.append(loss.item())
    acc, vl = evaluate_split(tuned.model, AdditionBatches(tok, val, ids), ids, 32, "bfloat16")
    print(json.dumps({**cfg, "steps": steps, "train_loss_last20": float(np.mean(losses[-20:])), "val_loss": vl, "val_acc": acc, "s": round(time.time() - t0)}), flush=True)
