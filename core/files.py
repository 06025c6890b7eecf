"""Small file helpers every layer shares: the project's folders, the sha256 of a file, and a JSON file read without
raising."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

#: The project folder (the one holding core/, models/, recipes/ and cache/).
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def models_root() -> Path:
    """The folder models are loaded from: `models/`, or the folder FOURIER_MODELS_DIR names (tests, servers)."""
    return Path(os.environ.get("FOURIER_MODELS_DIR", PROJECT_ROOT / "models")).resolve()


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(2**20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_json_file(path: Path):
    """The file's JSON, or None when it is missing, unreadable or not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None
