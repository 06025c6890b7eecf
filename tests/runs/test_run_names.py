"""A run named on the command line is found by folder, id, label or whole words of its name; a typo gets "did you
mean" and several matches are named, before any model is loaded; anything else is left to be a model. And a run's
summary edited by hand does not pass `verify`."""

import json
import shutil

import pytest

from core.errors import CoreError
from core.files import PROJECT_ROOT
from core.runs.cache import verify_run
from core.runs.run_names import find_run

SHIPPED_RUN = "fourier-frozen-tied-demo-trained-here-addition-test-05d0125721"

RUNS = {
    "fourier-frozen-tied-demo-trained-here-addition-test-05d0125721": "Fourier-frozen, tied (demo, trained here)",
    "scratch-demo-trained-here-addition-test-1ec9ce694d": "scratch (demo, trained here)",
    "scratch-multiplication-demo-trained-here-test-a1b2c3d4e5": "scratch, multiplication (demo, trained here)",
}


@pytest.fixture()
def cache(tmp_path):
    for name, label in RUNS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({"label": label}))
    (tmp_path / "broken-run-ffffffffff").mkdir()  # no manifest: still a run folder, found by name
    return tmp_path


def test_a_run_is_found_by_its_name_id_label_or_a_unique_part(cache):
    tied = "fourier-frozen-tied-demo-trained-here-addition-test-05d0125721"
    assert find_run(cache, tied) == tied
    assert find_run(cache, "05d0125721") == tied
    assert find_run(cache, "Fourier-frozen, tied (demo, trained here)") == tied
    assert find_run(cache, "fourier-frozen") == tied
    assert find_run(cache, "broken-run-ffffffffff") == "broken-run-ffffffffff"
    # a part the shipped model shares only with its seed runs names the shipped model; a seed is named by more
    seed = cache / "fourier-frozen-tied-demo-trained-here-seed-1-addition-test-abcdef0123"
    seed.mkdir()
    (seed / "manifest.json").write_text(json.dumps({"label": "Fourier-frozen, tied (demo, trained here), seed 1",
                                                    "model": {"source": "models/fourier-frozen/seeds/s1"}}))
    assert find_run(cache, "fourier-frozen-tied") == tied
    assert find_run(cache, "seed-1") == "fourier-frozen-tied-demo-trained-here-seed-1-addition-test-abcdef0123"


def test_a_typo_is_answered_with_the_run_it_probably_meant(cache):
    with pytest.raises(CoreError, match="did you mean fourier-frozen-tied-demo"):
        find_run(cache, "fourier-frozn")
    with pytest.raises(CoreError, match="did you mean one of scratch-demo.*; scratch-multiplication"):
        find_run(cache, "scrath")


def test_several_matches_are_named_and_nothing_close_is_a_model(cache, tmp_path):
    with pytest.raises(CoreError, match="matches 2 runs"):
        find_run(cache, "scratch")
    assert find_run(cache, "gpt2") is None  # a hub id
    assert find_run(cache, "frozen-ti") is None  # not whole words of a name: left to be a model
    with pytest.raises(CoreError, match="matches 3 runs"):
        find_run(cache, "demo-trained")
    with pytest.raises(CoreError, match="empty run name"):
        find_run(cache, " ")
    assert find_run(cache, "openai-community/gpt2") is None
    assert find_run(cache, str(tmp_path)) is None  # a folder
    assert find_run(tmp_path / "no-cache-here", "scratch") is None


@pytest.mark.skipif(not (PROJECT_ROOT / "cache" / SHIPPED_RUN).is_dir(), reason="the shipped cache")
def test_an_edited_summary_does_not_pass_verify(tmp_path):
    """`list` and the dashboard show a manifest's accuracy and count: one edited by hand fails `verify`."""
    run = tmp_path / SHIPPED_RUN
    shutil.copytree(PROJECT_ROOT / "cache" / SHIPPED_RUN, run)
    assert verify_run(run) == []
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["accuracy"], manifest["task"]["n_examples"] = 0.99, 300
    (run / "manifest.json").write_text(json.dumps(manifest))
    problems = " ".join(verify_run(run))
    assert "the manifest's accuracy 99.0000% is not its examples table's" in problems
    assert "the manifest says 300 examples, its examples table holds 3419" in problems
