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

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from core import SCHEMA_VERSION
from core.errors import CoreError

MANIFEST = "manifest.json"
STAGING_PREFIX = ".staging-"
OLD_PREFIX = ".old-"

#: Required columns of each table. A table may carry more.
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "examples": ("id", "split", "a", "b", "answer", "prompt", "prediction", "correct", "loss"),
    "layer_accuracy": ("layer", "final_norm", "exact", "within_2", "within_10", "n"),
    "module_spectra": ("basis", "module", "layer", "k", "period", "magnitude"),
    "module_logits": ("example_id", "module", "layer", "number", "logit"),
    "final_waves": ("example_id", "basis", "rank", "k", "period", "magnitude", "number", "value"),
    "embedding_spectrum": ("basis", "matrix", "k", "period", "magnitude", "null_mean", "null_p95", "outlier"),
    "embedding_clusters": ("matrix", "number", "x", "y", "cluster", "last_digit"),
    "ablations": ("modules", "removed", "tau", "keep_k", "label", "accuracy", "loss", "n", "erased", "rank", "width"),
    "ablation_errors": ("modules", "removed", "tau", "keep_k", "error", "count"),
    "error_analysis": ("source", "n", "n_wrong", "accuracy", "share_multiple_of_10"),
    "training_log": ("seed", "epoch", "split", "accuracy", "loss"),
}
REQUIRED_TABLES = tuple(t for t in TABLE_COLUMNS if t != "training_log")
NAME_OK = re.compile(r"^[a-z0-9][a-z0-9._-]{0,120}$")


def slugify(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:60] or "run"


def identity_hash(identity: dict) -> str:
    blob = json.dumps(identity, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def run_name(label: str, identity: dict) -> str:
    return f"{slugify(label)}-{identity_hash(identity)}"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(2**20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_table(name: str, frame: pd.DataFrame) -> None:
    if name not in TABLE_COLUMNS:
        raise CoreError(f"unknown table {name!r}")
    missing = [c for c in TABLE_COLUMNS[name] if c not in frame.columns]
    if missing:
        raise CoreError(f"table {name} lacks columns {missing}")


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _write_parquet(path: Path, frame: pd.DataFrame) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    frame.to_parquet(tmp, index=False, compression="zstd")
    os.replace(tmp, path)


class RunWriter:
    """Builds one run in a staging folder and publishes it atomically."""

    def __init__(self, cache_dir: str | Path, name: str, identity: dict, options: dict, recompute: bool = False):
        if not NAME_OK.match(name):
            raise CoreError(f"invalid run name {name!r}")
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.identity = identity
        self.options = options
        self.final = self.cache_dir / name
        self.staging = self.cache_dir / f"{STAGING_PREFIX}{name}"
        stage_key = {"identity": identity, "options": options, "schema_version": SCHEMA_VERSION}
        stage_file = self.staging / "stage.json"
        if self.staging.exists():
            old = read_json_file(stage_file)
            if recompute or old != json.loads(json.dumps(stage_key, default=str)):
                shutil.rmtree(self.staging)
        self.resumed = self.staging.exists()
        self.staging.mkdir(parents=True, exist_ok=True)
        if not self.resumed:
            _atomic_write_bytes(stage_file, json.dumps(stage_key, indent=1, default=str).encode())

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

    def publish(self, manifest: dict) -> Path:
        """Write the manifest and move the run into place (replacing an older one by renames)."""
        missing = [t for t in REQUIRED_TABLES if not self.has(t)]
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
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "tables": tables,
        }
        _atomic_write_bytes(self.staging / MANIFEST, json.dumps(manifest, indent=1, default=str).encode())
        for f in self.staging.glob("*.json"):  # working files of the stages (stage.json, partial results)
            if f.name != MANIFEST:
                f.unlink()
        old = None
        if self.final.exists():
            old = self.cache_dir / f"{OLD_PREFIX}{self.name}-{os.getpid()}"
            os.replace(self.final, old)
        os.replace(self.staging, self.final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.final


def read_json_file(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None


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
        return (self.manifest or {}).get("label") or self.name


def resolve_run(cache_dir: str | Path, name: str) -> Path:
    """The folder of run `name`, refusing anything that is not a plain run folder in the cache."""
    cache = Path(cache_dir).resolve()
    if not isinstance(name, str) or not NAME_OK.match(name) or name.startswith("."):
        raise CoreError(f"{name!r} is not a run name (runs are folders like 'scratch-1a2b3c4d5e' in {cache_dir})")
    path = (cache / name).resolve()
    if path.parent != cache:
        raise CoreError(f"{name!r} is outside the cache folder")
    if not path.is_dir():
        raise CoreError(f"no run {name!r} in {cache_dir}: `python -m core list --cache-dir {cache_dir}` shows the runs")
    return path


def verify_run(path: str | Path, deep: bool = True) -> list[str]:
    """Problems found in a run folder (empty when it matches its manifest).

    Checks the manifest is readable and of this schema version, every required table is listed
    and present, and (deep) every file's sha256, row count and columns match.
    """
    path = Path(path)
    manifest = read_json_file(path / MANIFEST)
    if manifest is None:
        return [f"{path.name}: no readable {MANIFEST}"]
    problems = []
    if manifest.get("schema_version") != SCHEMA_VERSION:
        problems.append(
            f"schema version {manifest.get('schema_version')} (this code reads {SCHEMA_VERSION}): recompute the run"
        )
    tables = manifest.get("tables") or {}
    for t in REQUIRED_TABLES:
        if t not in tables:
            problems.append(f"table {t} is not in the manifest")
    for t, entry in tables.items():
        f = path / str(entry.get("file", ""))
        if f.parent != path or not f.is_file():
            problems.append(f"table {t}: file {entry.get('file')} is missing")
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
    return problems


def list_runs(cache_dir: str | Path, deep: bool = False) -> list[RunInfo]:
    """Every run folder in the cache (hidden staging folders excluded), each with its problems."""
    cache = Path(cache_dir)
    if not cache.is_dir():
        return []
    runs = []
    for path in sorted(cache.iterdir()):
        if not path.is_dir() or path.name.startswith("."):
            continue
        problems = verify_run(path, deep=deep)
        runs.append(RunInfo(path.name, path, read_json_file(path / MANIFEST), problems))
    return runs


def read_manifest(cache_dir: str | Path, name: str) -> dict:
    path = resolve_run(cache_dir, name)
    manifest = read_json_file(path / MANIFEST)
    if manifest is None:
        raise CoreError(f"run {name} has no readable manifest: run `python -m core verify {name}`")
    return manifest


def read_table(cache_dir: str | Path, name: str, table: str, columns: list[str] | None = None) -> pd.DataFrame:
    """One table of a run, as listed in its manifest."""
    path = resolve_run(cache_dir, name)
    manifest = read_manifest(cache_dir, name)
    entry = (manifest.get("tables") or {}).get(table)
    if entry is None:
        raise CoreError(f"run {name} has no table {table!r}")
    f = (path / entry["file"]).resolve()
    if f.parent != path:
        raise CoreError(f"table {table} of run {name} points outside its folder")
    return pd.read_parquet(f, columns=columns)
