"""Fine-tune a pre-trained model on single-token addition: the paper's set-up on a real LLM.

A model whose tokenizer splits numbers into digits (SmolLM2) gets one new token per number
0..p-1, written with its leading space (" 108", as GPT-2 writes it), so the operands and the answer
are single tokens. Their rows are initialised from the model's own representation of each number
(`core.analysis.numbers`: the vector at the last digit of "The number n" after block `layer`), centred over
the numbers if the recipe says `centre` (the part common to every number says nothing about n),
and scaled to the mean norm of the model's existing embedding rows; with tied embeddings
(SmolLM2's) the same rows are the answer's output rows. Then the model is fine-tuned on the paper's training split with
the answer-token loss (`core.training.train.answer_loss`):

* the new rows are trained; every original row stays exactly as it was;
* every linear map inside the blocks gets a LoRA update W + (alpha / r) B A (B starts at zero, so
  training starts from the pre-trained model); the base weights are frozen;
* bfloat16 autocast on the CPU, float32 trainable weights, seeded, a checkpoint every
  `checkpoint_steps` steps (safetensors; nothing pickled), so an interrupted run resumes mid-epoch;
* per-epoch train/val/test accuracy and loss in `training_log.parquet`, as for the demo recipes.

What is kept is a **delta** (`delta.safetensors`, a few MB: the new rows and the LoRA factors in
float16). `rebuild` merges it into the base model and writes an ordinary model folder. The merge is
W + (alpha / r) sum_k outer(B[:, k], A[k]), summed in float64 in a fixed order with elementwise
numpy operations (no BLAS, whose rounding varies with the processor), then rounded once to the
base's float32, so it gives the same bits on any machine; the digest of the rebuilt weights is
stored in the delta and checked. The fine-tuned model that is evaluated and analysed is always the
rebuilt one.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from core.training.delta import (
    DELTA_FILE,
    DELTA_FORMAT,
    NUMBER_TOKEN,
    add_number_tokens,
    library_versions,
    load_base,
    merged_model,
    read_delta,
    rebuild,
    require_rows_follow,
    save_delta,
    state_digest,
    unique_state,
)
from core.errors import CoreError

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


# ----------------------------------------------------------------------------- tokens and rows


def initial_number_rows(base, n_numbers: int, layer: int, context: str, base_rows: np.ndarray, centre: bool = False, log=print) -> np.ndarray:
    """The new rows: `base`'s representation of n after block `layer` (layer 0: the embedding of
    the last digit), scaled so the mean row norm equals that of `base_rows` (the model's own rows)."""
    from core.analysis.numbers import number_representations

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


# ----------------------------------------------------------------------------- the trainable model


def _modules():
    import torch

    class NumberRowsEmbedding(torch.nn.Module):
        """The input embedding: the original rows (frozen) followed by the trainable new rows."""

        def __init__(self, base_weight, rows):
            super().__init__()
            self.register_buffer("base", base_weight.detach(), persistent=False)
            self.rows = torch.nn.Parameter(rows)
            self.n_base = base_weight.shape[0]

        def weight_matrix(self):
            return torch.cat([self.base, self.rows], 0)

        def forward(self, ids):
            new = ids >= self.n_base
            old = torch.nn.functional.embedding(ids.clamp(max=self.n_base - 1), self.base)
            added = torch.nn.functional.embedding((ids - self.n_base).clamp(min=0), self.rows)
            return torch.where(new[..., None], added, old)

    class TiedHead(torch.nn.Module):
        """The output layer of a tied model: logits over the original and the new rows."""

        def __init__(self, embedding):
            super().__init__()
            self.embedding = embedding

        def forward(self, h):
            e = self.embedding
            return torch.cat([torch.nn.functional.linear(h, e.base), torch.nn.functional.linear(h, e.rows)], -1)

    class LoRALinear(torch.nn.Module):
        """base(x) + scale * B A x, with the base linear map frozen and B starting at zero."""

        def __init__(self, base, rank: int, alpha: float):
            super().__init__()
            self.base = base
            self.scale = alpha / rank
            self.A = torch.nn.Parameter(torch.empty(rank, base.in_features))
            self.B = torch.nn.Parameter(torch.zeros(base.out_features, rank))
            torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))

        def forward(self, x):
            return self.base(x) + torch.nn.functional.linear(torch.nn.functional.linear(x, self.A), self.B) * self.scale

    return NumberRowsEmbedding, TiedHead, LoRALinear


