"""Train the project's demo models: GPT-2-style, from scratch or with frozen number embeddings.

A recipe (recipes/NAME.json, committed; `core.training.recipe`) says everything: architecture,
initialisation, which number-token embedding rows are frozen and to what, the optional pre-training
corpus, the optimiser, epochs, seed, and where the model goes. `python -m core train --recipe NAME`
trains it, top to bottom in `train`:

* the tokenizer (one token per number, `core.models.vocab`) and the model (`build_model`);
* optional pre-training on the number corpus (`core.training.pretraining`), kept in
  pretrained.safetensors so an interrupted run never redoes it;
* frozen number rows (`core.training.number_rows`): they get no gradient and are restored after
  every optimiser step. With tied embeddings (GPT-2's default) the output rows are the same rows and
  are frozen too; `tied: false` trains a separate output matrix;
* an optional band for each module's output (`module_bands`, `core.training.module_bands`): the output maps are
  projected after every optimiser step so that W_U reads nothing of the other band off them (the controls);
* loss on the answer token only (`core.training.answers`), AdamW with warm-up and linear decay
  (`core.training.optimiser`), bfloat16 autocast (about 5x faster matrix products on this CPU),
  float32 master weights, on the CPU or with `--device cuda` on a GPU (not bit for bit the CPU's numbers);
* per-epoch train/val/test accuracy and loss in `training_log.parquet`;
* a checkpoint after every epoch (`core.training.checkpoint`), so an interrupted run resumes where
  it stopped; at the end, the weights, tokenizer, recipe and log in the output folder (`publish`).

Fine-tuning a pre-trained model with number tokens is `core.training.finetune`.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

from core.errors import CoreError
from core.models.source import resolve_source
from core.models.vocab import number_tokenizer
from core.tasks import build_examples, number_space, select_split
from core.training.answers import AdditionBatches, answer_loss, evaluate_split, training_device
from core.training.checkpoint import CHECKPOINT, load_checkpoint, restore_optimizer, save_checkpoint, unique_tensors
from core.training.module_bands import band_constraint, pair_noise
from core.training.number_rows import FrozenRows, frozen_values, number_token_ids
from core.training.optimiser import lr_schedule, step_bar, whole_model_optimizer
from core.training.pretraining import PRETRAIN_WORDS, pretrain
from core.training.recipe import Recipe

WEIGHTS_FILE = "model.safetensors"  # the weights in a checkpoint of a model trained here
PRETRAINED_FILE = "pretrained.safetensors"  # the weights after pre-training, kept for a restart
BEST_FILE = "best.safetensors"  # with `select: "val"`, the weights of the best validation epoch so far


@dataclass
class TrainResult:
    out: Path
    log: pd.DataFrame
    seconds: float
    test_accuracy: float


def build_model(recipe: Recipe, tokenizer):
    """A GPT-2-style model for the recipe (random init, or the folder in `init_from`)."""
    if recipe.init_from:
        resolve_source(recipe.init_from)
        return AutoModelForCausalLM.from_pretrained(recipe.init_from, use_safetensors=True)
    if recipe.arch != "gpt2":
        raise CoreError(f"recipe {recipe.name}: only arch 'gpt2' can be trained from scratch here")
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=recipe.max_positions,
        n_embd=recipe.width,
        n_layer=recipe.n_layers,
        n_head=recipe.heads,
        n_inner=int(recipe.mlp_ratio * recipe.width),
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=recipe.tied,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(recipe.seed)
    return GPT2LMHeadModel(config)


def train(recipe: Recipe, out: str | Path | None = None, restart: bool = False, progress=None,
          log=print) -> TrainResult:
    """Train a recipe; returns the output folder, the training log and the final test accuracy."""
    if recipe.threads:
        torch.set_num_threads(recipe.threads)
    out = Path(out or recipe.out)
    out.mkdir(parents=True, exist_ok=True)

    # the tokenizer, the model and the data
    p = number_space(recipe.task, recipe.max_operand)
    tokenizer = number_tokenizer(p - 1, extra_words=PRETRAIN_WORDS)
    number_ids = number_token_ids(tokenizer, p)
    model = build_model(recipe, tokenizer).to(training_device(recipe.device))
    examples = build_examples(recipe.task, recipe.max_operand, recipe.dataset_seed)
    data = {s: AdditionBatches(tokenizer, select_split(examples, s), number_ids) for s in ("train", "val", "test")}
    train_subset = np.random.default_rng(recipe.seed).permutation(len(data["train"]))[: recipe.eval_train_subset]

    ckpt = out / CHECKPOINT
    resume = ckpt.exists() and not restart
    if recipe.pretrain and not resume:
        _pretrain_once(model, tokenizer, recipe, out / PRETRAINED_FILE, log, progress)

    frozen = None
    freeze = recipe.freeze_config()
    if freeze is not None:
        values = frozen_values(freeze, tokenizer, p, model.config.n_embd, recipe.seed, log)
        frozen = FrozenRows(model, number_ids, values)
    # module_bands: each module's output map held to its band (core.training.module_bands), from the frozen W_U
    constraint = band_constraint(recipe, model, number_ids)
    noise = pair_noise(recipe, model, number_ids)  # cancelling pairs: the layers between learn to ignore them

    # the optimiser, and where a resumed run stopped
    steps_per_epoch = math.ceil(len(data["train"]) / recipe.batch_size)
    opt = whole_model_optimizer(model, recipe.lr, recipe.weight_decay)
    sched = lr_schedule(opt, recipe.epochs * steps_per_epoch, recipe.warmup_steps, recipe.min_lr_ratio)
    log_rows: list[dict] = []
    start_epoch, elapsed, best = 0, 0.0, None
    # "val" selection never looks at the test split while training: it is scored once, on the chosen weights
    epoch_splits = ("train", "val") if recipe.select == "val" else ("train", "val", "test")
    if resume:
        progress_saved = resume_from(ckpt, model, opt, sched)
        start_epoch, log_rows, elapsed = progress_saved["epoch"], progress_saved["log"], progress_saved["elapsed_s"]
        best = progress_saved.get("best")
        if frozen is not None:
            frozen.restore()
        log(f"resuming {recipe.name} (seed {recipe.seed}) after epoch {start_epoch}")

    # the epochs
    model.train()
    bar = step_bar((recipe.epochs - start_epoch) * steps_per_epoch, f"train {recipe.name}", progress)
    for epoch in range(start_epoch, recipe.epochs):
        t0 = time.time()
        order = np.random.default_rng((recipe.seed, epoch)).permutation(len(data["train"]))
        if noise is not None:
            noise.start_epoch(epoch)
        for _, ids, mask, pos, target in data["train"].batches(recipe.batch_size, order):
            loss = answer_loss(model, ids, mask, pos, target, recipe.precision)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if frozen is not None:
                frozen.restore()
            if constraint is not None:
                constraint.apply()
            bar.update(1)
        elapsed += time.time() - t0
        row = {"seed": recipe.seed, "width": recipe.width, "epoch": epoch + 1, "seconds": round(elapsed, 1)}
        for split in epoch_splits:
            subset = train_subset if split == "train" else None
            acc, loss_v = evaluate_split(model, data[split], number_ids, recipe.batch_size, recipe.precision, subset)
            log_rows.append({**row, "split": split, "accuracy": acc, "loss": loss_v})
        last = {r["split"]: r for r in log_rows[-len(epoch_splits):]}
        log(
            f"{recipe.name} seed {recipe.seed} epoch {epoch + 1}/{recipe.epochs}: "
            + " ".join(f"{s} {last[s]['accuracy']:.2%}" for s in epoch_splits)
            + f" (val loss {last['val']['loss']:.4f}, {elapsed:.0f}s)"
        )
        if recipe.select == "val" and is_better(last["val"], best):
            best = {"epoch": epoch + 1, "accuracy": last["val"]["accuracy"], "loss": last["val"]["loss"]}
            save_weights(model, out / BEST_FILE)
        save_checkpoint(ckpt, WEIGHTS_FILE, model.state_dict(), opt, sched,
                        {"epoch": epoch + 1, "log": log_rows, "elapsed_s": elapsed, "best": best})
    bar.close()
    if noise is not None:
        noise.close()

    if recipe.select == "val":
        # the chosen epoch's weights, and the one scoring of the test split
        model.load_state_dict(load_file(str(out / BEST_FILE)), strict=False)
        if frozen is not None:
            frozen.restore()
        acc, loss_v = evaluate_split(model, data["test"], number_ids, recipe.batch_size, recipe.precision, None)
        chosen = next(r for r in log_rows if r["epoch"] == best["epoch"] and r["split"] == "val")
        log_rows.append({**{k: chosen[k] for k in ("seed", "width", "epoch", "seconds")},
                         "split": "test", "accuracy": acc, "loss": loss_v})
        log(f"{recipe.name}: epoch {best['epoch']} chosen on validation ({best['accuracy']:.2%}); "
            f"test, scored once: {acc:.2%}")
    frame = pd.DataFrame(log_rows)
    frame.insert(0, "recipe", recipe.name)
    publish(out, model, tokenizer, recipe, frame, elapsed, best)
    (out / BEST_FILE).unlink(missing_ok=True)
    test_acc = float(frame[frame["split"] == "test"]["accuracy"].iloc[-1])
    return TrainResult(out, frame, elapsed, test_acc)


def is_better(val_row: dict, best: dict | None) -> bool:
    """Selection on validation: a higher accuracy wins; at equal accuracy, a lower loss."""
    if best is None:
        return True
    return (val_row["accuracy"], -val_row["loss"]) > (best["accuracy"], -best["loss"])


def save_weights(model, path: Path) -> None:
    """The model's weights (each tied tensor once) in `path`, written whole or not at all."""
    tensors = {k: v.detach().clone().contiguous() for k, v in unique_tensors(model.state_dict()).items()}
    save_file(tensors, str(path.with_suffix(".tmp")))
    path.with_suffix(".tmp").rename(path)


