"""The files a background job of the dashboard shares with its pages (the weights' rebuild, the live path's
warm-up): a private folder of the system's temporary directory, a status written whole as JSON, and a lock file
held with flock() for as long as the job runs. No torch and no Streamlit here."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from pathlib import Path


def job_root(kind: str, where: str, create: bool = False) -> Path:
    """The folder of the job `kind` for `where` (the models and cache folders it serves): one per user and place on
    this machine; made only when `create` (a page that only looks leaves nothing behind)."""
    key = hashlib.sha256(where.encode()).hexdigest()[:12]
    root = Path(tempfile.gettempdir()) / f"fourier-{kind}-{os.getuid()}-{key}"
    if create:
        root.mkdir(mode=0o700, exist_ok=True)
    return root


def write_json_status(root: Path, status) -> None:
    """status.json from a dataclass's fields, whole or not at all (a reader never sees half a file)."""
    path = root / "status.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(status.__dict__))
    os.replace(tmp, path)


def read_json_status(root: Path, kind: type):
    """status.json as a `kind` (a dataclass), its unknown keys dropped; `kind()` when there is none or it is not
    a JSON object."""
    try:
        data = json.loads((root / "status.json").read_text())
    except (OSError, ValueError):
        return kind()
    if not isinstance(data, dict):
        return kind()
    return kind(**{k: v for k, v in data.items() if k in kind.__dataclass_fields__})


def lock_held(path: Path) -> bool:
    """Whether a job holds the lock file `path` now (tried for a moment with a shared lock, then let go)."""
    if not path.exists():
        return False
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False
