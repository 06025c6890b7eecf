"""Bad input gets one clear line (CoreError / "error: ..." and exit 2), never a traceback, and a failed
run loses nothing cached: manifests, cache folders, model folders, recipes, concurrency, resuming."""

import errno
import json
import os
import shutil
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import OPTConfig, OPTForCausalLM

import core.runs.precompute as pre
from app.run_loading import valid_runs
from core.cli import main
from core.errors import CoreError
from core.files import PROJECT_ROOT
from core.models.number_tokens import NumberTokens, require_number_range
from core.models.random_models import number_tokenizer
from core.models.source import fingerprint_folder
from core.runs.cache import list_runs, read_manifest, read_table, resolve_run, run_lock, verify_run
from core.runs.run_timings import TIMINGS_FILE

#: The stages these tests read (the number probes and the phase shift are other tests' business: seconds saved each)
SMALL = ["--max-operand", "20", "--limit", "30", "--taus", "5", "--n-sample", "2", "--no-progress",
         "--stages", "measure,embeddings,ablations"]


def precompute_cli(model, cache, *extra):
    return main(["precompute", "--model", str(model), "--cache-dir", str(cache), *SMALL, *extra])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    return err


@pytest.fixture(scope="module")
def good_run(model_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("robust-cache")
    assert precompute_cli(model_dir("gpt2"), cache) == 0
    (run,) = list_runs(cache)
    return run.path


def copy_run(good_run, tmp_path) -> Path:
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copytree(good_run, cache / good_run.name)
    return cache / good_run.name


# ----------------------------------------------------------------------------- manifests and verify


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda m: [m], "not a JSON object"),
        (lambda m: {**m, "tables": list(m["tables"])}, "'tables' should be an object"),
        (lambda m: {k: v for k, v in m.items() if k != "p"}, "lacks 'p'"),
        (lambda m: {**m, "p": "521"}, "'p' should be a whole number"),
        (lambda m: {**m, "task": "addition"}, "'task' should be an object"),
        (lambda m: {**m, "tables": {**m["tables"], "examples": "examples.parquet"}}, "table examples is not an object"),
        (lambda m: {**m, "accuracy": "high"}, "'accuracy' should be a number"),
    ],
)
def test_wrongly_shaped_manifests_are_reported_not_crashed_on(good_run, tmp_path, capsys, damage, problem):
    run = copy_run(good_run, tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(damage(manifest)))
    (info,) = list_runs(run.parent)
    assert not info.ok and any(problem in p for p in info.problems)
    assert isinstance(info.label, str)
    assert main(["list", "--cache-dir", str(run.parent)]) == 0
    out = capsys.readouterr().out
    assert "BROKEN" in out and problem in out
    assert main(["verify", "--cache-dir", str(run.parent)]) == 1
    assert problem in capsys.readouterr().out


def test_symlinked_run_and_table_fail_verify_as_they_fail_the_readers(good_run, tmp_path):
    run = copy_run(good_run, tmp_path)
    cache = run.parent
    # a symlinked run folder pointing outside the cache
    outside = tmp_path / "elsewhere"
    shutil.copytree(run, outside)
    (cache / "linked-0000000000").symlink_to(outside, target_is_directory=True)
    problems = verify_run(cache / "linked-0000000000")
    assert problems and "symbolic link" in problems[0]
    with pytest.raises(CoreError, match="symbolic link"):
        read_manifest(cache, "linked-0000000000")
    # a symlinked table whose content is identical (the checksum matches) still fails both
    table = run / "examples.parquet"
    target = tmp_path / "examples-copy.parquet"
    shutil.copy2(table, target)
    table.unlink()
    table.symlink_to(target)
    assert any("symbolic link" in p for p in verify_run(run))
    with pytest.raises(CoreError, match="symbolic link"):
        read_table(cache, run.name, "examples")
    runs = {r.name: r for r in list_runs(cache)}
    assert not runs[run.name].ok and not runs["linked-0000000000"].ok


