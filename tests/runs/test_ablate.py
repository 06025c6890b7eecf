"""`python -m core ablate` and `python -m core shift` (core.runs.ablate): the numbers they print against an
independent computation and against the shipped run's cached grid, and their one-line errors."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from core.analysis.ablations import Ablation
from core.analysis.evaluation import evaluate_by_full_recompute
from core.analysis.fourier import fourier_basis
from core.cli import main
from core.errors import CoreError
from core.files import PROJECT_ROOT
from core.runs.ablate import ablate, open_target
from core.runs.cache import read_table
from core.runs.edit_arguments import parse_removed

FOURIER_FROZEN = "fourier-frozen-tied-demo-trained-here-addition-test-05d0125721"
NO_WEIGHTS = "fourier-frozen-untied-control-demo-trained-here-addition-tes-805c3b536c"  # ships its log, not weights
CACHE = str(PROJECT_ROOT / "cache")
needs_shipped = pytest.mark.skipif(
    not (PROJECT_ROOT / "models" / "fourier-frozen" / "config.json").exists(), reason="the shipped demo model"
)


@needs_shipped
def test_a_filter_on_a_sample_equals_its_definition_recomputed_in_full():
    """The answer-position pass (prefix once, the filter on the last token) against every position recomputed
    with the filter on: the same predictions, so the same accuracy."""
    target = open_target(FOURIER_FROZEN, CACHE, limit=150, threads=1, log=lambda *_: None)
    report = ablate(target, "mlp", "low", 50, progress=False)
    flt = Ablation("mlp", "low", 50).build(target.loaded.unembedding(target.p), fourier_basis(target.p))
    preds, _ = evaluate_by_full_recompute(target.loaded, target.texts, target.answers, target.p, flt, "mlp")
    assert report.accuracy == pytest.approx(float(np.mean(preds == target.answers)), abs=1e-12)
    assert 0.3 < report.accuracy < 0.9 and report.base_accuracy == 1.0  # the filter bites, the model is exact
    assert report.n == 150 and "150 of 3419 test questions" in report.text()
    # a sample is not the cached grid's questions: the cached figure is named, not compared
    assert "over its 3,419 questions (not compared: this edit read 150 questions" in report.text()
    assert "agrees" not in report.text() and "DIFFERS" not in report.text()
    data = json.loads(report.as_json())  # --json: the same numbers for a program
    assert data["accuracy"] == report.accuracy and data["n"] == 150 and data["figures"]["filter_rank"] > 0
    cell = read_table(CACHE, FOURIER_FROZEN, "ablations").query("modules == 'mlp' and removed == 'low' and tau == 50")
    assert data["figures"]["cached"] == {"value": pytest.approx(float(cell["accuracy"].iloc[0])),
                                         "questions": 3419, "same_questions": False, "agrees": None}


@pytest.mark.slow
@needs_shipped
def test_the_command_agrees_with_the_shipped_grid_and_phase_shift(capsys):
    """Over every test question the command reproduces the cached cell of the shipped run."""
    assert main(["ablate", FOURIER_FROZEN, "--modules", "attn", "--remove", "high", "--tau", "50", "--threads", "1",
                 "--no-progress", "--cache-dir", CACHE]) == 0
    out = capsys.readouterr().out
    assert "all 3419 test questions" in out and "(agrees)" in out and "DIFFERS" not in out
    assert re.search(r"accuracy \d+\.\d\d% \(95% interval", out)
    assert main(["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "1", "--d", "1", "--threads", "1",
                 "--no-progress", "--cache-dir", CACHE]) == 0
    out = capsys.readouterr().out
    assert "(agrees)" in out and "random edits of the same norm" in out


def test_a_run_without_weights_is_one_line_that_says_how_to_get_them(capsys):
    assert main(["ablate", NO_WEIGHTS, "--modules", "mlp", "--remove", "low", "--tau", "50",
                 "--cache-dir", CACHE]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot be recomputed here" in err and "python -m core train --recipe" in err


def test_bad_choices_are_named(capsys):
    assert main(["ablate", FOURIER_FROZEN, "--modules", "mlp", "--remove", "low", "--cache-dir", CACHE]) == 2
    assert "needs --tau" in capsys.readouterr().err
    with pytest.raises(CoreError, match="keep-K"):
        parse_removed("middle")
    assert parse_removed("keep-52") == ("keep", 52) and parse_removed("high") == ("high", None)


def test_arguments_and_run_names_are_checked_before_any_model_is_loaded(capsys, monkeypatch):
    """A shift off the number line, a cutoff above the top frequency, an unknown period set and a mistyped run
    name each end in one line before the model is loaded (loading is made to fail the test)."""
    monkeypatch.setattr("core.runs.ablate.load_model", lambda *a, **k: pytest.fail("loaded the model"))
    edits = [
        (["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "1", "--d", "600"], "--d 600"),
        (["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "1", "--periods", "3"], "--periods '3'"),
        (["ablate", FOURIER_FROZEN, "--modules", "mlp", "--remove", "low", "--tau", "1000"], "--tau 1000"),
        (["ablate", FOURIER_FROZEN, "--modules", "mlp", "--remove", "keep-300"], "keep-300"),
        (["ablate", "fourier-frozn", "--modules", "mlp", "--remove", "low", "--tau", "50"], "did you mean"),
    ]
    for argv, said in edits:
        assert main([*argv, "--cache-dir", CACHE]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert said in err and err.count("\n") == 0, err


def test_a_typo_or_a_hub_id_offline_is_answered_without_torch():
    """The command line checks a run's name, a hub id the hub cannot give and an edit's arguments before it imports
    torch: each ends in one line with exit 2 in a process that never imported it (so it answers in about a second)."""
    script = ("import sys; from core.cli import main; rc = main(sys.argv[1:]); "
              "sys.exit(rc if 'torch' not in sys.modules else 99)")
    for argv in (["ablate", "fourier-frozn", "--modules", "mlp", "--remove", "low", "--tau", "50"],
                 ["ablate", "nobody/no-such-model", "--modules", "mlp", "--remove", "low", "--tau", "50"],
                 ["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "1", "--d", "600"]):
        done = subprocess.run([sys.executable, "-c", script, *argv, "--cache-dir", CACHE], capture_output=True,
                              text=True, cwd=PROJECT_ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
        err = done.stderr.strip()
        assert done.returncode == 2 and err.startswith("error: ") and "\n" not in err, (argv, done.returncode, err)


@needs_shipped
def test_a_run_whose_model_moved_is_found_where_it_is_and_checked(tmp_path):
    """A run's model outside the project, at a place its manifest does not name: the command line says to name it
    with --model, loads it from there (any folder) when its weights are the run's, and refuses other weights."""
    cache = tmp_path / "cache"
    shutil.copytree(PROJECT_ROOT / "cache" / FOURIER_FROZEN, cache / FOURIER_FROZEN)
    moved = tmp_path / "elsewhere" / "fourier-frozen"
    shutil.copytree(PROJECT_ROOT / "models" / "fourier-frozen", moved)
    manifest_file = cache / FOURIER_FROZEN / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["model"]["source"] = manifest["model"]["source_as_given"] = str(tmp_path / "gone")
    manifest_file.write_text(json.dumps(manifest))
    with pytest.raises(CoreError, match="say where with --model"):
        open_target(FOURIER_FROZEN, str(cache), limit=20, threads=1, log=lambda *_: None)
    target = open_target(FOURIER_FROZEN, str(cache), limit=20, threads=1, log=lambda *_: None, model=str(moved))
    assert len(target.answers) == 20 and target.run_name == FOURIER_FROZEN
    with pytest.raises(CoreError, match="differ from the ones this run was computed with"):
        open_target(FOURIER_FROZEN, str(cache), limit=20, threads=1, log=lambda *_: None,
                    model=str(PROJECT_ROOT / "models" / "scratch"))
