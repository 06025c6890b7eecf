"""Find a model's blocks, attention and MLP modules and final norm, and check they are what the analysis assumes.

The parts are found by the known layouts of GPT-2, GPT-J, GPT-NeoX/Pythia, Phi, Llama/Mistral/
Qwen2/Gemma-style models (`core.models.names.KNOWN_LAYOUTS`); any other layout can be named by hand
with `ModuleNames` (CLI: --modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH). Inside each attention module
the output projection W_O is found by name (`OUTPUT_PROJECTIONS`), with the number of heads and their width from
the model's config, for the per-head readings (`head_weights`); a layout without one (a post-norm layout, whose
"attention" is the norm after it) keeps working without heads, and asking it for heads is refused. `check_layout`
then verifies on a probe prompt that the residual stream adds exactly the hooked outputs and that
the logit lens reproduces the model's own logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn as nn
from transformers.pytorch_utils import Conv1D

from core.errors import CoreError
from core.models.capture import LastPositionRecorder, prepare_batches
from core.models.modes import evaluating
from core.models.names import ATTN, KNOWN_LAYOUTS, MLP, RESID, ModuleNames
from core.models.number_tokens import PROBE_PROMPT


@dataclass
class ModelParts:
    """The modules the analysis hooks and reads. attn[l] and mlp[l] add Attn(l), MLP(l) to the stream.

    out_proj[l] is attention l's output projection W_O (its input: the heads' outputs z side by side, head-major),
    with `n_heads` heads of `head_dim` each; None where the layout has none, and `heads_missing` says why."""

    names: ModuleNames
    blocks: list
    attn: list
    mlp: list
    final_norm: object | None
    out_proj: list | None = None
    n_heads: int = 0
    head_dim: int = 0
    heads_missing: str | None = "the attention's output projection was not looked for"
    #: Why the blocks have no stream between attention and MLP (attention and MLP read the same stream), or None.
    parallel_blocks: str | None = None

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    def __repr__(self) -> str:
        """One line: the module names and the number of blocks (not every module's own repr)."""
        return f"ModelParts({self.names}, {self.n_layers} blocks)"

    def outputs(self, kind: str) -> list:
        """The modules whose outputs are `kind` (`core.models.names.ATTN` or `MLP`), one per layer."""
        return {ATTN: self.attn, MLP: self.mlp}[kind]

    @property
    def has_heads(self) -> bool:
        """Whether each attention output is W_O applied to the heads' outputs, so heads can be read one by one."""
        return self.out_proj is not None

    def require_heads(self, what: str = "reading attention head by head") -> None:
        """Nothing when the heads can be read; else a CoreError saying why not."""
        if not self.has_heads:
            raise CoreError(f"{what} is not possible with this model ({self.names}): {self.heads_missing}")

    def head_weights(self, layer: int):
        """W_O of attention `layer` (1-based, the project's count) head by head: (heads, head_dim, width) float32 in
        the stream's basis, so head h adds z_h @ W[h] to the stream (a Linear's weight is (out, in), GPT-2's
        Conv1D's (in, out))."""
        proj = self.out_proj[self.attention_index(layer)]
        w = proj.weight.detach().float()
        w = w if isinstance(proj, Conv1D) else w.T  # (in, out) = (heads * head_dim, width)
        return w.reshape(self.n_heads, self.head_dim, w.shape[1])

    def head_output_matrix(self, layer: int, head: int):
        """W_O^h: head `head`'s (0-based, as TransformerLens counts) slice of attention `layer`'s (1-based) output
        projection, (head_dim, width) float32; head h's result is z_h @ W_O^h."""
        weights = self.head_weights(layer)
        if not 0 <= int(head) < self.n_heads:
            raise CoreError(f"head {head}: this model's heads are 0..{self.n_heads - 1} (counted from 0)")
        return weights[int(head)]

    def head_bias(self, layer: int):
        """The bias attention `layer`'s (1-based) output projection adds, (width,) float32, or None: it belongs to no
        head. Attn(l) = sum_h z_h @ W_O^h + this bias."""
        bias = getattr(self.out_proj[self.attention_index(layer)], "bias", None)
        return None if bias is None else bias.detach().float()

    def attention_index(self, layer: int) -> int:
        """The 0-based index of attention `layer` (1-based), once the heads are known readable and the layer exists."""
        self.require_heads()
        if not 1 <= int(layer) <= self.n_layers:
            raise CoreError(f"layer {layer}: this model's attention layers are 1..{self.n_layers} (counted from 1)")
        return int(layer) - 1


def _get(model, path: str):
    try:
        return model.get_submodule(path)
    except AttributeError:
        return None


def _module_listing(model, depth: int = 3) -> str:
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
        attn = [_get(b, cand.attn) for b in blocks]
        out_proj, n_heads, head_dim, missing = find_heads(model, attn, cand)
        return ModelParts(
            names=cand,
            blocks=list(blocks),
            attn=attn,
            mlp=[_get(b, cand.mlp) for b in blocks],
            final_norm=final_norm,
            out_proj=out_proj,
            n_heads=n_heads,
            head_dim=head_dim,
            heads_missing=missing,
            parallel_blocks=parallel_blocks(model),
        )
    what = (f"the module names you gave ({names})" if names is not None
            else "any known layout (GPT-2, GPT-J, GPT-NeoX, Phi, Llama-style)")
    raise CoreError(
        f"cannot find the decoder blocks, attention, MLP and final norm of {type(model).__name__} with {what}. "
        f"Modules found: {_module_listing(model)}. Name them by hand with "
        f"--modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH (for GPT-2: {KNOWN_LAYOUTS[0]})"
    )


#: The names of an attention module's output projection W_O: Llama, Mistral, Qwen2, Gemma, Phi-3 `o_proj`; GPT-2
#: `c_proj` (a Conv1D, weight (in, out)); GPT-J `out_proj`; GPT-NeoX and Phi-1/1.5/2 `dense`.
OUTPUT_PROJECTIONS = ("o_proj", "c_proj", "out_proj", "dense")


def head_shape(model, attn) -> tuple[int, int]:
    """(heads, head width) from the model's config (num_attention_heads; head_dim, else hidden_size / heads), else
    from the attention module's own attributes; (0, 0) when neither says."""
    config = getattr(model, "config", None)
    config = getattr(config, "text_config", None) or config
    heads = getattr(config, "num_attention_heads", None) or getattr(attn, "num_heads", None)
    heads = heads or getattr(attn, "num_attention_heads", None) or getattr(attn, "n_head", None)
    if not heads:
        return 0, 0
    dim = getattr(config, "head_dim", None) or getattr(attn, "head_dim", None) or getattr(attn, "head_size", None)
    hidden = getattr(config, "hidden_size", None)
    if not dim and hidden:
        dim = int(hidden) // int(heads)
    return int(heads), int(dim or 0)


def projection_sizes(proj) -> tuple[int, int] | None:
    """(input width, output width) of a linear layer or GPT-2's Conv1D; None for anything else."""
    if isinstance(proj, nn.Linear):
        return int(proj.in_features), int(proj.out_features)
    if isinstance(proj, Conv1D):
        return int(proj.weight.shape[0]), int(proj.weight.shape[1])
    return None


def find_heads(model, attn: list, names: ModuleNames) -> tuple[list | None, int, int, str | None]:
    """(out_proj per block, heads, head width, None), or (None, 0, 0, why) when the heads cannot be read.

    Heads can be read when every attention module holds an output projection (`OUTPUT_PROJECTIONS`) whose input is
    heads x head width wide and whose output is the stream's width; that its output is what the module returns, so
    that Attn(l) = sum_h z_h W_O^h + bias, is checked on every batch the heads are read from
    (core.analysis.heads.check_head_sum). A
    post-norm layout's "attention" (Gemma2, Gemma3, OLMo2: the norm after attention, what is added to the stream) is
    the heads' sum normalised, not a sum over heads, and is refused."""
    found = [next((m for n in OUTPUT_PROJECTIONS if (m := _get(a, n)) is not None and projection_sizes(m)), None)
             for a in attn]
    if any(f is None for f in found):
        kind = type(attn[found.index(None)]).__name__
        why = (f"the attention part {names.attn!r} ({kind}) holds no output projection "
               f"({', '.join(OUTPUT_PROJECTIONS)}, a linear layer) whose input is the heads' outputs")
        if "norm" in (kind + names.attn).lower():
            why += ("; it is the norm after attention (a post-norm layout: Gemma2, Gemma3, OLMo2), so what attention "
                    "adds to the stream is the heads' sum normalised, and heads do not add linearly to it")
        return None, 0, 0, why
    heads, dim = head_shape(model, attn[0])
    sizes = projection_sizes(found[0])
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)  # a training wrapper's head (core.training) may hold no weight of its own
    width = int(weight.shape[1]) if weight is not None else sizes[1]  # the stream's width, read by the unembedding
    if not heads or not dim or sizes != (heads * dim, width) or any(projection_sizes(f) != sizes for f in found):
        return None, 0, 0, (f"the output projection {type(found[0]).__name__} maps {sizes[0]} to {sizes[1]} numbers, "
                            f"but the config gives {heads} heads of {dim} and a stream {width} wide")
    return found, heads, dim, None


