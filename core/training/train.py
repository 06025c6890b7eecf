"""Train the project's demo models: GPT-2-style, from scratch or with frozen number embeddings.

A recipe (recipes/NAME.json, committed) says everything: architecture, initialisation, which
number-token embedding rows are frozen and to what, the optional pre-training corpus, the
optimiser, epochs, seed, and where the model goes. `python -m core train --recipe NAME` trains it:

* loss on the answer token only (the prompt's last position predicts the answer token);
* frozen number rows: (a) "fourier": synthetic sinusoids of chosen periods, or (b) "transplant":
  another model's embedding rows, copied number by number through each model's number tokens.
  Frozen rows get no gradient and are restored after every optimiser step, so AdamW's weight
  decay cannot shrink them. With tied embeddings (GPT-2's default) the output rows are the same
  rows and are frozen too; `tied: false` trains a separate output matrix;
* optional pre-training on a synthetic corpus about numbers that holds no addition (counting,
  spelling numbers into digits, comparisons), with the ordinary next-token loss;
* bfloat16 autocast on the CPU (about 5x faster matrix products), float32 master weights;
* per-epoch train/val/test accuracy and loss in `training_log.parquet`;
* a checkpoint (safetensors: weights and optimiser state; nothing pickled) after every epoch, so
  an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from core.errors import CoreError
from core.files import PROJECT_ROOT
from core.tasks import build_examples, number_space, select_split

RECIPE_DIR = PROJECT_ROOT / "recipes"
CHECKPOINT = "checkpoint"
#: fourier: synthetic sinusoids; transplant: another model's number-embedding rows (same width);
#: representation: another model's hidden states of the numbers at a layer, mapped by an isometry.
FREEZE_KINDS = ("fourier", "transplant", "representation")
PRETRAIN_WORDS = ("count", "digits", "of", "is", "more", "less", "than", "the", "same", "as", "from", "to")


@dataclass
class Recipe:
    name: str
    label: str
    out: str
    description: str = ""
    arch: str = "gpt2"
    n_layers: int = 2
    width: int = 640
    heads: int = 8
    mlp_ratio: float = 2.0
    tied: bool = True
    max_positions: int = 64
    task: str = "addition"
    max_operand: int = 260
    dataset_seed: int = 0
    freeze: dict | None = None  # {"kind": "fourier", "periods": [...], "scale": 1.0} | {"kind": "transplant", "source": ...}
    init_from: str | None = None  # fine-tune an existing model folder instead of random init
    number_tokens: dict | None = None  # add single number tokens and fine-tune (core.training.finetune): {"layer": 5, "context": ...}
    lora: dict | None = None  # with number_tokens: {"rank": 8, "alpha": 16, "targets": [...]}
    pretrain: dict | None = None  # {"epochs": 3, "n_sequences": 60000, "lr": 1e-3}
    epochs: int = 10
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 100
    min_lr_ratio: float = 0.0
    precision: str = "bfloat16"
    seed: int = 0
    eval_train_subset: int = 3000
    save_dtype: str = "float16"
    threads: int | None = None
    device: str | None = None  # number-token fine-tuning only: "cuda" trains on a GPU (not part of a checkpoint's identity)
    extra: dict = field(default_factory=dict)

    @classmethod
    def load(cls, name_or_path: str) -> "Recipe":
        path = Path(name_or_path)
        if not path.suffix:
            path = RECIPE_DIR / f"{name_or_path}.json"
        if not path.exists():
            known = ", ".join(sorted(p.stem for p in RECIPE_DIR.glob("*.json"))) or "none"
            raise CoreError(f"no recipe {name_or_path!r} (looked for {path}); recipes: {known}")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise CoreError(f"recipe {path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise CoreError(f"recipe {path} must be a JSON object of fields, not {type(data).__name__}")
        known_fields = set(cls.__dataclass_fields__)
        unknown = set(data) - known_fields
        if unknown:
            raise CoreError(f"recipe {path}: unknown fields {sorted(unknown)}")
        missing = [f for f in ("name", "label", "out") if f not in data]
        if missing:
            raise CoreError(f"recipe {path}: missing fields {missing}")
        for key, value in data.items():
            _check_field_type(path, key, value, cls.__dataclass_fields__[key].type)
        recipe = cls(**data)
        recipe.check()
        return recipe

    def check(self) -> None:
        for key in ("n_layers", "width", "heads", "max_positions", "max_operand", "epochs", "batch_size"):
            if getattr(self, key) < 1:
                raise CoreError(f"recipe {self.name}: {key} must be at least 1, got {getattr(self, key)}")
        if not self.lr > 0:
            raise CoreError(f"recipe {self.name}: lr must be positive, got {self.lr}")
        if self.width % self.heads:
            raise CoreError(f"recipe {self.name}: width {self.width} is not divisible by heads {self.heads}")
        if self.precision not in ("bfloat16", "float32"):
            raise CoreError(f"recipe {self.name}: precision must be bfloat16 or float32")
        if self.freeze and self.freeze.get("kind") not in FREEZE_KINDS:
            raise CoreError(f"recipe {self.name}: freeze.kind must be one of {', '.join(FREEZE_KINDS)}")
        if self.lora is not None and self.number_tokens is None:
            raise CoreError(f"recipe {self.name}: lora is used only with number_tokens (number-token fine-tuning)")
        if self.number_tokens is not None:
            if not self.init_from:
                raise CoreError(f"recipe {self.name}: number_tokens fine-tunes a pre-trained model: set init_from to its folder")
            every = self.number_tokens.get("checkpoint_steps", 50)
            if not isinstance(every, int) or every < 1:
                raise CoreError(f"recipe {self.name}: number_tokens.checkpoint_steps must be a whole number >= 1, got {every!r}")
            ratio = self.number_tokens.get("rows_lr_ratio", 1.0)
            if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 10:
                raise CoreError(f"recipe {self.name}: number_tokens.rows_lr_ratio (the new rows' learning rate over lr) must be a number in 0..10, got {ratio!r}")
            stop = self.number_tokens.get("stop_at_val_accuracy")
            if stop is not None and (isinstance(stop, bool) or not isinstance(stop, (int, float)) or not 0 < stop <= 1):
                raise CoreError(f"recipe {self.name}: number_tokens.stop_at_val_accuracy must be a fraction in (0, 1], such as 0.99, got {stop!r}")
            balance = self.number_tokens.get("balance_answers", 0)
            if isinstance(balance, bool) or not isinstance(balance, (int, float)) or not 0 <= balance <= 1:
                raise CoreError(f"recipe {self.name}: number_tokens.balance_answers (0: plain epochs; 1: every answer drawn equally often) must be a number in 0..1, got {balance!r}")
            frozen = self.number_tokens.get("frozen_blocks", 0)
            if isinstance(frozen, bool) or not isinstance(frozen, int) or not 0 <= frozen < self.n_layers:
                raise CoreError(f"recipe {self.name}: number_tokens.frozen_blocks (how many lower blocks stay frozen) must be a whole number in 0..{self.n_layers - 1}, got {frozen!r}")
            if frozen and ratio != 0:
                raise CoreError(f"recipe {self.name}: number_tokens.frozen_blocks needs the new rows frozen too (rows_lr_ratio 0): the frozen blocks' output is computed once from them")
            mode = (self.lora or {}).get("train", "lora")
            if mode not in ("lora", "full"):
                raise CoreError(f"recipe {self.name}: lora.train must be 'lora' (train LoRA factors) or 'full' (train the maps, ship rank-r SVD factors of the change), got {mode!r}")
            if mode == "full" and (self.lora or {}).get("init_delta"):
                raise CoreError(f"recipe {self.name}: lora.init_delta starts LoRA factors from an earlier delta; it does not apply with lora.train 'full'")
            rank = (self.lora or {}).get("rank", 8)
            if not isinstance(rank, int) or rank < 1:
                raise CoreError(f"recipe {self.name}: lora.rank must be a whole number >= 1, got {rank!r}")
        if self.freeze and self.freeze.get("kind") == "representation":
            missing = [k for k in ("source", "layer") if k not in self.freeze]
            if missing:
                raise CoreError(f"recipe {self.name}: a 'representation' freeze needs {missing} (source model folder, layer)")

    def as_dict(self) -> dict:
        return dict(self.__dict__)


_FIELD_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "dict": (dict,), "None": (type(None),)}


def _check_field_type(path, key: str, value, annotation) -> None:
    """A recipe field's JSON value must have the field's type (ints are not bools, floats may be ints)."""
    names = [n.strip() for n in str(annotation).split("|")]
    allowed = tuple(t for n in names for t in _FIELD_TYPES.get(n, (object,)))
    ok = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
    if not ok:
        want = " or ".join({"int": "a whole number", "float": "a number", "str": "text", "bool": "true/false", "dict": "an object", "None": "null"}.get(n, n) for n in names)
        raise CoreError(f"recipe {path}: field {key!r} should be {want}, got {json.dumps(value)[:40]}")


# ----------------------------------------------------------------------------- model and data


def build_model(recipe: Recipe, tokenizer):
    """A GPT-2-style model for the recipe (random init, or the folder in `init_from`)."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

    if recipe.init_from:
        from core.models.loading import resolve_source

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


