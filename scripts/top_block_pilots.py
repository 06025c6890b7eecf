"""Pilots for fine-tuning only SmolLM2's top blocks with the new number rows frozen: blocks
0..K-1 and the rows never change, so their output for every training prompt is computed once and
kept, and each step runs only blocks K..29 (forward and backward). Prints validation loss and
accuracy on 512 seeded questions (plus within 10, parity and last digit) after N steps.

    THREADS=1 .venv/bin/python scripts/top_block_pilots.py '{"K": 15, "mode": "lora", "lr": 0.003}' 300

Config keys: K (first trained block), mode ("lora": rank-r LoRA on the 7 linear maps of the trained
blocks; "full": every weight of the trained blocks and the final norm), lr, rank, alpha, total
(schedule length in steps), eval_every.
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

from core.finetune import DEFAULT_TARGETS, FineTuneModel, _load_base, add_number_tokens, scaled_rows
from core.models import load_model
from core.numbers import number_representations
from core.tasks import build_examples, select_split
from core.train import _schedule

cfg = json.loads(sys.argv[1])
steps = int(sys.argv[2])
K = cfg.get("K", 15)
base_folder = "models/smollm2-135m"
cache_file = Path(f"runs-scratch/reps5.npy")
if cache_file.exists():
    rep5 = np.load(cache_file)
else:
    rep5 = number_representations(load_model(base_folder), 521, "The number {n}", progress=False).vectors[5]
    cache_file.parent.mkdir(exist_ok=True)
    np.save(cache_file, rep5)
ex = build_examples("addition", 260, 0)
train, val = select_split(ex, "train"), select_split(ex, "val")
val = [val[i] for i in np.random.default_rng(1).permutation(len(val))[:512]]
base = _load_base(base_folder)
tok = AutoTokenizer.from_pretrained(base_folder)
rows = scaled_rows(rep5, base.get_input_embeddings().weight.detach().numpy(), False)
ids = add_number_tokens(tok, 521)
full = cfg.get("mode", "lora") == "full"
import core.finetune as fm

orig = fm._lora_targets
fm._lora_targets = lambda model, targets: [t for t in orig(model, targets) if int(t[0].split(".")[0]) >= K] if not full else []
tuned = FineTuneModel(base, rows, cfg.get("rank", 8), cfg.get("alpha", 16), DEFAULT_TARGETS, 0)
m = base.model
layers = list(m.layers)


def encode(examples):
    enc = tok([e.prompt for e in examples])["input_ids"]
    return enc, np.array([ids[e.answer] for e in examples]), np.array([e.answer for e in examples])


def run_blocks(h, blocks):
    pos = torch.arange(h.shape[1])[None]
    pe = m.rotary_emb(h, position_ids=pos)
    for layer in blocks:
        h = layer(h, attention_mask=None, position_ids=pos, position_embeddings=pe)
    return h


def bottom(enc):
    """Hidden state after block K-1 for every prompt, grouped by prompt length."""
    groups = {}
    for i, e in enumerate(enc):
        groups.setdefault(len(e), []).append(i)
    out = {}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for n, idx in groups.items():
            hs = []
            for s in range(0, len(idx), 256):
                x = torch.as_tensor([enc[i] for i in idx[s:s + 256]])
                hs.append(run_blocks(m.embed_tokens(x), layers[:K]).float())
            out[n] = (np.array(idx), torch.cat(hs))
    return out


out_rows = None
if cfg.get("out_rows") == "train":  # untied: the numbers' output rows are their own trainable copy
    out_rows = torch.nn.Parameter(tuned.embedding.rows.detach().clone())


def top_logits(h):
    h = m.norm(run_blocks(h, layers[K:])[:, -1])
    if out_rows is None:
        return base.lm_head(h)
    return torch.cat([torch.nn.functional.linear(h, tuned.embedding.base), torch.nn.functional.linear(h, out_rows)], -1)


t0 = time.time()
tr_enc, tr_t, _ = encode(train)
va_enc, va_t, va_ans = encode(val)
cache_h = Path(f"runs-scratch/bottom_K{K}.safetensors")
from safetensors.torch import load_file, save_file

if cache_h.exists():  # written below by this script
    flat = load_file(str(cache_h))
    tr_h, va_h = {}, {}
    for key in flat:
        split, n, kind = key.split("_")
        if kind == "idx":
            (tr_h if split == "tr" else va_h)[int(n)] = (flat[key].numpy(), flat[f"{split}_{n}_h"])
else:
    tr_h, va_h = bottom(tr_enc), bottom(va_enc)
    save_file({**{f"tr_{n}_idx": torch.as_tensor(i) for n, (i, h) in tr_h.items()}, **{f"tr_{n}_h": h for n, (i, h) in tr_h.items()},
               **{f"va_{n}_idx": torch.as_tensor(i) for n, (i, h) in va_h.items()}, **{f"va_{n}_h": h for n, (i, h) in va_h.items()}}, str(cache_h))
# check: the split forward equals the whole model on a few validation prompts
with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    n0, (idx0, h0) = next(iter(va_h.items()))
    whole = base(input_ids=torch.as_tensor([va_enc[i] for i in idx0[:4]]), use_cache=False).logits[:, -1].float()
    split = top_logits(h0[:4]).float()
if cfg.get("cache_only"):
    sys.exit(0)
print(json.dumps({"cache_s": round(time.time() - t0), "split_vs_whole_maxdiff": float((whole - split).abs().max())}), flush=True)

if full:
    trained = list(torch.nn.ModuleList(layers[K:]).parameters()) + list(m.norm.parameters())
    for w in trained:
        w.requires_grad_(True)
else:
    trained = [v for k, v in tuned.trainable().items() if k != "number_rows"]
tuned.embedding.rows.requires_grad_(False)
if out_rows is not None:
    trained.append(out_rows)
opt = torch.optim.AdamW([{"params": trained, "weight_decay": 0.0}], lr=cfg["lr"], betas=(0.9, 0.98), eps=1e-8)
sched = _schedule(opt, cfg.get("total", steps), 50, 0.0)
rng = np.random.default_rng(0)
lengths = sorted(tr_h)
sizes = np.array([len(tr_h[n][0]) for n in lengths], dtype=float)


def evaluate():
    preds, tgts, loss = [], [], 0.0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for n, (idx, h) in va_h.items():
            lg = top_logits(h).float()
            loss += torch.nn.functional.cross_entropy(lg, torch.as_tensor(va_t[idx]), reduction="sum").item()
            preds.append(lg[:, torch.as_tensor(ids)].argmax(-1).numpy())
            tgts.append(va_ans[idx])
    pred, ans = np.concatenate(preds), np.concatenate(tgts)
    err = pred - ans
    return {"val_loss": round(loss / len(ans), 3), "val_acc": float((err == 0).mean()), "within10": float((abs(err) <= 10).mean()),
            "parity": float((pred % 2 == ans % 2).mean()), "last_digit": float((pred % 10 == ans % 10).mean())}


t0 = time.time()
losses = []
for step in range(1, steps + 1):
    n = lengths[rng.choice(len(lengths), p=sizes / sizes.sum())]
    idx, h = tr_h[n]
    pick = rng.choice(len(idx), 32, replace=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lg = top_logits(h[pick])
    loss = torch.nn.functional.cross_entropy(lg.float(), torch.as_tensor(tr_t[idx[pick]]))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trained, 1.0)
    opt.step()
    sched.step()
    losses.append(loss.item())
    if step % cfg.get("eval_every", 100) == 0 or step == steps:
        print(json.dumps({**cfg, "step": step, "train_loss_last50": round(float(np.mean(losses[-50:])), 3), **evaluate(),
                          "s_per_step": round((time.time() - t0) / step, 3)}), flush=True)
