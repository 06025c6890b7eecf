"""Attention heads at the answer position: TransformerLens' hook_z and hook_result through capture_hooks, W_O found in
every known layout (GPT-2's Conv1D the right way round), and the heads refused, with why, where they do not add up."""

import numpy as np
import pytest
import torch

from core.errors import CoreError
from core.models.capture import capture, capture_hooks
from core.models.names import ACCEPTED_HEAD_HOOKS, HEAD, UNSUPPORTED_HOOKS, Z, hook_name, site_of_hook
from core.models.random_models import ARCHITECTURES, POST_NORM_ARCHITECTURES

PROMPTS = ["Put together 15 and 93. Answer:", "Total of 1 and 2. Answer:", "Calculate 100 + 7. Answer:",
           "Add together 9 and 250. Answer:"]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_heads_results_plus_bias_are_the_attention_output(loaded_model, arch):
    lm = loaded_model(arch)
    parts = lm.parts
    assert parts.has_heads and (parts.n_heads, parts.head_dim) == (4, 16)
    for block in range(lm.n_layers):
        names = [f"blocks.{block}.attn.hook_z", f"blocks.{block}.attn.hook_result", f"blocks.{block}.hook_attn_out"]
        got = capture_hooks(lm, PROMPTS, names)
        z, result, attn = (got[n] for n in names)
        assert z.shape == (4, 4, 16) and result.shape == (4, 4, 64) and attn.shape == (4, 64)
        bias = parts.head_bias(block + 1)
        total = result.sum(1) + (0 if bias is None else bias.numpy())
        assert np.allclose(total, attn, atol=1e-6, rtol=1e-5), (arch, block)
        for h in range(parts.n_heads):  # head h's result is z_h @ W_O^h
            assert np.allclose(result[:, h], z[:, h] @ parts.head_output_matrix(block + 1, h).numpy(), atol=1e-6)


def test_gpt2_conv1d_and_llama_linear_read_their_weights_the_right_way_round(loaded_model):
    gpt2, llama = loaded_model("gpt2"), loaded_model("llama")
    c_proj = gpt2.parts.out_proj[0]
    assert torch.equal(gpt2.parts.head_output_matrix(1, 2), c_proj.weight[32:48, :])  # Conv1D: (in, out)
    o_proj = llama.parts.out_proj[1]
    assert torch.equal(llama.parts.head_output_matrix(2, 3), o_proj.weight[:, 48:64].T)  # Linear: (out, in)
    assert gpt2.parts.head_bias(1) is not None and llama.parts.head_bias(1) is None


def test_capture_keeps_the_heads_only_when_asked(loaded_model):
    lm = loaded_model("llama")
    plain, with_heads = capture(lm, PROMPTS[:2]), capture(lm, PROMPTS[:2], heads=True)
    assert Z not in plain and with_heads[Z].shape == (2, lm.n_layers, 4, 16)
    assert np.allclose(plain["attn"], with_heads["attn"])


def test_the_head_hooks_are_named_in_one_scheme():
    assert hook_name(Z, 2) == "blocks.1.attn.hook_z" and hook_name(HEAD, 1) == "blocks.0.attn.hook_result"
    for name in ACCEPTED_HEAD_HOOKS:
        assert name not in UNSUPPORTED_HOOKS
        assert site_of_hook(name.replace("N", "1"), 2, heads=True)[1] == 2
    assert site_of_hook("blocks.1.attn.hook_result", 2, heads=True) == (HEAD, 2)


def test_a_head_hook_is_not_an_edit_site_and_other_head_internals_are_refused(loaded_model):
    with pytest.raises(CoreError, match="one row per attention head") as err:
        site_of_hook("blocks.0.attn.hook_z", 2)  # what edit_site asks: one vector per prompt
    assert "blocks.N.hook_attn_out" in str(err.value)
    lm = loaded_model("llama")
    with pytest.raises(CoreError, match="not a site this project reads") as err:
        capture_hooks(lm, PROMPTS, ["blocks.0.attn.hook_q"])
    assert all(name in str(err.value) for name in ACCEPTED_HEAD_HOOKS) and "hook_pattern" in str(err.value)
    with pytest.raises(CoreError, match="no block 5"):
        capture_hooks(lm, PROMPTS, ["blocks.5.attn.hook_z"])
    with pytest.raises(CoreError, match="heads are 0..3"):
        lm.parts.head_output_matrix(1, 4)
    with pytest.raises(CoreError, match="layers are 1..2"):
        lm.parts.head_weights(0)


@pytest.mark.parametrize("arch", POST_NORM_ARCHITECTURES)
def test_a_post_norm_layout_refuses_its_heads_and_keeps_everything_else(loaded_model, arch):
    lm = loaded_model(arch)
    assert not lm.parts.has_heads and "post-norm" in lm.parts.heads_missing
    with pytest.raises(CoreError, match="heads do not add linearly") as err:
        capture_hooks(lm, PROMPTS, ["blocks.0.attn.hook_result"])
    assert "blocks.0.attn.hook_result" in str(err.value)
    with pytest.raises(CoreError, match="post-norm"):
        lm.parts.head_output_matrix(1, 0)
    assert capture_hooks(lm, PROMPTS, ["blocks.0.hook_attn_out"])["blocks.0.hook_attn_out"].shape == (4, 64)
