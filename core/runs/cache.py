"""The run cache: one folder per run, a manifest and long-format parquet tables.

A run is identified by what determines its numbers: the model (source, revision, weights
fingerprint), task, max operand, split, shots, prompt format, basis, limit, and the schema
version. Its folder name is a readable slug plus a short hash of that identity.

Writing is atomic: tables are written into a hidden staging folder (`.staging-NAME`), each table
through a temporary file and a rename; the manifest, with every table's row count and sha256,
is written last, and the staging folder is renamed to its final name. A run interrupted half way
leaves only its staging folder, which a rerun with the same options resumes from. Nothing that
is already cached is touched until a new run is complete; a recomputed run replaces the old
one by renames.

Readers (the dashboard) list runs with `list_runs`, which checks each manifest, and read tables
with `read_table`, which refuses paths outside the cache folder.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from core import SCHEMA_VERSION
from core.errors import CoreError
from core.files import read_json_file, sha256_file
from core.runs.manifest_checks import EDITED, field_problems, table_problems
from core.runs.table_checks import CROSS_TABLES, content_problems, cross_table_problems
from core.runs.tables import TABLE_COLUMNS, check_table, required_tables

MANIFEST = "manifest.json"
STAGING_PREFIX = ".staging-"
OLD_PREFIX = ".old-"
LOCK_PREFIX = ".lock-"
STAGE_FILE = "stage.json"
PARQUET_ZSTD_LEVEL = 9  # writes stay well under a second for the largest shipped table


NAME_OK = re.compile(r"^[a-z0-9][a-z0-9._-]{0,120}$")


def slugify(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:60] or "run"


def identity_hash(identity: dict) -> str:
    blob = json.dumps(identity, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def run_name(label: str, identity: dict) -> str:
    return f"{slugify(label)}-{identity_hash(identity)}"




def _cache_write_error(path: Path, exc: OSError) -> CoreError:
    why = {errno.EACCES: "permission denied", errno.EROFS: "read-only file system", errno.ENOSPC: "disk full"}.get(
        exc.errno, exc.strerror or type(exc).__name__
    )
    return CoreError(f"cannot write {path} ({why}): choose a writable cache folder with --cache-dir")


def _atomic_write(path: Path, write) -> None:
    """`write(tmp)` into a temporary file beside `path`, then rename it over `path`; on any failure
    the temporary file is removed, and a file-system error becomes one clear CoreError."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _cache_write_error(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    def write(tmp: Path) -> None:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    _atomic_write(path, write)


def parquet_options(frame: pd.DataFrame) -> dict:
    """How a table is written, losslessly: zstd at PARQUET_ZSTD_LEVEL; float columns byte-stream-split (each value's
    bytes grouped by significance, which zstd packs about a fifth tighter); integer columns delta-encoded (sorted ids,
    layers and counts shrink to a few bits a row); strings and categories dictionary-encoded, booleans run-length
    encoded. Together about a third smaller than plain zstd on the shipped runs (docs/cache-format.md);
    core.runs.repack rewrites a run cached before in this encoding."""
    floats = [str(c) for c in frame.columns if pd.api.types.is_float_dtype(frame[c])]
    integers = [str(c) for c in frame.columns if pd.api.types.is_integer_dtype(frame[c])]  # not booleans, categories
    return {
        "compression": "zstd",
        "compression_level": PARQUET_ZSTD_LEVEL,
        "use_byte_stream_split": floats or False,
        "use_dictionary": [str(c) for c in frame.columns if str(c) not in floats and str(c) not in integers],
        "column_encoding": {c: "DELTA_BINARY_PACKED" for c in integers} or None,
    }


def _write_parquet(path: Path, frame: pd.DataFrame) -> None:
    _atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False, **parquet_options(frame)))


def ensure_cache_dir(cache_dir: str | Path) -> Path:
    """The cache folder, created if needed; a clear error if it is a file or cannot be written."""
    cache = Path(cache_dir)
    if cache.exists() and not cache.is_dir():
        raise CoreError(f"--cache-dir {cache_dir} is a file, not a folder: give a folder (it is created if missing)")
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cache_write_error(cache, exc) from None
    if not os.access(cache, os.W_OK | os.X_OK):
        raise CoreError(f"cannot write to the cache folder {cache_dir}: choose a writable one with --cache-dir")
    return cache


