"""A researcher's own models (issue 59): a model in train mode is left in train mode, a LoadedModel prints as one
short line, OPT is refused by name, and TransformerLens names this project does not read are refused with the
accepted ones named."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, OPTConfig, OPTForCausalLM

from core.analysis.ablations import Condition
from core.analysis.evaluation import evaluate, evaluate_conditions
from core.analysis.filters import low_pass
from core.analysis.fourier import fourier_basis
from core.analysis.kshot import generate
from core.errors import CoreError
from core.models.capture import capture, capture_hooks, prepare_batches
from core.models.loading import load_model, wrap_model
from core.models.modes import evaluating
from core.models.names import ACCEPTED_HOOKS, UNSUPPORTED_HOOKS, site_of_hook
from core.models.random_models import random_config
from core.models.vocab import number_tokenizer

P = 61
QUESTIONS = [(15, 13), (1, 2), (20, 22), (7, 30), (3, 4), (11, 0)]
TEXTS = [f"{a} + {b} =" for a, b in QUESTIONS]
ANSWERS = [a + b for a, b in QUESTIONS]
#: dropout everywhere it can be, so a pass in train mode would not give the eval-mode numbers
DROPOUT = {"gpt2": dict(resid_pdrop=0.5, embd_pdrop=0.5, attn_pdrop=0.5), "llama": dict(attention_dropout=0.5)}


def twin_models(arch: str):
    """(tokenizer, the same random weights twice: one in train mode with one block in eval mode, one in eval)."""
    tok = number_tokenizer(200)
    special = dict(pad_token_id=tok.pad_token_id, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    config = random_config(arch, len(tok), **special, **DROPOUT[arch])
    torch.manual_seed(0)
    training = AutoModelForCausalLM.from_config(config)
    reference = AutoModelForCausalLM.from_config(config)
    reference.load_state_dict(training.state_dict())
    training.train()
    next(m for name, m in training.named_modules() if name.endswith(".1") or name.endswith("layers.1")).eval()
    return tok, training, reference.eval()


def flags(model) -> dict:
    return {name: m.training for name, m in model.named_modules()}


def results(loaded) -> dict:
    """Every kind of pass the analysis makes: captures, evaluations (answer position, every position, several
    conditions sharing a pass), generation."""
    flt = low_pass(loaded.unembedding(P), fourier_basis(P, "paper"), 5)
    out = {f"capture {k}": v for k, v in capture(loaded, TEXTS, batch_size=4).items()}
    out["hooks"] = capture_hooks(loaded, TEXTS, ["blocks.1.hook_mlp_out", "blocks.0.hook_resid_post"])
    for positions in ("last", "all"):
        ev = evaluate(loaded, TEXTS, ANSWERS, P, flt, "mlp", positions, batch_size=4)
        out[f"evaluate {positions}"] = (ev.predictions, ev.losses)
    grid = evaluate_conditions(loaded, TEXTS, ANSWERS, P, [Condition(None), Condition(flt, "both"),
                                                           Condition(flt, "attn", layer=2)], batch_size=3)
    out["grid"] = [(e.predictions, e.losses) for e in grid]
    out["generate"] = generate(loaded, TEXTS, max_new_tokens=2, batch_size=4)
    return out


def same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.allclose(a, b, atol=1e-5)
    return a == b


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_model_in_train_mode_stays_in_train_mode_and_is_analysed_in_eval_mode(arch):
    """wrap_model and every pass leave each module's own training flag as they found it (one block in eval mode
    among modules in train mode included), and the numbers are those of the same weights in eval mode."""
    tok, training, reference = twin_models(arch)
    before = flags(training)
    assert training.training and not all(before.values())
    batch = prepare_batches(tok, TEXTS, len(TEXTS))[0]
    with torch.no_grad():  # the dropout is real: a pass in train mode gives other numbers
        ids = batch.input_ids
        assert not torch.allclose(training(input_ids=ids).logits, reference(input_ids=ids).logits)
    loaded = wrap_model(training, tok, name="mine")
    assert flags(training) == before
    got = results(loaded)
    assert flags(training) == before
    assert same(got, results(wrap_model(reference, tok, name="reference")))
    assert not reference.training


def test_evaluating_nests_and_restores_on_error():
    """Nested passes restore the flags when the outer one ends; an error inside still restores them."""
    _, training, _ = twin_models("gpt2")
    before = flags(training)
    with evaluating(training):
        with evaluating(training):
            assert not any(flags(training).values())
        assert not any(flags(training).values())  # the outer pass is still running
    assert flags(training) == before
    with pytest.raises(ValueError), evaluating(training):
        raise ValueError("a pass that fails")
    assert flags(training) == before


def test_reprs_are_one_short_line(loaded_model, model_dir):
    """A LoadedModel (loaded or wrapped), its parts, its number tokens and an evaluation print as one short line
    that names what they are, not every token id, module or prediction."""
    from_folder = loaded_model("gpt2")
    tok, _, reference = twin_models("gpt2")
    wrapped = wrap_model(reference, tok, name="mine")
    for loaded in (from_folder, wrapped):
        text = repr(loaded)
        assert len(text) < 300 and "\n" not in text, text
        assert f"{loaded.n_layers} layers" in text and f"width {loaded.width}" in text
        assert f"0..{loaded.numbers.P - 1}" in text and "cpu float32" in text
        for part in (loaded.parts, loaded.numbers):
            assert len(repr(part)) < 300 and "\n" not in repr(part), repr(part)
    assert "mine" in repr(wrapped) and "GPT2LMHeadModel" in repr(wrapped)
    ev = evaluate(wrapped, TEXTS * 100, ANSWERS * 100, P)
    assert len(repr(ev)) < 300 and "n=600" in repr(ev)
    long_source = wrap_model(reference, tok, name="x" * 1000)
    assert len(repr(long_source)) < 300


def tiny_opt():
    tok = number_tokenizer(200)
    config = OPTConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,
                       max_position_embeddings=64, word_embed_proj_dim=32, pad_token_id=tok.pad_token_id,
                       bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    return tok, OPTForCausalLM(config)


def test_opt_is_refused_by_name_with_why(tmp_path):
    """OPT flattens the positions around its MLP (fc2's output is (batch * positions, width)): wrap_model and
    load_model refuse it in one line that says why and what to use, before any pass (load_model: before its
    weights are read)."""
    tok, opt = tiny_opt()
    with pytest.raises(CoreError, match=r"OPTForCausalLM.*flattens.*fc2.*use a model of a supported layout") as err:
        wrap_model(opt, tok)
    assert "\n" not in str(err.value)
    opt.save_pretrained(tmp_path, safe_serialization=True)
    tok.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not read")  # refused from config.json alone
    with pytest.raises(CoreError, match=r"model type 'opt'.*flattens"):
        load_model(str(tmp_path))


TL_NAMES_REFUSED = ["blocks.0.hook_resid_mid", "hook_embed", "hook_pos_embed", "ln_final.hook_normalized",
                    "blocks.1.attn.hook_z", "blocks.0.hook_attn_in", "blocks.0.mlp.hook_post", "blocks.0.hook_q"]


@pytest.mark.parametrize("name", TL_NAMES_REFUSED)
def test_transformer_lens_names_not_read_here_are_refused_naming_the_accepted_ones(name):
    with pytest.raises(CoreError) as err:
        site_of_hook(name, 2)
    text = str(err.value)
    assert "\n" not in text and all(ok in text for ok in ACCEPTED_HOOKS) and "N from 0 to 1" in text
    key = name.replace("blocks.0.", "blocks.N.").replace("blocks.1.", "blocks.N.")
    assert key not in UNSUPPORTED_HOOKS or UNSUPPORTED_HOOKS[key] in text


def test_every_unsupported_hook_is_refused_with_its_reason():
    for name, why in UNSUPPORTED_HOOKS.items():
        with pytest.raises(CoreError, match="not a site this project reads") as err:
            site_of_hook(name.replace("blocks.N.", "blocks.1."), 3)
        assert why in str(err.value)
    assert [site_of_hook(n.replace("N", "0"), 2)[0] for n in ACCEPTED_HOOKS] == ["resid", "resid", "attn", "mlp"]