def parallel_blocks(model) -> str | None:
    """Why `model`'s blocks have no stream between attention and MLP (GPT-J, Phi-1/1.5/2, CodeGen, and GPT-NeoX with
    use_parallel_residual: attention and MLP both read the block's input), or None for sequential blocks."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", "")
    if kind in ("gptj", "phi", "codegen") or getattr(config, "use_parallel_residual", False) or getattr(
            config, "parallel_attn", False):
        return (f"{kind or type(model).__name__}'s blocks run attention and MLP in parallel on the same input, so no "
                "stream lies between them (hook_resid_mid)")
    return None


def worst_layer_gap(gap, reference) -> tuple[int, float]:
    """(0-based layer, share) where ||gap|| / ||reference|| is largest over the prompts and layers of two
    (prompts, layers, width) tensors: the checks that hooked parts add up to what they claim to."""
    share = (gap.norm(dim=-1) / reference.norm(dim=-1).clamp_min(1e-12)).max(0).values  # per layer
    worst = int(share.argmax())
    return worst, float(share[worst])


#: Largest share of h(l) that h(l) - h(l-1) - Attn(l) - MLP(l) may have (float32; half precisions get more).
RESIDUAL_TOLERANCE = {"float32": 1e-3, "half": 3e-2}


def check_layout(
    model, tokenizer, parts: ModelParts, unembed_of, probe_ids=None, texts: Sequence[str] = (PROBE_PROMPT,)
) -> dict:
    """Check on a probe batch that the hooked modules are what the analysis assumes; fail clearly if not.

    1. h(l) = h(l-1) + Attn(l) + MLP(l) at every layer (the residual stream adds exactly the hooked
       attention and MLP outputs): post-norm layouts hooked at the wrong place, or --modules naming
       the wrong modules, break it.
    2. The `Unembed` at the last layer reproduces the model's own logits (final norm, bias, scale,
       soft-cap all accounted for).
    Returns the largest relative errors seen, for the manifest. The probe runs in eval mode, the model's own training
    flags restored after (`core.models.modes.evaluating`).
    """
    batch = prepare_batches(tokenizer, list(texts), len(texts))[0]
    device = model.get_input_embeddings().weight.device
    try:
        with LastPositionRecorder(parts) as rec, torch.no_grad(), evaluating(model):
            out = model(
                input_ids=batch.input_ids.to(device),
                attention_mask=batch.attention_mask.to(device),
                position_ids=batch.position_ids.to(device),
                use_cache=False,
            )
            vecs = rec.take(model.get_output_embeddings().weight.device)
    except CoreError:
        raise
    except (RuntimeError, IndexError, TypeError, ValueError, AttributeError) as exc:  # hooks on modules that are not
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]           # what the analysis assumes
        raise CoreError(
            f"{type(model).__name__} failed on a probe prompt with the modules {parts.names} hooked "
            f"({type(exc).__name__}: {first}). Name the modules whose outputs the blocks add to the stream with "
            "--modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH, or use another model."
        ) from None
    resid, attn, mlp = vecs[RESID].float(), vecs[ATTN].float(), vecs[MLP].float()
    if attn.shape[-1] != resid.shape[-1] or mlp.shape[-1] != resid.shape[-1]:
        raise CoreError(
            f"the hooked attention/MLP outputs are {attn.shape[-1]}/{mlp.shape[-1]} wide but the residual stream is "
            f"{resid.shape[-1]} wide: the module names ({parts.names}) do not name the modules whose outputs are added "
            "to the stream. Name them with --modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH"
        )
    half = model.get_output_embeddings().weight.dtype in (torch.float16, torch.bfloat16)
    tol = RESIDUAL_TOLERANCE["half" if half else "float32"]
    worst, share = worst_layer_gap(resid[:, 1:] - resid[:, :-1] - attn - mlp, resid[:, 1:])
    if share > tol:
        raise CoreError(
            f"{type(model).__name__}: h(l) - h(l-1) - Attn(l) - MLP(l) is {share:.1%} of h(l) at layer "
            f"{worst + 1} (allowed {tol:.1%}), so the hooked modules ({parts.names}) are not what each block adds to "
            "the residual stream. This happens with post-norm layouts (a norm after each module) hooked before their "
            "norm, or with --modules naming the wrong modules. Name the modules whose outputs are added to the stream "
            "with --modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH, or use another model."
        )
    lens_share = None
    if probe_ids is not None and len(probe_ids):
        unembed = unembed_of(probe_ids)
        lens = unembed.logits(resid[:, -1])
        probe = torch.as_tensor(np.asarray(probe_ids), device=out.logits.device)
        own = out.logits[:, -1, :].float()[:, probe].to(lens.device)
        lens_share = float((lens - own).abs().max() / own.abs().max().clamp_min(1e-12))
        if lens_share > tol * 10:
            raise CoreError(
                f"{type(model).__name__}: the logit lens at the last layer (final norm, unembedding, bias, logit "
                f"scale and soft-cap) differs from the model's own logits by {lens_share:.1%} of their size: the model "
                "transforms its logits in a way this tool does not know, or final_norm names the wrong module "
                "(--modules ...,final_norm=PATH)."
            )
    lens_gap = None if lens_share is None else round(lens_share, 6)
    return {"residual_gap": round(share, 6), "lens_gap": lens_gap}