def test_a_run_folder_the_readers_would_refuse_by_name_fails_verify(good_run, tmp_path):
    run = copy_run(good_run, tmp_path)
    renamed = run.rename(run.parent / "Upper Case Run")
    problems = verify_run(renamed)
    assert problems and "not a run name" in problems[0]
    with pytest.raises(CoreError, match="not a run name"):
        resolve_run(renamed.parent, renamed.name)


def test_extra_files_in_a_run_folder_are_reported(good_run, tmp_path):
    run = copy_run(good_run, tmp_path)
    assert verify_run(run) == []
    (run / ".examples.parquet.tmp-123").write_bytes(b"half written")
    shutil.copy2(run / "examples.parquet", run / "stray.parquet")
    problems = verify_run(run)
    assert len(problems) == 1 and "files not in the manifest" in problems[0] and "stray.parquet" in problems[0]


def test_list_and_verify_fail_on_a_missing_cache_folder(tmp_path, capsys):
    for cmd in (["list"], ["verify"]):
        assert main([*cmd, "--cache-dir", str(tmp_path / "nope")]) == 2
        assert "no cache folder" in one_error_line(capsys)


def test_manifest_paths_are_relative_to_the_project(good_run):
    manifest = json.loads((good_run / "manifest.json").read_text())

    def strings(x):
        if isinstance(x, dict):
            for v in x.values():
                yield from strings(v)
        elif isinstance(x, list):
            for v in x:
                yield from strings(v)
        elif isinstance(x, str):
            yield x

    assert not [s for s in strings(manifest) if os.path.isabs(s)]  # no absolute path of this machine
    model = manifest["model"]
    for key in ("source", "source_as_given"):
        assert not os.path.isabs(model[key])

        assert (PROJECT_ROOT / model[key] / "config.json").exists()


# ----------------------------------------------------------------------------- bad command-line input


def test_huge_max_operand_fails_before_building_pairs(model_dir, tmp_path, capsys):
    args = ["precompute", "--model", str(model_dir("gpt2")), "--cache-dir", str(tmp_path), "--max-operand", "100000"]
    assert main(args) == 2
    assert "--max-operand 1023 or less" in one_error_line(capsys)


def test_cache_dir_naming_a_file(model_dir, tmp_path, capsys):
    f = tmp_path / "a-file"
    f.write_text("x")
    assert precompute_cli(model_dir("gpt2"), f) == 2
    assert "is a file, not a folder" in one_error_line(capsys)
    for cmd in (["list"], ["verify"]):
        assert main([*cmd, "--cache-dir", str(f)]) == 2
        one_error_line(capsys)


def test_read_only_cache(model_dir, tmp_path, capsys, monkeypatch):
    def refuse(self, *a, **kw):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    assert precompute_cli(model_dir("gpt2"), tmp_path / "ro") == 2
    assert "read-only file system" in one_error_line(capsys)


def test_corrupt_safetensors_file(model_dir, tmp_path, capsys):
    folder = tmp_path / "corrupt"
    shutil.copytree(model_dir("gpt2"), folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert precompute_cli(folder, tmp_path / "cache") == 2
    assert "corrupt or truncated" in one_error_line(capsys)


def test_weights_holding_nan_are_refused_at_load_in_float32(model_dir, tmp_path, capsys):
    """A float32 checkpoint with a NaN weight is named as broken when it loads, not advised to use float32."""
    folder = tmp_path / "diverged"
    shutil.copytree(model_dir("gpt2"), folder)
    weights = load_file(folder / "model.safetensors")
    name = next(k for k in weights if k.endswith("mlp.c_fc.weight"))
    weights[name][0, 0] = float("nan")
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()  # what saving the model printed
    assert precompute_cli(folder, tmp_path / "cache") == 2
    line = one_error_line(capsys)
    assert "NaN or infinite" in line and name in line and "--dtype float32" not in line
    assert not (tmp_path / "cache").exists() or not list_runs(tmp_path / "cache")


def test_a_module_that_flattens_positions_ends_in_one_line(tmp_path, capsys):
    """OPT's blocks flatten (batch, positions) before their MLP: it is refused by name in one line that says why,
    even when its fc2 is named by hand (core.models.loading.UNSUPPORTED_ARCHITECTURES)."""
    tokenizer = number_tokenizer(40)
    config = OPTConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                       num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=32,
                       pad_token_id=tokenizer.pad_token_id or 0)
    torch.manual_seed(0)
    OPTForCausalLM(config).save_pretrained(tmp_path / "opt")
    tokenizer.save_pretrained(tmp_path / "opt")
    layout = "blocks=model.decoder.layers,attn=self_attn,mlp=fc2,final_norm=model.decoder.final_layer_norm"
    capsys.readouterr()  # what saving the model printed
    assert precompute_cli(tmp_path / "opt", tmp_path / "cache", "--modules", layout) == 2
    line = one_error_line(capsys)
    assert "OPTForCausalLM (model type 'opt') cannot be analysed" in line and "flattens (batch, positions)" in line