def fourier_embedding(n_numbers: int, width: int, periods, scale: float = 1.0, seed: int = 0) -> np.ndarray:
    """Rows n = 0..n_numbers-1: sum over periods T of cos(2 pi n / T) u_T + sin(2 pi n / T) v_T.

    u_T, v_T are orthonormal directions drawn once (seeded); sin is left out where it vanishes on
    the integers (T = 2). Every row has norm `scale`.
    """
    periods = [float(t) for t in periods]
    n_dirs = 2 * len(periods)
    if n_dirs > width:
        raise CoreError(f"{len(periods)} periods need width >= {n_dirs}")
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(width, n_dirs)))
    x = np.arange(n_numbers)[:, None]
    feats = []
    for T in periods:
        feats.append(np.cos(2 * np.pi * x / T))
        s = np.sin(2 * np.pi * x / T)
        feats.append(s if np.abs(s).max() > 1e-9 else np.zeros_like(s))
    F = np.hstack(feats)  # (n, 2 * len(periods))
    E = F @ q.T
    norms = np.linalg.norm(E, axis=1, keepdims=True)
    return (scale * E / np.where(norms > 0, norms, 1)).astype(np.float32)


def transplant_rows(source: str, tokenizer, n_numbers: int, width: int) -> np.ndarray:
    """The input-embedding rows of numbers 0..n-1 of another model, found through its number tokens."""
    from core.models.loading import load_model

    donor = load_model(source)
    donor.select_numbers(n_numbers, f"transplanting {n_numbers} number embeddings from {source}")
    if donor.width != width:
        raise CoreError(f"cannot transplant: {source} is {donor.width} wide, the recipe's model is {width}; set width to {donor.width}")
    return donor.number_embedding(n_numbers).cpu().numpy()


