"""The fine-tuning delta on its own: its file format, the number tokens it adds, and the exact rebuild.

A fine-tuned model (core.training.finetune) is kept as a **delta** (`delta.safetensors`: the new number rows
in float16 and the LoRA factors in float16 or, where a recipe asks, in 8 bits with a scale per rank component
(`encode_factors`), with their metadata). `rebuild` merges it into the base model and
writes an ordinary model folder. The merge is W + (alpha / r) sum_k outer(B[:, k], A[k]), summed in
float64 in a fixed order with elementwise numpy operations (no BLAS, whose rounding varies with the
processor), then rounded once to the base's float32, so it gives the same bits on any machine; the
digest of the rebuilt weights is stored in the delta and checked. The delta also says which stage
it continues (read by `core.training.stages`, which names what must be retrained first).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import AddedToken
from transformers import AutoModelForCausalLM, AutoTokenizer

from core.errors import CoreError
from core.models.importer import ensure_base_model
from core.models.parts import find_parts
from core.models.source import project_path, read_provenance
from core.training.checkpoint import unique_tensors
from core.training.recipe import FACTOR_PRECISIONS
from core.training.stages import DELTA_FILE

NUMBER_TOKEN = " {n}"  # the added token of n: its text, with the leading space (GPT-2's convention)
DELTA_FORMAT = "number-rows+lora/1"  # the factors in float16
DELTA_FORMAT_INT8 = "number-rows+lora-int8/1"  # the factors in 8 bits, one float32 scale per rank component
#: How a delta may keep its LoRA factors (a recipe's `lora.factors`), and the format each is written in.
FACTOR_FORMATS = dict(zip(FACTOR_PRECISIONS, (DELTA_FORMAT, DELTA_FORMAT_INT8), strict=True))
SCALE_PREFIX = "scale."  # the int8 format's scale of factor `lora.X.A` is the tensor `scale.lora.X.A`
#: The stages of `rebuild`, in order, as its `progress` callback names them (the first only when the base model has
#: to be imported).
REBUILD_STAGES = ("importing the base model", "merging", "checking the digest", "writing")

#: progress(stage, done, total): `rebuild` is in `stage` (one of REBUILD_STAGES), `done` of its `total` steps done.
Progress = Callable[[str, int, int], None]


def no_progress(stage: str, done: int, total: int) -> None:
    """The `progress` of a rebuild nobody follows."""


def add_number_tokens(tokenizer, p: int) -> np.ndarray:
    """Add the tokens " 0" .. " {p-1}" to `tokenizer` (in place) and return their ids.

    They are matched in the raw text before the model's own splitting, longest first, so " 108"
    is one token and " 1080" becomes " 108" + "0". Refuses a tokenizer that already has any of them.
    """
    texts = [NUMBER_TOKEN.format(n=n) for n in range(p)]
    probe = [t for t in (texts[min(10, p - 1)], texts[-1])
             if len(tokenizer(t, add_special_tokens=False)["input_ids"]) == 1]
    if probe or any(t in tokenizer.get_vocab() for t in texts):
        raise CoreError(
            f"this tokenizer already writes numbers such as {(probe or texts)[0]!r} as one token: it needs no added "
            "number tokens; precompute the model as it is (python -m core precompute --model ...)"
        )
    before = len(tokenizer)
    tokenizer.add_tokens([AddedToken(t, normalized=False, special=False) for t in texts])
    ids = np.asarray(tokenizer.convert_tokens_to_ids(texts), dtype=np.int64)
    if len(tokenizer) != before + p or not np.array_equal(ids, np.arange(before, before + p)):
        raise CoreError("adding the number tokens did not give p new consecutive ids; this tokenizer is not supported")
    return ids


def state_digest(state: dict) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes, in name order: equal digests mean
    bit-for-bit equal weights."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def unique_state(model) -> dict:
    """The model's state dict with tied tensors once (the names `save_pretrained` keeps)."""
    return unique_tensors(model.state_dict())


def encode_factors(tensors: dict, factors: str) -> dict:
    """The delta's tensors as `factors` ("float16" or "int8", FACTOR_FORMATS) keeps them; the number rows stay
    float16 either way. int8: each rank component k of a map's factors, A's row k and B's column k, is divided by its
    own scale (its largest magnitude / 127) and rounded, so a component with a small singular value keeps as many
    levels as the largest; the scales are kept in float32 (`SCALE_PREFIX`). `decode_factors` undoes it."""
    if factors not in FACTOR_FORMATS:
        raise CoreError(f"unknown factor precision {factors!r}: choose one of {', '.join(FACTOR_FORMATS)}")
    out = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in tensors.items()}
    if factors == "float16":
        return out
    for key in [k for k in tensors if k.startswith("lora.")]:
        t = tensors[key].detach().to("cpu", torch.float32)
        along = 1 if key.endswith(".A") else 0  # A is r x in (component k a row), B is out x r (a column)
        largest = t.abs().amax(dim=along)
        scale = torch.where(largest > 0, largest / 127.0, torch.ones_like(largest))  # an all-zero component: 0 / 1
        shaped = scale[:, None] if along == 1 else scale[None, :]
        out[key] = torch.round(t / shaped).clamp(-127, 127).to(torch.int8).contiguous()
        out[SCALE_PREFIX + key] = scale.contiguous()
    return out


