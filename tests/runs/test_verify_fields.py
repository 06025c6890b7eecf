"""`verify` checks every manifest field a page or reader reads against the run's own tables (and against the rest of
the manifest): a manifest edited by hand after the run was published keeps its tables' checksums, so without these
checks it passed, and a page crashed on it (issue 59: n_layers 2 -> 48 and the Logit lens page stopped at "no cached
attn logits at layer 48"). Each edit fails with one line naming the field, what the tables hold and what to do; the
dashboard lists the edited run as skipped; no shipped run is a false alarm.

The manifest records no checksum of itself (its `tables` hold the tables' sha256 only), so an edit needs no fix-up."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.run_loading import valid_runs
from core.cli import main
from core.files import PROJECT_ROOT
from core.runs.cache import MANIFEST, list_runs, read_manifest, read_table, verify_run
from core.runs.manifest_checks import EDITED, field_problems, table_problems

CACHE = PROJECT_ROOT / "cache"
RUN = "fourier-frozen-tied-demo-trained-here-addition-test-05d0125721"  # 2 layers, width 640, p 521, test split
DIGITS_RUN = "smollm2-135m-real-pre-trained-llm-q4-1-addition-test-k-shot-0169960346"
SAMPLED_RUN = "smollm2-135m-fine-tuned-number-tokens-real-llm-the-whole-mod-087c27b8f9"  # its weights are gone
SHIPPED = sorted(p.name for p in CACHE.iterdir() if (p / MANIFEST).is_file()) if CACHE.is_dir() else []

needs_shipped = pytest.mark.skipif(not (CACHE / RUN).is_dir(), reason="the shipped cache")


def copy_run(tmp_path: Path, name: str = RUN) -> Path:
    run = tmp_path / "cache" / name
    shutil.copytree(CACHE / name, run)
    return run


def edit_manifest(run: Path, edit) -> dict:
    manifest = json.loads((run / MANIFEST).read_text())
    assert "sha256" not in manifest and MANIFEST not in manifest["tables"]  # nothing of the manifest's own to fix up
    edit(manifest)
    (run / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def set_in(path: str, value):
    """An edit setting the manifest field at dotted `path` (several fields: several edits in a tuple)."""

    def edit(manifest: dict) -> None:
        *parents, key = path.split(".")
        node = manifest
        for part in parents:
            node = node[part]
        node[key] = value

    return edit


def both(*edits):
    def edit(manifest: dict) -> None:
        for e in edits:
            e(manifest)

    return edit


@pytest.mark.skipif(not SHIPPED, reason="the shipped cache")
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_run_still_verifies(name):
    """No false alarm: every shipped run passes the shallow and the deep checks, and its manifest agrees with itself."""
    assert field_problems(read_manifest(CACHE, name)) == []
    assert verify_run(CACHE / name, deep=False) == []
    assert verify_run(CACHE / name, deep=True) == []


#: (edit, a line the deep verify must give, whether the manifest alone already shows it: the shallow verify too).
EDITS = {
    # the issue's case: the Logit lens page asks for layers 1..48
    "n_layers": (set_in("n_layers", 48), "manifest n_layers 48 but its model.n_layers is 2", True),
    "n_layers, model's too": (
        both(set_in("n_layers", 48), set_in("model.n_layers", 48)),
        f"manifest n_layers 48 but table layer_accuracy has layers 0..2: {EDITED}",
        False,
    ),
    "width": (set_in("width", 1024), "manifest width 1024 but its model.width is 640", True),
    "width, model's too": (
        both(set_in("width", 1024), set_in("model.width", 1024)),
        "manifest width 1024 but table ablations was run on width [640]",
        False,
    ),
    "p": (set_in("p", 1041), "manifest p 1041 but its task.p is 521", True),
    "p, against the number line": (
        set_in("p", 1041),
        "manifest p 1041 (numbers 0..1040) but table module_logits has numbers 0..520",
        False,
    ),
    "p, against the spectra": (
        set_in("p", 1041),
        "manifest p 1041 gives frequencies 1..520 in the paper basis but table module_spectra has 1..260",
        False,
    ),
    "taus": (set_in("taus", [10, 50]), "manifest taus [10, 50] but its options.taus (the grid it was made with)", True),
    "taus, options too": (
        both(set_in("taus", [10, 50]), set_in("options.taus", [10, 50])),
        "manifest taus [10, 50] but table ablations has cutoffs [10, 20, 30, 40, 50, 75, 100, 150, 200, 250]",
        False,
    ),
    "split": (set_in("task.split", "val"), "manifest task.split 'val' but the run's identity.split is 'test'", True),
    "split, against the examples": (
        set_in("task.split", "val"),
        "manifest task.split 'val' but table examples holds the test split",
        False,
    ),
    "n_examples": (set_in("task.n_examples", 300), "the manifest says 300 examples, its examples table holds 3419",
                   False),
    "accuracy": (set_in("accuracy", 0.5), "the manifest's accuracy 50.0000% is not its examples table's", False),
    "task": (
        set_in("task.task", "multiplication"),
        "manifest task.task 'multiplication' but table examples holds questions like",
        False,
    ),
    "max_operand": (set_in("task.max_operand", 100), "manifest p 521 but the number space of addition up to 100 is 201",
                    True),
    "basis": (set_in("basis", "dft"), "manifest basis 'dft' but the run's identity.basis is 'paper'", True),
    "label": (
        set_in("label", "GPT-2 XL"),
        "manifest label 'GPT-2 XL' with its task and split makes the run label 'GPT-2 XL addition test'",
        True,
    ),
    "label and run label": (
        both(set_in("label", "GPT-2 XL"), set_in("run_label", "GPT-2 XL addition test")),
        "manifest run_label 'GPT-2 XL addition test' and identity make the name 'gpt-2-xl-addition-test-05d0125721'",
        True,
    ),
    "name": (set_in("name", "gpt-2-xl-addition-test-05d0125721"), "the folder was renamed or the manifest edited",
             True),
    "run id": (set_in("run_id", "0123456789"), "manifest run_id '0123456789' is not its identity's hash", True),
    "phase-locking note": (
        set_in("phase_locking.n", 100),
        "manifest phase_locking.n 100 but task.n_examples (the note says the whole split) is 3419",
        True,
    ),
    "phase-locking note, against its table": (
        both(set_in("phase_locking.n", 100), set_in("phase_locking.whole_split", False)),
        "manifest phase_locking.n 100 but table phase_locking read [3419] examples",
        False,
    ),
    "numbers' count": (
        set_in("number_representations.n_numbers", 1000),
        "manifest number_representations.n_numbers 1000 but p is 521",
        True,
    ),
}


@needs_shipped
@pytest.mark.parametrize("what", list(EDITS))
def test_an_edited_manifest_field_fails_verify(what, tmp_path):
    edit, line, shallow = EDITS[what]
    run = copy_run(tmp_path)
    assert verify_run(run) == []
    edit_manifest(run, edit)
    problems = verify_run(run, deep=True)
    assert any(line in p for p in problems), problems
    assert all("\n" not in p and p.endswith("recompute the run") for p in problems), problems
    if shallow:  # the manifest alone shows it: `list` (shallow) and manifest_problems see it too
        assert any(line in p for p in verify_run(run, deep=False)), problems


@needs_shipped
def test_verify_on_the_command_line_fails_the_issues_edit(tmp_path, capsys):
    """`python -m core verify RUN` said "ok" for n_layers 2 -> 48 (the model's record edited alike); now it fails."""
    run = copy_run(tmp_path)
    edit_manifest(run, both(set_in("n_layers", 48), set_in("model.n_layers", 48)))
    assert main(["verify", RUN, "--cache-dir", str(run.parent)]) == 1
    out = capsys.readouterr().out
    assert f"{RUN}: FAILED" in out and f"manifest n_layers 48 but table layer_accuracy has layers 0..2: {EDITED}" in out


@needs_shipped
def test_the_dashboard_lists_an_edited_run_as_skipped(tmp_path):
    """The sidebar's run list (app.run_loading.valid_runs) skips the edited run, naming the problem, and keeps the
    unedited one beside it: no page is handed a run whose manifest disagrees with its tables."""
    edited = copy_run(tmp_path)
    other = "scratch-demo-trained-here-addition-test-1ec9ce694d"
    copy_run(tmp_path, other)
    edit_manifest(edited, both(set_in("n_layers", 48), set_in("model.n_layers", 48)))
    good, broken = valid_runs(str(edited.parent))
    assert [r["name"] for r in good] == [other]
    assert [b["name"] for b in broken] == [RUN]
    assert any("manifest n_layers 48 but table layer_accuracy has layers 0..2" in p for p in broken[0]["problems"])
    assert [r.name for r in list_runs(edited.parent, deep=True) if not r.ok] == [RUN]


@pytest.mark.skipif(not (CACHE / DIGITS_RUN).is_dir(), reason="the shipped cache")
def test_a_digit_models_shots_and_accuracies_are_checked_against_its_generations():
    manifest = read_manifest(CACHE, DIGITS_RUN)
    generations = read_table(CACHE, DIGITS_RUN, "generations")
    assert table_problems(manifest, "generations", generations) == []
    edited = {**manifest, "accuracy_by_shots": {**manifest["accuracy_by_shots"], "4": 0.5},
              "task": {**manifest["task"], "n_examples": 500, "shots_compared": [0, 8]}}
    problems = " | ".join(table_problems(edited, "generations", generations))
    assert "manifest accuracy_by_shots[4] 50.0000% but table generations gives 6.2000%" in problems
    assert "manifest task.n_examples 500 but table generations holds [1000] questions a shot" in problems
    assert "manifest task.shots_compared [0, 8] but table generations holds shots [0, 4]" in problems
    assert "manifest accuracy 0.062 but its accuracy_by_shots[4] is 0.5" in " | ".join(field_problems(edited))


@pytest.mark.skipif(not (CACHE / SAMPLED_RUN).is_dir(), reason="the shipped cache")
def test_a_deep_models_design_is_checked_against_its_grid():
    manifest = read_manifest(CACHE, SAMPLED_RUN)
    ablations = read_table(CACHE, SAMPLED_RUN, "ablations")
    assert table_problems(manifest, "ablations", ablations) == []
    edited = {**manifest, "design": {**manifest["design"], "n_split": 1000}}
    assert any("manifest design.n_split 1000 but the grid's every-question conditions read [3419] questions" in p
               for p in table_problems(edited, "ablations", ablations))
    assert any("manifest design.n_split 1000 but task.n_examples is 3419" in p for p in field_problems(edited))
