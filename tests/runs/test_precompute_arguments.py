"""`precompute`'s refusals before any model is loaded (core.runs.precompute_arguments, issue 59): a run cached with
other options is refused naming each option that differs, without torch; a stage asked for by name that cannot apply
to the model (a digit-splitting tokenizer) is an error, exit 2; the number stage says why --limit does not shorten
it."""

import json
import subprocess
import sys

import pytest

import core.runs.precompute as pre
from core.cli import main
from core.errors import CoreError
from core.files import PROJECT_ROOT
from core.models.random_models import save_random_model
from core.models.vocab import digit_tokenizer
from core.runs.cache import MANIFEST, list_runs
from core.runs.number_tables import limit_note
from core.runs.precompute_arguments import (
    STAGES,
    PrecomputeOptions,
    check_precompute,
    expected_run,
    option_differences,
    options_refusal,
)

# operands 0..20 (p = 41), 12 questions, the measurements only: a run of a tiny model in a few seconds
SMALL = dict(max_operand=20, limit=12, taus=(5,), n_sample=2, stages=("measure",), progress=False)


def small_args(folder, cache, *extra):
    return ["precompute", "--model", str(folder), "--cache-dir", str(cache), "--max-operand", "20", "--limit", "12",
            "--taus", "5", "--n-sample", "2", "--no-progress", *extra]


def check_in_fresh_process(**options) -> subprocess.CompletedProcess:
    """check_precompute(PrecomputeOptions(**options)) in a new Python: prints the refusal (or "ok") and whether torch,
    transformers or safetensors were imported on the way."""
    code = (
        "import sys\n"
        "from core.errors import CoreError\n"
        "from core.runs.precompute_arguments import PrecomputeOptions, check_precompute\n"
        f"opts = PrecomputeOptions(**{options!r})\n"
        "try:\n"
        "    check_precompute(opts)\n"
        "    print('ok')\n"
        "except CoreError as exc:\n"
        "    print('refused:', exc)\n"
        "print('heavy:', [m for m in ('torch', 'transformers', 'safetensors') if m in sys.modules])\n"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)


def test_the_refusal_names_each_option_that_differs_and_what_to_do():
    cached = {"taus": [10, 20, 50], "n_sample": 16, "stages": ["measure"]}
    refusal = options_refusal("r", cached, {"taus": [50], "n_sample": 16})
    assert "--taus 10,20,50 cached, 50 asked" in refusal
    assert "--stages measure cached, every stage asked" in refusal
    assert "n-sample" not in refusal  # the same on both sides: not named
    assert "--recompute" in refusal and "--cache-dir" in refusal and "--label" in refusal
    assert option_differences(cached, {**cached, "n_sample": 4}) == ["--n-sample 16 cached, 4 asked"]
    assert options_refusal("r", cached, dict(cached)) is None
    # only the keys asked for are compared (the design is known once the model is loaded)
    assert options_refusal("r", cached, {**cached, "design": "sampled"}, keys=("taus", "n_sample", "stages")) is None


def test_the_stages_are_the_precompute_tables_stages():
    assert tuple(pre.STAGE_TABLES) == STAGES


def test_malformed_options_are_refused_without_torch(model_dir):
    folder = str(model_dir("gpt2"))
    for options, said in (({"module_names": "blah"}, "cannot read module names 'blah'"),
                          ({"taus": (9999,)}, "tau = 9999 is out of range"),
                          ({"stages": ("measure", "waves")}, "no stage named 'waves'"),
                          ({"model": "/nowhere/at/all"}, "/nowhere/at/all")):
        done = check_in_fresh_process(**{"model": folder, **options})
        assert done.returncode == 0, done.stderr[-2000:]
        assert "refused: " in done.stdout and said in done.stdout, done.stdout
        assert "heavy: []" in done.stdout, done.stdout