def decode_factors(tensors: dict) -> dict:
    """The factors as the merge reads them: an int8 factor times its per-component scale, in float32 (exact,
    elementwise: the same bits on any machine); float tensors as they are. Without scales, the tensors unchanged."""
    out = {k: v for k, v in tensors.items() if not k.startswith(SCALE_PREFIX)}
    for key, value in out.items():
        if value.dtype == torch.int8:
            scale = tensors.get(SCALE_PREFIX + key)
            if scale is None:
                raise CoreError(f"the delta's factor {key} is int8 but has no scale {SCALE_PREFIX + key}: the delta is "
                                "damaged; train the recipe again")
            shaped = scale[:, None] if key.endswith(".A") else scale[None, :]
            out[key] = value.float() * shaped.float()
    return out


def save_delta(path: Path, tensors: dict, meta: dict) -> None:
    """The delta's tensors plus `meta` (strings) in the safetensors header; written, then renamed."""
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={k: str(v) for k, v in meta.items()})
    tmp.replace(path)


def read_delta(path: Path) -> tuple[dict, dict]:
    if not path.exists():
        raise CoreError(f"no fine-tuning delta at {path}: train the recipe first (python -m core train --recipe NAME)")
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if meta.get("format") not in FACTOR_FORMATS.values():
        raise CoreError(f"{path} is not a fine-tuning delta of this version (format {meta.get('format')!r}, "
                        f"expected one of {', '.join(repr(f) for f in FACTOR_FORMATS.values())})")
    return decode_factors(tensors), meta


def require_rows_follow(model, ids: np.ndarray) -> None:
    """The added tokens' ids must be the rows right after the embedding matrix (no padded vocabulary)."""
    n = model.get_input_embeddings().weight.shape[0]
    if int(ids[0]) != n:
        raise CoreError(
            f"the tokenizer gives the first added number token id {int(ids[0])}, but the embedding has {n} rows "
            "(a padded vocabulary): number-token fine-tuning does not support this model"
        )


def merge_lora(weight, A, B, scale: float):
    """weight + scale * sum_k outer(B[:, k], A[k]), summed in float64 in the order k = 0..r-1 with
    elementwise numpy operations and rounded once to weight's dtype: the same bits on any machine."""
    a = A.double().numpy()
    b = B.double().numpy()
    acc = np.zeros((b.shape[0], a.shape[1]), dtype=np.float64)
    for k in range(a.shape[0]):
        acc += np.multiply.outer(b[:, k], a[k])
    out = weight.detach().double().numpy() + scale * acc
    return torch.from_numpy(out).to(weight.dtype)


def merged_model(base_folder: str, tensors: dict, meta: dict, on_merged: Callable[[int, int], None] | None = None):
    """(model, tokenizer): the base model with the number tokens added, the new rows set and every
    LoRA update merged (`merge_lora`: the same bits on any machine); `on_merged(done, total)` after each
    weight matrix merged."""
    tokenizer = AutoTokenizer.from_pretrained(base_folder)
    model = AutoModelForCausalLM.from_pretrained(base_folder, use_safetensors=True, dtype=torch.float32)
    p = int(meta["p"])
    ids = add_number_tokens(tokenizer, p)
    require_rows_follow(model, ids)
    rows = tensors["number_rows"].float()
    if rows.shape != (p, model.config.hidden_size):
        raise CoreError(f"the delta's number rows are {tuple(rows.shape)}, the base model needs "
                        f"({p}, {model.config.hidden_size})")
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[torch.as_tensor(ids)] = rows
    scale = float(meta["alpha"]) / int(meta["rank"])
    blocks = find_parts(model).blocks
    names = sorted({k[len("lora."):-2] for k in tensors if k.startswith("lora.")})
    for done, name in enumerate(names, 1):
        i, sub = name.split(".", 1)
        linear = blocks[int(i)].get_submodule(sub)
        with torch.no_grad():
            linear.weight.copy_(merge_lora(linear.weight, tensors[f"lora.{name}.A"], tensors[f"lora.{name}.B"], scale))
        if on_merged is not None:
            on_merged(done, len(names))
    model.tie_weights()
    return model, tokenizer


