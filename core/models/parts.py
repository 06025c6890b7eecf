"""Find a model's blocks, attention and MLP modules and final norm, and check they are what the analysis assumes.

The parts are found by the known layouts of GPT-2, GPT-J, GPT-NeoX/Pythia, Phi, Llama/Mistral/
Qwen2/Gemma-style models (`core.models.names.KNOWN_LAYOUTS`); any other layout can be named by hand
with `ModuleNames` (CLI: --modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH). `check_layout`
then verifies on a probe prompt that the residual stream adds exactly the hooked outputs and that
the logit lens reproduces the model's own logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn as nn

from core.errors import CoreError
from core.models.capture import LastPositionRecorder, prepare_batches
from core.models.modes import evaluating
from core.models.names import ATTN, KNOWN_LAYOUTS, MLP, RESID, ModuleNames
from core.models.number_tokens import PROBE_PROMPT


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

    def __repr__(self) -> str:
        """One line: the module names and the number of blocks (not every module's own repr)."""
        return f"ModelParts({self.names}, {self.n_layers} blocks)"

    def outputs(self, kind: str) -> list:
        """The modules whose outputs are `kind` (`core.models.names.ATTN` or `MLP`), one per layer."""
        return {ATTN: self.attn, MLP: self.mlp}[kind]


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
        return ModelParts(
            names=cand,
            blocks=list(blocks),
            attn=[_get(b, cand.attn) for b in blocks],
            mlp=[_get(b, cand.mlp) for b in blocks],
            final_norm=final_norm,
        )
    what = (f"the module names you gave ({names})" if names is not None
            else "any known layout (GPT-2, GPT-J, GPT-NeoX, Phi, Llama-style)")
    raise CoreError(
        f"cannot find the decoder blocks, attention, MLP and final norm of {type(model).__name__} with {what}. "
        f"Modules found: {_module_listing(model)}. Name them by hand with "
        f"--modules blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH (for GPT-2: {KNOWN_LAYOUTS[0]})"
    )


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
    return {"residual_gap": round(float(share.max()), 6), "lens_gap": lens_gap}
