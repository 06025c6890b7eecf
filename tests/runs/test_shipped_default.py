"""What a clone ships: the default run's model as a tracked delta that rebuilds to the weights the run was
computed from, every table of it read over every question, and the weights and caches within budget."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest

from core.files import PROJECT_ROOT
from core.models.source import project_path
from core.runs.cache import list_runs
from core.training.delta import read_delta

CACHE = PROJECT_ROOT / "cache"
RUNS = sorted((r for r in list_runs(CACHE, deep=False) if r.ok and r.manifest["task"].get("split") == "test"),
              key=lambda r: r.manifest.get("display_order", 100))  # the test split's: the one the dashboard opens on
MAX_DELTA_BYTES = 50_000_000  # one shipped delta
MAX_SHIPPED_BYTES = 200_000_000  # shipped weights and caches together


def git_files(*paths: str) -> list[str]:
    try:
        done = subprocess.run(["git", "ls-files", "-z", *paths], cwd=PROJECT_ROOT, capture_output=True, timeout=60)
    except OSError:
        pytest.skip("git is not here")
    if done.returncode != 0:
        pytest.skip("not a git work tree")
    return [p for p in done.stdout.decode().split("\0") if p]


def test_the_shipped_weights_and_caches_stay_within_budget():
    tracked = git_files("models", "cache")
    total = sum((PROJECT_ROOT / p).stat().st_size for p in tracked if (PROJECT_ROOT / p).is_file())
    assert total <= MAX_SHIPPED_BYTES, f"shipped weights and caches take {total / 1e6:.1f} MB"


@pytest.mark.skipif(not RUNS, reason="no cached run")
def test_the_default_run_ships_its_delta_and_reads_every_question():
    default = RUNS[0].manifest
    prov = default["model"].get("provenance") or {}
    assert prov.get("fine_tuned"), "the default run is the real LLM fine-tuned here"
    folder = project_path(default["model"]["source"])
    delta = folder / prov["delta"]
    rel = delta.relative_to(PROJECT_ROOT).as_posix()
    assert git_files(rel) == [rel], f"{rel} is not tracked by git: a clone could not rebuild the default model"
    assert delta.stat().st_size <= MAX_DELTA_BYTES
    _, meta = read_delta(delta)
    assert meta["rebuilt_sha256"] == prov["rebuilt_sha256"], "the run was computed from another model than the delta's"
    summary = json.loads((folder / "train_summary.json").read_text())
    assert summary["delta_bytes"] == delta.stat().st_size and summary.get("delta_shipped") is True
    # validation chose: the log never scored the test split; the rebuilt model's test score is the run's
    log_splits = set(pd.read_parquet(folder / "training_log.parquet")["split"])
    assert log_splits == {"train", "val"}
    # the trainer's one test scoring and precompute's agree to within a near-tie (batches pad differently)
    n = default["task"]["n_examples"]
    assert summary["rebuilt_test_accuracy_float32"] == pytest.approx(default["accuracy"], abs=1.5 / n)
    # every table over every question: no fallback to the cached sample, no sampled design
    locking = default.get("phase_locking") or {}
    assert locking.get("whole_split") is True and locking.get("n") == n
    assert "design" not in default and "design" not in default["options"]
    run = RUNS[0].path
    assert (pd.read_parquet(run / "ablations.parquet", columns=["n"])["n"] == n).all()
    # a phase shift by d reads every question whose unedited answer y has y + d on the number line
    predictions = pd.read_parquet(run / "examples.parquet", columns=["prediction"])["prediction"]
    shift = pd.read_parquet(run / "phase_shift.parquet", columns=["period_set", "d", "n"])
    reads = {d: int((predictions + d <= default["p"] - 1).sum()) for d in shift["d"].unique()}
    assert (shift["n"] == shift["d"].map(reads)).all()
    # and each question's outcome is kept for the verdict's set of periods (its interval resamples them)
    per_condition = pd.read_parquet(run / "phase_shift_answers.parquet", columns=["condition"])["condition"]
    controlled = shift[shift["period_set"] == "all"]
    assert per_condition.value_counts().sort_index().to_dict() == controlled["n"].to_dict()
    patching = default["patching"]
    assert patching["pairs"] == patching["head_pairs"] == patching["questions"] == n
    assert set(patching["extra_pairs"].values()) == {n}