def rebuild(folder: str | Path, base: str | None = None, check: bool = True, log=print,
            progress: Progress = no_progress) -> Path:
    """Write the fine-tuned model into `folder` from `folder/delta.safetensors` and the base model
    (the folder the delta names, as written when it was trained, unless `base` is given); with
    `check`, fail unless the rebuilt weights have the digest recorded when the delta was written.
    `progress(stage, done, total)` follows it stage by stage (REBUILD_STAGES). Nothing is written unless the
    whole rebuild succeeds, and then whole (`write_model_folder`)."""
    folder = Path(folder)
    tensors, meta = read_delta(folder / DELTA_FILE)
    base = base or meta["base"]
    if not project_path(base).is_dir():
        progress(REBUILD_STAGES[0], 0, 1)
    base = str(ensure_base_model(base, log=log))
    t0 = time.time()
    progress("merging", 0, 1)
    model, tokenizer = merged_model(base, tensors, meta, on_merged=lambda done, total: progress("merging", done, total))
    progress("checking the digest", 0, 1)
    digest = state_digest(unique_state(model))
    recorded = meta.get("rebuilt_sha256")
    if check and recorded and digest != recorded:
        base_now = state_digest(unique_state(load_base(base)))
        if meta.get("base_sha256") and base_now != meta["base_sha256"]:
            what = (f"the base model in {base} is not the one the delta was trained on: import it again "
                    f"(python -m core import-model smollm2-135m --force) or name the right one with --base")
        else:
            what = ("the base model is the right one, so the merge itself came out differently here (other library "
                    f"versions: the delta was made with {meta.get('versions', '?')}); rebuild with --no-check to keep "
                    "it anyway")
        raise CoreError(f"the rebuilt weights differ from the ones trained (digest {digest[:12]} != {recorded[:12]}): "
                        f"{what}")
    progress("writing", 0, 1)
    write_model_folder(folder, model, tokenizer, {
        "kind": "fine-tuned",
        "fine_tuned": meta.get("recipe", "") or folder.name,
        "folder": str(folder),
        "base": str(base),
        "base_provenance": read_provenance(Path(base)) or {},  # where the base model came from (package, licence, ...)
        "delta": DELTA_FILE,
        "rebuilt_sha256": digest,
        "label": epochs_said(meta.get("label", ""), folder),
    })
    if not recorded:
        checked = "NOT checked: no digest recorded"
    else:
        checked = "matches the digest recorded in the delta" if check else "NOT checked (--no-check)"
    log(f"rebuilt {folder} from {base} + {DELTA_FILE} in {time.time() - t0:.0f}s "
        f"(weights sha256 {digest[:12]}, {checked})")
    return folder


def epochs_said(label: str, folder: Path) -> str:
    """The delta's label with the epochs its training ran (train_summary.json beside it) where the recipe planned
    more: "7 epochs" becomes "6 of 7 epochs" for a run its stop rule ended early."""
    try:
        ran = json.loads((Path(folder) / "train_summary.json").read_text()).get("epochs_run")
    except (OSError, ValueError, AttributeError):
        return label
    planned = re.search(r"\b(\d+) epochs\b", label)
    if isinstance(ran, int) and planned and int(planned.group(1)) != ran:
        return label.replace(planned.group(0), f"{ran} of {planned.group(1)} epochs", 1)
    return label


def write_model_folder(folder: Path, model, tokenizer, provenance: dict) -> None:
    """A model folder: the weights (safetensors), the tokenizer, provenance.json; the folder's other files (a delta,
    its recipe and log) stay. Written whole or not at all: everything is saved into a folder beside it first
    (`.writing-NAME`), then moved in with the weights last, after the older weights are removed; a write that fails
    or is stopped half way leaves a folder without weights (a model not there yet), never new files with old weights
    or weights without their tokenizer."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stage = folder.parent / f".writing-{folder.name}"
    shutil.rmtree(stage, ignore_errors=True)  # what a write stopped half way left
    stage.mkdir()
    try:
        model.save_pretrained(stage, safe_serialization=True)
        tokenizer.save_pretrained(stage)
        (stage / "provenance.json").write_text(json.dumps(provenance, indent=1))
        for f in [*folder.glob("model*.safetensors"), folder / "model.safetensors.index.json"]:
            f.unlink(missing_ok=True)
        weights = sorted(stage.glob("model*.safetensors")) + sorted(stage.glob("model.safetensors.index.json"))
        for f in [*(f for f in sorted(stage.iterdir()) if f not in weights), *weights]:  # the weights last
            os.replace(f, folder / f.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def load_base(base_folder: str):
    """The imported base model (float32, safetensors only) that a delta is trained against and merged into."""
    return AutoModelForCausalLM.from_pretrained(base_folder, use_safetensors=True, dtype=torch.float32)


def library_versions() -> str:
    return f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}"

