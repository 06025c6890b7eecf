"""The prompts' prefix key/value caches on disk, so a live filter after a restart skips the prefix.

Every filter at the answer position starts from the same prefix (every token but the last), which
is most of a live computation's cost on a deep model. `PrefixStore` keeps one batch's keys and
values per safetensors file (never a pickle) in a folder named by what determines them: the model's
weights fingerprint, the prompts, their batching, the dtype and the torch version. A file is written
to a temporary name and renamed, so a reader never sees half of one; a file that does not read back
with the expected key and shapes is ignored (and recomputed). The folders together stay under a disk
budget (`PREFIX_DISK_BYTES`, or FOURIER_PREFIX_DISK_MB): before a write, the least recently used other
folders are removed; a batch that still does not fit is not written.

    <cache dir>/.prefix/<key>/batch-0000.safetensors    keys and values of every layer, one batch
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

#: Disk kept for prefix caches under one cache folder (all keys together).
PREFIX_DISK_BYTES = int(os.environ.get("FOURIER_PREFIX_DISK_MB", "2048")) * 2**20
PREFIX_FOLDER = ".prefix"


def prefix_key(fingerprint: str, texts, batch_size: int, by_length: bool, dtype: str) -> str:
    """A name for the prefixes of these prompts on this model (what changes them changes the name)."""
    h = hashlib.sha256()
    for part in (fingerprint, str(batch_size), str(by_length), dtype, torch.__version__):
        h.update(part.encode())
        h.update(b"\0")
    for t in texts:
        h.update(t.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


class PrefixStore:
    """One key's batches on disk (see the module doc); `load`/`save` are what `PrefixCache` calls."""

    def __init__(self, cache_dir: str | Path, key: str, max_bytes: int = PREFIX_DISK_BYTES):
        self.root = Path(cache_dir) / PREFIX_FOLDER
        self.key = key
        self.folder = self.root / key
        self.max_bytes = max_bytes

    def _file(self, batch_no: int) -> Path:
        return self.folder / f"batch-{batch_no:04d}.safetensors"

    def batches_on_disk(self) -> int:
        return len(list(self.folder.glob("batch-*.safetensors"))) if self.folder.is_dir() else 0

    def load(self, batch_no: int) -> list[tuple] | None:
        path = self._file(batch_no)
        if not path.is_file():
            return None
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                if meta.get("key") != self.key or meta.get("batch") != str(batch_no):
                    return None
                n_layers = int(meta["layers"])
                prefix = [(f.get_tensor(f"k{i}"), f.get_tensor(f"v{i}")) for i in range(n_layers)]
        except Exception:  # noqa: BLE001 - a damaged or foreign file is recomputed, never trusted
            return None
        os.utime(self.folder)  # recently used: the last to be evicted
        return prefix

    def save(self, batch_no: int, prefix: list[tuple]) -> bool:
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in prefix)
        if not self._make_room(size):
            return False
        self.folder.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for i, (k, v) in enumerate(prefix):
            tensors[f"k{i}"] = k.detach().contiguous()
            tensors[f"v{i}"] = v.detach().contiguous()
        meta = {"key": self.key, "batch": str(batch_no), "layers": str(len(prefix))}
        tmp = self.folder / f".tmp-{os.getpid()}-{batch_no:04d}.safetensors"
        try:
            save_file(tensors, str(tmp), metadata=meta)
            tmp.replace(self._file(batch_no))
        except OSError:
            tmp.unlink(missing_ok=True)
            return False
        return True

    def _make_room(self, size: int) -> bool:
        """Remove the least recently used other keys until `size` more bytes fit the budget."""
        if size > self.max_bytes:
            return False
        if not self.root.is_dir():
            return True
        folders = [f for f in self.root.iterdir() if f.is_dir()]
        used = sum(folder_bytes(f) for f in folders)
        others = sorted((f for f in folders if f.name != self.key), key=lambda f: f.stat().st_mtime)
        while used + size > self.max_bytes and others:
            old = others.pop(0)
            used -= folder_bytes(old)
            shutil.rmtree(old, ignore_errors=True)
        return used + size <= self.max_bytes

