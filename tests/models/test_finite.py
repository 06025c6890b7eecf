"""Honest about broken models: activations that overflow stop precompute, ablate, shift and patch in one line that
names the first layer and module where they appear (core.models.finite), and nothing is published."""

import pytest
from safetensors.torch import load_file, save_file

from core.cli import main
from core.errors import CoreError
from core.models.finite import first_nonfinite_site
from core.models.loading import load_model
from core.models.random_models import save_random_model
from core.runs.ablate import edit_site, open_target

WHERE = "first in the MLP output of layer 2 (blocks.1.hook_mlp_out)"


@pytest.fixture(scope="module")
def overflowing(tmp_path_factory):
    """A tiny GPT-2 whose second MLP's two maps are scaled by 1e25: every weight finite, its output past float32's
    largest number, so everything from layer 2's MLP on is infinite or NaN. (Scaling the attention's query and key
    instead overflows its scores, but what a softmax of infinite scores gives depends on the attention kernel: on
    some CPUs a single prompt's came out finite.)"""
    folder = save_random_model(tmp_path_factory.mktemp("overflow"), "gpt2", n_layers=2)
    weights = load_file(folder / "model.safetensors")
    weights["transformer.h.1.mlp.c_fc.weight"] *= 1e25
    weights["transformer.h.1.mlp.c_proj.weight"] *= 1e25
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.mark.parametrize("command", ["ablate", "shift", "patch", "precompute"])
def test_each_command_refuses_an_overflowing_model_in_one_line(overflowing, tmp_path, capsys, command):
    common = ["--threads", "1", "--no-progress"]
    argv = {
        "ablate": ["ablate", str(overflowing), "--modules", "mlp", "--remove", "low", "--tau", "5", "--limit", "20"],
        "shift": ["shift", str(overflowing), "--module", "mlp", "--layer", "1", "--d", "1", "--limit", "20"],
        "patch": ["patch", str(overflowing), "--clean", "15 + 93", "--corrupt", "15 + 94"],
        "precompute": ["precompute", "--model", str(overflowing), "--cache-dir", str(tmp_path / "cache"),
                       "--max-operand", "30", "--limit", "40", "--taus", "5", "--n-sample", "2"],
    }[command]
    assert main(argv + common) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and WHERE in errors[0] and "NaN or infinite" in errors[0]
    assert "check its weights" in errors[0]
    if command == "precompute":  # nothing published, no staging folder left
        assert not list((tmp_path / "cache").glob("*")) if (tmp_path / "cache").exists() else True


def test_float16_overflow_says_load_it_in_float32(tmp_path):
    """The realistic case: finite in float32, past float16's 65504 in float16 (what an edit receives already
    overflowed: the model's doing, not the edit's)."""
    folder = save_random_model(tmp_path / "m", "gpt2", n_layers=2)
    weights = load_file(folder / "model.safetensors")
    weights["transformer.h.0.mlp.c_fc.weight"] *= 1e3  # weights still below float16's largest, activations not
    weights["transformer.h.0.mlp.c_proj.weight"] *= 3e3
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    target = open_target(str(folder), limit=10, threads=1, log=lambda *_: None, dtype="float16")
    with pytest.raises(CoreError, match=r"MLP output of layer 1 \(blocks.0.hook_mlp_out\).*overflow in float16: "
                                        r"load it in float32"):
        edit_site(target, "blocks.1.hook_mlp_out", lambda rows: rows, progress=False)
    assert edit_site(open_target(str(folder), limit=10, threads=1, log=lambda *_: None), "blocks.1.hook_mlp_out",
                     lambda rows: rows, progress=False).accuracy >= 0  # the same model is finite in float32


def test_a_healthy_model_has_no_nonfinite_site(tmp_path):
    loaded = load_model(str(save_random_model(tmp_path / "m", "llama", n_layers=2)))
    batch = loaded.tokenizer(["Put together 15 and 93. Answer:"], return_tensors="pt")
    assert first_nonfinite_site(loaded, batch["input_ids"], batch["attention_mask"]) is None
    loaded.model.model.layers[1].mlp.down_proj.weight.data *= float("inf")
    found = first_nonfinite_site(loaded, batch["input_ids"], batch["attention_mask"])
    assert found == "the MLP output of layer 2 (blocks.1.hook_mlp_out)"