def _lora_targets(model, targets) -> list[tuple[str, object, str]]:
    """(block-relative name, parent module, attribute) of every targeted linear map, in block order."""
    import torch

    from core.models.parts import find_parts

    parts = find_parts(model)
    found = []
    for i, block in enumerate(parts.blocks):
        for name, module in block.named_modules():
            if isinstance(module, torch.nn.Linear) and name.split(".")[-1] in targets:
                parent = block.get_submodule(name.rsplit(".", 1)[0]) if "." in name else block
                found.append((f"{i}.{name}", parent, name.split(".")[-1]))
    if not found:
        raise CoreError(f"no linear maps named {', '.join(targets)} in the model's blocks: name the LoRA targets in the recipe")
    return found


class FineTuneModel:
    """A base model with trainable number rows and LoRA factors (`trainable()` lists them).

    With `full`, the targeted linear maps themselves are trained instead of LoRA factors (every
    weight of theirs); `compressed_delta()` then turns each map's change into rank-`rank` factors
    by SVD, in the same delta format, so what ships and how it is rebuilt do not change."""

    def __init__(self, model, rows: np.ndarray, rank: int, alpha: float, targets, seed: int, first_block: int = 0, full: bool = False,
                 keep_lower: bool = False):
        import torch

        if not getattr(model.config, "tie_word_embeddings", False):
            raise CoreError("number-token fine-tuning supports models with tied input and output embeddings (such as SmolLM2) only")
        NumberRowsEmbedding, TiedHead, LoRALinear = _modules()
        for param in model.parameters():
            param.requires_grad_(False)
        self.model = model
        self.embedding = NumberRowsEmbedding(model.get_input_embeddings().weight, torch.as_tensor(rows, dtype=torch.float32))
        model.set_input_embeddings(self.embedding)
        model.lm_head = TiedHead(self.embedding)
        torch.manual_seed(seed)
        self.lora, self.full, self.fixed, self.rank, self.alpha = {}, {}, {}, rank, alpha
        for name, parent, attr in _lora_targets(model, targets):
            if int(name.split(".", 1)[0]) < first_block:  # a frozen lower block: no trained LoRA there
                if keep_lower:  # but an earlier stage's factors stay in it, frozen (`load_factors` fills them)
                    wrapped = LoRALinear(getattr(parent, attr), rank, alpha)
                    wrapped.A.requires_grad_(False)
                    wrapped.B.requires_grad_(False)
                    setattr(parent, attr, wrapped)
                    self.fixed[name] = wrapped
                continue
            if full:
                linear = getattr(parent, attr)
                linear.weight.requires_grad_(True)
                self.full[name] = (linear, linear.weight.detach().to("cpu", copy=True))
                continue
            wrapped = LoRALinear(getattr(parent, attr), rank, alpha)
            setattr(parent, attr, wrapped)
            self.lora[name] = wrapped

    def load_factors(self, start: "StartDelta") -> None:
        """Start the LoRA factors from an earlier stage's delta (`load_start_delta`): its first `rank`
        factors, B scaled so that the update equals the delta's (its scale over this model's)."""
        import torch

        tensors = start.tensors
        if self.fixed and start.rank and start.rank != self.rank:
            raise CoreError(f"frozen lower blocks keep the starting delta's factors as they are: set lora.rank to its rank ({start.rank}), "
                            f"not {self.rank} (its first {self.rank} trained factors alone would change those blocks)")
        ratio = start.scale * self.rank / self.alpha
        factors = {**self.fixed, **self.lora}
        missing = [n for n in factors if f"lora.{n}.A" not in tensors]
        if missing:
            raise CoreError(f"the starting delta has no factors for {missing[0]} (and {len(missing) - 1} more maps): its targets differ from the recipe's")
        with torch.no_grad():
            for name, m in factors.items():
                m.A.copy_(tensors[f"lora.{name}.A"][: self.rank].float())
                m.B.copy_(tensors[f"lora.{name}.B"][:, : self.rank].float() * ratio)

    def trainable(self) -> dict:
        out = {"number_rows": self.embedding.rows}
        for name, m in self.lora.items():
            out[f"lora.{name}.A"] = m.A
            out[f"lora.{name}.B"] = m.B
        for name, (linear, _) in self.full.items():
            out[f"full.{name}.weight"] = linear.weight
        return out

    def delta_state(self) -> dict:
        """What the delta keeps: the trainable tensors and the frozen lower blocks' earlier-stage factors."""
        out = self.trainable()
        for name, m in self.fixed.items():
            out[f"lora.{name}.A"] = m.A
            out[f"lora.{name}.B"] = m.B
        return out

    def compressed_delta(self) -> tuple[dict, dict]:
        """Full training only: (tensors, report). Each trained map's change W - W0 as its best
        rank-`rank` approximation (SVD), written as LoRA factors B (out x r) and A (r x in) with
        W0 + (alpha / r) B A; the report gives the share of the change's energy each map keeps."""
        import torch

        out = {"number_rows": self.embedding.rows.detach().cpu().float()}
        kept = {}
        scale = self.alpha / self.rank
        for name, (linear, original) in self.full.items():
            change = linear.weight.detach().double().cpu() - original.double()
            U, S, Vh = torch.linalg.svd(change, full_matrices=False)
            r = min(self.rank, S.numel())
            out[f"lora.{name}.B"] = (U[:, :r] * (S[:r] / scale)).float()
            out[f"lora.{name}.A"] = Vh[:r].float()
            total = float((S ** 2).sum())
            kept[name] = float((S[:r] ** 2).sum()) / total if total > 0 else 1.0
        return out, kept


