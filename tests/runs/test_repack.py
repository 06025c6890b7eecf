"""The tables' encoding (core.runs.cache.parquet_options) and `repack` (core.runs.repack), which rewrites a run cached
in an older encoding: every table reads back the same, the run still verifies, only the files and their checksums
change; a repack refused, failed or stopped leaves the run as it was."""

import json
import shutil

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from core.cli import main
from core.errors import CoreError
from core.files import sha256_file
from core.runs.cache import LOCK_PREFIX, STAGING_PREFIX, RunWriter, list_runs, parquet_options, run_lock, verify_run
from core.runs.repack import repack_run, table_packed

SMALL = ["--max-operand", "20", "--limit", "30", "--taus", "5", "--n-sample", "2", "--no-progress",
         "--stages", "measure,embeddings,ablations"]


def column_encodings(path) -> dict:
    """Each column's encodings, as the parquet file's metadata records them (first row group)."""
    group = pq.ParquetFile(path).metadata.row_group(0)
    return {group.column(i).path_in_schema: set(group.column(i).encodings) for i in range(group.num_columns)}


def write_old_style(run) -> None:
    """Rewrite a run's tables as the cache wrote them before (plain zstd) and sign them in the manifest: a run
    cached by an older version of this code."""
    manifest = json.loads((run / "manifest.json").read_text())
    for entry in manifest["tables"].values():
        path = run / entry["file"]
        pd.read_parquet(path).to_parquet(path, index=False, compression="zstd")
        entry["sha256"] = sha256_file(path)
    (run / "manifest.json").write_text(json.dumps(manifest, indent=1))


