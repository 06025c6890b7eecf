"""Load a causal LM and its tokenizer; find its blocks, modules, final norm, unembedding and numbers.

Loading goes through transformers' `from_pretrained` on a hub id or a local folder, with
safetensors only (a folder holding only pickled checkpoints is refused; nothing is unpickled)
and `trust_remote_code` off unless the caller turns it on. `device_map="auto"` (accelerate)
spreads a model too big for one device over several.

The parts the analysis needs are found by the known layouts of GPT-2, GPT-J, GPT-NeoX/Pythia,
Phi, Llama/Mistral/Qwen2/Gemma-style models; any other layout can be named by hand with
`ModuleNames` (CLI: --modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from core.errors import CoreError
from core.files import PROJECT_ROOT

DTYPES = ("float32", "bfloat16", "float16", "auto")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
#: The prompt the number tokens are probed with: the paper's running example.
PROBE_PROMPT = "Put together 15 and 93. Answer:"
NUMBER_SCAN_LIMIT = 2048
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model", "vocab.txt")


def project_path(path) -> Path:
    """A path as manifests and recipes store it (relative to the project root, or absolute), made absolute."""
    path = Path(path)
    return (path if path.is_absolute() else PROJECT_ROOT / path).resolve()


def project_relative(folder: Path) -> str:
    """A local model folder as manifests store it: relative to the project root (portable between machines)."""
    import os

    return Path(os.path.relpath(Path(folder).resolve(), PROJECT_ROOT)).as_posix()


@dataclass(frozen=True)
class ModuleNames:
    """Where a model keeps its parts: dotted paths from the top model, names inside a block."""

    blocks: str
    attn: str
    mlp: str
    final_norm: str | None

    @classmethod
    def parse(cls, text: str) -> "ModuleNames":
        """From "blocks=transformer.h,attn=attn,mlp=mlp,final_norm=transformer.ln_f"."""
        parts = {}
        for item in text.split(","):
            key, sep, value = item.partition("=")
            if not sep or not value.strip():
                raise CoreError(f"cannot read module names {text!r}: write blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH")
            parts[key.strip()] = value.strip()
        unknown = set(parts) - {"blocks", "attn", "mlp", "final_norm"}
        missing = {"blocks", "attn", "mlp"} - set(parts)
        if unknown or missing:
            raise CoreError(
                f"module names {text!r}: "
                + (f"unknown keys {sorted(unknown)}; " if unknown else "")
                + (f"missing {sorted(missing)}; " if missing else "")
                + "write blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH"
            )
        fn = parts.get("final_norm")
        return cls(parts["blocks"], parts["attn"], parts["mlp"], None if fn in (None, "none") else fn)

    def __str__(self) -> str:
        return f"blocks={self.blocks},attn={self.attn},mlp={self.mlp},final_norm={self.final_norm or 'none'}"


KNOWN_LAYOUTS = (
    ModuleNames("transformer.h", "attn", "mlp", "transformer.ln_f"),  # GPT-2, GPT-J
    ModuleNames("gpt_neox.layers", "attention", "mlp", "gpt_neox.final_layer_norm"),  # GPT-NeoX, Pythia
    # Gemma2, Gemma3, OLMo2 normalise each module's output before adding it to the stream: what is
    # added is the output of the post-norms, so those are the "attention" and "MLP" outputs here.
    ModuleNames("model.layers", "post_attention_layernorm", "post_feedforward_layernorm", "model.norm"),
    ModuleNames("model.layers", "self_attn", "mlp", "model.norm"),  # Llama, Mistral, Qwen2, Gemma, Phi-3
    ModuleNames("model.layers", "self_attn", "mlp", "model.final_layernorm"),  # Phi-1/1.5/2
)


@dataclass
class ModelParts:
    """The modules the analysis hooks and reads. attn[l] and mlp[l] add Attn(l), MLP(l) to the stream."""

    names: ModuleNames
    blocks: list
    attn: list
    mlp: list
    final_norm: object | None

    @property
    def n_layers(self) -> int:
        return len(self.blocks)


@dataclass(frozen=True)
class NumberTokens:
    """The single tokens the model would emit for the numbers 0..P-1 after a prompt.

    A prompt is read as `prompt + prompt_suffix`; the answer n follows it as the text
    `answer_prefix + str(n)`, one token. Three ways are tried (`core.models.loading.NUMBER_CONVENTIONS`):

    * "leading-space": the token carries its space (GPT-2's " 108" after "Answer:");
    * "no-space" after a prompt ending in a space ("Answer: " then "108": the space is its own
      token or is dropped by a word-level tokenizer);
    * "no-space" right after the prompt ("Answer:" then "108": what the paper's fine-tuned GPT-2
      emits; with GPT-2's vocabulary it is the only way the numbers 0..520 are all single tokens).

    k-shot prompts write their solved examples the same way, so an un-fine-tuned model sees in
    the prompt the very tokens it is scored on.
    """

    ids: tuple[int, ...]
    prompt_suffix: str
    first_split: int | None  # first number that is not a single token (None: all up to the scan limit are)
    first_split_pieces: tuple[str, ...] = ()
    convention: str = "leading-space"  # "leading-space" or "no-space"
    answer_prefix: str = " "  # text between the prompt (with its suffix) and the number

    @property
    def P(self) -> int:
        return len(self.ids)

    def ids_for(self, p: int) -> np.ndarray:
        require_number_range(self, p)
        return np.asarray(self.ids[:p], dtype=np.int64)

    def answer_text(self, n: int) -> str:
        """The text that follows the prompt (as the model reads it) when the answer is n."""
        return f"{self.answer_prefix}{n}"

    def describe(self) -> str:
        style = {
            ("leading-space", "", " "): 'with the leading space inside the token (" 108" after "Answer:")',
            ("no-space", "", " "): 'without a space ("108" after "Answer:", the tokenizer drops the space between)',
            ("no-space", " ", ""): 'without a space, after a prompt ending in a space ("108" after "Answer: ")',
            ("no-space", "", ""): 'without a space, right after the prompt ("108" after "Answer:")',
        }.get((self.convention, self.prompt_suffix, self.answer_prefix), f"{self.convention} tokens")
        if self.first_split is None:
            return f"numbers 0..{self.P - 1} (at least) are single tokens, {style}"
        return f"numbers 0..{self.P - 1} are single tokens, {style}; {self.first_split} is the first that is not"


#: (convention, prompt_suffix, answer_prefix), in order of preference when several cover a task:
#: the way running text writes an answer first, the fine-tuned paper models' way last.
NUMBER_CONVENTIONS = (("leading-space", "", " "), ("no-space", " ", ""), ("no-space", "", ""))


def require_number_range(numbers: NumberTokens, p: int, what: str = "this task") -> None:
    """Fail with a clear message when the numbers 0..p-1 are not all single tokens."""
    if p <= numbers.P:
        return
    if numbers.P == 0:
        pieces = f" (it becomes {list(numbers.first_split_pieces)})" if numbers.first_split_pieces else ""
        raise CoreError(
            f"{what} needs the numbers 0..{p - 1} as single tokens, but this tokenizer has not even 0 as one token "
            f"after the prompt{pieces}: this model cannot be analysed with this method"
        )
    if numbers.P == 10 and numbers.first_split == 10:
        hint = "this tokenizer splits numbers into digits, so only 0..9 are single tokens (P = 10)"
    else:
        hint = f"the model's usable range is 0..{numbers.P - 1} (P = {numbers.P})"
    pieces = f" (it becomes {list(numbers.first_split_pieces)})" if numbers.first_split_pieces else ""
    largest = (numbers.P - 1) // 2
    raise CoreError(
        f"{what} needs the numbers 0..{p - 1} as single tokens, but {numbers.first_split} is the first "
        f"number that is not one token{pieces}: {hint}. "
        + (
            f"Use --max-operand {largest} to shrink the task to answers 0..{2 * largest}."
            if largest >= 1
            else "This model cannot be analysed with this method."
        )
    )


def number_token_candidates(
    tokenizer, probe_prompt: str = PROBE_PROMPT, limit: int = NUMBER_SCAN_LIMIT
) -> list[NumberTokens]:
    """The number tokens under each convention of `NUMBER_CONVENTIONS`, in that order.

    A number counts only if `prompt + suffix + prefix + str(n)` tokenizes to the prompt's own
    tokens plus exactly one more, that token is not the unknown token, decodes back to the
    number, and differs from the tokens of all smaller numbers. The scan stops at the first
    number that fails.
    """
    unk = getattr(tokenizer, "unk_token_id", None)
    out = []
    for convention, suffix, prefix in NUMBER_CONVENTIONS:
        base = tokenizer(probe_prompt + suffix)["input_ids"]
        texts = [probe_prompt + suffix + prefix + str(n) for n in range(limit)]
        encoded = tokenizer(texts)["input_ids"]
        ids: list[int] = []
        seen: set[int] = set()
        first_split, pieces = None, ()
        for n, full in enumerate(encoded):
            new = full[len(base):]
            ok = (
                full[: len(base)] == base
                and len(new) == 1
                and new[0] != unk
                and new[0] not in seen
                and tokenizer.decode([new[0]]).strip() == str(n)
            )
            if not ok:
                first_split = n
                pieces = tuple(tokenizer.convert_ids_to_tokens(new if full[: len(base)] == base else full[-4:]))
                break
            ids.append(new[0])
            seen.add(new[0])
        if ids and convention == "leading-space" and not _carries_space(tokenizer, ids[0]):
            convention = "no-space"  # a word-level tokenizer drops the space: the token is the bare number
        out.append(NumberTokens(tuple(ids), suffix, first_split, pieces, convention, prefix))
    return out


def _carries_space(tokenizer, token_id: int) -> bool:
    piece = tokenizer.convert_ids_to_tokens(token_id)
    return tokenizer.decode([token_id]).startswith(" ") or (isinstance(piece, str) and piece[:1] in ("Ġ", "▁", " "))


def choose_number_tokens(candidates: Sequence[NumberTokens], p: int | None = None) -> NumberTokens:
    """The first convention (in order of preference) that covers 0..p-1; else the longest range."""
    if p is not None:
        for cand in candidates:
            if cand.P >= p:
                return cand
    best = candidates[0]
    for cand in candidates[1:]:
        if cand.P > best.P:
            best = cand
    return best


def find_number_tokens(
    tokenizer, probe_prompt: str = PROBE_PROMPT, limit: int = NUMBER_SCAN_LIMIT, p: int | None = None
) -> NumberTokens:
    """Find, for each n, the single token a model emits for n after `probe_prompt`.

    With `p`, the first convention that covers 0..p-1 wins (a natural-text convention before the
    fine-tuned models' no-space one); without, the one that covers the longest run 0..P-1.
    """
    return choose_number_tokens(number_token_candidates(tokenizer, probe_prompt, limit), p)


@dataclass(eq=False)
class Unembed:
    """How the model turns a residual-stream vector into logits over the number tokens.

    logits(h) = softcap(scale * (W_U norm(h) + b)): the final norm (optional, off for the
    logit lens "without the final norm"), the unembedding rows of the number tokens 0..p-1, the
    lm_head bias, a constant logit scale (Cohere, Granite) and final logit soft-capping
    (c tanh(z / c), Gemma2). `read(x)` is the linear part scale * W_U x: what W_U reads off a
    module output (module logits, module spectra, the Fourier filters), with no bias, since a
    module output adds no bias of its own.
    """

    weight: object  # (p, D) float32 tensor, on the lm_head's device
    bias: object | None  # (p,) float32 or None
    norm: object | None  # the final norm module or None
    scale: float = 1.0
    softcap: float | None = None
    weight_dtype: object = None  # the dtype the model stores W_U in (sets the filters' rank tolerance)

    @property
    def p(self) -> int:
        return int(self.weight.shape[0])

    @property
    def width(self) -> int:
        return int(self.weight.shape[1])

    def read(self, x):
        """scale * W_U x over the last axis, float32 (..., D) -> (..., p)."""
        out = x.to(self.weight.device).float() @ self.weight.T
        return out * self.scale if self.scale != 1.0 else out

    def logits(self, h, final_norm: bool = True):
        """The model's own logits over the number tokens for residual vectors h (..., D)."""
        import torch

        if final_norm and self.norm is not None:
            dev = next(self.norm.parameters(), h).device
            with torch.no_grad():
                h = self.norm(h.to(dev))
        z = h.to(self.weight.device).float() @ self.weight.T
        if self.bias is not None:
            z = z + self.bias
        if self.scale != 1.0:
            z = z * self.scale
        if self.softcap:
            z = torch.tanh(z / self.softcap) * self.softcap
        return z


def build_unembed(model, final_norm, ids) -> Unembed:
    """The model's `Unembed` restricted to the token ids `ids` (the number tokens)."""
    import torch

    head = model.get_output_embeddings()
    weight = head.weight
    t = torch.as_tensor(np.asarray(ids, dtype=np.int64), device=weight.device)
    rows = weight.detach()[t].float()
    bias = getattr(head, "bias", None)
    bias = bias.detach()[t.to(bias.device)].float().to(weight.device) if bias is not None else None
    scale, softcap = logit_transform(model.config)
    return Unembed(rows, bias, final_norm, scale, softcap, weight.dtype)


def logit_transform(config) -> tuple[float, float | None]:
    """(scale, softcap) the model applies to its logits after lm_head, read from its config."""
    model_type = getattr(config, "model_type", "")
    text = getattr(config, "text_config", None) or config
    scale = 1.0
    if model_type.startswith("cohere") and getattr(text, "logit_scale", None):
        scale = float(text.logit_scale)
    if model_type.startswith("granite") and getattr(text, "logits_scaling", None):
        scale = 1.0 / float(text.logits_scaling)
    softcap = getattr(text, "final_logit_softcapping", None)
    return scale, (float(softcap) if softcap else None)


@dataclass
class LoadedModel:
    """A model ready for analysis: weights, tokenizer, parts, and number tokens."""

    model: object
    tokenizer: object
    parts: ModelParts
    numbers: NumberTokens
    source: str
    revision: str | None
    fingerprint: str
    architecture: str
    local: bool
    extra: dict = field(default_factory=dict)
    number_candidates: list = field(default_factory=list)  # NumberTokens under each convention

    @property
    def n_layers(self) -> int:
        return self.parts.n_layers

    @property
    def width(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[1])

    @property
    def input_device(self):
        return self.model.get_input_embeddings().weight.device

    def select_numbers(self, p: int, what: str = "this task") -> NumberTokens:
        """Use the number-token convention that covers 0..p-1 (see `choose_number_tokens`); fail clearly if none does."""
        chosen = choose_number_tokens(self.number_candidates or [self.numbers], p)
        require_number_range(chosen, p, what)
        self.numbers = chosen
        return chosen

    def unembed(self, p: int, ids=None) -> Unembed:
        """The `Unembed` of the number tokens 0..p-1 (or of the token ids `ids`)."""
        return build_unembed(self.model, self.parts.final_norm, self.numbers.ids_for(p) if ids is None else ids)

    def unembedding(self, p: int):
        """W_U: the p rows of the unembedding for the number tokens 0..p-1, float32, (p, D).

        The tensor carries `weight_dtype`, the dtype the model stores W_U in, which sets the
        rank tolerance of the filters built from it (`core.analysis.filters.projection_filter`).
        """
        import torch

        ids = torch.as_tensor(self.numbers.ids_for(p))
        weight = self.model.get_output_embeddings().weight
        rows = weight.detach()[ids.to(weight.device)].float()
        rows.weight_dtype = weight.dtype
        return rows

    def number_embedding(self, p: int):
        """W_E: the p input-embedding rows of the number tokens 0..p-1, float32, (p, D)."""
        import torch

        ids = torch.as_tensor(self.numbers.ids_for(p))
        weight = self.model.get_input_embeddings().weight
        return weight.detach()[ids.to(weight.device)].float()


def _get(model, path: str):
    try:
        return model.get_submodule(path)
    except AttributeError:
        return None


def _module_listing(model, depth: int = 3) -> str:
    import torch.nn as nn

    lines = []
    for name, mod in model.named_modules():
        if not name or name.count(".") >= depth:
            continue
        if isinstance(mod, nn.ModuleList):
            first = list(mod[0].named_children()) if len(mod) else []
            lines.append(f"{name} (list of {len(mod)}; first item has: {', '.join(n for n, _ in first)})")
        elif name.count(".") < 2:
            lines.append(name)
    return "; ".join(lines[:40])


def find_parts(model, names: ModuleNames | None = None) -> ModelParts:
    """Locate blocks, attention and MLP modules, and the final norm, by known layouts or by `names`."""
    candidates = [names] if names is not None else list(KNOWN_LAYOUTS)
    for cand in candidates:
        blocks = _get(model, cand.blocks)
        if blocks is None or not hasattr(blocks, "__len__") or len(blocks) == 0:
            continue
        if not all(_get(b, cand.attn) is not None and _get(b, cand.mlp) is not None for b in blocks):
            continue
        final_norm = _get(model, cand.final_norm) if cand.final_norm else None
        if cand.final_norm and final_norm is None:
            continue
        return ModelParts(
            names=cand,
            blocks=list(blocks),
            attn=[_get(b, cand.attn) for b in blocks],
            mlp=[_get(b, cand.mlp) for b in blocks],
            final_norm=final_norm,
        )
    what = f"the module names you gave ({names})" if names is not None else "any known layout (GPT-2, GPT-J, GPT-NeoX, Phi, Llama-style)"
    raise CoreError(
        f"cannot find the decoder blocks, attention, MLP and final norm of {type(model).__name__} with {what}. "
        f"Modules found: {_module_listing(model)}. Name them by hand with "
        f"--modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH (for GPT-2: {KNOWN_LAYOUTS[0]})"
    )


#: Largest share of h(l) that h(l) - h(l-1) - Attn(l) - MLP(l) may have (float32; half precisions get more).
RESIDUAL_TOLERANCE = {"float32": 1e-3, "half": 3e-2}


def check_layout(model, tokenizer, parts: ModelParts, unembed_of, probe_ids=None, texts: Sequence[str] = (PROBE_PROMPT,)) -> dict:
    """Check on a probe batch that the hooked modules are what the analysis assumes; fail clearly if not.

    1. h(l) = h(l-1) + Attn(l) + MLP(l) at every layer (the residual stream adds exactly the hooked
       attention and MLP outputs): post-norm layouts hooked at the wrong place, or --modules naming
       the wrong modules, break it.
    2. The `Unembed` at the last layer reproduces the model's own logits (final norm, bias, scale,
       soft-cap all accounted for).
    Returns the largest relative errors seen, for the manifest.
    """
    import torch

    from core.models.capture import LastPositionRecorder, prepare_batches

    batch = prepare_batches(tokenizer, list(texts), len(texts))[0]
    device = model.get_input_embeddings().weight.device
    with LastPositionRecorder(parts) as rec, torch.no_grad():
        out = model(
            input_ids=batch.input_ids.to(device),
            attention_mask=batch.attention_mask.to(device),
            position_ids=batch.position_ids.to(device),
            use_cache=False,
        )
        vecs = rec.take(model.get_output_embeddings().weight.device)
    resid, attn, mlp = vecs["resid"].float(), vecs["attn"].float(), vecs["mlp"].float()
    if attn.shape[-1] != resid.shape[-1] or mlp.shape[-1] != resid.shape[-1]:
        raise CoreError(
            f"the hooked attention/MLP outputs are {attn.shape[-1]}/{mlp.shape[-1]} wide but the residual stream is "
            f"{resid.shape[-1]} wide: the module names ({parts.names}) do not name the modules whose outputs are added "
            "to the stream. Name them with --modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH"
        )
    half = model.get_output_embeddings().weight.dtype in (torch.float16, torch.bfloat16)
    tol = RESIDUAL_TOLERANCE["half" if half else "float32"]
    gap = resid[:, 1:] - resid[:, :-1] - attn - mlp
    share = (gap.norm(dim=-1) / resid[:, 1:].norm(dim=-1).clamp_min(1e-12)).max(0).values  # per layer
    worst = int(share.argmax())
    if float(share[worst]) > tol:
        raise CoreError(
            f"{type(model).__name__}: h(l) - h(l-1) - Attn(l) - MLP(l) is {float(share[worst]):.1%} of h(l) at layer "
            f"{worst + 1} (allowed {tol:.1%}), so the hooked modules ({parts.names}) are not what each block adds to "
            "the residual stream. This happens with post-norm layouts (a norm after each module) hooked before their "
            "norm, or with --modules naming the wrong modules. Name the modules whose outputs are added to the stream "
            "with --modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH, or use another model."
        )
    lens_share = None
    if probe_ids is not None and len(probe_ids):
        unembed = unembed_of(probe_ids)
        lens = unembed.logits(resid[:, -1])
        own = out.logits[:, -1, :].float()[:, torch.as_tensor(np.asarray(probe_ids), device=out.logits.device)].to(lens.device)
        lens_share = float((lens - own).abs().max() / own.abs().max().clamp_min(1e-12))
        if lens_share > tol * 10:
            raise CoreError(
                f"{type(model).__name__}: the logit lens at the last layer (final norm, unembedding, bias, logit "
                f"scale and soft-cap) differs from the model's own logits by {lens_share:.1%} of their size: the model "
                "transforms its logits in a way this tool does not know, or final_norm names the wrong module "
                "(--modules ...,final_norm=PATH)."
            )
    return {"residual_gap": round(float(share.max()), 6), "lens_gap": None if lens_share is None else round(lens_share, 6)}


def _torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise CoreError(f"unknown dtype {name!r}: choose one of {', '.join(DTYPES)}")
    return "auto" if name == "auto" else getattr(torch, name)


def check_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise CoreError(f"unknown device {device!r}: use cpu, cuda, cuda:N, mps or auto") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CoreError(f"device {device!r} asked for, but this machine has no CUDA GPU: use --device cpu")
    return device


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files that make up the model in `folder`."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
        except (OSError, json.JSONDecodeError, AttributeError):
            shards = []
        if shards and all((folder / f).is_file() for f in shards):
            return [folder / f for f in shards]
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    return sorted(f for f in folder.glob("*.safetensors") if f.name != "delta.safetensors")  # not a fine-tuning delta


def fingerprint_folder(folder: Path, full_hash_limit: int = 512 * 2**20) -> str:
    """A hash of the safetensors weights a folder's model loads: whole files when small, else headers
    and sizes. Only the files `from_pretrained` reads count (the shards of model.safetensors.index.json,
    or model.safetensors): a leftover checkpoint beside them does not change the run's identity."""
    files = weight_files(folder)
    total = sum(f.stat().st_size for f in files)
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        with f.open("rb") as fh:
            if total <= full_hash_limit:
                for chunk in iter(lambda: fh.read(2**20), b""):
                    h.update(chunk)
            else:
                head = fh.read(8)
                n = int.from_bytes(head, "little")
                h.update(head + fh.read(min(n, 2**24)))
                h.update(str(f.stat().st_size).encode())
    return ("sha256:" if total <= full_hash_limit else "header-sha256:") + h.hexdigest()[:16]


def resolve_source(source: str) -> tuple[bool, Path | None]:
    """(is_local, folder): a local folder when it exists, else a validated hub id."""
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise CoreError(f"{source} is a file: give the model's folder (with config.json and *.safetensors) or a hub id")
        if not (path / "config.json").exists():
            raise CoreError(f"{source} has no config.json: give a folder saved with save_pretrained, or a hub id")
        if (path / "delta.safetensors").exists() and not weight_files(path):
            shown = project_relative(path) if PROJECT_ROOT in path.resolve().parents else str(path)
            raise CoreError(f"{source} holds only a fine-tuning delta, not the model's weights: run `python -m core rebuild "
                            f"{shown}` (it names anything else it needs first, such as the base model)")
        if not any(path.glob("*.safetensors")):
            pickled = [p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES]
            found = f" (found only {', '.join(pickled)})" if pickled else ""
            raise CoreError(
                f"{source} has no .safetensors weights{found}. This tool loads safetensors only and never "
                "unpickles checkpoints: convert the weights with save_pretrained(..., safe_serialization=True) "
                "in an environment you trust."
            )
        if not any((path / f).exists() for f in TOKENIZER_FILES):
            raise CoreError(
                f"{source} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...): save the tokenizer next to "
                "the weights with tokenizer.save_pretrained(folder)"
            )
        return True, path
    parent = path.parent
    if "/" in source and str(parent) not in ("", ".") and parent.is_dir():
        import difflib

        near = difflib.get_close_matches(path.name, [c.name for c in parent.iterdir() if c.is_dir()], n=1)
        hint = f" Did you mean {parent / near[0]}?" if near else ""
        raise CoreError(
            f"there is no folder {source} (but {parent} exists here, so this is not read as a hub id).{hint}"
        )
    if source.startswith((".", "/", "~")) or not HUB_ID.match(source):
        raise CoreError(f"{source!r} is neither an existing folder nor a hub id like 'gpt2' or 'EleutherAI/pythia-160m'")
    return False, None


def load_tokenizer(source: str, trust_remote_code: bool = False, revision: str | None = None):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, revision=revision)
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        if tok.eos_token is not None:
            tok.pad_token = tok.eos_token
        elif tok.unk_token is not None:
            tok.pad_token = tok.unk_token
        else:
            raise CoreError(f"the tokenizer of {source} has no pad, eos or unk token to pad batches with")
    return tok


def load_model(
    source: str,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    device_map: str | None = None,
    trust_remote_code: bool = False,
    revision: str | None = None,
    module_names: ModuleNames | None = None,
) -> LoadedModel:
    """Load a causal LM from a hub id or local folder, in eval mode, with its parts and numbers."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own bars say what is being computed; theirs only clutter
    local, folder = resolve_source(source)
    torch_dtype = _torch_dtype(dtype)
    if device_map is None:
        device = check_device(device)
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code, revision=revision)
        tokenizer = load_tokenizer(source, trust_remote_code, revision)
        model = AutoModelForCausalLM.from_pretrained(
            source,
            config=config,
            dtype=torch_dtype,
            use_safetensors=True,
            trust_remote_code=trust_remote_code,
            revision=revision,
            device_map=device_map,
        )
    except CoreError:
        raise
    except Exception as exc:  # OSError, ValueError, a corrupt safetensors file (SafetensorError), ...
        where = f"the folder {source}" if local else f"the Hugging Face hub id {source!r}"
        msg = str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__
        if type(exc).__name__ == "SafetensorError" or "safetensors" in type(exc).__module__:
            raise CoreError(
                f"could not load {where}: a .safetensors file is corrupt or truncated ({msg}). "
                "Copy or save the weights again."
            ) from None
        if "trust_remote_code" in str(exc):
            raise CoreError(
                f"{where} needs custom code to load. It is off by default; pass --trust-remote-code on the "
                "command line only if you trust that code."
            ) from None
        hint = (
            " If this machine has no internet, download the model elsewhere (as safetensors) and pass its folder."
            if not local
            else ""
        )
        raise CoreError(f"could not load {where}: {msg}.{hint}") from None
    if device_map is None:
        model.to(device)
    model.eval()
    parts = find_parts(model, module_names)
    candidates = number_token_candidates(tokenizer)
    numbers = choose_number_tokens(candidates)
    if numbers.P == 0:
        require_number_range(numbers, 1, f"{source}")
    checks = check_layout(model, tokenizer, parts, lambda ids: build_unembed(model, parts.final_norm, ids), numbers.ids)
    revision_seen = getattr(config, "_commit_hash", None) or revision
    if local:
        fingerprint = fingerprint_folder(folder)
    else:
        fingerprint = f"hub:{revision_seen}" if revision_seen else "hub:unknown-revision"
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        parts=parts,
        numbers=numbers,
        source=str(folder.resolve()) if local else source,
        revision=revision_seen,
        fingerprint=fingerprint,
        architecture=type(model).__name__,
        local=local,
        extra={"dtype": dtype, "device": device if device_map is None else f"device_map={device_map}", "layout_check": checks},
        number_candidates=candidates,
    )


def describe_model(loaded: LoadedModel) -> dict:
    """A JSON-friendly summary for manifests."""
    return {
        "source": project_relative(Path(loaded.source)) if loaded.local else loaded.source,
        "revision": loaded.revision,
        "fingerprint": loaded.fingerprint,
        "architecture": loaded.architecture,
        "n_layers": loaded.n_layers,
        "width": loaded.width,
        "module_names": str(loaded.parts.names),
        "numbers": loaded.numbers.describe(),
        "number_range": loaded.numbers.P,
        "number_token_convention": loaded.numbers.convention,
        "number_ranges_by_convention": {
            f"{c.convention}, prompt ends {('Answer:' + c.prompt_suffix)!r}": c.P for c in loaded.number_candidates
        },
        "prompt_suffix": loaded.numbers.prompt_suffix,
        "answer_prefix": loaded.numbers.answer_prefix,
        "provenance": read_provenance(Path(loaded.source)) if loaded.local else None,
        **loaded.extra,
    }


def read_recipe_label(folder: Path) -> str | None:
    """The human label a project-trained model carries in its folder (recipe.json), if any."""
    for name in ("recipe.json", "provenance.json"):  # trained here / imported (core.models.importer)
        path = folder / name
        if path.exists():
            try:
                return json.loads(path.read_text()).get("label")
            except (OSError, json.JSONDecodeError):
                return None
    return None


def read_provenance(folder: Path) -> dict | None:
    """Where an imported model came from (`core.models.importer` writes provenance.json), if it was imported."""
    path = folder / "provenance.json"
    try:
        data = json.loads(path.read_text()) if path.exists() else None
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    keys = ("origin", "package", "version", "licence", "model", "parameters", "quantization", "source_file", "source_sha256", "description", "label",
            "fine_tuned", "folder", "base", "base_provenance", "delta", "rebuilt_sha256")
    return {k: data[k] for k in keys if k in data}


def prompt_texts(loaded: LoadedModel, prompts: Sequence[str]) -> list[str]:
    """Prompts as the model reads them (with the space its number tokens expect, if any)."""
    return [p + loaded.numbers.prompt_suffix for p in prompts]
