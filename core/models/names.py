"""The names of what the analysis captures and filters, defined once, and where a model keeps those parts.

Three activations are read at the answer position, for every layer l
(docs/method.md#residual-stream-and-logit-lens); their names are the keys of a capture, the `kind`/`module`
column of the tables and the modules a filter acts on. Each has its TransformerLens hook name beside it:

    RESID  "resid"  h(l): l = 0 the embedding output, l = 1..L the output of block l
                    (TransformerLens blocks.{l}.hook_resid_pre, and blocks.{L-1}.hook_resid_post for l = L)
    ATTN   "attn"   Attn(l), l = 1..L: what block l's attention adds to the stream (blocks.{l-1}.hook_attn_out)
    MLP    "mlp"    MLP(l), l = 1..L: what block l's MLP adds to the stream (blocks.{l-1}.hook_mlp_out)

FINAL ("final") names the model's own logits in the phase tables, and BOTH ("both") the attention
and MLP outputs together as a filter target. `ModuleNames` says where a model keeps those parts:
the dotted path of its blocks and final norm, the names of the attention and MLP inside a block.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import CoreError

RESID = "resid"
ATTN = "attn"
MLP = "mlp"
FINAL = "final"
BOTH = "both"
#: Everything a capture can keep, in the order captures list it.
STREAMS = (RESID, ATTN, MLP)
#: The module outputs each block adds to the residual stream: what filters act on.
MODULE_OUTPUTS = (ATTN, MLP)
#: Filter targets: one module kind, or both.
MODULE_SETS = {ATTN: (ATTN,), MLP: (MLP,), BOTH: MODULE_OUTPUTS}

_HOOK_SUFFIX = {ATTN: "hook_attn_out", MLP: "hook_mlp_out"}


def hook_name(stream: str, layer: int, n_layers: int | None = None) -> str:
    """The TransformerLens hook name of `stream` at `layer` (this project's 1-based layer; 0..L for RESID)."""
    if stream == RESID:
        if n_layers is not None and layer == n_layers and layer > 0:
            return f"blocks.{layer - 1}.hook_resid_post"
        return f"blocks.{layer}.hook_resid_pre"
    if stream in _HOOK_SUFFIX:
        return f"blocks.{layer - 1}.{_HOOK_SUFFIX[stream]}"
    raise CoreError(f"unknown stream {stream!r}: choose from {', '.join(STREAMS)}")


def site_of_hook(name: str, n_layers: int) -> tuple[str, int]:
    """(stream, layer) of a TransformerLens hook name, the inverse of `hook_name`: blocks.{i}.hook_attn_out and
    hook_mlp_out are layer i + 1's module outputs, blocks.{i}.hook_resid_pre the stream before block i (layer i),
    blocks.{i}.hook_resid_post the stream after it (layer i + 1). A name of another site, or a block the model does
    not have, is a clear error."""
    parts = str(name).split(".")
    suffixes = {v: k for k, v in _HOOK_SUFFIX.items()}
    if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit():
        block, hook = int(parts[1]), parts[2]
        if not 0 <= block < int(n_layers):
            raise CoreError(f"hook {name!r}: this model has blocks 0..{int(n_layers) - 1}")
        if hook in suffixes:
            return suffixes[hook], block + 1
        if hook == "hook_resid_pre":
            return RESID, block
        if hook == "hook_resid_post":
            return RESID, block + 1
    raise CoreError(f"hook {name!r} is not a site this project reads: use blocks.N.hook_attn_out, "
                    "blocks.N.hook_mlp_out, blocks.N.hook_resid_pre or blocks.N.hook_resid_post (N from 0, as "
                    "TransformerLens counts)")


def check_streams(streams) -> tuple[str, ...]:
    """`streams` as a tuple, failing clearly on a name that is not one of `STREAMS`."""
    unknown = set(streams) - set(STREAMS)
    if unknown:
        raise CoreError(f"unknown streams {sorted(unknown)}: choose from {', '.join(STREAMS)}")
    return tuple(streams)


def check_modules(modules: str) -> str:
    """`modules` if it names a filter target of `MODULE_SETS`; else a clear error."""
    if modules not in MODULE_SETS:
        raise CoreError(f"unknown modules {modules!r}: choose attn, mlp or both")
    return modules


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
                raise CoreError(
                    f"cannot read module names {text!r}: write blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH"
                )
            parts[key.strip()] = value.strip()
        unknown = set(parts) - {"blocks", ATTN, MLP, "final_norm"}
        missing = {"blocks", ATTN, MLP} - set(parts)
        if unknown or missing:
            raise CoreError(
                f"module names {text!r}: "
                + (f"unknown keys {sorted(unknown)}; " if unknown else "")
                + (f"missing {sorted(missing)}; " if missing else "")
                + "write blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH"
            )
        fn = parts.get("final_norm")
        return cls(parts["blocks"], parts[ATTN], parts[MLP], None if fn in (None, "none") else fn)

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