# ----------------------------------------------------------------------------- delta and rebuild


def delta_tensors(tuned: FineTuneModel, log=print) -> dict:
    """The delta's tensors, float16: the trained rows and LoRA factors, or, after full training, the
    rank-r factors of each map's change (`FineTuneModel.compressed_delta`)."""
    import torch

    tensors = tuned.delta_state()
    if tuned.full:
        tensors, kept = tuned.compressed_delta()
        shares = np.array(list(kept.values()))
        log(f"full training compressed to rank {tuned.rank}: the factors keep {shares.mean():.1%} of the change's energy "
            f"on average (least {shares.min():.1%}, {min(kept, key=kept.get)})")
    return {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in tensors.items()}


def _stack(model):
    """The Llama-style inner model (embed_tokens, layers, norm, rotary_emb) that blocks are run from by hand."""
    inner = getattr(model, "model", None)
    if inner is None or not all(hasattr(inner, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
        raise CoreError(
            "frozen_blocks needs a Llama-style model (model.embed_tokens, layers, norm, rotary_emb); "
            "set number_tokens.frozen_blocks to 0 for this model"
        )
    return inner


def run_blocks(inner, hidden, blocks):
    """`hidden` (batch, length, width) through `blocks`, causal, positions 0..length-1, no padding."""
    import torch

    pos = torch.arange(hidden.shape[1], device=hidden.device)[None]
    pe = inner.rotary_emb(hidden, position_ids=pos)
    for block in blocks:
        hidden = block(hidden, attention_mask=None, position_ids=pos, position_embeddings=pe)
    return hidden


def length_batches(lengths: np.ndarray, batch_size: int, rng, order: np.ndarray | None = None) -> list[np.ndarray]:
    """Batches of example indices in which every prompt has the same length: the examples in a
    seeded order (or `order`, an epoch's draw), cut into batches length by length, then the batches
    in a seeded order."""
    order = rng.permutation(len(lengths)) if order is None else order
    chunks = []
    for n in np.unique(lengths):
        members = order[lengths[order] == n]
        chunks += [members[s : s + batch_size] for s in range(0, len(members), batch_size)]
    return [chunks[i] for i in rng.permutation(len(chunks))]


def answer_balanced_draw(answers: np.ndarray, power: float, rng) -> np.ndarray:
    """An epoch of training examples drawn with replacement, as many as there are, each with
    probability proportional to (how many training examples share its answer) ** -power: with
    power 1 every answer is drawn equally often, with 0.5 a rare answer's questions come up more
    often than their share without taking over (answers near 0 and 520 have few questions)."""
    _, which, counts = np.unique(answers, return_inverse=True, return_counts=True)
    weight = counts[which].astype(np.float64) ** -float(power)
    return rng.choice(len(answers), size=len(answers), replace=True, p=weight / weight.sum())


class FrozenBottom:
    """The output of blocks 0..K-1 for every prompt of a split (float32), computed once."""

    def __init__(self, model, encoded, first_trained: int, precision: str, batch_size: int = 256):
        import torch

        from core.training.train import autocast, model_device

        self.inner = _stack(model)
        device = model_device(model)
        self.K = first_trained
        self.lengths = np.array([len(e) for e in encoded])
        by_length = {}
        for i, n in enumerate(self.lengths):
            by_length.setdefault(int(n), []).append(i)
        self.tensors, self.row = {}, np.zeros(len(encoded), dtype=np.int64)
        with torch.no_grad(), autocast(precision, device.type):
            for n, idx in sorted(by_length.items()):
                parts = []
                for s in range(0, len(idx), batch_size):
                    ids = torch.as_tensor([encoded[i] for i in idx[s : s + batch_size]], device=device)
                    parts.append(run_blocks(self.inner, self.inner.embed_tokens(ids), self.inner.layers[: self.K]).float())
                self.tensors[n] = torch.cat(parts)
                self.row[idx] = np.arange(len(idx))

    def __call__(self, idx: np.ndarray):
        n = int(self.lengths[idx[0]])
        if (self.lengths[idx] != n).any():
            raise CoreError("a batch for the frozen lower blocks mixes prompt lengths")
        return self.tensors[n][self.row[idx]]

    def loss(self, model, idx: np.ndarray, target, precision: str):
        """Answer-token cross-entropy of the prompts `idx`, running only blocks K.. on their kept states."""
        import torch

        from core.training.train import autocast

        states = self(idx)
        with autocast(precision, states.device.type):
            hidden = run_blocks(self.inner, states, self.inner.layers[self.K :])
            logits = model.lm_head(self.inner.norm(hidden[:, -1]))
        return torch.nn.functional.cross_entropy(logits.float(), target.to(states.device))


# ----------------------------------------------------------------------------- training


def _save_checkpoint(folder: Path, tuned: FineTuneModel, opt, sched, state: dict):
    from safetensors.torch import save_file

    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in tuned.trainable().items()}, str(tmp / "trainable.safetensors"))
    opt_tensors, opt_scalars = {}, {}
    for i, st in opt.state_dict()["state"].items():
        for name, val in st.items():
            if hasattr(val, "shape") and val.ndim > 0:
                opt_tensors[f"{i}.{name}"] = val.cpu().contiguous()
            else:
                opt_scalars[f"{i}.{name}"] = float(val)
    save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
    (tmp / "progress.json").write_text(json.dumps({**state, "scheduler": sched.state_dict(), "optimizer_scalars": opt_scalars}, default=float))
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)