def representation_rows(freeze: dict, n_numbers: int, width: int, log=print) -> np.ndarray:
    """Rows from another model's number representations (`core.analysis.numbers`) at `freeze["layer"]`, read
    in `freeze["context"]`: centred, unit rows, mapped into `width` by the isometry seeded with
    `freeze["isometry_seed"]` (default 0; the same for every training seed)."""
    from core.models.importer import import_hint
    from core.models.loading import load_model
    from core.analysis.numbers import number_representations, transplant_matrix

    source = freeze["source"]
    if not Path(source).is_dir():
        raise CoreError(f"the representation source {source} is not here; {import_hint(source)}")
    donor = load_model(source)
    layer = int(freeze["layer"])
    if not 0 <= layer <= donor.n_layers:
        raise CoreError(f"layer {layer} is outside 0..{donor.n_layers} for {source}")
    reps = number_representations(donor, n_numbers, freeze.get("context"), progress=False)
    log(f"frozen rows: {source} layer {layer}, {reps.describe()}")
    return transplant_matrix(reps.vectors[layer], width, int(freeze.get("isometry_seed", 0)))


def number_token_ids(tokenizer, p: int) -> np.ndarray:
    from core.models.loading import find_number_tokens, require_number_range

    numbers = find_number_tokens(tokenizer, p=p)
    require_number_range(numbers, p)
    if numbers.prompt_suffix:
        raise CoreError("the training code expects number tokens that follow the prompt directly")
    return np.asarray(numbers.ids[:p])


