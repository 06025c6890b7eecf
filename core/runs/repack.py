"""Rewriting a cached run's tables in the cache's current encoding (core.runs.cache.parquet_options), for a run
cached before that encoding: `python -m core repack`. Nothing a table says changes: each is read back equal before
the run is published again, with its manifest's own keys and `created` kept and only the tables' checksums new."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from core.errors import CoreError
from core.runs.cache import STAGING_PREFIX, RunWriter, read_manifest, resolve_run, run_lock, verify_run


def table_packed(path: str | Path) -> bool:
    """Whether a table file is written as parquet_options writes one: every column chunk zstd, every float column
    byte-stream-split, every integer column delta-encoded. Read from the file's metadata, not its bytes (those also
    record the versions of the libraries that wrote them)."""
    f = pq.ParquetFile(path)
    kinds = {field.name: field.type for field in f.schema_arrow}
    for g in range(f.metadata.num_row_groups):
        group = f.metadata.row_group(g)
        for i in range(group.num_columns):
            chunk = group.column(i)
            kind = kinds.get(chunk.path_in_schema)
            if chunk.compression != "ZSTD":
                return False
            if kind is not None and pa.types.is_floating(kind) and "BYTE_STREAM_SPLIT" not in chunk.encodings:
                return False
            if kind is not None and pa.types.is_integer(kind) and "DELTA_BINARY_PACKED" not in chunk.encodings:
                return False
    return True


def repack_run(cache_dir: str | Path, name: str, log=print) -> bool:
    """Rewrite run `name`'s tables in the current encoding through a staging copy published as any amendment is,
    every table read back equal to what it was. Returns False, touching nothing, when every table is packed already
    (`table_packed`, read from the files' metadata: no table is read for a run with nothing to rewrite). Refused,
    with nothing touched, for a run to rewrite that fails `verify_run` (a repack must not sign a damaged table), one
    another command holds the lock of, or one with a staging folder (another command's work, running or stopped
    half way). A repack that fails or is stopped leaves the run as it was and no staging folder."""
    path = resolve_run(cache_dir, name)
    with run_lock(cache_dir, name, log, wait=False):
        staging = Path(cache_dir) / f"{STAGING_PREFIX}{name}"
        if staging.exists():
            raise CoreError(f"run {name} is being amended by another command, or one was stopped half way ({staging} "
                            "exists): let it finish, or run that command again to finish it, then repack")
        manifest = read_manifest(cache_dir, name)
        tables = manifest.get("tables") or {}
        odd = [t for t, entry in tables.items() if entry.get("file") != f"{t}.parquet"]
        if odd:
            raise CoreError(f"run {name}: table {odd[0]} is not in the file {odd[0]}.parquet, as a precompute writes "
                            "it: recompute the run")
        if all((path / e["file"]).is_file() and table_packed(path / e["file"]) for e in tables.values()):
            return False  # nothing to rewrite: the metadata says so, without reading a table (verify does that)
        problems = verify_run(path, deep=True)
        if problems:
            raise CoreError(f"run {name} does not verify ({problems[0]}; `python -m core verify {name}` lists every "
                            "problem): mend or recompute it before repacking it")
        writer = RunWriter(cache_dir, name, manifest.get("identity") or {}, manifest.get("options") or {})
        try:
            keep = writer.stage_published()
            for table in tables:
                before = writer.read(table)
                writer.write(table, before)
                if not writer.read(table).equals(before):
                    raise CoreError(f"run {name}: table {table} read back differently after repacking; the run is "
                                    "left as it was")
            writer.publish(keep, created=manifest.get("created"))
        except BaseException:
            shutil.rmtree(writer.staging, ignore_errors=True)
            raise
    return True