def existing_cache_dir(cache_dir: str | Path) -> Path:
    """The cache folder for reading; a clear error if it does not exist or is not a folder."""
    cache = Path(cache_dir)
    if not cache.exists():
        raise CoreError(
            f"there is no cache folder {cache_dir}: give the right --cache-dir, "
            "or make runs with `python -m core precompute`"
        )
    if not cache.is_dir():
        raise CoreError(f"--cache-dir {cache_dir} is a file, not a folder")
    return cache


@contextmanager
def run_lock(cache_dir: str | Path, name: str, log=print, wait: bool = True):
    """Serialise work on one run: a second precompute of the same run waits for the first (or, with
    wait=False, fails with a clear message). An exclusive flock on `.lock-NAME` in the cache folder;
    the lock file is removed on release."""

    cache = ensure_cache_dir(cache_dir)
    path = cache / f"{LOCK_PREFIX}{name}"
    while True:
        try:
            fh = open(path, "a+")
        except OSError as exc:
            raise _cache_write_error(path, exc) from None
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            if not wait:
                fh.close()
                raise CoreError(
                    f"another precompute of run {name} is running (pid {holder}): wait for it to finish, then run this "
                    "command again (it will find the run cached)"
                ) from None
            log(f"another precompute of run {name} is running (pid {holder}): waiting for it to finish")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            same = path.exists() and os.stat(path).st_ino == os.fstat(fh.fileno()).st_ino
        except OSError:
            same = False
        if same:
            break
        fh.close()  # the holder removed the file while we waited: lock the new one
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        yield
    finally:
        try:
            path.unlink(missing_ok=True)
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()


class RunWriter:
    """Builds one run in a staging folder and publishes it atomically."""

    def __init__(self, cache_dir: str | Path, name: str, identity: dict, options: dict, recompute: bool = False):
        if not NAME_OK.match(name):
            raise CoreError(f"invalid run name {name!r}")
        self.cache_dir = ensure_cache_dir(cache_dir)
        self.name = name
        self.identity = identity
        self.options = options
        self.final = self.cache_dir / name
        self.staging = self.cache_dir / f"{STAGING_PREFIX}{name}"
        # A staging folder is resumed when it was started for the same identity and options and
        # (under --recompute) by a --recompute too: an interrupted rebuild resumes, but --recompute
        # never resumes partial work of an earlier, ordinary run.
        mode = "recompute" if recompute else "fresh"
        stage_key = json.loads(
            json.dumps({"identity": identity, "options": options, "schema_version": SCHEMA_VERSION}, default=str)
        )
        stage_file = self.staging / STAGE_FILE
        try:
            if self.staging.is_symlink() or (self.staging.exists() and not self.staging.is_dir()):
                self.staging.unlink()
            elif self.staging.exists():
                old = read_json_file(stage_file)
                same = isinstance(old, dict) and old.get("key") == stage_key
                if not same or (recompute and old.get("mode") != "recompute"):
                    shutil.rmtree(self.staging)
            self.resumed = self.staging.exists()
            self.staging.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _cache_write_error(self.staging, exc) from None
        if not self.resumed:
            _atomic_write_bytes(stage_file, json.dumps({"key": stage_key, "mode": mode}, indent=1).encode())
        for leftover in self.staging.glob(".*.tmp-*"):  # temporary files of an interrupted write
            leftover.unlink(missing_ok=True)

    def discard_if_empty(self) -> None:
        """Remove the staging folder when it holds no finished table (nothing worth resuming)."""
        if (
            self.staging.is_dir()
            and not any(self.staging.glob("*.parquet"))
            and not (self.staging / "ablations.partial.json").exists()
        ):
            shutil.rmtree(self.staging, ignore_errors=True)

    @property
    def exists(self) -> bool:
        return (self.final / MANIFEST).exists()

    def has(self, table: str) -> bool:
        return (self.staging / f"{table}.parquet").exists()

    def read(self, table: str) -> pd.DataFrame:
        return pd.read_parquet(self.staging / f"{table}.parquet")

    def write(self, table: str, frame: pd.DataFrame) -> None:
        check_table(table, frame)
        _write_parquet(self.staging / f"{table}.parquet", frame.reset_index(drop=True))

    def write_json(self, filename: str, data) -> None:
        _atomic_write_bytes(self.staging / filename, json.dumps(data, indent=1, default=str).encode())

    def read_json(self, filename: str):
        return read_json_file(self.staging / filename)

    def stage_published(self) -> dict:
        """Copy the published run's tables into the staging folder to amend it; returns the manifest's
        own keys (those `publish` does not write itself), to publish again."""
        manifest = read_json_file(self.final / MANIFEST) or {}
        self.staging.mkdir(parents=True, exist_ok=True)  # a second amendment after a publish moved the first away
        for f in self.final.glob("*.parquet"):
            shutil.copy2(f, self.staging / f.name)
        written_by_publish = ("tables", "created", "name", "schema_version", "identity", "run_id", "options")
        return {k: v for k, v in manifest.items() if k not in written_by_publish}

    def publish(self, manifest: dict, created: str | None = None) -> Path:
        """Write the manifest and move the run into place (replacing an older one by renames). `created` is now unless
        given (a repack, which changes no number, keeps the run's own)."""
        missing = [t for t in required_tables(manifest) if not self.has(t)]
        if missing:
            raise CoreError(f"run {self.name} is missing tables {missing}; not publishing it")
        tables = {}
        for path in sorted(self.staging.glob("*.parquet")):
            frame = pd.read_parquet(path)
            tables[path.stem] = {
                "file": path.name,
                "rows": int(len(frame)),
                "columns": list(frame.columns),
                "sha256": sha256_file(path),
            }
        manifest = {
            **manifest,
            "name": self.name,
            "schema_version": SCHEMA_VERSION,
            "identity": self.identity,
            "run_id": identity_hash(self.identity),
            "options": self.options,
            "created": created or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "tables": tables,
        }
        _atomic_write_bytes(self.staging / MANIFEST, json.dumps(manifest, indent=1, default=str).encode())
        keep = {MANIFEST, *(entry["file"] for entry in tables.values())}
        for f in self.staging.iterdir():  # working files of the stages, temporary files: never published
            if f.name not in keep:
                shutil.rmtree(f) if f.is_dir() and not f.is_symlink() else f.unlink()
        old = None
        try:
            if self.final.is_symlink() or (self.final.exists() and not self.final.is_dir()):
                self.final.unlink()
            elif self.final.exists():
                old = self.cache_dir / f"{OLD_PREFIX}{self.name}-{os.getpid()}"
                os.replace(self.final, old)
            os.replace(self.staging, self.final)
        except OSError as exc:
            if old is not None and not self.final.exists():
                os.replace(old, self.final)  # put the old run back
            raise _cache_write_error(self.final, exc) from None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        for stale in self.cache_dir.glob(f"{OLD_PREFIX}{self.name}-*"):  # left by a publish that was killed
            shutil.rmtree(stale, ignore_errors=True)
        return self.final