class FrozenRows:
    """Keeps chosen rows of the input embedding (and, if untied, nothing else) fixed during training."""

    def __init__(self, model, row_ids: np.ndarray, values: np.ndarray):
        import torch

        self.weight = model.get_input_embeddings().weight
        self.ids = torch.as_tensor(row_ids, dtype=torch.long)
        with torch.no_grad():
            self.weight[self.ids] = torch.as_tensor(values, dtype=self.weight.dtype)
        self.values = self.weight.detach()[self.ids].clone()
        mask = torch.zeros(self.weight.shape[0], 1)
        mask[self.ids] = 1.0
        self.mask = mask
        self.handle = self.weight.register_hook(lambda g: g * (1 - self.mask).to(g.dtype))

    def restore(self):
        import torch

        with torch.no_grad():
            self.weight[self.ids] = self.values


class AdditionBatches:
    """Tokenized prompts and answer tokens of a split; left-padded batches in a seeded order."""

    def __init__(self, tokenizer, examples, number_ids: np.ndarray):
        self.pad = tokenizer.pad_token_id
        self.encoded = tokenizer([e.prompt for e in examples])["input_ids"]
        self.targets = np.array([number_ids[e.answer] for e in examples])
        self.answers = np.array([e.answer for e in examples])

    def __len__(self):
        return len(self.encoded)

    def batches(self, batch_size: int, order=None):
        import torch

        from core.models.capture import left_pad

        order = np.arange(len(self)) if order is None else order
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            ids, mask, pos = left_pad([self.encoded[i] for i in idx], self.pad)
            yield idx, ids, mask, pos, torch.as_tensor(self.targets[idx])


def answer_logits(model, ids, mask, pos):
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False, logits_to_keep=1)
    return out.logits[:, -1, :]


def answer_loss(model, ids, mask, pos, target, precision: str = "float32"):
    """Mean cross-entropy of the answer token, read at the last prompt position: the only loss."""
    import torch

    device = model_device(model)
    ids, mask, pos, target = (t.to(device) for t in (ids, mask, pos, target))
    with autocast(precision, device.type):
        logits = answer_logits(model, ids, mask, pos)
    return torch.nn.functional.cross_entropy(logits.float(), target)


def evaluate_split(model, data: AdditionBatches, number_ids, batch_size: int, precision: str, subset=None):
    """(accuracy, mean answer-token loss) over a split; prediction = argmax over the number tokens."""
    import torch

    order = np.arange(len(data)) if subset is None else subset
    device = model_device(model)
    ids_t = torch.as_tensor(number_ids, device=device)
    correct, loss_sum = 0, 0.0
    model.eval()
    with torch.no_grad(), autocast(precision, device.type):
        for idx, ids, mask, pos, target in data.batches(batch_size * 4, order):
            ids, mask, pos, target = (t.to(device) for t in (ids, mask, pos, target))
            logits = answer_logits(model, ids, mask, pos).float()
            loss_sum += torch.nn.functional.cross_entropy(logits, target, reduction="sum").item()
            pred = logits[:, ids_t].argmax(-1).cpu().numpy()
            correct += int((pred == data.answers[idx]).sum())
    model.train()
    return correct / len(order), loss_sum / len(order)


