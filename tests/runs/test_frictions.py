"""The frictions of issue 68, each mended: a run folder's path is a run wherever a run is taken; a refusal that needs
no model comes before the model loads (two equal prompts, a GPU this machine lacks); one rule and one message for
tau; choices listed alike; `patch` takes any two prompts and says how two of different lengths differ, and its JSON
holds what `ablate --json` holds; no "nan%" where a share cannot be read."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from core.cli import main
from core.errors import choices
from core.files import PROJECT_ROOT
from core.runs.ablate import positive_control_line
from core.runs.cache import read_table
from core.runs.patch_command import cached_comparison

CACHE = PROJECT_ROOT / "cache"
RUN = "fourier-frozen-tied-demo-trained-here-addition-test-05d0125721"  # 2 layers, p 521
needs_shipped = pytest.mark.skipif(not (CACHE / RUN).is_dir(), reason="the shipped cache")


@pytest.fixture()
def no_loading(monkeypatch):
    monkeypatch.setattr("core.runs.ablate.load_model", lambda *a, **k: pytest.fail("loaded the model"))


def one_error(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing on stdout before the refusal
    err = captured.err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


@needs_shipped
def test_refusals_that_need_no_model_come_before_it_loads(capsys, no_loading, monkeypatch):
    monkeypatch.chdir(PROJECT_ROOT)
    cases = [
        # a run folder's path is the run (its own cache folder), relative or absolute: not a model without config.json
        (["ablate", f"cache/{RUN}", "--modules", "mlp", "--remove", "low", "--tau", "1"], "--tau 1: cutoff tau = 1"),
        (["ablate", f"{CACHE / RUN}/", "--modules", "mlp", "--remove", "low", "--tau", "261"], "choose 2..260"),
        (["shift", str(CACHE / RUN), "--module", "mlp", "--layer", "1", "--periods", "7"],
         "--periods '7': choose one of 2, '5,10' or all"),
        (["patch", str(CACHE / RUN), "--clean", "15 + 93", "--corrupt", "15 + 93"], "are the same prompt"),
        (["patch", RUN, "--clean", "15 + 93", "--corrupt", "93 + 15"], "have the same answer (108)"),
        (["patch", RUN, "--clean", "15 + 93", "--corrupt", "any text", "--answers", "108,108"], "the same"),
    ]
    if not torch.cuda.is_available():
        cases.append((["patch", RUN, "--clean", "15 + 93", "--corrupt", "15 + 94", "--device", "cuda"], "no CUDA GPU"))
        cases.append((["ablate", RUN, "--modules", "mlp", "--remove", "low", "--tau", "50", "--device", "cuda"],
                      "no CUDA GPU"))
    for argv, said in cases:
        assert main(argv) == 2, argv
        assert said in one_error(capsys), argv
    # the tau rule and its words are precompute's too
    assert main(["precompute", "--model", "models/fourier-frozen", "--taus", "1", "--cache-dir", "nowhere"]) == 2
    assert "--taus 1: cutoff tau = 1 is out of range for 521 numbers: choose 2..260" in one_error(capsys)


def test_lists_of_choices_read_alike():
    assert choices(["2", "5,10", "all"]) == "2, '5,10' or all"
    assert choices(["float32"]) == "float32"


def test_a_positive_control_that_moves_nothing_says_why_there_is_no_share():
    line = positive_control_line(2, 1, 0.0, float("nan"), float("nan"))
    assert "nan" not in line and "cannot be read" in line and "moved no last digit" in line
    assert "the group moves 50.00% of that" in positive_control_line(2, 1, 0.4, 0.5, 0.1)


def test_patch_takes_any_two_prompts_and_says_how_two_lengths_differ(model_dir, capsys):
    folder = str(model_dir("gpt2"))
    argv = ["patch", folder, "--threads", "1", "--no-progress", "--json"]
    assert main([*argv, "--clean", "Put together 15 and 93. Answer:", "--corrupt", "Put together 15 and 94. Answer:",
                 "--answers", "108,109"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["split"] == "given" and report["pairs"] == 1 and report["cached"] is None  # a model: no cache
    assert report["lines"][0].startswith("'Put together 15 and 93. Answer:' (answer 108) against")
    assert main([*argv, "--clean", "Put together 15 and 93. Answer:", "--corrupt", "15 plus 93. Answer:"]) == 2
    err = capsys.readouterr().err
    assert "the clean prompt is 8 tokens and the corrupted one 6: they first differ at token 0 ('Put' against " \
           "'15')" in err


@needs_shipped
def test_patch_puts_the_runs_cached_patching_beside_its_own_over_the_same_pairs_only():
    examples = read_table(CACHE, RUN, "examples", columns=["id"])
    cached = read_table(CACHE, RUN, "patching")
    target = SimpleNamespace(run_name=RUN, run_dir=str(CACHE), run_split="test", split="test",
                             ids=tuple(examples["id"]))
    figures, line = cached_comparison(target, cached.assign(recovered=cached["recovered"] + 0.001), pair=False)
    assert figures["agrees"] is True and figures["same_questions"] and figures["sites_compared"] == len(cached)
    assert "(agrees: largest difference 0.0010 over" in line
    figures, line = cached_comparison(target, cached.assign(recovered=cached["recovered"] + 0.1), pair=False)
    assert figures["agrees"] is False and "DIFFERS" in line
    figures, line = cached_comparison(SimpleNamespace(**{**vars(target), "ids": target.ids[:30]}), cached, pair=False)
    assert figures["agrees"] is None and "not compared: this patch read 30 questions" in line
    assert "not compared: this patch read one pair" in cached_comparison(target, cached, pair=True)[1]
