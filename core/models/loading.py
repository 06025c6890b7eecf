"""Load a causal LM and its tokenizer with transformers, ready for analysis: its parts, number tokens and unembedding.

Loading goes through transformers' `from_pretrained` on a hub id or a local folder (checked first by
`core.models.source.resolve_source`), with safetensors only and `trust_remote_code` off unless the
caller turns it on. `device_map="auto"` (accelerate) spreads a model too big for one device over
several. The model's parts are found by `core.models.parts.find_parts`, checked by
`check_layout`, and its number tokens by `core.models.number_tokens`. Every pass runs in eval mode
(`LoadedModel.evaluating`); a model handed in from memory keeps its own training flag outside them. OPT is refused
by name (`UNSUPPORTED_ARCHITECTURES`): its blocks flatten the positions around the MLP.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from core.errors import CoreError, choices
from core.models.modes import evaluating
from core.models.names import ModuleNames
from core.models.number_tokens import NumberTokens, choose_number_tokens, number_token_candidates, require_number_range
from core.models.parts import ModelParts, check_layout, find_parts
from core.models.prompt_round_trip import check_round_trip, faithful_tokenizer
from core.models.source import fingerprint_folder, project_relative, read_provenance, resolve_source
from core.models.stored_weights import FILTER_DTYPE, StoredRows, read_stored_rows, weight_files
from core.models.unembed import Unembed, build_unembed

DTYPES = ("float32", "bfloat16", "float16", "auto")
#: Architectures refused by name (their config's model_type), each with why and what to use instead.
UNSUPPORTED_ARCHITECTURES = {
    "opt": (
        "its decoder layer flattens (batch, positions) into one dimension around its MLP (fc1, fc2), so what each "
        "block's MLP adds to the residual stream is never a (batch, positions, width) output the hooks can read or "
        "edit at the answer position; use a model of a supported layout of similar size instead (GPT-2, "
        "EleutherAI/pythia-*, or a Llama-style model such as SmolLM2)"
    ),
}
#: Longest source name a LoadedModel's repr shows whole (a longer one keeps its start and end).
REPR_SOURCE_CHARS = 90


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
    #: W_U's number rows (every convention's) and the final norm's gain as the files store them, read before the
    #: cast to the dtype the model runs in (core.models.stored_weights); None: the model's own rows are used
    stored: StoredRows | None = field(default=None, repr=False)

    @property
    def n_layers(self) -> int:
        return self.parts.n_layers

    @property
    def width(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[1])

    @property
    def input_device(self):
        return self.model.get_input_embeddings().weight.device

    def evaluating(self):
        """A context in which the model runs in eval mode; each module's own training flag comes back after it
        (`core.models.modes.evaluating`). The analysis' passes run in one."""
        return evaluating(self.model)

    def __repr__(self) -> str:
        """One short line (source, layers, width, number line, device and dtype), never the ids or the modules."""
        source = self.source if len(self.source) <= REPR_SOURCE_CHARS else (
            self.source[: REPR_SOURCE_CHARS // 2 - 2] + "..." + self.source[-(REPR_SOURCE_CHARS // 2 - 1):])
        weight = self.model.get_output_embeddings().weight
        numbers = f"numbers 0..{self.numbers.P - 1}" if self.numbers.P else "no single-token numbers"
        return (f"LoadedModel({source!r}, {self.architecture}, {self.n_layers} layers, width {self.width}, "
                f"{numbers} ({self.numbers.convention}), {weight.device} {str(weight.dtype).removeprefix('torch.')})")

    def select_numbers(self, p: int, what: str = "this task") -> NumberTokens:
        """Use the number-token convention that covers 0..p-1 (`choose_number_tokens`); fail clearly if none does."""
        chosen = choose_number_tokens(self.number_candidates or [self.numbers], p)
        require_number_range(chosen, p, what)
        self.numbers = chosen
        return chosen

    def unembed(self, p: int, ids=None) -> Unembed:
        """The `Unembed` of the number tokens 0..p-1 (or of the token ids `ids`), its W_U rows those of
        `unembedding` (as the files store them, whatever dtype the model runs in) when they were read."""
        ids = self.numbers.ids_for(p) if ids is None else ids
        unembed = build_unembed(self.model, self.parts.final_norm, ids)
        rows = self.stored.rows(ids) if self.stored is not None else None
        if rows is not None:
            unembed.weight, unembed.weight_dtype = rows.to(unembed.weight.device), FILTER_DTYPE
        return unembed

    def unembedding(self, p: int):
        """W_U: the p rows of the unembedding for the number tokens 0..p-1, float32, (p, D): what every filter
        and projection is built from.

        A model loaded from files (`load_model`) gives the rows as its files store them, read before the model was
        cast to the dtype it runs in, so the filters of a run in bfloat16 or float16 are those of the model in
        float32 (core.models.stored_weights). The tensor carries `weight_dtype`, the dtype whose eps sets the rank
        tolerance of the filters built from it (`core.analysis.filters.projection_filter`): float32 for rows read
        from the files; for a model in memory (`wrap_model`), the dtype it holds W_U in.
        """
        ids = torch.as_tensor(self.numbers.ids_for(p))
        rows = self.stored.rows(ids) if self.stored is not None else None
        if rows is not None:
            rows.weight_dtype = FILTER_DTYPE
            return rows
        weight = self.model.get_output_embeddings().weight
        rows = weight.detach()[ids.to(weight.device)].float()
        rows.weight_dtype = weight.dtype
        return rows

    def final_norm_gain(self):
        """The final norm's gain g (D,) as a float64 numpy array, as the files store it when they were read (else the
        model's own); None when the model has no final norm with a weight."""
        norm = self.parts.final_norm
        weight = getattr(norm, "weight", None) if norm is not None else None
        if not isinstance(weight, torch.Tensor):
            return None
        stored = self.stored.gain if self.stored is not None else None
        return (stored if stored is not None else weight.detach()).double().cpu().numpy()

    def number_embedding(self, p: int):
        """W_E: the p input-embedding rows of the number tokens 0..p-1, float32, (p, D)."""
        ids = torch.as_tensor(self.numbers.ids_for(p))
        weight = self.model.get_input_embeddings().weight
        return weight.detach()[ids.to(weight.device)].float()


def check_supported(config, source: str) -> None:
    """Refuse, with one line, a model whose architecture (`config.model_type`) is in `UNSUPPORTED_ARCHITECTURES`."""
    kind = str(getattr(config, "model_type", "") or "")
    if kind in UNSUPPORTED_ARCHITECTURES:
        names = ", ".join(getattr(config, "architectures", None) or [])
        what = f"{names} (model type {kind!r})" if names else f"model type {kind!r}"
        raise CoreError(f"{source}: {what} cannot be analysed by this tool: {UNSUPPORTED_ARCHITECTURES[kind]}.")


def _torch_dtype(name: str):
    """The torch dtype named `name` (one of `DTYPES`; "auto" stays "auto")."""
    if name not in DTYPES:
        raise CoreError(f"unknown dtype {name!r}: choose one of {choices(DTYPES)}")
    return "auto" if name == "auto" else getattr(torch, name)


def check_device(device: str) -> str:
    """`device` if this machine has it ("auto": cuda when there is one, else cpu); else a clear error."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise CoreError(f"unknown device {device!r}: use cpu, cuda, cuda:N, mps or auto") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CoreError(f"device {device!r} asked for, but this machine has no CUDA GPU: use --device cpu")
    return device


def load_tokenizer(source: str, trust_remote_code: bool = False, revision: str | None = None):
    """The tokenizer of `source`, padding on the left (with eos or unk as its pad token if it has none)."""
    chosen = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, revision=revision)
    return padded_on_the_left(faithful_tokenizer(chosen, source, revision), source)  # core.models.prompt_round_trip


def padded_on_the_left(tok, source: str):
    """`tok` set to pad batches on the left (with eos or unk as its pad token if it has none), as capture needs."""
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
    """Load a causal LM from a hub id or local folder, in eval mode, with its parts and numbers. An architecture of
    `UNSUPPORTED_ARCHITECTURES` is refused from its config, before any weights are read."""
    hf_logging.disable_progress_bar()  # our own bars say what is being computed; theirs only clutter
    local, folder = resolve_source(source)
    dtype_of_weights = _torch_dtype(dtype)
    if device_map is None:
        device = check_device(device)
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code, revision=revision)
        check_supported(config, source)
        tokenizer = load_tokenizer(source, trust_remote_code, revision)
        model = AutoModelForCausalLM.from_pretrained(
            source,
            config=config,
            dtype=dtype_of_weights,
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
    model.eval()  # this model is the analysis' own: it stays in eval mode
    files = weight_files(source, folder, local, revision)
    revision_seen = getattr(config, "_commit_hash", None) or revision
    if local:
        fingerprint = fingerprint_folder(folder)
    else:
        fingerprint = f"hub:{revision_seen}" if revision_seen else "hub:unknown-revision"
    return _ready(
        model, tokenizer, module_names, source=str(folder.resolve()) if local else source, revision=revision_seen,
        fingerprint=fingerprint, local=local,
        extra={"dtype": dtype, "device": device if device_map is None else f"device_map={device_map}"},
        files=files,
    )


def wrap_model(model, tokenizer, module_names: ModuleNames | None = None, name: str | None = None) -> LoadedModel:
    """A causal LM already in memory (an `nn.Module` with transformers' interface: `model(input_ids=...)` returning
    `.logits`, `get_input_embeddings`, `get_output_embeddings`) and its tokenizer, checked and read as `load_model`
    reads a folder: its parts found (or named by `module_names`), its number tokens chosen and its layout checked on
    a probe prompt. `name` is how reports call it (default: its class). Its fingerprint is a hash of its weights as
    they are now, so a later change to them is a different model. Its training flag is left as it is: every pass of
    the analysis runs in eval mode (`LoadedModel.evaluating`) and gives each module its own flag back after.

    Precision: a model in memory has no files, so its filters are built from W_U as it holds it, with the rank
    tolerance of that dtype: pass a float32 model (`model.float()`) for the filters of `load_model`, which reads W_U
    from the files whatever dtype the model runs in. Filters on a bfloat16 W_U are refused (bfloat16's tolerance
    would count every singular value as zero: `core.analysis.filters.rank_tolerance`)."""
    digest = hashlib.sha256()
    for key, w in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(w.detach().float().cpu().contiguous().numpy().tobytes())
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    tokenizer = padded_on_the_left(copy.deepcopy(tokenizer), name or type(model).__name__)  # the caller's is untouched
    return _ready(model, tokenizer, module_names, source=name or f"in-memory {type(model).__name__}", revision=None,
                  fingerprint="memory-sha256:" + digest.hexdigest()[:16], local=False,
                  extra={"dtype": dtype, "device": str(next(model.parameters()).device)})


def _ready(model, tokenizer, module_names, *, source: str, revision, fingerprint: str, local: bool,
           extra: dict, files=()) -> LoadedModel:
    """A loaded model's checks and parts (both `load_model` and `wrap_model`): a supported architecture, finite
    weights, its blocks' modules, its number tokens, the layout checked on a probe prompt (in eval mode, the model's
    own training flags restored after: `check_layout`), and W_U's number rows of every convention as the safetensors
    `files` store them (`read_stored_rows`; none for a model in memory)."""
    check_supported(getattr(model, "config", None), source)
    broken = [name for name, w in model.named_parameters()  # offloaded weights (device "meta") are not read here
              if w.is_floating_point() and not w.is_meta and not torch.isfinite(w).all()]
    if broken:
        shown = ", ".join(broken[:3]) + (f" and {len(broken) - 3} more" if len(broken) > 3 else "")
        raise CoreError(
            f"{source}: {len(broken)} weight tensor(s) hold NaN or infinite values ({shown}), so every activation "
            "would too. The checkpoint is broken (saved from a training run that diverged?): load an earlier one."
        )
    parts = find_parts(model, module_names)
    candidates = number_token_candidates(tokenizer)
    numbers = choose_number_tokens(candidates)
    check_round_trip(tokenizer, source, numbers.P)  # a tokenizer that garbles the prompt is refused, with the reason
    if numbers.P == 0:
        require_number_range(numbers, 1, f"{source}")
    checks = check_layout(model, tokenizer, parts, lambda ids: build_unembed(model, parts.final_norm, ids), numbers.ids)
    stored = read_stored_rows(model, files, [i for c in candidates for i in c.ids], parts.final_norm) if files else None
    held = model.get_output_embeddings().weight.dtype
    filters = stored.describe() if stored is not None else (
        f"the model's own rows ({str(held).removeprefix('torch.')})")
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        parts=parts,
        numbers=numbers,
        source=source,
        revision=revision,
        fingerprint=fingerprint,
        architecture=type(model).__name__,
        local=local,
        extra={**extra, "layout_check": checks, "filter_unembedding": filters},
        number_candidates=candidates,
        stored=stored,
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


def prompt_texts(loaded: LoadedModel, prompts: Sequence[str]) -> list[str]:
    """Prompts as the model reads them (with the space its number tokens expect, if any)."""
    return [p + loaded.numbers.prompt_suffix for p in prompts]