def _pretrain_once(model, tokenizer, recipe: Recipe, done: Path, log, progress) -> None:
    """Pre-train `model` (`core.training.pretraining`), or load the weights a run before kept in `done`."""
    if done.exists():
        model.load_state_dict(load_file(str(done)), strict=False)
        log(f"{recipe.name}: using the pre-trained weights in {done}")
        return
    pretrain(model, tokenizer, recipe, log, progress)
    save_weights(model, done)


def resume_from(ckpt: Path, model, opt, sched) -> dict:
    """Load the checkpoint's weights into `model` and its state into `opt` and `sched`; its progress."""
    weights, progress = load_checkpoint(ckpt, WEIGHTS_FILE)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied_ok = all("lm_head" in k for k in missing)
    if unexpected or not tied_ok:
        raise CoreError(f"checkpoint {ckpt} does not match the recipe's model; use --restart")
    restore_optimizer(ckpt, progress, opt, sched)
    return progress


def publish(out: Path, model, tokenizer, recipe: Recipe, frame: pd.DataFrame, elapsed: float,
            best: dict | None = None):
    """Weights (safetensors, recipe's dtype, shards under 5 MB), tokenizer, recipe, log, summary. `best`: the
    epoch chosen on validation (recipe `select: "val"`), whose accuracies the summary gives."""
    dtype = getattr(torch, recipe.save_dtype)
    for f in out.glob("model*.safetensors"):
        f.unlink()
    (out / "model.safetensors.index.json").unlink(missing_ok=True)
    copy = model.to(dtype)
    copy.save_pretrained(out, safe_serialization=True, max_shard_size="4MB")
    model.to(torch.float32)
    tokenizer.save_pretrained(out)
    (out / "recipe.json").write_text(json.dumps(recipe.as_dict(), indent=1))
    frame.to_parquet(out / "training_log.parquet", index=False)
    shipped_epoch = best["epoch"] if best else frame["epoch"].max()
    final = frame[frame["epoch"] == shipped_epoch].set_index("split")["accuracy"].to_dict()
    summary = {"recipe": recipe.name, "seed": recipe.seed, "train_seconds": round(elapsed, 1), "final_accuracy": final}
    if best:
        summary.update(selected_on="val", selected_epoch=int(best["epoch"]))
    (out / "train_summary.json").write_text(json.dumps(summary, indent=1))