def autocast(precision: str, device_type: str = "cpu"):
    """bfloat16 autocast on `device_type` for precision "bfloat16", otherwise a context that does nothing."""
    import contextlib

    import torch

    if precision == "bfloat16":
        return torch.autocast(device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def model_device(model):
    """The device `model`'s weights are on (the first parameter's or buffer's)."""
    import torch

    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


# ----------------------------------------------------------------------------- pre-training corpus


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
    import torch

    cfg = recipe.pretrain or {}
    texts = pretraining_corpus(number_space(recipe.task, recipe.max_operand) - 1, int(cfg.get("n_sequences", 60000)), recipe.seed)
    enc = tokenizer(texts)["input_ids"]
    epochs = int(cfg.get("epochs", 3))
    bs = int(cfg.get("batch_size", recipe.batch_size))
    steps = epochs * math.ceil(len(enc) / bs)
    opt = _optimizer(model, float(cfg.get("lr", recipe.lr)), recipe.weight_decay)
    sched = lr_schedule(opt, steps, recipe.warmup_steps, 0.0)
    pad = tokenizer.pad_token_id
    bar = step_bar(steps, "pre-train", progress)
    t0 = time.time()
    for epoch in range(epochs):
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
            with autocast(recipe.precision):
                loss = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            total += loss.item()
            count += 1
            bar.update(1)
        log(f"pre-train epoch {epoch + 1}/{epochs}: loss {total / count:.4f} ({time.time() - t0:.0f}s)")
    bar.close()


# ----------------------------------------------------------------------------- training


def _optimizer(model, lr: float, weight_decay: float):
    import torch

    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        # embeddings, biases and norms take no weight decay
        if param.ndim < 2 or "wte" in name or "wpe" in name or "embed" in name or "lm_head" in name:
            no_decay.append(param)
        else:
            decay.append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98), eps=1e-8)


def lr_schedule(opt, total_steps: int, warmup: int, min_ratio: float):
    """Linear warm-up over `warmup` steps, then linear decay to `min_ratio` of the rate at `total_steps`."""
    import torch

    def factor(step):
        if step < warmup:
            return (step + 1) / max(1, warmup)
        frac = (step - warmup) / max(1, total_steps - warmup)
        return max(min_ratio, 1.0 - frac * (1 - min_ratio))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def step_bar(total, desc, enabled):
    """A progress bar of training steps on stderr; `enabled` None: shown when stderr is a terminal."""
    from tqdm.auto import tqdm

    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, disable=not enabled, leave=False, file=sys.stderr)


def _save_checkpoint(folder: Path, model, opt, sched, epoch: int, log_rows: list, elapsed: float):
    """Weights and optimiser state as safetensors, progress as JSON; written then renamed."""
    from safetensors.torch import save_file

    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    seen, tensors = set(), {}
    for k, v in state.items():  # tied weights share storage: keep one copy
        key = v.untyped_storage().data_ptr()
        if key in seen:
            continue
        seen.add(key)
        tensors[k] = v
    save_file(tensors, str(tmp / "model.safetensors"))
    opt_tensors, opt_meta = {}, {}
    for i, st in opt.state_dict()["state"].items():
        for name, val in st.items():
            if hasattr(val, "shape"):
                opt_tensors[f"{i}.{name}"] = val.contiguous()
            else:
                opt_meta[f"{i}.{name}"] = val
    save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
    meta = {"epoch": epoch, "scheduler": sched.state_dict(), "optimizer_scalars": opt_meta, "log": log_rows, "elapsed_s": elapsed}
    (tmp / "progress.json").write_text(json.dumps(meta, default=float))
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)


def _load_checkpoint(folder: Path, model, opt, sched):
    from safetensors.torch import load_file

    weights = load_file(str(folder / "model.safetensors"))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied_ok = all("lm_head" in k for k in missing)
    if unexpected or not tied_ok:
        raise CoreError(f"checkpoint {folder} does not match the recipe's model; use --restart")
    meta = json.loads((folder / "progress.json").read_text())
    restore_optimizer(folder, meta, opt, sched)
    return meta


