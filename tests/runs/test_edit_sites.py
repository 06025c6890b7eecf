"""Every site `edit_site` accepts is edited where `capture_hooks` reads it, on every tiny architecture, layer 0
included (the stream before the first block, blocks.0.hook_resid_pre, is the first block's input)."""

import json

import numpy as np
import pytest
import torch

from core.cli import main
from core.errors import CoreError
from core.models.capture import capture_hooks
from core.models.random_models import ARCHITECTURES, POST_NORM_ARCHITECTURES, save_random_model
from core.runs.ablate import edit_site, open_target
from core.runs.run_names import find_run

N_LAYERS = 2
SITES = [f"blocks.{b}.{hook}" for b in range(N_LAYERS)
         for hook in ("hook_resid_pre", "hook_attn_out", "hook_mlp_out", "hook_resid_post")]


@pytest.fixture(scope="module", params=ARCHITECTURES + POST_NORM_ARCHITECTURES)
def tiny_target(request, tmp_path_factory):
    folder = save_random_model(tmp_path_factory.mktemp(request.param), request.param, n_layers=N_LAYERS)
    return open_target(str(folder), limit=40, threads=1, log=lambda *_: None)


def replaced_by_noise(rows):
    """Every row replaced by one fixed random vector of ten times its norm: an edit that must move answers."""
    g = torch.Generator().manual_seed(7)
    v = torch.randn(rows.shape[-1], generator=g)
    return v / v.norm() * 10 * rows.norm(dim=-1, keepdim=True)


@pytest.mark.parametrize("site", SITES)
def test_every_accepted_site_is_edited_where_it_is_captured(tiny_target, site):
    seen = []

    def record(rows):
        seen.append(rows.clone())
        return rows

    same = edit_site(tiny_target, site, record, progress=False)
    assert same.figures["changed"] == 0.0  # the identity edit is no edit
    edited_rows = torch.cat(seen).numpy()
    captured = capture_hooks(tiny_target.loaded, tiny_target.texts, [site], position="answer")[site]
    assert edited_rows.shape == captured.shape
    # batches run sorted by length: the rows the edit saw are the captured rows, in another order (equal rows, as at
    # layer 0 where the last token is the same for many prompts, may match any of their copies)
    distance = np.abs(edited_rows[:, None, :] - captured[None, :, :]).max(axis=-1)
    assert distance.min(axis=1).max() < 1e-4 and distance.min(axis=0).max() < 1e-4
    assert np.allclose(np.sort(edited_rows, axis=0), np.sort(captured, axis=0), atol=1e-4)

    moved = edit_site(tiny_target, site, replaced_by_noise, progress=False)
    assert moved.figures["changed"] > 0.2, f"an edit at {site} moved {moved.figures['changed']:.0%} of answers"


def test_zeroing_the_stream_before_the_first_block_changes_most_answers_of_a_shipped_run():
    target = open_target(find_run("cache", "fourier-frozen-tied"), limit=120, threads=1, log=lambda *_: None)
    report = edit_site(target, "blocks.0.hook_resid_pre", lambda rows: rows * 0, progress=False)
    assert report.base_accuracy > 0.9 and report.figures["changed"] > 0.5


def test_an_edit_in_place_that_returns_none_is_one_clear_error(tiny_target):
    def in_place(rows):
        rows.mul_(0.5)

    with pytest.raises(CoreError, match="returned None.*return rows"):
        edit_site(tiny_target, "blocks.0.hook_mlp_out", in_place, progress=False)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_zeroing_the_stream_before_the_first_block_of_a_tiny_model_changes_most_answers(arch, tmp_path):
    folder = save_random_model(tmp_path / arch, arch, n_layers=N_LAYERS)
    target = open_target(str(folder), limit=60, threads=1, log=lambda *_: None)
    report = edit_site(target, "blocks.0.hook_resid_pre", lambda rows: rows * 0, progress=False)
    assert report.figures["changed"] > 0.5


def test_an_edit_loads_the_model_in_the_dtype_asked_for(tmp_path, capsys):
    """`--dtype` and `--device` reach the model an edit runs on (the API's open_target, and the command line)."""
    folder = save_random_model(tmp_path / "gpt2", "gpt2", n_layers=N_LAYERS)
    target = open_target(str(folder), limit=20, threads=1, log=lambda *_: None, device="cpu", dtype="bfloat16")
    assert next(target.loaded.model.parameters()).dtype == torch.bfloat16 and "bfloat16" in repr(target)
    report = edit_site(target, "blocks.1.hook_mlp_out", lambda rows: rows * 0, progress=False)
    assert 0.0 <= report.accuracy <= 1.0
    assert main(["shift", str(folder), "--module", "mlp", "--layer", "1", "--d", "1", "--limit", "20", "--threads",
                 "1", "--dtype", "bfloat16", "--no-progress", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["n"] == 20 and data["figures"]["model"] == str(folder)
    with pytest.raises(SystemExit):
        main(["ablate", str(folder), "--modules", "mlp", "--remove", "low", "--tau", "5", "--dtype", "float64"])