@dataclass
class RunInfo:
    name: str
    path: Path
    manifest: dict | None
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def label(self) -> str:
        label = (self.manifest or {}).get("label")
        return label if isinstance(label, str) and label else self.name


def resolve_run(cache_dir: str | Path, name: str) -> Path:
    """The folder of run `name`, refusing anything that is not a plain run folder in the cache."""
    cache = Path(cache_dir).resolve()
    if not isinstance(name, str) or not NAME_OK.match(name) or name.startswith("."):
        raise CoreError(f"{name!r} is not a run name (runs are folders like 'scratch-1a2b3c4d5e' in {cache_dir})")
    if (cache / name).is_symlink():
        raise CoreError(f"run {name!r} is a symbolic link: only plain run folders inside the cache are read")
    path = (cache / name).resolve()
    if path.parent != cache:
        raise CoreError(f"{name!r} is outside the cache folder")
    if not path.is_dir():
        raise CoreError(f"no run {name!r} in {cache_dir}: `python -m core list --cache-dir {cache_dir}` shows the runs")
    return path


#: Manifest keys the readers (CLI list, dashboard) rely on, with their types.
MANIFEST_KEYS = {
    "label": str,
    "p": int,
    "n_layers": int,
    "width": int,
    "basis": str,
    "taus": list,
    "task": dict,
    "model": dict,
    "tables": dict,
}
TASK_KEYS = {"task": str, "split": str, "n_examples": int}
TABLE_ENTRY_KEYS = {"file": str, "rows": int, "sha256": str, "columns": list}


def _type_name(t) -> str:
    return {str: "text", int: "a whole number", list: "a list", dict: "an object"}.get(t, t.__name__)


def _has_type(value, t) -> bool:
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, t)


