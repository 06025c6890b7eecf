"""Where a block keeps the parts only read (core.models.site_recorder): its MLP's neurons, the stream between its
attention and MLP, its attention module itself; each found by name, or refused with what the block holds.

`parts` is a `core.models.parts.ModelParts` (the blocks, attention and MLP modules found for the analysis).
"""

from __future__ import annotations

import torch.nn as nn
from transformers.pytorch_utils import Conv1D

from core.errors import CoreError


def child(module, path: str):
    """The submodule at dotted `path`, or None."""
    try:
        return module.get_submodule(path)
    except AttributeError:
        return None


def is_projection(module) -> bool:
    """Whether `module` is a linear layer or GPT-2's Conv1D."""
    return isinstance(module, (nn.Linear, Conv1D))


#: The names of an MLP's output (down) projection, whose input is the MLP's neurons after the nonlinearity
#: (TransformerLens' hook_post): Llama-style `down_proj`, GPT-2 `c_proj`, GPT-J `fc_out`, GPT-NeoX `dense_4h_to_h`,
#: Phi `fc2`.
MLP_DOWN_PROJECTIONS = ("down_proj", "c_proj", "fc_out", "dense_4h_to_h", "fc2")
#: The norms whose input is the stream between attention and MLP: GPT-2 `ln_2`, Gemma2/3 `pre_feedforward_layernorm`,
#: Llama-style and sequential GPT-NeoX `post_attention_layernorm` (unless it is the post-norm of attention's output).
MID_NORMS = ("ln_2", "pre_feedforward_layernorm", "post_attention_layernorm")
#: The names of a block's attention module (whose output holds the attention probabilities under eager attention).
ATTENTION_MODULES = ("self_attn", "attn", "attention")


def block_child(parts, layer: int, names: tuple[str, ...], what: str, skip: tuple[str, ...] = ()):
    """The first module of block `layer` (1-based) named one of `names` (not one of `skip`), or a CoreError naming
    what is missing and what the block holds."""
    if not 1 <= int(layer) <= parts.n_layers:
        raise CoreError(f"layer {layer}: this model's layers are 1..{parts.n_layers} (counted from 1)")
    block = parts.blocks[int(layer) - 1]
    for name in names:
        found = child(block, name) if name not in skip else None
        if found is not None:
            return found
    have = ", ".join(n for n, _ in block.named_children())
    raise CoreError(f"{what} is not found in this model's blocks ({type(block).__name__} holds {have}; looked for "
                    f"{', '.join(n for n in names if n not in skip)})")


def mlp_neurons_module(parts, layer: int):
    """The module whose input is MLP `layer`'s neurons after the nonlinearity (hook_post): its down projection."""
    mlp = parts.mlp[int(layer) - 1] if 1 <= int(layer) <= parts.n_layers else None
    if mlp is None or "norm" in parts.names.mlp.lower():  # a post-norm layout: the MLP itself is the block's "mlp"
        mlp = block_child(parts, layer, ("mlp", "feed_forward"), "the MLP")
    found = next((m for n in MLP_DOWN_PROJECTIONS if (m := child(mlp, n)) is not None and is_projection(m)), None)
    if found is None:
        have = ", ".join(n for n, _ in mlp.named_children())
        raise CoreError(f"the MLP's neurons (hook_post) cannot be read: {type(mlp).__name__} holds no output "
                        f"projection named {', '.join(MLP_DOWN_PROJECTIONS)} (it holds {have})")
    return found


def mid_stream_module(parts, layer: int):
    """The module whose input is block `layer`'s stream between attention and MLP (hook_resid_mid): the MLP's input
    norm; refused for parallel blocks (`ModelParts.parallel_blocks`)."""
    if parts.parallel_blocks:
        raise CoreError(f"hook_resid_mid cannot be read: {parts.parallel_blocks}")
    skip = (parts.names.attn,)  # a post-norm layout's post_attention_layernorm normalises attention's output
    if "norm" in parts.names.attn.lower() and child(parts.blocks[0], "pre_feedforward_layernorm") is None:
        return block_child(parts, layer, ("mlp",), "the MLP whose input is hook_resid_mid")
    return block_child(parts, layer, MID_NORMS, "the norm before the MLP (whose input is hook_resid_mid)", skip)


def attention_module(parts, layer: int):
    """Block `layer`'s attention module itself (not a post-norm layout's norm after it), for its pattern."""
    if "norm" not in parts.names.attn.lower():
        return parts.attn[int(layer) - 1]
    return block_child(parts, layer, ATTENTION_MODULES, "the attention module")