def seed_logs(main_out: Path) -> pd.DataFrame | None:
    """The training log of a recipe's shipped model together with those of its extra seeds (seeds/*)."""
    folders = [main_out] + sorted(p for p in main_out.glob("seeds/*") if p.is_dir())
    frames = []
    for folder in folders:
        f = folder / "training_log.parquet"
        if not f.exists():
            continue
        frame = pd.read_parquet(f)
        if "width" not in frame.columns:  # logs written before the width column existed
            recipe = json.loads((folder / "recipe.json").read_text()) if (folder / "recipe.json").exists() else {}
            frame.insert(2, "width", int(recipe.get("width", 0)))
        frames.append(frame)
    if not frames:
        return None
    merged = pd.concat(frames, ignore_index=True).drop_duplicates(["width", "seed", "epoch", "split"], keep="first")
    return merged.sort_values(["width", "seed", "epoch", "split"]).reset_index(drop=True)


def train_from_recipe(
    name: str, out=None, seed=None, epochs=None, restart=False, threads=None, width=None, progress=None, log=print,
    device=None, run=None, precision=None,
) -> TrainResult:
    """CLI entry. The recipe as written trains the shipped model. Another seed or width (a seed
    study) trains into OUT/seeds/[wWIDTH-]sSEED: its weights are not shipped, its log is, and
    precompute merges it into the run's training log. `run` trains one recipe into one folder:
    `train` (the default) for a model trained here from its recipe; the CLI passes
    `core.training.finetune.finetune` for a recipe that fine-tunes a pre-trained model (`number_tokens`),
    so that this module, which fine-tuning builds on, never imports it. `precision` replaces the
    recipe's (float32 on a CPU without native bfloat16, where bfloat16 autocast is several times slower); the model
    it trains is another than the shipped one, so it goes beside it (OUT-float32) unless `out` says where."""
    shipped = Recipe.load(name)
    recipe = Recipe.load(name)
    if epochs is not None:
        recipe.epochs = epochs
    if threads is not None:
        recipe.threads = threads
    if precision is not None:
        recipe.precision = precision
    if device is not None:
        recipe.device = device
    main_out = Path(out or recipe.out)
    if width is not None and width != shipped.width:
        if recipe.number_tokens is not None:
            raise CoreError(f"recipe {name} fine-tunes a pre-trained model of fixed width: --width does not apply")
        recipe.width = width
        recipe.heads = max(1, min(recipe.heads, width // 32))
    if seed is not None:
        recipe.seed = seed
    recipe.check()
    run = run or train
    if recipe.number_tokens is not None and run is train:
        raise CoreError(f"recipe {name} fine-tunes a pre-trained model: run it with "
                        f"`python -m core train --recipe {name}`")
    if recipe.precision != shipped.precision and out is None:  # another model than the shipped one: beside it
        main_out = main_out.with_name(f"{main_out.name}-{recipe.precision}")
        log(f"--precision {recipe.precision} (the recipe trains in {shipped.precision}): writing to {main_out}")
    if (recipe.width, recipe.seed) == (shipped.width, shipped.seed):
        return run(recipe, main_out, restart, progress, log)
    sub = (f"w{recipe.width}-" if recipe.width != shipped.width else "") + f"s{recipe.seed}"
    wide = f", {recipe.width} wide" if recipe.width != shipped.width else ""
    recipe.label = f"{recipe.label}{wide}, seed {recipe.seed}"
    return run(recipe, main_out / "seeds" / sub, restart, progress, log)