def test_a_run_cached_with_other_options_is_refused_before_torch_naming_them(model_dir, tmp_path, capsys):
    folder, cache = model_dir("gpt2"), tmp_path / "cache"
    assert main(small_args(folder, cache, "--stages", "measure")) == 0
    (run,) = list_runs(cache)
    opts = PrecomputeOptions(model=str(folder), cache_dir=str(cache), **SMALL)
    assert expected_run(opts).name == run.name  # the name known before the load is the run's
    check_precompute(opts)  # the same options: no refusal (the precompute finds nothing to do)
    capsys.readouterr()

    other = {**SMALL, "taus": (5, 7), "stages": None}
    done = check_in_fresh_process(model=str(folder), cache_dir=str(cache), **other)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "already cached with other options" in done.stdout and run.name in done.stdout
    assert "--taus 5 cached, 5,7 asked" in done.stdout and "--stages measure cached, every stage asked" in done.stdout
    assert "heavy: []" in done.stdout, done.stdout
    # the command line says the same in one line, exit 2, and leaves the run as it was
    before = (run.path / MANIFEST).read_text()
    assert main(small_args(folder, cache, "--taus", "5,7")) == 2
    err = capsys.readouterr().err.strip()
    assert "--taus 5 cached, 5,7 asked" in err and "\n" not in err
    assert (run.path / MANIFEST).read_text() == before
    # --recompute, or another label (another run), is not refused
    check_precompute(PrecomputeOptions(model=str(folder), cache_dir=str(cache), recompute=True, **other))
    check_precompute(PrecomputeOptions(model=str(folder), cache_dir=str(cache), label="other", **other))


def test_a_stage_asked_for_that_cannot_apply_to_a_digit_splitting_model_exits_2(tmp_path, capsys):
    folder = save_random_model(tmp_path / "digits", "gpt2", tokenizer=digit_tokenizer())
    cache = tmp_path / "cache"
    capsys.readouterr()
    # asked for by name: an error, one line, before any table is written
    assert main(small_args(folder, cache, "--stages", "ablations")) == 2
    err = capsys.readouterr().err.strip()
    assert "--stages ablations: this stage does not apply to this model" in err and "\n" not in err
    assert "several tokens" in err and "--max-operand 4" in err
    assert list_runs(cache) == [] and not [p for p in cache.iterdir() if p.name.startswith(".staging")]
    # --stages numbers applies: a k-shot run
    assert main(small_args(folder, cache, "--stages", "numbers")) == 0
    out = capsys.readouterr().out
    assert "a k-shot run" in out and "do not apply (no Table 1)" in out
    assert "--limit 12 does not shorten this stage" in out
    (run,) = list_runs(cache)
    assert "number_probes" in run.manifest["tables"]
    # once its k-shot run is cached, the stage asked for by name is refused without torch
    done = check_in_fresh_process(model=str(folder), cache_dir=str(cache), **{**SMALL, "stages": ("shift", "numbers")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: --stages shift: this stage does not apply to this model" in done.stdout, done.stdout
    assert "--max-operand 4" in done.stdout and "heavy: []" in done.stdout, done.stdout


def test_the_number_stage_says_why_limit_does_not_shorten_it():
    assert limit_note(521, 2, None) is None
    note = limit_note(521, 2, 300)
    assert "--limit 300 does not shorten this stage" in note and "numbers 0..520" in note
    assert "90 probe fits" in note  # 3 layers x 6 moduli x 5 splits
    assert "\n" not in note


def test_precompute_makes_the_same_checks_when_called_without_the_command_line(model_dir, tmp_path):
    """core.runs.precompute.precompute checks first too (a program that calls it, not the command line)."""
    cache = tmp_path / "cache"
    opts = PrecomputeOptions(model=str(model_dir("gpt2")), cache_dir=str(cache), **SMALL)
    expected = expected_run(opts)
    (cache / expected.name).mkdir(parents=True)
    (cache / expected.name / MANIFEST).write_text(json.dumps({"options": {"taus": [9], "n_sample": 2,
                                                                          "stages": ["measure"]}}))
    with pytest.raises(CoreError, match="--taus 9 cached, 5 asked"):
        pre.precompute(opts, log=lambda *_: None)
