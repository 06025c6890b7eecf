"""One Unembed per model: final norm, W_U number rows, lm_head bias, logit scale, soft-cap; and the
load-time check that the hooked modules are what each block adds to the residual stream."""

import numpy as np
import pytest
import torch

from core.errors import CoreError
from core.models.capture import capture
from core.models.loading import load_model
from core.models.random_models import ARCHITECTURES, POST_NORM_ARCHITECTURES, random_config
from core.models.vocab import number_tokenizer
from transformers import AutoModelForCausalLM
from core.models.names import ModuleNames
from core.cli import main
from core.runs.cache import list_runs, read_table

P = 61


def save_perturbed_model(folder, arch, seed=0, softcap=None):
    """A random-init model whose biases (lm_head's included, where it has one) and norm weights are
    random and non-zero, so that leaving any of them out of the unembedding shows."""

    tok = number_tokenizer(200)
    special = dict(pad_token_id=tok.pad_token_id, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    config = random_config(arch, len(tok), 2, 64, 4, **special)
    if softcap is not None:
        config.final_logit_softcapping = softcap
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.copy_(0.5 * torch.randn(param.shape, generator=gen))
            elif "norm" in name or name.split(".")[-2].startswith("ln"):
                param.copy_(1.0 + 0.5 * torch.randn(param.shape, generator=gen))
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


PROMPTS = ["Put together 15 and 93. Answer:", "Total of 1 and 2. Answer:", "Calculate 40 + 7. Answer:"]


@pytest.mark.parametrize("arch", ARCHITECTURES + POST_NORM_ARCHITECTURES)
def test_lens_at_last_layer_is_the_models_own_logits(tmp_path, arch):
    softcap = 2.0 if arch == "gemma2" else None  # small, so tanh is far from linear on these logits
    lm = load_model(str(save_perturbed_model(tmp_path, arch, softcap=softcap)))
    p = min(P, lm.numbers.P)  # transformers loads Qwen2's own tokenizer class, which splits digits (P = 10)
    unembed = lm.unembed(p)
    head = lm.model.get_output_embeddings()
    if arch in ("gptj", "phi"):  # the paper's 4-shot models carry an lm_head bias
        assert unembed.bias is not None and float(unembed.bias.abs().max()) > 0.1
    if arch == "gemma2":
        assert unembed.softcap == 2.0
    got = capture(lm, PROMPTS)
    resid_last = torch.as_tensor(got["resid"][:, -1])
    lens = unembed.logits(resid_last).numpy()
    own = got["logits"][:, lm.numbers.ids_for(p)]
    assert np.abs(own).max() > 0.1
    assert np.allclose(lens, own, atol=1e-4 * np.abs(own).max() + 1e-5)
    # leaving out the bias (where there is one) or the final norm would not reproduce it
    if head.bias is not None:
        plain = (unembed.norm(resid_last).float() @ unembed.weight.T).detach().numpy()
        assert not np.allclose(plain, own, atol=1e-3)
    assert not np.allclose(unembed.logits(resid_last, final_norm=False).numpy(), own, atol=1e-3)
    # the layout check passed at load and measured the residual identity
    assert lm.extra["layout_check"]["residual_gap"] < 1e-3


@pytest.mark.parametrize("arch", POST_NORM_ARCHITECTURES)
def test_post_norm_layouts_hook_what_is_added_or_are_refused(tmp_path, arch):
    folder = save_perturbed_model(tmp_path, arch)
    lm = load_model(str(folder))
    assert lm.parts.names.attn == "post_attention_layernorm" and lm.parts.names.mlp == "post_feedforward_layernorm"
    got = capture(lm, PROMPTS)
    gap = got["resid"][:, 1:] - got["resid"][:, :-1] - got["attn"] - got["mlp"]
    assert np.abs(gap).max() < 1e-4 * np.abs(got["resid"]).max()
    # hooking the modules before their post-norm (as for Llama) breaks h(l) = h(l-1) + Attn(l) + MLP(l): refused

    with pytest.raises(
        CoreError, match=r"h\(l\) - h\(l-1\) - Attn\(l\) - MLP\(l\) is .* of h\(l\) at layer 1.*post-norm"
    ):
        load_model(str(folder), module_names=ModuleNames("model.layers", "self_attn", "mlp", "model.norm"))


def test_wrong_module_names_are_refused_at_load(model_dir, tmp_path):
    folder = str(model_dir("gpt2"))
    with pytest.raises(CoreError, match=r"not what each block adds to the residual stream"):
        load_model(folder, module_names=ModuleNames("transformer.h", "attn", "ln_2", "transformer.ln_f"))
    with pytest.raises(CoreError, match=r"wide but the residual stream is 64 wide"):
        load_model(folder, module_names=ModuleNames("transformer.h", "attn", "mlp.c_fc", "transformer.ln_f"))
    # a final norm that is not the model's (norm weights differ in the perturbed model)
    perturbed = str(save_perturbed_model(tmp_path, "gpt2"))
    with pytest.raises(CoreError, match=r"differs from the model's own logits"):
        load_model(perturbed, module_names=ModuleNames("transformer.h", "attn", "mlp", "transformer.h.0.ln_1"))
    # naming the projection inside the module gives the same added output: accepted
    lm = load_model(folder, module_names=ModuleNames("transformer.h", "attn.c_proj", "mlp", "transformer.ln_f"))
    assert lm.extra["layout_check"]["residual_gap"] < 1e-3


def test_logit_lens_layer_accuracy_at_the_top_uses_the_bias(tmp_path):
    """End to end: the stored logit-lens accuracy at the last layer is the model's own accuracy,
    on a model whose lm_head bias is large enough to change predictions."""

    folder = save_perturbed_model(tmp_path / "m", "gptj")
    cache = tmp_path / "cache"
    args = ["--max-operand", "30", "--limit", "40", "--taus", "5", "--n-sample", "2", "--no-progress",
            "--stages", "measure"]  # the logit lens and the examples are the measurements' tables
    assert main(["precompute", "--model", str(folder), "--cache-dir", str(cache), *args]) == 0
    (run,) = list_runs(cache)
    ex = read_table(cache, run.name, "examples")
    acc = read_table(cache, run.name, "layer_accuracy")
    top = acc[(acc["layer"] == run.manifest["n_layers"]) & acc["final_norm"]].iloc[0]
    err = (ex["prediction"] - ex["answer"]).abs()
    assert (err <= 10).mean() > 0  # not a vacuous comparison
    for col, d in (("exact", 0), ("within_2", 2), ("within_10", 10)):
        assert np.isclose(top[col], (err <= d).mean())