def manifest_problems(manifest) -> list[str]:
    """What is wrong with a manifest on its own: missing keys or wrong types the readers would trip on, and fields that
    disagree with the rest of it (its name and id with its identity: `name_problems`; the others:
    core.runs.manifest_checks.field_problems)."""
    if not isinstance(manifest, dict):
        return [f"{MANIFEST} is not a JSON object"]
    problems = []
    for key, t in MANIFEST_KEYS.items():
        if key not in manifest:
            problems.append(f"{MANIFEST} lacks {key!r}")
        elif not _has_type(manifest[key], t):
            problems.append(f"{MANIFEST}: {key!r} should be {_type_name(t)}, is {type(manifest[key]).__name__}")
    if _has_type(manifest.get("p"), int) and manifest["p"] < 3:
        problems.append(f"{MANIFEST}: p = {manifest['p']} (a number space needs at least 3 numbers)")
    for key in ("n_layers", "width"):
        if _has_type(manifest.get(key), int) and manifest[key] < 1:
            problems.append(f"{MANIFEST}: {key} = {manifest[key]}")
    if isinstance(manifest.get("taus"), list) and not all(_has_type(t, int) for t in manifest["taus"]):
        problems.append(f"{MANIFEST}: 'taus' should be whole numbers")
    if isinstance(manifest.get("task"), dict):
        for key, t in TASK_KEYS.items():
            if not _has_type(manifest["task"].get(key), t):
                problems.append(f"{MANIFEST}: task.{key} should be {_type_name(t)}")
    if "run_label" in manifest and not isinstance(manifest["run_label"], str):
        problems.append(f"{MANIFEST}: 'run_label' should be text")
    for key in ("accuracy", "display_order"):
        if key in manifest and (isinstance(manifest[key], bool) or not isinstance(manifest[key], (int, float))):
            problems.append(f"{MANIFEST}: {key!r} should be a number")
    for key in ("not_applicable", "not_computed"):
        na = manifest.get(key, {})
        if not isinstance(na, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in na.items()):
            problems.append(f"{MANIFEST}: {key!r} should map table names to reasons (text)")
    if isinstance(manifest.get("tables"), dict):
        for t, entry in manifest["tables"].items():
            if not isinstance(entry, dict):
                problems.append(f"{MANIFEST}: table {t} is not an object")
                continue
            for key, typ in TABLE_ENTRY_KEYS.items():
                if not _has_type(entry.get(key), typ):
                    problems.append(f"{MANIFEST}: table {t}: {key!r} should be {_type_name(typ)}")
    return problems + name_problems(manifest) + field_problems(manifest)


def name_problems(manifest: dict) -> list[str]:
    """The run's id and name against what they are made of (`run_name`): its identity, and its run label (its label,
    task and split; core.runs.manifest_checks checks those make it), so an edited identity or label does not pass."""
    identity, run_label = manifest.get("identity"), manifest.get("run_label")
    if not isinstance(identity, dict):
        return []
    problems, run_id = [], identity_hash(identity)
    if "run_id" in manifest and manifest["run_id"] != run_id:
        problems.append(f"manifest run_id {manifest['run_id']!r} is not its identity's hash {run_id!r}: {EDITED}")
    name = run_name(run_label, identity) if isinstance(run_label, str) else None
    if name is not None and isinstance(manifest.get("name"), str) and manifest["name"] != name:
        problems.append(f"manifest run_label {run_label!r} and identity make the name {name!r}, but the run is named "
                        f"{manifest['name']!r}: {EDITED}")
    return problems


