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
from core.analysis.phase_shift import PERIOD_SETS, moved_periods
from core.cli import main
from core.errors import CoreError
from core.files import PROJECT_ROOT
from core.runs.ablate import ablate, open_target
from core.runs.cache import read_table
from core.runs.edit_arguments import check_edit, parse_removed
from core.training.stages import retrain_commands

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
    assert "over its 3,419 test questions (not compared: this edit read 150 test questions" in report.text()
    assert "agrees" not in report.text() and "DIFFERS" not in report.text()
    data = json.loads(report.as_json())  # --json: the same numbers for a program
    assert data["accuracy"] == report.accuracy and data["n"] == 150 and data["figures"]["filter_rank"] > 0
    cell = read_table(CACHE, FOURIER_FROZEN, "ablations").query("modules == 'mlp' and removed == 'low' and tau == 50")
    assert data["figures"]["cached"] == {"value": pytest.approx(float(cell["accuracy"].iloc[0])),
                                         "questions": 3419, "split": "test", "same_questions": False,
                                         "agrees": None}


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
        # a shift that moves no chosen wave, or whose last digit cannot move, or that no answer can take
        (["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "1", "--d", "10"], "move no wave"),
        (["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "1", "--d", "520"], "move no wave"),
        (["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "1", "--periods", "2", "--d", "2"], "move no wave"),
        (["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "1", "--periods", "5,10", "--d", "10"],
         "move no wave"),
        (["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "1", "--d", "519"], "no test question's answer"),
        (["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "3", "--d", "1"], "layers 1..2"),
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


def test_a_shift_by_a_multiple_of_the_last_digit_modulus_is_refused_and_others_name_the_waves_they_move():
    """d = 10 leaves every wave of period 2, 2.5, 5, 10 where it was and y + 10 has y's last digit: the share of
    "last digits moved" would be 100% for an edit that does nothing. d = 2 moves periods 2.5, 5, 10 only."""
    for periods, d in (("all", 10), ("all", 20), ("5,10", 10), ("2", 2), ("2", 4)):
        with pytest.raises(CoreError, match="move no wave"):
            check_edit(521, periods=periods, d=d)
    for periods, d in (("all", 1), ("all", 2), ("all", 5), ("2", 1), ("5,10", 5)):
        check_edit(521, periods=periods, d=d)
    every = PERIOD_SETS["all"]
    assert moved_periods(every, 2) == (2.5, 5.0, 10.0) and moved_periods(every, 5) == (2.0, 10.0)


def test_argument_errors_are_one_line(capsys):
    for argv in (["ablate", FOURIER_FROZEN, "--modules", "mlp", "--remove", "low", "--tau", "-1"],
                 ["ablate", FOURIER_FROZEN, "--modules", "mlp", "--remove", "low", "--tau", "50", "--limit", "0"],
                 ["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "1", "--d", "0"],
                 ["shift", FOURIER_FROZEN, "--module", "nothing", "--layer", "1"]):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and err.startswith("error: ") and "\n" not in err and "--help" in err, err


@needs_shipped
def test_json_is_alone_on_stdout_and_every_comparison_names_its_split(capsys):
    assert main(["ablate", FOURIER_FROZEN, "--modules", "mlp", "--remove", "low", "--tau", "50", "--limit", "40",
                 "--split", "train", "--threads", "1", "--no-progress", "--json", "--cache-dir", CACHE]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # nothing but the JSON on stdout
    assert data["split"] == "train" and data["figures"]["cached"]["split"] == "test"
    assert data["figures"]["cached"]["agrees"] is None and data["figures"]["cached"]["same_questions"] is False
    assert "loaded" in captured.err  # the log went to stderr
    said = " ".join(data["lines"])
    assert "this edit read the train split, the cache the test split" in said and "3,419 test questions" in said
    assert main(["list", "--json", "--cache-dir", CACHE]) == 0
    assert {r["name"] for r in json.loads(capsys.readouterr().out)} >= {FOURIER_FROZEN}


@needs_shipped
def test_a_run_made_on_a_sample_is_read_on_its_own_sample_by_default(tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(PROJECT_ROOT / "cache" / FOURIER_FROZEN, cache / FOURIER_FROZEN)
    manifest_file = cache / FOURIER_FROZEN / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["identity"]["limit"] = 30
    manifest_file.write_text(json.dumps(manifest))
    quiet = dict(threads=1, log=lambda *_: None)
    assert len(open_target(FOURIER_FROZEN, str(cache), **quiet).answers) == 30
    assert len(open_target(FOURIER_FROZEN, str(cache), limit=12, **quiet).answers) == 12
    other = open_target(FOURIER_FROZEN, str(cache), split="val", **quiet)  # another split: all of it
    assert len(other.answers) == other.n_split > 30
    assert "30 of 3419 test questions" in repr(open_target(FOURIER_FROZEN, str(cache), **quiet))


def test_the_retrain_hint_names_the_seed_and_the_cpu_for_a_small_demo(tmp_path):
    small = tmp_path / "seeds" / "s1"
    small.mkdir(parents=True)
    (small / "recipe.json").write_text(json.dumps({"name": "fourier-frozen", "seed": 1, "width": 640,
                                                   "n_layers": 2, "device": "cuda"}))
    assert retrain_commands(small) == [("python -m core train --recipe fourier-frozen --seed 1", False)]
    wide = tmp_path / "seeds" / "w256-s2"
    wide.mkdir(parents=True)
    (wide / "recipe.json").write_text(json.dumps({"name": "fourier-frozen", "seed": 2, "width": 256,
                                                  "n_layers": 2, "device": "cuda"}))
    assert retrain_commands(wide)[0][0] == "python -m core train --recipe fourier-frozen --seed 2 --width 256"
    finetune = tmp_path / "ft"
    finetune.mkdir()
    (finetune / "recipe.json").write_text(json.dumps({"name": "smollm2-addition-rows-blocks-18-29",
                                                      "number_tokens": {"n": 521}, "device": "cuda"}))
    assert retrain_commands(finetune) == [
        ("python -m core train --recipe smollm2-addition-rows-blocks-18-29 --device cuda", True)]


@needs_shipped
def test_a_group_shift_from_the_command_line_agrees_with_the_cached_group_table(capsys):
    """`core shift --layer 1-2`: every MLP of both layers shifted together, over every test question, beside the
    stream after layer 2; the same shares as the run's `group_shift` table (the same edits, the same questions)."""
    assert main(["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "1-2", "--d", "1", "--threads", "1",
                 "--no-progress", "--json", "--cache-dir", CACHE]) == 0
    data = json.loads(capsys.readouterr().out)
    figures = data["figures"]
    assert (figures["first_layer"], figures["layer"]) == (1, 2)
    table = read_table(CACHE, FOURIER_FROZEN, "group_shift")
    row = table[(table["group"] == "every layer") & (table["kind"] == "mlp") & (table["d"] == 1) & ~table["control"]]
    stream = table[(table["kind"] == "resid") & (table["d"] == 1) & ~table["control"]]
    assert figures["residue_moved"] == pytest.approx(float(row["residue_moved"].iloc[0]), abs=1e-3)
    assert figures["stream_residue_moved"] == pytest.approx(float(stream["residue_moved"].iloc[0]), abs=1e-3)
    assert figures["relative"] == pytest.approx(figures["residue_moved"] / figures["stream_residue_moved"])
    assert len(figures["control_residue_moved"]) == 3
    # the stream takes one layer, and a range goes up: both refused before the model loads
    assert main(["shift", FOURIER_FROZEN, "--module", "resid", "--layer", "1-2", "--cache-dir", CACHE]) == 2
    assert "one --layer" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["shift", FOURIER_FROZEN, "--module", "mlp", "--layer", "2-1", "--cache-dir", CACHE])


@needs_shipped
def test_removing_only_the_paper_periods_from_the_command_line_agrees_with_the_cached_table(capsys):
    assert main(["ablate", FOURIER_FROZEN, "--modules", "mlp", "--remove", "periods", "--threads", "1",
                 "--no-progress", "--json", "--cache-dir", CACHE]) == 0
    data = json.loads(capsys.readouterr().out)
    table = read_table(CACHE, FOURIER_FROZEN, "period_ablation")
    for reading, figures in data["figures"]["readings"].items():
        rows = table[(table["modules"] == "mlp") & (table["slice"] == "periods") & (table["reading"] == reading)]
        edit, controls = rows[~rows["control"]].iloc[0], rows[rows["control"]]
        assert figures["accuracy"] == pytest.approx(float(edit["accuracy"]), abs=1e-3)
        assert figures["rank"] == int(edit["rank"]) == 7
        assert figures["control_accuracy"] == pytest.approx(controls["accuracy"].tolist(), abs=1e-3)
    assert len(data["figures"]["readings"]) == 2  # W_U, and W_U through the final norm's gain
    assert main(["ablate", FOURIER_FROZEN, "--modules", "mlp", "--remove", "periods:3", "--cache-dir", CACHE]) == 2
    assert "not a frequency" in capsys.readouterr().err
