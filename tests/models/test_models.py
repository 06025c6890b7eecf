import json

import numpy as np
import pytest
import torch

from core.analysis.filter_hooks import filtered
from core.analysis.filters import high_pass
from core.analysis.fourier import band_frequencies, fourier_basis, frequency_magnitudes
from core.errors import CoreError
from core.models.capture import LastPositionRecorder, capture, prepare_batches
from core.models.loading import load_model, wrap_model
from core.models.names import ATTN, MLP, RESID, ModuleNames, hook_name, site_of_hook
from core.models.number_tokens import find_number_tokens, require_number_range
from core.models.parts import find_parts
from core.models.random_models import ARCHITECTURES
from core.models.source import resolve_source
from core.models.vocab import digit_tokenizer
import transformers

PROMPTS = [
    "Put together 15 and 93. Answer:",
    "Total of 1 and 2. Answer:",
    "What is the sum of 3 and 4? Answer:",
    "Calculate 100 + 7. Answer:",
    "Add together 9 and 250. Answer:",
]
SEQUENTIAL = {"gpt2", "llama", "mistral", "qwen2"}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_parts_found_and_residual_decomposes(loaded_model, arch):
    lm = loaded_model(arch)
    assert lm.n_layers == 2 and lm.width == 64
    got = capture(lm, PROMPTS, batch_size=5)
    h, attn, mlp = got["resid"], got["attn"], got["mlp"]
    assert h.shape == (5, 3, 64) and attn.shape == mlp.shape == (5, 2, 64)
    # docs/method.md#residual-stream-and-logit-lens: h(l) = h(l-1) + Attn(l) + MLP(l),
    # for sequential and parallel blocks alike
    assert np.allclose(h[:, 1:], h[:, :-1] + attn + mlp, atol=1e-5)


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "llama", "phi", "gptj"])
def test_left_padded_batches_match_single_prompts(loaded_model, arch):
    lm = loaded_model(arch)
    batched = capture(lm, PROMPTS, batch_size=5)  # different lengths: padding needed
    batches = prepare_batches(lm.tokenizer, PROMPTS, 5)
    assert (batches[0].attention_mask == 0).any()
    for i, prompt in enumerate(PROMPTS):
        single = capture(lm, [prompt], batch_size=1)
        for key in ("logits", "resid", "attn", "mlp"):
            assert np.allclose(batched[key][i], single[key][0], atol=1e-4), (arch, key, i)


def test_batches_of_given_sizes_take_the_prompts_in_order_the_last_size_repeated(loaded_model):
    """(64, 448) for the live sample: a list of sizes gives the first batches in order and repeats the last; every
    prompt once, in order when not sorted by length; a size below 1 is refused."""
    lm = loaded_model("gpt2")
    prompts = [f"{i} plus {i}" for i in range(11)]
    for sizes, expect in (((2, 4), [2, 4, 4, 1]), ((3,), [3, 3, 3, 2]), (5, [5, 5, 1]), ((20, 1), [11])):
        batches = prepare_batches(lm.tokenizer, prompts, sizes, by_length=False)
        assert [len(b.indices) for b in batches] == expect, sizes
        assert np.concatenate([b.indices for b in batches]).tolist() == list(range(11))
    for bad in (0, (), (4, 0)):
        with pytest.raises(CoreError, match="batch size must be at least 1"):
            prepare_batches(lm.tokenizer, prompts, bad)


def test_final_norm_logit_lens_equals_model_output(loaded_model):
    lm = loaded_model("gpt2")
    got = capture(lm, PROMPTS)
    with torch.no_grad():
        normed = lm.parts.final_norm(torch.as_tensor(got["resid"][:, -1]))
        lens = normed @ lm.model.get_output_embeddings().weight.T
    assert np.allclose(lens.numpy(), got["logits"], atol=1e-4)


def test_capture_keeps_only_last_position(loaded_model):
    """Stored vectors own just B x D numbers, however long the prompts are."""
    lm = loaded_model("gpt2")
    long_prompts = [" ".join(["Total of 1 and 2. Answer: 3"] * 20) + " " + p for p in PROMPTS]
    for prompts in (PROMPTS, long_prompts):
        batch = prepare_batches(lm.tokenizer, prompts, 5)[0]
        with LastPositionRecorder(lm.parts) as rec, torch.no_grad():
            lm.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids)
            for stream in ("resid", "attn", "mlp"):
                for v in rec.store[stream]:
                    assert v.shape == (5, 64)
                    assert v.untyped_storage().nbytes() == 5 * 64 * v.element_size()


def test_hooked_filter_removes_frequencies_from_module_logits(loaded_model):
    lm = loaded_model("gpt2")
    p = 61
    basis = fourier_basis(p, "paper")
    W_U = lm.unembedding(p)
    flt = high_pass(W_U, basis, 5)  # removes 8 rows of 30 frequencies: width 64 is enough
    assert not flt.erased
    plain = capture(lm, PROMPTS)
    with filtered(lm, flt, "both"):
        got = capture(lm, PROMPTS)
    rows = basis.rows_of(band_frequencies(basis, "low", 5))
    for key in ("attn", "mlp"):
        coeffs = got[key] @ W_U.numpy().T @ basis.matrix[rows].T
        assert np.abs(coeffs).max() < 1e-4
    # layer 1's attention output is exactly the numpy filter of the unfiltered one
    assert np.allclose(got["attn"][:, 0], flt.apply(plain["attn"][:, 0]), atol=1e-4)
    mags = frequency_magnitudes(basis, got["mlp"][:, 1] @ W_U.numpy().T)
    assert mags[:, 4:].max() > 1e-3
    # hooks are removed afterwards
    assert np.allclose(capture(lm, PROMPTS)["mlp"], plain["mlp"])