def verify_run(path: str | Path, deep: bool = True) -> list[str]:
    """Problems found in a run folder (empty when it matches its manifest).

    Checks the folder and its files are plain (no symbolic links: the readers refuse them too),
    the manifest is readable, of this schema version and of the shape the readers expect, every
    required table is listed and present, no file is there that the manifest does not list, the manifest's
    fields agree with each other and its name with the folder's, and (deep) every file's sha256, row count and
    columns match and every manifest field a reader takes for a table's content (n_layers, p, width, taus, split,
    task, n_examples, accuracy, ...) agrees with the table (core.runs.manifest_checks.table_problems), and what the
    tables say can be: no NaN where nothing may be missing, layers and heads within the model's shape, shares,
    counts and intervals as they must be, the unfiltered accuracy the examples table's
    (core.runs.table_checks).
    """
    path = Path(path)
    if path.is_symlink():
        return [f"{path.name} is a symbolic link: the dashboard reads only plain run folders inside the cache"]
    if not NAME_OK.match(path.name):
        return [f"{path.name!r} is not a run name (lower-case letters, digits, '.', '_', '-'): the readers refuse it"]
    if (path / MANIFEST).is_symlink():
        return [f"{MANIFEST} is a symbolic link"]
    manifest = read_json_file(path / MANIFEST)
    if manifest is None:
        return [f"{path.name}: no readable {MANIFEST}"]
    problems = manifest_problems(manifest)
    if not isinstance(manifest, dict):
        return problems
    if isinstance(manifest.get("name"), str) and manifest["name"] != path.name:
        problems.append(f"manifest name {manifest['name']!r} but the run's folder is {path.name!r}: the folder was "
                        f"renamed or the manifest edited; give the folder its name back, or recompute the run")
    if manifest.get("schema_version") != SCHEMA_VERSION:
        problems.append(
            f"schema version {manifest.get('schema_version')} (this code reads {SCHEMA_VERSION}): "
            + (
                "run the same precompute again (it adds the tables of the newer schema and keeps the rest), "
                "or, when the "
                "model is not here, `python -m core upgrade` (phase tables from the run's cached sample)"
                if manifest.get("schema_version") in (2, 3)
                else "recompute the run"
            )
        )
    tables = manifest.get("tables") if isinstance(manifest.get("tables"), dict) else {}
    for t in required_tables(manifest):
        if t not in tables:
            problems.append(f"table {t} is not in the manifest")
    listed, read = {MANIFEST}, {}
    for t, entry in tables.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            continue
        f = path / entry["file"]
        listed.add(entry["file"])
        if f.parent != path or f.name in ("", ".", ".."):
            problems.append(f"table {t}: file {entry['file']!r} is not inside the run folder")
            continue
        if f.is_symlink():
            problems.append(f"table {t}: {entry['file']} is a symbolic link (the readers refuse it)")
            continue
        if not f.is_file():
            problems.append(f"table {t}: file {entry['file']} is missing")
            continue
        if not deep:
            continue
        if sha256_file(f) != entry.get("sha256"):
            problems.append(f"table {t}: sha256 differs from the manifest (file changed or corrupted)")
            continue
        try:
            frame = pd.read_parquet(f)
        except Exception as exc:  # a corrupt parquet file can raise many kinds
            problems.append(f"table {t}: unreadable ({type(exc).__name__})")
            continue
        if len(frame) != entry.get("rows"):
            problems.append(f"table {t}: {len(frame)} rows, manifest says {entry.get('rows')}")
        if t in TABLE_COLUMNS:
            missing = [c for c in TABLE_COLUMNS[t] if c not in frame.columns]
            if missing:
                problems.append(f"table {t}: lacks columns {missing}")
        problems += table_problems(manifest, t, frame) + content_problems(manifest, t, frame)
        if t in CROSS_TABLES:
            read[t] = frame
    problems += cross_table_problems(read)
    extra = sorted(f.name for f in path.iterdir() if f.name not in listed)
    if extra:
        problems.append(
            f"files not in the manifest: {', '.join(extra[:5])}{', ...' if len(extra) > 5 else ''} "
            "(remove them, or recompute the run)"
        )
    return problems


def list_runs(cache_dir: str | Path, deep: bool = False) -> list[RunInfo]:
    """Every run folder in the cache (hidden staging folders excluded), each with its problems."""
    cache = Path(cache_dir)
    if not cache.is_dir():
        return []
    runs = []
    for path in sorted(cache.iterdir()):
        if path.name.startswith(".") or not (path.is_dir() or path.is_symlink()):
            continue
        problems = verify_run(path, deep=deep)
        manifest = None if path.is_symlink() else read_json_file(path / MANIFEST)
        runs.append(RunInfo(path.name, path, manifest if isinstance(manifest, dict) else None, problems))
    return runs


def read_manifest(cache_dir: str | Path, name: str) -> dict:
    path = resolve_run(cache_dir, name)
    manifest = read_json_file(path / MANIFEST)
    if not isinstance(manifest, dict):
        raise CoreError(f"run {name} has no readable manifest: run `python -m core verify {name}`")
    return manifest


def read_table(cache_dir: str | Path, name: str, table: str, columns: list[str] | None = None) -> pd.DataFrame:
    """One table of a run, as listed in its manifest."""
    path = resolve_run(cache_dir, name)
    manifest = read_manifest(cache_dir, name)
    tables = manifest.get("tables")
    entry = tables.get(table) if isinstance(tables, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        raise CoreError(f"run {name} has no table {table!r}")
    if (path / entry["file"]).is_symlink():
        raise CoreError(f"table {table} of run {name} is a symbolic link: run `python -m core verify {name}`")
    f = (path / entry["file"]).resolve()
    if f.parent != path:
        raise CoreError(f"table {table} of run {name} points outside its folder")
    return pd.read_parquet(f, columns=columns)

