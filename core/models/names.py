"""The names of what the analysis captures and filters, defined once, and where a model keeps those parts.

Three activations are read at the answer position, for every layer l
(docs/method.md#residual-stream-and-logit-lens); their names are the keys of a capture, the `kind`/`module`
column of the tables and the modules a filter acts on. Each has its TransformerLens hook name beside it:

    RESID  "resid"  h(l): l = 0 the embedding output, l = 1..L the output of block l
                    (TransformerLens blocks.{l}.hook_resid_pre, and blocks.{L-1}.hook_resid_post for l = L)
    ATTN   "attn"   Attn(l), l = 1..L: what block l's attention adds to the stream (blocks.{l-1}.hook_attn_out)
    MLP    "mlp"    MLP(l), l = 1..L: what block l's MLP adds to the stream (blocks.{l-1}.hook_mlp_out)

Attention's heads, read at the same position (where the layout has an output projection W_O whose input is the
heads' outputs side by side, `core.models.parts.ModelParts.heads`):

    Z      "z"     z(l, h), l = 1..L: head h's output in block l before W_O, (head_dim,) (blocks.{l-1}.attn.hook_z)
    HEAD   "head"  Head(l, h) = z(l, h) W_O^h: what head h adds to the stream, (width,)
                   (blocks.{l-1}.attn.hook_result); sum over h of Head(l, h), + W_O's bias, is Attn(l)

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
Z = "z"
HEAD = "head"
#: Everything a capture can keep, in the order captures list it.
STREAMS = (RESID, ATTN, MLP)
#: The module outputs each block adds to the residual stream: what filters act on.
MODULE_OUTPUTS = (ATTN, MLP)
#: Filter targets: one module kind, or both.
MODULE_SETS = {ATTN: (ATTN,), MLP: (MLP,), BOTH: MODULE_OUTPUTS}
#: The per-head sites: one row per head, not one vector per prompt (read by capture_hooks, never edited).
HEAD_SITES = (Z, HEAD)

_HOOK_SUFFIX = {ATTN: "hook_attn_out", MLP: "hook_mlp_out", Z: "attn.hook_z", HEAD: "attn.hook_result"}


def hook_name(stream: str, layer: int, n_layers: int | None = None) -> str:
    """The TransformerLens hook name of `stream` at `layer` (this project's 1-based layer; 0..L for RESID)."""
    if stream == RESID:
        if n_layers is not None and layer == n_layers and layer > 0:
            return f"blocks.{layer - 1}.hook_resid_post"
        return f"blocks.{layer}.hook_resid_pre"
    if stream in _HOOK_SUFFIX:
        return f"blocks.{layer - 1}.{_HOOK_SUFFIX[stream]}"
    raise CoreError(f"unknown stream {stream!r}: choose from {', '.join(STREAMS + HEAD_SITES)}")


#: The TransformerLens hook names `site_of_hook` accepts (N: the block, counted from 0).
ACCEPTED_HOOKS = ("blocks.N.hook_resid_pre", "blocks.N.hook_resid_post", "blocks.N.hook_attn_out",
                  "blocks.N.hook_mlp_out")
#: The per-head TransformerLens names `capture_hooks` also reads (`site_of_hook(..., heads=True)`).
ACCEPTED_HEAD_HOOKS = ("blocks.N.attn.hook_z", "blocks.N.attn.hook_result")
_HEADS = ("attention's per-head internals are not kept but for each head's output (hook_z) and what it adds to the "
          "stream (hook_result); their sum is hook_attn_out")
_NEURONS = "the MLP's hidden neurons are not kept, only what the MLP adds to the stream (hook_mlp_out)"
_HEAD_INPUT = "per-head copies of the stream attention reads are not kept; the stream itself is hook_resid_pre"
_NORM = "the blocks' norms are not kept, only the stream they read (hook_resid_pre)"
_MID = ("the stream between a block's attention and its MLP is not kept; with sequential blocks it is hook_resid_pre "
        "+ hook_attn_out of the same block, not so with parallel attention and MLP (GPT-J, GPT-NeoX, Phi)")
#: TransformerLens hook names of sites this project does not read, each with why (docs/api.md lists them).
UNSUPPORTED_HOOKS = {
    "hook_embed": "the token embedding alone is not kept; token and position embeddings together are "
                  "blocks.0.hook_resid_pre",
    "hook_pos_embed": "the position embedding alone is not kept; token and position embeddings together are "
                      "blocks.0.hook_resid_pre",
    "hook_tokens": "token ids are not activations: the tokenizer gives them",
    "ln_final.hook_normalized": "the final norm's output is not kept; the logit lens applies the final norm to the "
                                "last stream itself (core.models.unembed)",
    "ln_final.hook_scale": "the final norm's scale is not kept; the logit lens applies the final norm itself",
    "blocks.N.hook_resid_mid": _MID,
    "blocks.N.hook_mlp_in": _MID,
    "blocks.N.hook_attn_in": _HEAD_INPUT,
    "blocks.N.hook_q_input": _HEAD_INPUT,
    "blocks.N.hook_k_input": _HEAD_INPUT,
    "blocks.N.hook_v_input": _HEAD_INPUT,
    **{f"blocks.N.attn.{h}": _HEADS for h in ("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k",
                                              "hook_attn_scores", "hook_pattern")},
    **{f"blocks.N.mlp.{h}": _NEURONS for h in ("hook_pre", "hook_pre_linear", "hook_post")},
    **{f"blocks.N.{ln}.{h}": _NORM for ln in ("ln1", "ln2") for h in ("hook_scale", "hook_normalized")},
}


def site_of_hook(name: str, n_layers: int, heads: bool = False) -> tuple[str, int]:
    """(stream, layer) of a TransformerLens hook name, the inverse of `hook_name`: blocks.{i}.hook_attn_out and
    hook_mlp_out are layer i + 1's module outputs, blocks.{i}.hook_resid_pre the stream before block i (layer i),
    blocks.{i}.hook_resid_post the stream after it (layer i + 1). With `heads`, also the per-head sites
    blocks.{i}.attn.hook_z (`Z`) and blocks.{i}.attn.hook_result (`HEAD`) of layer i + 1 (`ACCEPTED_HEAD_HOOKS`:
    what `capture_hooks` reads; a site that is one vector per prompt, as an edit needs, is never one of them). A name
    of another site (`UNSUPPORTED_HOOKS` says why for TransformerLens' other names), or a block the model does not
    have, is refused with one line that names the accepted ones (`ACCEPTED_HOOKS`)."""
    parts = str(name).split(".")
    suffixes = {v: k for k, v in _HOOK_SUFFIX.items()}
    names = ACCEPTED_HOOKS + (ACCEPTED_HEAD_HOOKS if heads else ())
    accepted = (f"Accepted: {', '.join(names)}, N from 0 to {int(n_layers) - 1} (blocks counted from 0, "
                "as TransformerLens counts)")
    in_block = len(parts) >= 3 and parts[0] == "blocks" and parts[1].isdigit()
    hook = ".".join(parts[2:]) if in_block else ""
    if hook in suffixes or hook in ("hook_resid_pre", "hook_resid_post"):
        block = int(parts[1])
        if suffixes.get(hook) in HEAD_SITES and not heads:
            raise CoreError(f"hook {name!r} is one row per attention head, not one vector per prompt: "
                            f"core.models.capture.capture_hooks reads it, nothing here edits it. {accepted}")
        if not 0 <= block < int(n_layers):
            raise CoreError(f"hook {name!r}: this model has no block {block}. {accepted}")
        if hook in suffixes:
            return suffixes[hook], block + 1
        return RESID, block + (hook == "hook_resid_post")
    key = ".".join(["blocks", "N", *parts[2:]]) if in_block else str(name)
    why = UNSUPPORTED_HOOKS.get(key)
    raise CoreError(f"hook {name!r} is not a site this project reads" + (f": {why}" if why else "") + f". {accepted}")


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
