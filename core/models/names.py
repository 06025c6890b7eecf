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

from core.errors import CoreError, choices

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
    raise CoreError(f"unknown stream {stream!r}: choose one of {choices(STREAMS + HEAD_SITES)}")


#: The TransformerLens hook names `site_of_hook` accepts (N: the block, counted from 0).
ACCEPTED_HOOKS = ("blocks.N.hook_resid_pre", "blocks.N.hook_resid_post", "blocks.N.hook_attn_out",
                  "blocks.N.hook_mlp_out")
#: The per-head TransformerLens names `capture_hooks` also reads (`site_of_hook(..., heads=True)`).
ACCEPTED_HEAD_HOOKS = ("blocks.N.attn.hook_z", "blocks.N.attn.hook_result")
_HEADS = ("attention's queries, keys, values and scores are not kept, only each head's output (hook_z), what it adds "
          "to the stream (hook_result) and its attention pattern (hook_pattern)")
_NEURONS = ("the MLP's input side is not kept, only its hidden activation after the nonlinearity (hook_post) and what "
            "it adds to the stream (hook_mlp_out)")
_HEAD_INPUT = "per-head copies of the stream attention reads are not kept; the stream itself is hook_resid_pre"
_NORM = "the blocks' norms are not kept, only the stream they read (hook_resid_pre, hook_resid_mid)"
_MID = "the MLP's input is its norm's output, not kept; the stream it normalises is hook_resid_mid"
#: TransformerLens hook names of sites this project does not read, each with why (docs/api.md lists them).
UNSUPPORTED_HOOKS = {
    "hook_embed": "the token embedding alone is not kept; token and position embeddings together are "
                  "blocks.0.hook_resid_pre",
    "hook_pos_embed": "the position embedding alone is not kept; token and position embeddings together are "
                      "blocks.0.hook_resid_pre",
    "hook_tokens": "token ids are not activations: the tokenizer gives them",
    "ln_final.hook_scale": "the final norm's scale is not kept; its output is ln_final.hook_normalized",
    "blocks.N.hook_mlp_in": _MID,
    "blocks.N.hook_attn_in": _HEAD_INPUT,
    "blocks.N.hook_q_input": _HEAD_INPUT,
    "blocks.N.hook_k_input": _HEAD_INPUT,
    "blocks.N.hook_v_input": _HEAD_INPUT,
    **{f"blocks.N.attn.{h}": _HEADS for h in ("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k",
                                              "hook_attn_scores")},
    **{f"blocks.N.mlp.{h}": _NEURONS for h in ("hook_pre", "hook_pre_linear")},
    **{f"blocks.N.{ln}.{h}": _NORM for ln in ("ln1", "ln2") for h in ("hook_scale", "hook_normalized")},
}


#: The sites only read (capture_hooks, run_with_cache), each by the TransformerLens hook name's suffix: attention
#: patterns, the MLP's neurons, the stream between attention and MLP, the final norm's output.
PATTERN = "pattern"
POST = "post"
RESID_MID = "resid_mid"
LN_FINAL = "ln_final"
#: Every TransformerLens name `read_site` accepts, in the order `run_with_cache` lists a block's hooks.
READ_HOOKS = ("blocks.N.hook_resid_pre", "blocks.N.attn.hook_z", "blocks.N.attn.hook_pattern",
              "blocks.N.attn.hook_result", "blocks.N.hook_attn_out", "blocks.N.hook_resid_mid",
              "blocks.N.mlp.hook_post", "blocks.N.hook_mlp_out", "blocks.N.hook_resid_post", "ln_final.hook_normalized")
_READ_KIND = {"hook_resid_pre": "resid_pre", "attn.hook_z": Z, "attn.hook_pattern": PATTERN, "attn.hook_result": HEAD,
              "hook_attn_out": ATTN, "hook_resid_mid": RESID_MID, "mlp.hook_post": POST, "hook_mlp_out": MLP,
              "hook_resid_post": "resid_post"}
#: The per-unit sites an edit reaches one unit at a time, named with the unit in brackets: a head's output before
#: W_O (blocks.N.attn.hook_z[H], H counted from 0) and one MLP neuron (blocks.N.mlp.hook_post[I]).
UNIT_SITES = {"attn.hook_z": Z, "mlp.hook_post": POST}


def read_site(name: str, n_layers: int) -> tuple[str, int | None]:
    """(kind, block counted from 0) of a TransformerLens name `capture_hooks` reads (`READ_HOOKS`; the kinds
    "resid_pre", "resid_post", ATTN, MLP, Z, HEAD, PATTERN, POST, RESID_MID; LN_FINAL with block None); any other name
    is refused with why (`UNSUPPORTED_HOOKS`) and the names accepted."""
    name = str(name)
    if name == "ln_final.hook_normalized":
        return LN_FINAL, None
    parts = name.split(".")
    in_block = len(parts) >= 3 and parts[0] == "blocks" and parts[1].isdigit()
    accepted = (f"Accepted: {', '.join(READ_HOOKS)}, N from 0 to {int(n_layers) - 1} (blocks counted from 0, as "
                "TransformerLens counts)")
    kind = _READ_KIND.get(".".join(parts[2:])) if in_block else None
    if kind is None:
        key = ".".join(["blocks", "N", *parts[2:]]) if in_block else name
        why = UNSUPPORTED_HOOKS.get(key)
        raise CoreError(f"hook {name!r} is not a site this project reads" + (f": {why}" if why else "")
                        + f". {accepted}")
    if not 0 <= int(parts[1]) < int(n_layers):
        raise CoreError(f"hook {name!r}: this model has no block {parts[1]}. {accepted}")
    return kind, int(parts[1])


def unit_site(name: str, n_layers: int) -> tuple[str, int, int]:
    """(Z or POST, 1-based layer, unit) of a per-unit edit site, "blocks.0.attn.hook_z[3]" (head 3 of layer 1) or
    "blocks.1.mlp.hook_post[17]" (neuron 17 of layer 2's MLP); the unit's range is checked against the model later."""
    head, bracket, rest = str(name).partition("[")
    parts = head.split(".")
    kind = UNIT_SITES.get(".".join(parts[2:])) if len(parts) >= 3 and parts[0] == "blocks" else None
    if kind is None or not bracket or not rest.endswith("]") or not rest[:-1].isdigit() or not parts[1].isdigit():
        raise CoreError(f"site {name!r}: a head is named blocks.N.attn.hook_z[H], a neuron blocks.N.mlp.hook_post[I] "
                        "(N the block and H, I counted from 0, as TransformerLens counts)")
    if not 0 <= int(parts[1]) < int(n_layers):
        raise CoreError(f"site {name!r}: this model has no block {parts[1]} (blocks 0 to {int(n_layers) - 1})")
    return kind, int(parts[1]) + 1, int(rest[:-1])


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
    if key in READ_HOOKS:
        raise CoreError(f"hook {name!r} is read (core.models.capture.capture_hooks), not edited as one vector per "
                        "prompt; a head or a neuron is edited as blocks.N.attn.hook_z[H] or blocks.N.mlp.hook_post[I]. "
                        f"{accepted}")
    why = UNSUPPORTED_HOOKS.get(key)
    raise CoreError(f"hook {name!r} is not a site this project reads" + (f": {why}" if why else "") + f". {accepted}")


def check_streams(streams) -> tuple[str, ...]:
    """`streams` as a tuple, failing clearly on a name that is not one of `STREAMS`."""
    unknown = set(streams) - set(STREAMS)
    if unknown:
        raise CoreError(f"unknown streams {sorted(unknown)}: choose one of {choices(STREAMS)}")
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
