"""Fine-tune a pre-trained model on single-token addition: the paper's set-up on a real LLM.

A model whose tokenizer splits numbers into digits (SmolLM2) gets one new token per number
0..p-1, written with its leading space (" 108", as GPT-2 writes it), so the operands and the answer
are single tokens. Their rows are initialised from the model's own representation of each number
(`core.analysis.numbers`: the vector at the last digit of "The number n" after block `layer`),
centred over the numbers if the recipe says `centre` (the part common to every number says nothing
about n), and scaled to the mean norm of the model's existing embedding rows; with tied embeddings
(SmolLM2's) the same rows are the answer's output rows. Then the model is fine-tuned on the paper's
training split with the answer-token loss (`core.training.answers.answer_loss`):

* the new rows are trained; every original row stays exactly as it was;
* every linear map inside the blocks gets a LoRA update W + (alpha / r) B A (B starts at zero, so
  training starts from the pre-trained model; `core.training.lora`); the base weights are frozen;
* or, with `lora.train: "full"`, those maps are trained whole and their change ships as rank-r factors
  (from an earlier stage's delta, `lora.init_delta`, they start as that stage left them, and the change
  that ships is still measured from the base model, so the new delta rebuilds from the base alone);
* with `frozen_blocks`, the lower blocks keep the base weights; while the rows stay frozen too their output
  is computed once (`core.training.frozen_blocks`), with trained rows every step runs the whole stack;
* bfloat16 autocast on the CPU, float32 trainable weights, seeded, a checkpoint every
  `checkpoint_steps` steps (`core.training.checkpoint`), so an interrupted run resumes mid-epoch;
* per-epoch train and validation accuracy and loss in `training_log.parquet`; the test split is never
  read while training (validation chooses): it is scored once, on the model rebuilt from the delta.

The recipe's `number_tokens` and `lora` parts, with their defaults, are `core.training.recipe`'s
`NumberTokens` and `LoRA`. What is kept is a **delta** (`delta.safetensors`, a few MB: the new rows
in float16 and the LoRA factors in float16, or in 8 bits where the recipe's `lora.factors` asks;
`core.training.delta`). `rebuild` merges it into the base model and
writes an ordinary model folder, bit for bit the same on any machine; the digest of the rebuilt
weights is stored in the delta and checked. The fine-tuned model that is evaluated and analysed is
always the rebuilt one.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from transformers import AutoTokenizer

from core.analysis.numbers import number_representations
from core.errors import CoreError
from core.models.importer import ensure_base_model
from core.models.loading import load_model
from core.models.source import resolve_source
from core.tasks import build_examples, number_space, select_split
from core.training.answers import AdditionBatches, answer_loss, evaluate_split, training_device
from core.training.checkpoint import CHECKPOINT, load_checkpoint, restore_optimizer, save_checkpoint
from core.training.delta import (
    DELTA_FILE,
    FACTOR_FORMATS,
    NUMBER_TOKEN,
    add_number_tokens,
    decode_factors,
    library_versions,
    load_base,
    merged_model,
    rebuild,
    require_rows_follow,
    save_delta,
    state_digest,
    unique_state,
)
from core.training.frozen_blocks import FrozenBottom, length_batches
from core.training.lora import FineTuneModel, delta_tensors, load_start_delta
from core.training.optimiser import adamw, lr_schedule, step_bar
from core.training.train import TrainResult

TRAINABLE_FILE = "trainable.safetensors"  # the trained tensors in a fine-tuning's checkpoint
#: what a checkpoint must share with the recipe to be resumed (not threads, labels or the device)
RESUME_FIELDS = ("init_from", "task", "max_operand", "dataset_seed", "number_tokens", "lora", "epochs", "batch_size",
                 "lr", "weight_decay", "warmup_steps", "min_lr_ratio", "precision", "seed")


# ----------------------------------------------------------------------------- the new rows


def initial_number_rows(base, n_numbers: int, layer: int, context: str, base_rows: np.ndarray, centre: bool = False,
                        log=print) -> np.ndarray:
    """The new rows: `base`'s representation of n after block `layer` (layer 0: the embedding of
    the last digit), scaled so the mean row norm equals that of `base_rows` (the model's own rows)."""
    if not 0 <= layer <= base.n_layers:
        raise CoreError(f"layer {layer} is outside 0..{base.n_layers} for this model")
    reps = number_representations(base, n_numbers, context, progress=False)
    log(f"new number rows: layer {layer}, {reps.describe()}")
    return scaled_rows(reps.vectors[layer], base_rows, centre)


def scaled_rows(vectors: np.ndarray, base_rows: np.ndarray, centre: bool) -> np.ndarray:
    """`vectors` (centred over the numbers first if `centre`), scaled so their mean norm is the
    mean norm of `base_rows`."""
    rows = vectors.astype(np.float64)
    if centre:
        rows = rows - rows.mean(0, keepdims=True)
    rows *= float(np.linalg.norm(base_rows, axis=1).mean()) / float(np.linalg.norm(rows, axis=1).mean())
    return rows.astype(np.float32)


# ----------------------------------------------------------------------------- epochs, devices, resuming


def answer_balanced_draw(answers: np.ndarray, power: float, rng) -> np.ndarray:
    """An epoch of training examples drawn with replacement, as many as there are, each with
    probability proportional to (how many training examples share its answer) ** -power: with
    power 1 every answer is drawn equally often, with 0.5 a rare answer's questions come up more
    often than their share without taking over (answers near 0 and 520 have few questions)."""
    _, which, counts = np.unique(answers, return_inverse=True, return_counts=True)
    weight = counts[which].astype(np.float64) ** -float(power)
    return rng.choice(len(answers), size=len(answers), replace=True, p=weight / weight.sum())


def device_text(device) -> str:
    """Where a fine-tuning ran, as its summary and pages say it: "a GPU (NAME)" or "this N-core CPU, T threads"."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"a GPU ({torch.cuda.get_device_name(device)})"
    return f"this {os.cpu_count()}-core CPU, {torch.get_num_threads()} threads"


def shipped_by_git(path: Path) -> bool | None:
    """Whether git would ship `path` (True: not ignored, so a commit takes it; False: ignored, as the
    earlier stages' deltas are); None outside a git work tree."""
    try:
        where = path.resolve()
        done = subprocess.run(["git", "check-ignore", "-q", str(where)], cwd=where.parent, capture_output=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {0: False, 1: True}.get(done.returncode)


def _resume_key(recipe) -> dict:
    """What a checkpoint must share with the recipe to be resumed (`RESUME_FIELDS`), as the recipe writes it."""
    return {k: getattr(recipe, k) for k in RESUME_FIELDS}


def _require_same_recipe(saved: dict | None, recipe, ckpt: Path) -> None:
    if saved is None:  # checkpoints written before this check existed
        return
    now = json.loads(json.dumps(_resume_key(recipe)))
    changed = sorted(k for k in now if saved.get(k) != now[k])
    if changed:
        raise CoreError(f"the checkpoint in {ckpt} was made with other settings ({', '.join(changed)}): "
                        "use --restart to start again")


def resume_from(ckpt: Path, tuned: FineTuneModel, opt, sched) -> dict:
    """Load the checkpoint's trained tensors into `tuned` and its state into `opt` and `sched`; its progress."""
    saved, progress = load_checkpoint(ckpt, TRAINABLE_FILE)
    params = tuned.trainable()
    if set(saved) != set(params) or any(saved[k].shape != params[k].shape for k in params):
        raise CoreError(f"checkpoint {ckpt} does not match the recipe's model; use --restart")
    with torch.no_grad():
        for k, v in params.items():
            v.copy_(saved[k])
    restore_optimizer(ckpt, progress, opt, sched)
    return progress


# ----------------------------------------------------------------------------- training


def finetune(recipe, out: str | Path | None = None, restart: bool = False, progress=None, log=print) -> TrainResult:
    """Train a number-token fine-tuning recipe (see the module doc); returns a `core.training.train.TrainResult`."""
    spec = recipe.number_token_config()
    lora = recipe.lora_config()
    if spec is None or not recipe.init_from:
        raise CoreError(f"recipe {recipe.name}: number-token fine-tuning needs number_tokens and init_from "
                        "(the base model's folder or hub id)")
    if recipe.threads:
        torch.set_num_threads(recipe.threads)
    # before minutes of loading: a machine without the GPU asked for says so at once
    device = training_device(recipe.device)
    base_folder = recipe.init_from
    ensure_base_model(base_folder, log=log)  # a fresh clone: the packaged base is imported first
    resolve_source(base_folder)
    out = Path(out or recipe.out)
    out.mkdir(parents=True, exist_ok=True)
    p = number_space(recipe.task, recipe.max_operand)
    frozen = spec.frozen_blocks
    # the frozen blocks' output is kept only while the rows that feed them stay frozen too; with trained rows
    # every step runs the whole stack (the lower blocks' maps still frozen, their gradient reaching the rows)
    keep_bottom = bool(frozen) and spec.rows_lr_ratio == 0

    # the base model, its tokenizer with the number tokens, and the model to train
    ckpt = out / CHECKPOINT
    resume = ckpt.exists() and not restart
    base = load_base(base_folder)
    base_digest = state_digest(unique_state(base))
    tokenizer = AutoTokenizer.from_pretrained(base_folder)
    base_rows = base.get_input_embeddings().weight.detach().numpy()
    start = lora.init_delta  # an earlier stage's delta: its rows and its factors (cut to rank) are the start
    # read on a resume too when lower blocks are frozen: they keep its factors, which the checkpoint does not hold
    # (full training merges every factor of the start at its own scale: the recipe's rank does not cut it)
    start_tensors = (load_start_delta(start, base_digest, 0 if lora.full else lora.rank)
                     if start and (frozen or not resume) else None)
    if start_tensors is not None and frozen and not lora.full and start_tensors.factors != lora.factors:
        raise CoreError(  # encoded again at another precision, the frozen blocks' factors would change
            f"recipe {recipe.name}: its frozen lower blocks keep {start}'s factors, kept in {start_tensors.factors}; "
            f"set lora.factors to {start_tensors.factors!r} too"
        )
    if start_tensors is not None:
        rows = start_tensors.tensors["number_rows"].float().numpy()  # on a resume, replaced by the checkpoint's
        if not resume:
            how = "merged into the maps" if lora.full else f"cut to rank {lora.rank}"
            log(f"starting from {start}: its number rows, and its factors {how}")
    elif resume:
        rows = np.zeros((p, base.config.hidden_size), dtype=np.float32)  # replaced by the checkpoint's
    else:
        rows = initial_number_rows(load_model(base_folder), p, spec.layer, spec.context, base_rows, centre=spec.centre,
                                   log=log)
    number_ids = add_number_tokens(tokenizer, p)
    require_rows_follow(base, number_ids)
    tuned = FineTuneModel(base, rows, lora.rank, lora.alpha, lora.targets, recipe.seed, first_block=frozen,
                          full=lora.full, keep_lower=start_tensors is not None and not lora.full)
    if start_tensors is not None and lora.full:
        tuned.load_change(start_tensors)  # the maps start as the earlier stage left them
    elif start_tensors is not None:
        tuned.load_factors(start_tensors)
    model = tuned.model.to(device)

    # the data, and each epoch's batches
    examples = build_examples(recipe.task, recipe.max_operand, recipe.dataset_seed)
    data = {s: AdditionBatches(tokenizer, select_split(examples, s), number_ids) for s in ("train", "val", "test")}
    train_subset = np.random.default_rng(recipe.seed).permutation(len(data["train"]))[: recipe.eval_train_subset]
    train_lengths = np.array([len(e) for e in data["train"].encoded])

    def epoch_batches(epoch):
        rng = np.random.default_rng((recipe.seed, epoch))
        drawn = None
        if spec.balance_answers:
            drawn = answer_balanced_draw(np.asarray(data["train"].targets), spec.balance_answers, rng)
        if keep_bottom:
            return length_batches(train_lengths, recipe.batch_size, rng, drawn)
        order = rng.permutation(len(data["train"])) if drawn is None else drawn
        return [order[s : s + recipe.batch_size] for s in range(0, len(order), recipe.batch_size)]

    # with balance_answers and frozen_blocks together an epoch's batch count varies a little (batches by length)
    batches_per_epoch = [len(epoch_batches(e)) for e in range(recipe.epochs)]

    # the optimiser, and where a resumed run stopped
    params = tuned.trainable()
    groups = [
        {"params": [params["number_rows"]], "weight_decay": 0.0, "lr": recipe.lr * spec.rows_lr_ratio},
        {"params": [v for k, v in params.items() if k != "number_rows"], "weight_decay": recipe.weight_decay},
    ]
    opt = adamw(groups, recipe.lr)
    sched = lr_schedule(opt, sum(batches_per_epoch), recipe.warmup_steps, recipe.min_lr_ratio)
    stop_at = spec.stop_at_val_accuracy
    state = {"epoch": 0, "step": 0, "log": [], "elapsed_s": 0.0, "recipe": _resume_key(recipe),
             "start_sha256": start_tensors.digest if start_tensors is not None else None}
    if resume:
        state = resume_from(ckpt, tuned, opt, sched)
        _require_same_recipe(state.get("recipe"), recipe, ckpt)
        if start_tensors is not None and state.get("start_sha256") and state["start_sha256"] != start_tensors.digest:
            raise CoreError(f"{start} is not the delta this run started from (it was retrained since): the frozen "
                            "lower blocks would mix two models; use --restart")
        log(f"resuming {recipe.name} (seed {recipe.seed}) at epoch {state['epoch'] + 1}, "
            f"step {state['step']}/{batches_per_epoch[state['epoch'] % recipe.epochs]}")
    bottom = None  # with frozen_blocks: the frozen blocks' kept output, made once the rows are final (after a resume)
    if keep_bottom:
        t_bottom = time.time()
        bottom = FrozenBottom(model, data["train"].encoded, frozen, recipe.precision)
        log(f"blocks 0..{frozen - 1} frozen: their output for {len(data['train'])} training prompts kept "
            f"({time.time() - t_bottom:.0f}s)")

    # the epochs
    model.train()
    bar = step_bar(sum(batches_per_epoch[state["epoch"]:]) - state["step"], f"fine-tune {recipe.name}", progress)
    t0 = time.time()
    # a run that already met its stop rule (then stopped or was interrupted) trains no further
    stopped = stop_at is not None and any(
        r["split"] == "val" and r["epoch"] == state["epoch"] and r["accuracy"] >= stop_at for r in state["log"]
    )
    for epoch in range(state["epoch"], state["epoch"] if stopped else recipe.epochs):
        skip = state["step"] if epoch == state["epoch"] else 0
        for step, idx in enumerate(epoch_batches(epoch)[skip:], start=skip + 1):
            if bottom is not None:
                loss = bottom.loss(model, idx, torch.as_tensor(data["train"].targets[idx]), recipe.precision)
            else:
                _, ids, mask, pos, target = next(data["train"].batches(len(idx), idx))
                loss = answer_loss(model, ids, mask, pos, target, recipe.precision)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
            opt.step()
            sched.step()
            bar.update(1)
            if step % spec.checkpoint_steps == 0 and step < batches_per_epoch[epoch]:
                elapsed = state["elapsed_s"] + time.time() - t0
                save_checkpoint(ckpt, TRAINABLE_FILE, tuned.trainable(), opt, sched,
                                {**state, "epoch": epoch, "step": step, "elapsed_s": elapsed})
                log(f"{recipe.name}: epoch {epoch + 1} step {step}/{batches_per_epoch[epoch]}, loss {loss.item():.4f} "
                    f"({elapsed:.0f}s)")
        elapsed = state["elapsed_s"] + time.time() - t0
        row = {"seed": recipe.seed, "width": model.config.hidden_size, "epoch": epoch + 1, "seconds": round(elapsed, 1)}
        for split in ("train", "val"):  # never the test split: it is scored once, on the rebuilt model
            subset = train_subset if split == "train" else None
            acc, loss_v = evaluate_split(model, data[split], number_ids, recipe.batch_size, recipe.precision, subset)
            state["log"].append({**row, "split": split, "accuracy": acc, "loss": loss_v})
        last = {r["split"]: r for r in state["log"][-2:]}
        log(
            f"{recipe.name} seed {recipe.seed} epoch {epoch + 1}/{recipe.epochs}: "
            f"train {last['train']['accuracy']:.2%} val {last['val']['accuracy']:.2%} "
            f"(val loss {last['val']['loss']:.4f}, {elapsed:.0f}s)"
        )
        state = {**state, "epoch": epoch + 1, "step": 0, "elapsed_s": elapsed}
        t0 = time.time()
        save_checkpoint(ckpt, TRAINABLE_FILE, tuned.trainable(), opt, sched, state)
        if stop_at is not None and last["val"]["accuracy"] >= stop_at:
            log(f"{recipe.name}: validation accuracy {last['val']['accuracy']:.2%} reached the recipe's "
                f"stop_at_val_accuracy {stop_at:.2%}: stopping after epoch {epoch + 1} of {recipe.epochs}")
            break
    bar.close()

    frame = pd.DataFrame(state["log"])
    frame.insert(0, "recipe", recipe.name)
    meta = {
        "format": FACTOR_FORMATS[lora.factors],
        **({"factors": lora.factors} if lora.factors != "float16" else {}),  # a float16 delta's header as it was
        "base": base_folder,
        "p": p,
        "rank": lora.rank,
        "alpha": lora.alpha,
        "trained": "full, compressed to rank r by SVD" if lora.full else "LoRA",
        "layer": spec.layer,
        "context": spec.context,
        "frozen_blocks": frozen,
        "centre": spec.centre,
        "recipe": recipe.name,
        "label": recipe.label,
        "seed": recipe.seed,
        "base_sha256": base_digest,
        "versions": library_versions(),
    }
    test_acc = publish_delta(out, recipe, tuned, meta, data, number_ids, frame, state["elapsed_s"], log)
    return TrainResult(out, frame, state["elapsed_s"], test_acc)


def publish_delta(out: Path, recipe, tuned: FineTuneModel, meta: dict, data: dict, number_ids,
                  frame: pd.DataFrame, seconds: float, log=print) -> float:
    """Write the delta, the recipe, the log and the summary into `out`, then rebuild the model from the
    delta there; the rebuilt model's test accuracy. The delta is float16 or 8-bit: the model that counts is the
    one rebuilt from it, so its digest is recorded and it is scored as precompute scores it (its own
    tokenizer, float32): on the validation split, which says what the cut to rank r cost (the log's
    last validation figure is the uncut model's), and once on the test split, never read before."""
    base_folder, p = meta["base"], meta["p"]
    tensors = delta_tensors(tuned, log=log, factors=meta.get("factors", "float16"))
    rebuilt, rebuilt_tok = merged_model(base_folder, decode_factors(tensors), meta)
    meta["rebuilt_sha256"] = state_digest(unique_state(rebuilt))
    save_delta(out / DELTA_FILE, tensors, meta)
    examples = build_examples(recipe.task, recipe.max_operand, recipe.dataset_seed)
    rebuilt_ids = np.asarray(rebuilt_tok.convert_tokens_to_ids([NUMBER_TOKEN.format(n=n) for n in range(p)]))
    scores = {}
    for split in ("val", "test"):
        rebuilt_data = AdditionBatches(rebuilt_tok, select_split(examples, split), rebuilt_ids)
        if rebuilt_data.encoded != data[split].encoded:
            raise CoreError(f"the rebuilt model's tokenizer reads the {split} prompts differently from the one "
                            "trained with")
        scores[split], _ = evaluate_split(rebuilt, rebuilt_data, number_ids, recipe.batch_size, "float32")
    test_acc = scores["test"]
    (out / "recipe.json").write_text(json.dumps(recipe.as_dict(), indent=1))
    frame.to_parquet(out / "training_log.parquet", index=False)
    final = frame[frame["epoch"] == frame["epoch"].max()].set_index("split")["accuracy"].to_dict()
    summary = {
        "recipe": recipe.name,
        "seed": recipe.seed,
        "epochs_run": int(frame["epoch"].max()),
        "train_step_seconds": round(seconds, 1),  # the optimisation steps, evaluations not counted
        "final_accuracy": final,
        "rebuilt_val_accuracy_float32": scores["val"],
        "rebuilt_test_accuracy_float32": test_acc,
        "delta_bytes": (out / DELTA_FILE).stat().st_size,
        "device": device_text(next(tuned.model.parameters()).device),
        "delta_shipped": shipped_by_git(out / DELTA_FILE),
    }
    (out / "train_summary.json").write_text(json.dumps(summary, indent=1))
    log(f"{recipe.name}: delta {summary['delta_bytes'] / 1e6:.1f} MB; the model rebuilt from it scores "
        f"{scores['val']:.2%} on the validation split and {test_acc:.2%} on the test split (scored once)")
    rebuild(out, base_folder, log=log)
    return test_acc