@pytest.fixture(scope="module")
def old_run(model_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("repack-cache")
    assert main(["precompute", "--model", str(model_dir("gpt2")), "--cache-dir", str(cache), *SMALL]) == 0
    (run,) = list_runs(cache)
    write_old_style(run.path)
    assert verify_run(run.path) == []
    return run.path


@pytest.fixture
def cache_copy(old_run, tmp_path):
    shutil.copytree(old_run, tmp_path / old_run.name)
    return tmp_path, old_run.name


def test_every_kind_of_column_reads_back_the_same_and_is_encoded_as_documented(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({
        "layer": np.repeat(np.arange(5), 20), "example": np.tile(np.arange(20, dtype=np.int32), 5),
        "magnitude": rng.random(100), "logit": rng.random(100).astype(np.float32),
        "module": ["attn", "mlp"] * 50, "stayed": rng.random(100) < 0.5,
        "kind": pd.Categorical(["a", "b", "c", "d"] * 25), "count": pd.array([1, None] * 50, dtype="Int64"),
        "share": [np.nan, 0.5] * 50,
    })
    path = tmp_path / "t.parquet"
    frame.to_parquet(path, index=False, **parquet_options(frame))
    assert pd.read_parquet(path).equals(frame)
    encodings = column_encodings(path)
    for column in ("layer", "example", "count"):
        assert "DELTA_BINARY_PACKED" in encodings[column], column
    for column in ("magnitude", "logit", "share"):
        assert "BYTE_STREAM_SPLIT" in encodings[column], column
    for column in ("module", "kind"):
        assert "RLE_DICTIONARY" in encodings[column], column
    assert all(pq.ParquetFile(path).metadata.row_group(0).column(i).compression == "ZSTD" for i in range(9))
    assert table_packed(path)
    frame.to_parquet(path, index=False, compression="zstd")  # as the cache wrote tables before
    assert not table_packed(path)


def test_repack_rewrites_an_old_run_without_changing_a_number(cache_copy):
    cache, name = cache_copy
    run = cache / name
    before = json.loads((run / "manifest.json").read_text())
    frames = {t: pd.read_parquet(run / e["file"]) for t, e in before["tables"].items()}
    sizes = sum((run / e["file"]).stat().st_size for e in before["tables"].values())

    assert repack_run(cache, name, log=lambda *_: None) is True
    after = json.loads((run / "manifest.json").read_text())
    assert verify_run(run) == []
    assert {k: v for k, v in after.items() if k != "tables"} == {k: v for k, v in before.items() if k != "tables"}
    for table, entry in after["tables"].items():
        assert pd.read_parquet(run / entry["file"]).equals(frames[table]), table
        assert {k: v for k, v in entry.items() if k != "sha256"} == {
            k: v for k, v in before["tables"][table].items() if k != "sha256"}
    assert any(e["sha256"] != before["tables"][t]["sha256"] for t, e in after["tables"].items())
    assert sum((run / e["file"]).stat().st_size for e in after["tables"].values()) < sizes
    assert not (cache / f"{STAGING_PREFIX}{name}").exists()
    assert after["created"] == before["created"]
    assert repack_run(cache, name, log=lambda *_: None) is False  # already packed: nothing rewritten
    assert json.loads((run / "manifest.json").read_text()) == after


def test_a_repack_stopped_half_way_leaves_the_run_as_it_was(cache_copy, monkeypatch):
    cache, name = cache_copy
    run = cache / name
    files = {f.name: f.read_bytes() for f in run.iterdir()}
    written = []
    real_write = RunWriter.write

    def stop_at_the_second_table(self, table, frame):
        written.append(table)
        if len(written) == 2:
            raise KeyboardInterrupt
        real_write(self, table, frame)

    monkeypatch.setattr(RunWriter, "write", stop_at_the_second_table)
    with pytest.raises(KeyboardInterrupt):
        repack_run(cache, name, log=lambda *_: None)
    assert {f.name: f.read_bytes() for f in run.iterdir()} == files
    assert not (cache / f"{STAGING_PREFIX}{name}").exists() and not (cache / f"{LOCK_PREFIX}{name}").exists()
    monkeypatch.undo()
    assert repack_run(cache, name, log=lambda *_: None) is True  # and the next repack goes through


def test_an_ordinary_amendment_still_gets_a_new_created(cache_copy):
    cache, name = cache_copy
    manifest = json.loads((cache / name / "manifest.json").read_text())
    manifest["created"] = "2000-01-01T00:00:00+0000"
    (cache / name / "manifest.json").write_text(json.dumps(manifest))
    writer = RunWriter(cache, name, manifest["identity"], manifest["options"])
    writer.publish(writer.stage_published())
    assert json.loads((cache / name / "manifest.json").read_text())["created"] != "2000-01-01T00:00:00+0000"


def test_repack_refuses_a_damaged_run_and_leaves_it_as_it_was(cache_copy):
    cache, name = cache_copy
    run = cache / name
    examples = run / "examples.parquet"
    frame = pd.read_parquet(examples)
    frame.loc[0, "correct"] = not frame.loc[0, "correct"]
    frame.to_parquet(examples, index=False, compression="zstd")
    damaged = {f.name: f.read_bytes() for f in run.iterdir()}
    with pytest.raises(CoreError, match="does not verify.*mend or recompute"):
        repack_run(cache, name, log=lambda *_: None)
    assert {f.name: f.read_bytes() for f in run.iterdir()} == damaged


def test_repack_refuses_a_run_being_computed_or_left_half_computed(cache_copy):
    cache, name = cache_copy
    with run_lock(cache, name, log=lambda *_: None):
        with pytest.raises(CoreError, match="another precompute .* is running"):
            repack_run(cache, name, log=lambda *_: None)
    staging = cache / f"{STAGING_PREFIX}{name}"
    staging.mkdir()
    (staging / "ablations.partial.json").write_text("{}")
    with pytest.raises(CoreError, match="being amended by another command, or one was stopped half way"):
        repack_run(cache, name, log=lambda *_: None)
    assert (staging / "ablations.partial.json").read_text() == "{}"  # the interrupted work is kept
    assert not (cache / f"{LOCK_PREFIX}{name}").exists()


def test_repack_command_names_each_run_and_its_sizes(cache_copy, capsys):
    cache, name = cache_copy
    assert main(["repack", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"{name}: ") and " MB -> " in out
    assert main(["repack", name, "--cache-dir", str(cache)]) == 0
    assert capsys.readouterr().out.strip() == f"{name}: already packed"
    assert main(["repack", "--cache-dir", str(cache / "missing")]) == 2
    assert "there is no cache folder" in capsys.readouterr().err
    # a run named by its path is looked for in the folder that holds it, whatever --cache-dir says
    assert main(["repack", str(cache / name), "--cache-dir", str(cache / "missing")]) == 0
    assert capsys.readouterr().out.strip() == f"{name}: already packed"
    # a folder that is no run is named and skipped; the others are still repacked, and the command fails
    (cache / "stray").mkdir()
    assert main(["repack", "--cache-dir", str(cache)]) == 1
    out = capsys.readouterr().out
    assert "stray: not repacked: " in out and f"{name}: already packed" in out