def test_number_tokens_of_word_level_tokenizer(loaded_model):
    lm = loaded_model("gpt2")
    nt = lm.numbers
    assert nt.P == 601 and nt.first_split == 601 and nt.prompt_suffix == ""
    assert lm.tokenizer.decode([nt.ids[108]]).strip() == "108"
    require_number_range(nt, 521)
    with pytest.raises(CoreError, match=r"601 is the first number that is not one token.*--max-operand 300"):
        require_number_range(nt, 700)


def test_digit_splitting_tokenizer_gets_p_10():
    nt = find_number_tokens(digit_tokenizer())
    assert nt.P == 10 and nt.first_split == 10
    with pytest.raises(CoreError, match=r"splits numbers into digits.*P = 10.*--max-operand 4"):
        require_number_range(nt, 521)


def test_wrong_module_names_list_what_is_there(loaded_model):
    lm = loaded_model("gpt2")
    with pytest.raises(
        CoreError, match=r"transformer\.h \(list of 2; first item has: ln_1, attn, ln_2, mlp\).*--modules"
    ):
        find_parts(lm.model, ModuleNames("transformer.h", "self_attn", "ffn", None))
    parts = find_parts(lm.model, ModuleNames.parse("blocks=transformer.h,attn=attn,mlp=mlp,final_norm=none"))
    assert parts.n_layers == 2 and parts.final_norm is None


def test_unknown_architecture_fails_with_listing():
    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stack = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])

    with pytest.raises(CoreError, match=r"Toy.*stack \(list of 3.*blocks=PATH,attn=NAME"):
        find_parts(Toy())


@pytest.mark.parametrize(
    "text,match",
    [("blocks=a,attn=b", "missing"), ("blocks=a,attn=b,mlp=c,foo=d", "unknown keys"), ("nonsense", "cannot read")],
)
def test_module_names_parse_errors(text, match):
    with pytest.raises(CoreError, match=match):
        ModuleNames.parse(text)


def test_loading_refuses_pickles_and_bad_sources(tmp_path, model_dir):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04not really")
    with pytest.raises(CoreError, match="safetensors only and never unpickles"):
        load_model(str(tmp_path))
    with pytest.raises(CoreError, match="no config.json"):
        load_model(str(tmp_path.parent))
    with pytest.raises(CoreError, match="is a file"):
        load_model(str(tmp_path / "config.json"))
    with pytest.raises(CoreError, match="neither an existing folder nor a hub id"):
        load_model("./does/not/exist")
    with pytest.raises(
        CoreError, match="could not load the Hugging Face hub id 'nobody/no-such-model'.*pass its folder"
    ):
        load_model("nobody/no-such-model")
    with pytest.raises(CoreError, match="dtype"):
        load_model(str(model_dir("gpt2")), dtype="float8")


def test_trust_remote_code_is_off_unless_asked(monkeypatch, model_dir):
    seen = []
    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        seen.append(kwargs.get("trust_remote_code"))
        assert kwargs.get("use_safetensors") is True
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    load_model(str(model_dir("gpt2")))
    assert seen == [False]


def test_a_packaged_model_not_imported_yet_says_how_to_import_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()  # models/ is here, models/smollm2-135m (its import folder) is not
    with pytest.raises(CoreError, match="packaged model that is not imported yet.*import-model smollm2-135m"):
        resolve_source("models/smollm2-135m")


def test_hook_names_are_read_back_to_the_site_they_name():
    """site_of_hook inverts hook_name for every stream and layer of a 3-layer model, and names what it accepts."""
    L = 3
    sites = [(ATTN, l) for l in range(1, L + 1)] + [(MLP, l) for l in range(1, L + 1)] + [(RESID, l) for l in range(L + 1)]
    for stream, layer in sites:
        assert site_of_hook(hook_name(stream, layer, L), L) == (stream, layer)
    assert site_of_hook("blocks.1.hook_resid_post", L) == (RESID, 2) == site_of_hook("blocks.2.hook_resid_pre", L)
    for bad in ("blocks.3.hook_mlp_out", "blocks.0.hook_q", "ln_final.hook_normalized", "blocks.x.hook_mlp_out"):
        with pytest.raises(CoreError, match="hook"):
            site_of_hook(bad, L)


def test_a_model_in_memory_reads_as_its_folder_does(model_dir):
    """wrap_model on the module and tokenizer transformers loads from a folder: the same parts, number tokens and
    captured streams as load_model on that folder; the caller's tokenizer is left as it was; its fingerprint follows
    its weights; NaN weights are refused."""
    folder = str(model_dir("llama"))
    from_folder = load_model(folder)
    module = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    side = tokenizer.padding_side
    wrapped = wrap_model(module, tokenizer, name="mine")
    assert tokenizer.padding_side == side and wrapped.tokenizer.padding_side == "left"
    assert wrapped.source == "mine" and wrapped.numbers.ids == from_folder.numbers.ids
    texts = ["15 + 93 =", "1 + 2 =", "40 + 2 ="]
    a, b = capture(wrapped, texts), capture(from_folder, texts)
    assert all(np.allclose(a[k], b[k], atol=1e-5) for k in (RESID, ATTN, MLP))
    with torch.no_grad():
        module.model.layers[0].mlp.down_proj.weight[0, 0] += 1.0
    assert wrap_model(module, tokenizer).fingerprint != wrapped.fingerprint
    with torch.no_grad():
        module.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")
    with pytest.raises(CoreError, match="NaN or infinite"):
        wrap_model(module, tokenizer)
