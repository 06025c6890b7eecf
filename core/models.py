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

DTYPES = ("float32", "bfloat16", "float16", "auto")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
#: The prompt the number tokens are probed with: the paper's running example.
PROBE_PROMPT = "Put together 15 and 93. Answer:"
NUMBER_SCAN_LIMIT = 2048


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

    `prompt_suffix` is appended to every prompt: "" when the number token carries its own
    leading space (GPT-2's " 108"), " " when the tokenizer splits the space off ("108" after
    "Answer: ").
    """

    ids: tuple[int, ...]
    prompt_suffix: str
    first_split: int | None  # first number that is not a single token (None: all up to the scan limit are)
    first_split_pieces: tuple[str, ...] = ()

    @property
    def P(self) -> int:
        return len(self.ids)

    def ids_for(self, p: int) -> np.ndarray:
        require_number_range(self, p)
        return np.asarray(self.ids[:p], dtype=np.int64)

    def describe(self) -> str:
        style = "with a leading space inside the token" if self.prompt_suffix == "" else "after a prompt ending in a space"
        if self.first_split is None:
            return f"numbers 0..{self.P - 1} (at least) are single tokens, {style}"
        return f"numbers 0..{self.P - 1} are single tokens, {style}; {self.first_split} is the first that is not"


def require_number_range(numbers: NumberTokens, p: int, what: str = "this task") -> None:
    """Fail with a clear message when the numbers 0..p-1 are not all single tokens."""
    if p <= numbers.P:
        return
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


def find_number_tokens(tokenizer, probe_prompt: str = PROBE_PROMPT, limit: int = NUMBER_SCAN_LIMIT) -> NumberTokens:
    """Find, for each n, the single token a model emits for n after `probe_prompt`.

    Two conventions are tried: the number token carries its leading space (prompt ends in
    "Answer:", token " 108"), or the space is its own token or part of the prompt (prompt ends
    in "Answer: ", token "108"). The one that covers the longer run 0..P-1 wins. A number counts
    only if it adds exactly one token, that token is not the unknown token, decodes back to the
    number, and differs from the tokens of all smaller numbers.
    """
    unk = getattr(tokenizer, "unk_token_id", None)
    best: NumberTokens | None = None
    for suffix in ("", " "):
        base = tokenizer(probe_prompt + suffix)["input_ids"]
        texts = [probe_prompt + " " + str(n) for n in range(limit)]
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
                pieces = tuple(tokenizer.convert_ids_to_tokens(new if full[: len(base)] == base else full))
                break
            ids.append(new[0])
            seen.add(new[0])
        cand = NumberTokens(tuple(ids), suffix, first_split, pieces)
        if best is None or cand.P > best.P:
            best = cand
    assert best is not None
    return best


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

    @property
    def n_layers(self) -> int:
        return self.parts.n_layers

    @property
    def width(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[1])

    @property
    def input_device(self):
        return self.model.get_input_embeddings().weight.device

    def unembedding(self, p: int):
        """W_U: the p rows of the unembedding for the number tokens 0..p-1, float32, (p, D)."""
        import torch

        ids = torch.as_tensor(self.numbers.ids_for(p))
        weight = self.model.get_output_embeddings().weight
        return weight.detach()[ids.to(weight.device)].float()

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
        if not all(hasattr(b, cand.attn) and hasattr(b, cand.mlp) for b in blocks):
            continue
        final_norm = _get(model, cand.final_norm) if cand.final_norm else None
        if cand.final_norm and final_norm is None:
            continue
        return ModelParts(
            names=cand,
            blocks=list(blocks),
            attn=[getattr(b, cand.attn) for b in blocks],
            mlp=[getattr(b, cand.mlp) for b in blocks],
            final_norm=final_norm,
        )
    what = f"the module names you gave ({names})" if names is not None else "any known layout (GPT-2, GPT-J, GPT-NeoX, Phi, Llama-style)"
    raise CoreError(
        f"cannot find the decoder blocks, attention, MLP and final norm of {type(model).__name__} with {what}. "
        f"Modules found: {_module_listing(model)}. Name them by hand with "
        f"--modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH (for GPT-2: {KNOWN_LAYOUTS[0]})"
    )


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


def fingerprint_folder(folder: Path, full_hash_limit: int = 512 * 2**20) -> str:
    """A hash of the safetensors weights in a folder: whole files when small, else headers and sizes."""
    files = sorted(folder.glob("*.safetensors"))
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
        if not any(path.glob("*.safetensors")):
            pickled = [p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES]
            found = f" (found only {', '.join(pickled)})" if pickled else ""
            raise CoreError(
                f"{source} has no .safetensors weights{found}. This tool loads safetensors only and never "
                "unpickles checkpoints: convert the weights with save_pretrained(..., safe_serialization=True) "
                "in an environment you trust."
            )
        return True, path
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
    import torch
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
    except (OSError, ValueError, EnvironmentError) as exc:
        where = f"the folder {source}" if local else f"the Hugging Face hub id {source!r}"
        msg = str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__
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
    numbers = find_number_tokens(tokenizer)
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
        extra={"dtype": dtype, "device": device if device_map is None else f"device_map={device_map}"},
    )


def describe_model(loaded: LoadedModel) -> dict:
    """A JSON-friendly summary for manifests."""
    return {
        "source": loaded.source,
        "revision": loaded.revision,
        "fingerprint": loaded.fingerprint,
        "architecture": loaded.architecture,
        "n_layers": loaded.n_layers,
        "width": loaded.width,
        "module_names": str(loaded.parts.names),
        "numbers": loaded.numbers.describe(),
        "number_range": loaded.numbers.P,
        "prompt_suffix": loaded.numbers.prompt_suffix,
        **loaded.extra,
    }


def read_recipe_label(folder: Path) -> str | None:
    """The human label a project-trained model carries in its folder (recipe.json), if any."""
    recipe = folder / "recipe.json"
    if recipe.exists():
        try:
            return json.loads(recipe.read_text()).get("label")
        except (OSError, json.JSONDecodeError):
            return None
    return None


def prompt_texts(loaded: LoadedModel, prompts: Sequence[str]) -> list[str]:
    """Prompts as the model reads them (with the space its number tokens expect, if any)."""
    return [p + loaded.numbers.prompt_suffix for p in prompts]