def _load_checkpoint(folder: Path, tuned: FineTuneModel, opt, sched) -> dict:
    import torch
    from safetensors.torch import load_file

    saved = load_file(str(folder / "trainable.safetensors"))
    params = tuned.trainable()
    if set(saved) != set(params) or any(saved[k].shape != params[k].shape for k in params):
        raise CoreError(f"checkpoint {folder} does not match the recipe's model; use --restart")
    with torch.no_grad():
        for k, v in params.items():
            v.copy_(saved[k])
    meta = json.loads((folder / "progress.json").read_text())
    from core.training.train import restore_optimizer

    restore_optimizer(folder, meta, opt, sched)
    return meta


_RESUME_FIELDS = ("init_from", "task", "max_operand", "dataset_seed", "number_tokens", "lora", "epochs", "batch_size", "lr",
                  "weight_decay", "warmup_steps", "min_lr_ratio", "precision", "seed")


def _resume_key(recipe) -> dict:
    """What a checkpoint must share with the recipe to be resumed (not threads or labels)."""
    return {k: getattr(recipe, k) for k in _RESUME_FIELDS}


def _require_same_recipe(saved: dict | None, recipe, ckpt: Path) -> None:
    if saved is None:  # checkpoints written before this check existed
        return
    now = json.loads(json.dumps(_resume_key(recipe)))
    changed = sorted(k for k in now if saved.get(k) != now[k])
    if changed:
        raise CoreError(f"the checkpoint in {ckpt} was made with other settings ({', '.join(changed)}): use --restart to start again")