def restore_optimizer(folder: Path, meta: dict, opt, sched) -> None:
    """Optimiser state from `folder/optimizer.safetensors` and the scalars in `meta`, the scheduler
    from `meta`, and each group's learning rate set to the scheduled one (a fresh optimiser holds
    the first warm-up step's)."""
    import torch
    from safetensors.torch import load_file

    sd = opt.state_dict()
    state: dict = {}
    for key, val in load_file(str(folder / "optimizer.safetensors")).items():
        i, name = key.split(".", 1)
        state.setdefault(int(i), {})[name] = val
    for key, val in meta["optimizer_scalars"].items():
        i, name = key.split(".", 1)
        state.setdefault(int(i), {})[name] = torch.tensor(val) if name == "step" else val
    sd["state"] = state
    opt.load_state_dict(sd)
    sched.load_state_dict(meta["scheduler"])
    for group, lr in zip(opt.param_groups, sched.get_last_lr()):
        group["lr"] = lr


@dataclass
class TrainResult:
    out: Path
    log: pd.DataFrame
    seconds: float
    test_accuracy: float


def train(recipe: Recipe, out: str | Path | None = None, restart: bool = False, progress=None, log=print) -> TrainResult:
    """Train a recipe; returns the output folder, the training log and the final test accuracy."""
    import torch

    from core.models.vocab import number_tokenizer

    if recipe.threads:
        torch.set_num_threads(recipe.threads)
    out = Path(out or recipe.out)
    out.mkdir(parents=True, exist_ok=True)
    p = number_space(recipe.task, recipe.max_operand)
    tokenizer = number_tokenizer(p - 1, extra_words=PRETRAIN_WORDS)
    number_ids = number_token_ids(tokenizer, p)
    model = build_model(recipe, tokenizer)

    examples = build_examples(recipe.task, recipe.max_operand, recipe.dataset_seed)
    data = {s: AdditionBatches(tokenizer, select_split(examples, s), number_ids) for s in ("train", "val", "test")}
    train_subset = np.random.default_rng(recipe.seed).permutation(len(data["train"]))[: recipe.eval_train_subset]

    ckpt = out / CHECKPOINT
    resume = ckpt.exists() and not restart
    if recipe.pretrain and not resume:
        done = out / "pretrained.safetensors"  # kept, so an interrupted fine-tune never redoes pre-training
        if done.exists():
            from safetensors.torch import load_file

            model.load_state_dict(load_file(str(done)), strict=False)
            log(f"{recipe.name}: using the pre-trained weights in {done}")
        else:
            pretrain(model, tokenizer, recipe, log, progress)
            from safetensors.torch import save_file

            tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
            save_file(tensors, str(done.with_suffix(".tmp")))
            done.with_suffix(".tmp").rename(done)

    frozen = None
    if recipe.freeze:
        kind = recipe.freeze["kind"]
        if kind == "fourier":
            values = fourier_embedding(
                p, model.config.n_embd, recipe.freeze["periods"], float(recipe.freeze.get("scale", 1.0)), recipe.seed
            )
        elif kind == "representation":
            values = representation_rows(recipe.freeze, p, model.config.n_embd, log)
        else:
            values = transplant_rows(recipe.freeze["source"], tokenizer, p, model.config.n_embd)
        frozen = FrozenRows(model, number_ids, values)

    steps_per_epoch = math.ceil(len(data["train"]) / recipe.batch_size)
    opt = _optimizer(model, recipe.lr, recipe.weight_decay)
    sched = lr_schedule(opt, recipe.epochs * steps_per_epoch, recipe.warmup_steps, recipe.min_lr_ratio)
    log_rows: list[dict] = []
    start_epoch, elapsed = 0, 0.0
    if resume:
        meta = _load_checkpoint(ckpt, model, opt, sched)
        start_epoch, log_rows, elapsed = meta["epoch"], meta["log"], meta["elapsed_s"]
        if frozen is not None:
            frozen.restore()
        log(f"resuming {recipe.name} (seed {recipe.seed}) after epoch {start_epoch}")
    model.train()
    bar = step_bar((recipe.epochs - start_epoch) * steps_per_epoch, f"train {recipe.name}", progress)
    for epoch in range(start_epoch, recipe.epochs):
        t0 = time.time()
        order = np.random.default_rng((recipe.seed, epoch)).permutation(len(data["train"]))
        for _, ids, mask, pos, target in data["train"].batches(recipe.batch_size, order):
            loss = answer_loss(model, ids, mask, pos, target, recipe.precision)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if frozen is not None:
                frozen.restore()
            bar.update(1)
        elapsed += time.time() - t0
        row = {"seed": recipe.seed, "width": recipe.width, "epoch": epoch + 1, "seconds": round(elapsed, 1)}
        for split in ("train", "val", "test"):
            subset = train_subset if split == "train" else None
            acc, loss_v = evaluate_split(model, data[split], number_ids, recipe.batch_size, recipe.precision, subset)
            log_rows.append({**row, "split": split, "accuracy": acc, "loss": loss_v})
        last = {r["split"]: r for r in log_rows[-3:]}
        log(
            f"{recipe.name} seed {recipe.seed} epoch {epoch + 1}/{recipe.epochs}: "
            f"train {last['train']['accuracy']:.2%} val {last['val']['accuracy']:.2%} "
            f"test {last['test']['accuracy']:.2%} (val loss {last['val']['loss']:.4f}, {elapsed:.0f}s)"
        )
        _save_checkpoint(ckpt, model, opt, sched, epoch + 1, log_rows, elapsed)
    bar.close()

    frame = pd.DataFrame(log_rows)
    frame.insert(0, "recipe", recipe.name)
    _publish(out, model, tokenizer, recipe, frame, elapsed)
    test_acc = float(frame[frame["split"] == "test"]["accuracy"].iloc[-1])
    return TrainResult(out, frame, elapsed, test_acc)


