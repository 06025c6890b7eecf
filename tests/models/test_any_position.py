"""Any position and every TransformerLens site: capture_hooks at an index, an operand or every token (left-padded,
with a mask), attention patterns, MLP neurons and the stream between attention and MLP where the architecture has
them (refused with why where not), and run_with_cache naming them as TransformerLens does."""

import numpy as np
import pytest
import torch

from core.errors import CoreError
from core.models.capture import capture, capture_hooks, run_with_cache
from core.models.positions import token_index

PROMPTS = ["Put together 15 and 93. Answer:", "Total of 1 and 2. Answer:", "Calculate 100 + 7. Answer:"]


def test_one_position_is_the_same_token_as_in_every_position(loaded_model):
    lm = loaded_model("llama")
    name = "blocks.1.hook_resid_pre"
    every = capture_hooks(lm, PROMPTS, [name], position="all")
    lengths = every.mask.sum(1)
    width = every.mask.shape[1]
    assert len(set(lengths)) > 1  # prompts shorter than their batch: their pad tokens are computed, then zeroed
    assert every[name].shape == (3, width, lm.width) and (every[name][~every.mask] == 0).all()  # left-padded zeros
    pattern = capture_hooks(lm, PROMPTS, ["blocks.0.attn.hook_pattern"], position="all")["blocks.0.attn.hook_pattern"]
    assert np.isfinite(pattern).all() and np.allclose(pattern.sum(-1)[every.mask.repeat(pattern.shape[1], 0)
                                                                        .reshape(3, -1, width)], 1, atol=1e-5)
    assert (pattern.transpose(0, 2, 1, 3)[~every.mask] == 0).all() and (pattern.transpose(0, 3, 1, 2)[~every.mask]
                                                                        == 0).all()
    for position in ("answer", "a", "b", 0, -3):
        one = capture_hooks(lm, PROMPTS, [name], position=position)
        columns = width - lengths + one.index
        assert np.allclose(one[name], every[name][np.arange(3), columns], atol=1e-5), position
    b = capture_hooks(lm, PROMPTS, [name], position="b")
    assert [tokens[i].strip()[-1] for tokens, i in zip(b.tokens, b.index)] == ["3", "2", "7"]  # b's last token
    assert np.allclose(capture_hooks(lm, PROMPTS, [name])[name], capture(lm, PROMPTS)["resid"][:, 1], atol=1e-6)


def test_a_position_that_is_not_there_is_refused_with_the_prompt(loaded_model):
    lm = loaded_model("llama")
    with pytest.raises(CoreError, match="whole number"):
        token_index(lm.tokenizer, ["Hello there. Answer:"], "a")
    with pytest.raises(CoreError, match="has .* tokens"):
        capture_hooks(lm, PROMPTS, ["blocks.0.hook_mlp_out"], position=40)
    with pytest.raises(CoreError, match="give a token index"):
        capture_hooks(lm, PROMPTS, ["blocks.0.hook_mlp_out"], position="first")


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_pattern_neurons_and_mid_stream_are_what_they_say(loaded_model, arch):
    lm = loaded_model(arch)
    before = lm.model.config._attn_implementation
    logits, cache = run_with_cache(lm, PROMPTS)
    assert lm.model.config._attn_implementation == before  # eager only for the pass that reads patterns
    pattern = cache["blocks.0.attn.hook_pattern"]
    assert pattern.shape[:2] == (3, lm.parts.n_heads) and np.allclose(pattern.sum(-1), 1, atol=1e-5)
    assert (pattern[2, :, : pattern.shape[2] - len(lm.tokenizer(PROMPTS[2])["input_ids"])] == 0).all()
    mid = cache["blocks.1.hook_resid_mid"]
    assert np.allclose(mid, cache["blocks.1.hook_resid_pre"] + cache["blocks.1.hook_attn_out"], atol=1e-4)
    down = lm.parts.mlp[0].c_proj if arch == "gpt2" else lm.parts.mlp[0].down_proj
    with torch.no_grad():
        out = down(torch.as_tensor(cache["blocks.0.mlp.hook_post"])).numpy()
    assert np.allclose(out, cache["blocks.0.hook_mlp_out"], atol=1e-5)  # the neurons are the down projection's input
    with torch.no_grad():
        own = lm.model(**lm.tokenizer(PROMPTS[:1], return_tensors="pt")).logits[0, -1].numpy()
    assert np.allclose(logits[0], own, atol=1e-4) and "ln_final.hook_normalized" in cache


def test_parallel_blocks_refuse_the_mid_stream_and_run_with_cache_leaves_it_out(loaded_model):
    lm = loaded_model("gptj")
    with pytest.raises(CoreError, match="in parallel"):
        capture_hooks(lm, PROMPTS, ["blocks.0.hook_resid_mid"])
    names = list(run_with_cache(lm, PROMPTS[:1])[1])
    assert "blocks.0.hook_resid_mid" not in names and "blocks.0.mlp.hook_post" in names