def test_mistyped_local_folder_is_not_sent_to_the_hub(model_dir, tmp_path, capsys, monkeypatch):
    real = Path(model_dir("gpt2"))
    parent = tmp_path / "models"
    shutil.copytree(real, parent / "fourier-frozen")
    monkeypatch.chdir(tmp_path)
    assert precompute_cli("models/fourier-frozn", tmp_path / "cache") == 2
    line = one_error_line(capsys)
    assert "no folder models/fourier-frozn" in line and "Did you mean models/fourier-frozen" in line


def test_folder_without_tokenizer_files(model_dir, tmp_path, capsys):
    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for f in Path(model_dir("gpt2")).iterdir():
        if "token" not in f.name and f.name != "special_tokens_map.json":
            shutil.copy2(f, folder / f.name)
    assert precompute_cli(folder, tmp_path / "cache") == 2
    assert "has no tokenizer files" in one_error_line(capsys)


def test_tokenizer_without_any_single_token_number(tmp_path):
    with pytest.raises(CoreError, match="not even 0 as one token"):
        require_number_range(NumberTokens((), "", 0, ("Ġ0",)), 521)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("width", "640", "'width' should be a whole number"),
        ("tied", 1, "'tied' should be true/false"),
        ("lr", "1e-3", "'lr' should be a number"),
        ("freeze", [2, 5], "'freeze' should be an object or null"),
        ("epochs", 0, "epochs must be at least 1"),
    ],
)
def test_recipes_with_wrong_field_types(tmp_path, capsys, field, value, message):
    recipe = json.loads((PROJECT_ROOT / "recipes" / "scratch.json").read_text())
    recipe[field] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(recipe))
    assert main(["train", "--recipe", str(path)]) == 2
    assert message in one_error_line(capsys)


# ----------------------------------------------------------------------------- concurrency, resuming, leftovers


def test_second_precompute_of_a_run_waits_for_the_first(model_dir, good_run, tmp_path):
    run = copy_run(good_run, tmp_path)
    cache, name = run.parent, run.name
    waiting = threading.Event()
    with run_lock(cache, name):
        with pytest.raises(CoreError, match="another precompute of run .* is running"):
            with run_lock(cache, name, wait=False):
                pass
        messages, result = [], {}

        def log(msg):
            messages.append(msg)
            if "waiting" in msg:
                waiting.set()

        def second():
            opts = pre.PrecomputeOptions(
                model=str(model_dir("gpt2")),
                max_operand=20,
                limit=30,
                taus=(5,),
                n_sample=2,
                cache_dir=str(cache),
                progress=False,
                stages=("measure", "embeddings", "ablations"),  # as SMALL asks
            )
            result["path"] = pre.precompute(opts, log=log)

        t = threading.Thread(target=second)
        t.start()
        assert waiting.wait(120), messages  # blocked on the lock the first holds
    t.join(120)
    assert result["path"] == run and any("already in" in m for m in messages)
    assert sorted(p.name for p in cache.iterdir()) == [name]  # no lock file, no empty staging folder left