def load_start_delta(path: str, base_digest: str, rank: int) -> "StartDelta":
    """The tensors of an earlier stage's delta, checked (same base model, at least `rank` factors),
    with the scale its factors were written with; `FineTuneModel.load_factors` rescales B to the recipe's."""
    tensors, meta = read_delta(Path(path))
    if meta.get("base_sha256") and meta["base_sha256"] != base_digest:
        raise CoreError(f"{path} was trained on another base model than this recipe's init_from: import the right one or start without lora.init_delta")
    have = int(meta["rank"])
    if have < rank:
        raise CoreError(f"{path} holds rank-{have} factors; this recipe's lora.rank {rank} needs at least that many")
    return StartDelta(tensors, float(meta["alpha"]) / have, have, meta.get("rebuilt_sha256", ""))


@dataclass
class StartDelta:
    """An earlier stage's delta tensors and the scale (alpha / rank) its factors were written with."""

    tensors: dict
    scale: float
    rank: int = 0
    digest: str = ""  # the earlier stage's rebuilt-weights digest: which delta this is


def training_device(name: str | None):
    """The torch device a fine-tuning runs on: `name` ("cpu", "cuda", "cuda:1", "auto"; None is the CPU)."""
    import torch

    from core.models.loading import check_device

    device = torch.device(check_device(name or "cpu"))
    if device.type not in ("cpu", "cuda"):
        raise CoreError(f"--device {name}: fine-tuning runs on cpu or cuda only")
    return device