def _publish(out: Path, model, tokenizer, recipe: Recipe, frame: pd.DataFrame, elapsed: float):
    """Weights (safetensors, recipe's dtype, shards under 5 MB), tokenizer, recipe, log, summary."""
    import torch

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
    final = frame[frame["epoch"] == frame["epoch"].max()].set_index("split")["accuracy"].to_dict()
    summary = {"recipe": recipe.name, "seed": recipe.seed, "train_seconds": round(elapsed, 1), "final_accuracy": final}
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
    name: str, out=None, seed=None, epochs=None, restart=False, threads=None, width=None, progress=None, log=print, device=None,
    run=None,
) -> TrainResult:
    """CLI entry. The recipe as written trains the shipped model. Another seed or width (a seed
    study) trains into OUT/seeds/[wWIDTH-]sSEED: its weights are not shipped, its log is, and
    precompute merges it into the run's training log. `run` trains one recipe into one folder:
    `train` (the default) for a model trained here from its recipe; the CLI passes
    `core.training.finetune.finetune` for a recipe that fine-tunes a pre-trained model (`number_tokens`), so that
    this module, which fine-tuning builds on, never imports it."""
    shipped = Recipe.load(name)
    recipe = Recipe.load(name)
    if epochs is not None:
        recipe.epochs = epochs
    if threads is not None:
        recipe.threads = threads
    if device is not None:
        if recipe.number_tokens is None and device != "cpu":
            raise CoreError(f"recipe {name} trains on the CPU only: --device applies to number-token fine-tuning recipes")
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
        raise CoreError(f"recipe {name} fine-tunes a pre-trained model: run it with `python -m core train --recipe {name}`")
    if (recipe.width, recipe.seed) == (shipped.width, shipped.seed):
        return run(recipe, main_out, restart, progress, log)
    sub = (f"w{recipe.width}-" if recipe.width != shipped.width else "") + f"s{recipe.seed}"
    return run(recipe, main_out / "seeds" / sub, restart, progress, log)