def test_interrupted_recompute_resumes_and_keeps_the_old_run(model_dir, good_run, tmp_path, monkeypatch, capsys):
    run = copy_run(good_run, tmp_path)
    cache = run.parent
    before = (run / "manifest.json").read_bytes()
    real_embeddings = pre.embedding_tables

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(pre, "embedding_tables", interrupted)
    assert precompute_cli(model_dir("gpt2"), cache, "--recompute") == 130
    assert (run / "manifest.json").read_bytes() == before and verify_run(run) == []  # the old run is untouched
    (staging,) = [p for p in cache.iterdir() if p.name.startswith(".staging-")]
    assert (staging / "examples.parquet").exists()
    first = json.loads((staging / TIMINGS_FILE).read_text())  # the interrupted part's seconds, kept as they ended
    assert first["parts"] == 1 and first["measurements_s"] > 0
    # a temporary file of a write that was killed is never published
    (staging / ".examples.parquet.tmp-99999").write_bytes(b"half")
    # the same --recompute again resumes: the measurements are not recomputed
    monkeypatch.setattr(pre, "embedding_tables", real_embeddings)
    monkeypatch.setattr(pre, "measure", lambda *a, **kw: pytest.fail("measurements recomputed on resume"))
    assert precompute_cli(model_dir("gpt2"), cache, "--recompute") == 0
    assert verify_run(run) == [] and (run / "manifest.json").read_bytes() != before
    assert sorted(p.name for p in cache.iterdir()) == [run.name]  # no staging, lock, .old or .tmp left
    timings = read_manifest(cache, run.name)["timings"]  # the whole run: both parts summed, not the resumed one's
    assert timings["parts"] == 2 and timings["measurements_s"] >= first["measurements_s"]
    assert timings["load_s"] >= first["load_s"] and TIMINGS_FILE not in {p.name for p in run.iterdir()}


def test_a_fresh_recompute_does_not_resume_an_older_ordinary_staging(model_dir, good_run, tmp_path, monkeypatch):
    run = copy_run(good_run, tmp_path)
    cache = run.parent
    staging = cache / f".staging-{run.name}"
    staging.mkdir()
    (staging / "stage.json").write_text(json.dumps({"key": "something else", "mode": "fresh"}))
    (staging / "examples.parquet").write_bytes(b"stale")
    assert precompute_cli(model_dir("gpt2"), cache, "--recompute") == 0
    assert verify_run(run) == [] and not staging.exists()


def test_failed_run_leaves_no_staging_folder(model_dir, tmp_path, capsys, monkeypatch):
    def broken(*a, **kw):
        raise CoreError("something the user must fix")

    monkeypatch.setattr(pre, "measure", broken)
    cache = tmp_path / "cache"
    assert precompute_cli(model_dir("gpt2"), cache) == 2
    one_error_line(capsys)
    assert list(cache.iterdir()) == []


def test_dashboard_run_list_skips_a_manifest_without_p(good_run, tmp_path):
    """The sidebar reads manifest["p"]: a run whose manifest lacks it is listed as broken, not chosen."""

    run = copy_run(good_run, tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["p"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    good, broken = (
        valid_runs.__wrapped__(str(run.parent)) if hasattr(valid_runs, "__wrapped__") else valid_runs(str(run.parent))
    )
    assert good == [] and broken and any("lacks 'p'" in p for p in broken[0]["problems"])


def test_a_leftover_checkpoint_beside_the_weights_does_not_change_the_fingerprint(model_dir, tmp_path):
    """Only the files from_pretrained loads identify the model (a run's name must not depend on leftovers)."""

    folder = tmp_path / "m"
    shutil.copytree(model_dir("gpt2"), folder)
    before = fingerprint_folder(folder)
    (folder / "pretrained.safetensors").write_bytes(b"leftover of an earlier stage")
    assert fingerprint_folder(folder) == before
    weights = next(folder.glob("model*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x01")
    assert fingerprint_folder(folder) != before