def finetune(recipe, out: str | Path | None = None, restart: bool = False, progress=None, log=print):
    """Train a number-token fine-tuning recipe (see the module doc); returns a `core.training.train.TrainResult`."""
    import torch
    from transformers import AutoTokenizer

    from core.models.loading import load_model
    from core.models.source import resolve_source
    from core.tasks import build_examples, number_space, select_split
    from core.training.train import AdditionBatches, TrainResult, answer_loss, evaluate_split, lr_schedule, step_bar

    spec = recipe.number_tokens or {}
    lora = recipe.lora or {}
    if not recipe.init_from:
        raise CoreError(f"recipe {recipe.name}: number-token fine-tuning needs init_from (the base model's folder or hub id)")
    if recipe.threads:
        torch.set_num_threads(recipe.threads)
    device = training_device(recipe.device)  # before minutes of loading: a machine without the GPU asked for says so at once
    base_folder = recipe.init_from
    if not Path(base_folder).is_dir():
        from core.models.importer import import_hint

        raise CoreError(f"the base model {base_folder} is not here; {import_hint(base_folder)}")
    resolve_source(base_folder)
    out = Path(out or recipe.out)
    out.mkdir(parents=True, exist_ok=True)
    p = number_space(recipe.task, recipe.max_operand)
    layer, context = int(spec.get("layer", 5)), spec.get("context", "The number {n}")
    centre = bool(spec.get("centre", False))
    rank, alpha = int(lora.get("rank", 8)), float(lora.get("alpha", 16))
    targets = tuple(lora.get("targets", DEFAULT_TARGETS))
    full = lora.get("train", "lora") == "full"

    ckpt = out / "checkpoint"
    resume = ckpt.exists() and not restart
    base = load_base(base_folder)
    base_digest = state_digest(unique_state(base))
    tokenizer = AutoTokenizer.from_pretrained(base_folder)
    base_rows = base.get_input_embeddings().weight.detach().numpy()
    start = lora.get("init_delta")  # an earlier stage's delta: its rows and its factors (cut to rank) are the start
    frozen = int(spec.get("frozen_blocks", 0))
    # read on a resume too when lower blocks are frozen: they keep its factors, which the checkpoint does not hold
    start_tensors = load_start_delta(start, base_digest, rank) if start and (frozen or not resume) else None
    if start_tensors is not None:
        rows = start_tensors.tensors["number_rows"].float().numpy()  # on a resume, replaced by the checkpoint's
        if not resume:
            log(f"starting from {start}: its number rows and its factors cut to rank {rank}")
    elif resume:
        rows = np.zeros((p, base.config.hidden_size), dtype=np.float32)  # replaced by the checkpoint's
    else:
        rows = initial_number_rows(load_model(base_folder), p, layer, context, base_rows, centre=centre, log=log)
    number_ids = add_number_tokens(tokenizer, p)
    require_rows_follow(base, number_ids)
    tuned = FineTuneModel(base, rows, rank, alpha, targets, recipe.seed, first_block=frozen, full=full, keep_lower=start_tensors is not None)
    if start_tensors is not None:
        tuned.load_factors(start_tensors)
    model = tuned.model.to(device)

    examples = build_examples(recipe.task, recipe.max_operand, recipe.dataset_seed)
    data = {s: AdditionBatches(tokenizer, select_split(examples, s), number_ids) for s in ("train", "val", "test")}
    train_subset = np.random.default_rng(recipe.seed).permutation(len(data["train"]))[: recipe.eval_train_subset]
    bottom = None  # with frozen_blocks: the kept output of the frozen blocks, made once the rows are final (after a resume)
    train_lengths = np.array([len(e) for e in data["train"].encoded])

    balance = float(spec.get("balance_answers", 0))

    def epoch_batches(epoch):
        rng = np.random.default_rng((recipe.seed, epoch))
        drawn = answer_balanced_draw(np.asarray(data["train"].targets), balance, rng) if balance else None
        if frozen:
            return length_batches(train_lengths, recipe.batch_size, rng, drawn)
        order = rng.permutation(len(data["train"])) if drawn is None else drawn
        return [order[s : s + recipe.batch_size] for s in range(0, len(order), recipe.batch_size)]

    # with balance_answers and frozen_blocks together an epoch's batch count varies a little (batches by length)
    batches_per_epoch = [len(epoch_batches(e)) for e in range(recipe.epochs)]
    params = tuned.trainable()
    groups = [
        {"params": [params["number_rows"]], "weight_decay": 0.0, "lr": recipe.lr * float(spec.get("rows_lr_ratio", 1.0))},
        {"params": [v for k, v in params.items() if k != "number_rows"], "weight_decay": recipe.weight_decay},
    ]
    opt = torch.optim.AdamW(groups, lr=recipe.lr, betas=(0.9, 0.98), eps=1e-8)
    sched = lr_schedule(opt, sum(batches_per_epoch), recipe.warmup_steps, recipe.min_lr_ratio)
    every = int(spec.get("checkpoint_steps", 50))
    stop_at = spec.get("stop_at_val_accuracy")
    state = {"epoch": 0, "step": 0, "log": [], "elapsed_s": 0.0, "recipe": _resume_key(recipe),
             "start_sha256": start_tensors.digest if start_tensors is not None else None}
    if resume:
        state = _load_checkpoint(ckpt, tuned, opt, sched)
        _require_same_recipe(state.get("recipe"), recipe, ckpt)
        if start_tensors is not None and state.get("start_sha256") and state["start_sha256"] != start_tensors.digest:
            raise CoreError(f"{start} is not the delta this run started from (it was retrained since): the frozen lower blocks "
                            f"would mix two models; use --restart")
        log(f"resuming {recipe.name} (seed {recipe.seed}) at epoch {state['epoch'] + 1}, step {state['step']}/{batches_per_epoch[state['epoch'] % recipe.epochs]}")
    if frozen:
        t_bottom = time.time()
        bottom = FrozenBottom(model, data["train"].encoded, frozen, recipe.precision)
        log(f"blocks 0..{frozen - 1} frozen: their output for {len(data['train'])} training prompts kept ({time.time() - t_bottom:.0f}s)")
    model.train()
    bar = step_bar(sum(batches_per_epoch[state["epoch"]:]) - state["step"], f"fine-tune {recipe.name}", progress)
    t0 = time.time()
    # a run that already met its stop rule (then stopped or was interrupted) trains no further
    stopped = stop_at is not None and any(r["split"] == "val" and r["epoch"] == state["epoch"] and r["accuracy"] >= stop_at for r in state["log"])
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
            if step % every == 0 and step < batches_per_epoch[epoch]:
                elapsed = state["elapsed_s"] + time.time() - t0
                _save_checkpoint(ckpt, tuned, opt, sched, {**state, "epoch": epoch, "step": step, "elapsed_s": elapsed})
                log(f"{recipe.name}: epoch {epoch + 1} step {step}/{batches_per_epoch[epoch]}, loss {loss.item():.4f} ({elapsed:.0f}s)")
        elapsed = state["elapsed_s"] + time.time() - t0
        row = {"seed": recipe.seed, "width": model.config.hidden_size, "epoch": epoch + 1, "seconds": round(elapsed, 1)}
        for split in ("train", "val", "test"):
            subset = train_subset if split == "train" else None
            acc, loss_v = evaluate_split(model, data[split], number_ids, recipe.batch_size, recipe.precision, subset)
            state["log"].append({**row, "split": split, "accuracy": acc, "loss": loss_v})
        last = {r["split"]: r for r in state["log"][-3:]}
        log(
            f"{recipe.name} seed {recipe.seed} epoch {epoch + 1}/{recipe.epochs}: train {last['train']['accuracy']:.2%} "
            f"val {last['val']['accuracy']:.2%} test {last['test']['accuracy']:.2%} (val loss {last['val']['loss']:.4f}, {elapsed:.0f}s)"
        )
        state = {**state, "epoch": epoch + 1, "step": 0, "elapsed_s": elapsed}
        t0 = time.time()
        _save_checkpoint(ckpt, tuned, opt, sched, state)
        if stop_at is not None and last["val"]["accuracy"] >= stop_at:
            log(f"{recipe.name}: validation accuracy {last['val']['accuracy']:.2%} reached the recipe's stop_at_val_accuracy {stop_at:.2%}: stopping after epoch {epoch + 1} of {recipe.epochs}")
            break
    bar.close()

    frame = pd.DataFrame(state["log"])
    frame.insert(0, "recipe", recipe.name)
    meta = {
        "format": DELTA_FORMAT,
        "base": base_folder,
        "p": p,
        "rank": rank,
        "alpha": alpha,
        "trained": "full, compressed to rank r by SVD" if full else "LoRA",
        "layer": layer,
        "context": context,
        "frozen_blocks": frozen,
        "centre": centre,
        "recipe": recipe.name,
        "label": recipe.label,
        "seed": recipe.seed,
        "base_sha256": base_digest,
        "versions": library_versions(),
    }
    # the delta is float16: the model that counts is the one rebuilt from it, so its digest is
    # recorded and its test accuracy measured
    tensors = delta_tensors(tuned, log=log)
    rebuilt, rebuilt_tok = merged_model(base_folder, tensors, meta)
    meta["rebuilt_sha256"] = state_digest(unique_state(rebuilt))
    save_delta(out / DELTA_FILE, tensors, meta)
    # scored as precompute scores it: the rebuilt model, its own tokenizer, float32
    test_examples = select_split(examples, "test")
    rebuilt_data = AdditionBatches(rebuilt_tok, test_examples, np.asarray(rebuilt_tok.convert_tokens_to_ids([NUMBER_TOKEN.format(n=n) for n in range(p)])))
    if rebuilt_data.encoded != data["test"].encoded:
        raise CoreError("the rebuilt model's tokenizer reads the test prompts differently from the one trained with")
    test_acc, _ = evaluate_split(rebuilt, rebuilt_data, number_ids, recipe.batch_size, "float32")
    (out / "recipe.json").write_text(json.dumps(recipe.as_dict(), indent=1))
    frame.to_parquet(out / "training_log.parquet", index=False)
    final = frame[frame["epoch"] == frame["epoch"].max()].set_index("split")["accuracy"].to_dict()
    summary = {
        "recipe": recipe.name,
        "seed": recipe.seed,
        "epochs_run": int(frame["epoch"].max()),
        "train_step_seconds": round(state["elapsed_s"], 1),  # the optimisation steps, evaluations not counted
        "final_accuracy": final,
        "rebuilt_test_accuracy_float32": test_acc,
        "delta_bytes": (out / DELTA_FILE).stat().st_size,
    }
    (out / "train_summary.json").write_text(json.dumps(summary, indent=1))
    log(f"{recipe.name}: delta {summary['delta_bytes'] / 1e6:.1f} MB; the model rebuilt from it scores {test_acc:.2%} on the test split")
    rebuild(out, base_folder, log=log)
    return TrainResult(out, frame, state["elapsed_s"], test_acc)
