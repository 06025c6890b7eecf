"""The prompts' prefix key/value caches on disk, so a live filter after a restart skips the prefix.

Every filter at the answer position starts from the same prefix (every token but the last), which
is most of a live computation's cost on a deep model. `PrefixStore` keeps one batch's keys and
values per safetensors file (never a pickle) in a folder named by what determines them
(`prefix_key`): the model (its fingerprint, and the size and modification time of each weights file,
since a large file's fingerprint reads only its header), the prompts' token ids, their batching, the
dtype and the torch and transformers versions. A file is written to a temporary name and renamed, so a
reader never sees half of one; a file whose embedded key, batch number or layer count differs, or that
does not read back, is ignored (and recomputed). The store only saves time: any failure to read,
write or evict (a full or read-only disk, another process removing a folder) is treated as a miss.
The folders under one cache folder stay under a disk budget (`PREFIX_DISK_BYTES`, or
FOURIER_PREFIX_DISK_MB) as each process sees them: before a write, the least recently used other
folders are removed; a batch that still does not fit is not written.

    <cache dir>/.prefix/<key>/batch-0000.safetensors    keys and values of every layer, one batch
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

#: Disk kept for prefix caches under one cache folder (all keys together).
PREFIX_DISK_BYTES = int(os.environ.get("FOURIER_PREFIX_DISK_MB", "2048")) * 2**20
PREFIX_FOLDER = ".prefix"
#: A temporary file older than this is a crashed write's leftover, removed when room is made.
STALE_TMP_S = 3600


def model_stamp(fingerprint: str, source: str | Path) -> str:
    """The model as far as its prefixes go: the fingerprint, and for a local folder each weights file's name,
    size and modification time (a retrained model of the same shapes changes them)."""
    parts = [fingerprint]
    folder = Path(source)
    if folder.is_dir():
        for f in sorted(folder.glob("*.safetensors")):
            st = f.stat()
            parts.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)


def prefix_key(stamp: str, token_ids, batch_size: int, by_length: bool, dtype: str) -> str:
    """A name for the prefixes of these prompts (their token ids) on this model: what changes them changes it."""
    h = hashlib.sha256()
    for part in (stamp, str(batch_size), str(by_length), dtype, torch.__version__, transformers.__version__):
        h.update(part.encode())
        h.update(b"\0")
    for ids in token_ids:
        h.update(",".join(map(str, ids)).encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


class PrefixStore:
    """One key's batches on disk (see the module doc); `load`/`save` are what `PrefixCache` calls."""

    def __init__(self, cache_dir: str | Path, key: str, n_layers: int | None = None,
                 max_bytes: int | None = None):
        self.root = Path(cache_dir) / PREFIX_FOLDER
        self.key = key
        self.folder = self.root / key
        self.n_layers = n_layers
        # read at each store's making, not at import: a test or a server may lower it
        self.max_bytes = PREFIX_DISK_BYTES if max_bytes is None else max_bytes

    def _file(self, batch_no: int) -> Path:
        return self.folder / f"batch-{batch_no:04d}.safetensors"

    def batches_on_disk(self) -> int:
        return len(list(self.folder.glob("batch-*.safetensors"))) if self.folder.is_dir() else 0

    def load(self, batch_no: int) -> list[tuple] | None:
        path = self._file(batch_no)
        try:
            if not path.is_file():
                return None
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                if meta.get("key") != self.key or meta.get("batch") != str(batch_no):
                    return None
                layers = int(meta["layers"])
                if self.n_layers is not None and layers != self.n_layers:
                    return None
                prefix = [(f.get_tensor(f"k{i}"), f.get_tensor(f"v{i}")) for i in range(layers)]
        except Exception:  # noqa: BLE001 - a damaged, foreign or vanished file is a miss, never trusted
            return None
        if len({(k.shape, v.shape) for k, v in prefix}) != 1:
            return None  # every layer of one batch has the same shape
        return prefix

    def save(self, batch_no: int, prefix: list[tuple]) -> bool:
        """Write one batch; False (nothing written) when it does not fit or the disk refuses."""
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in prefix)
        tmp = self.folder / f".tmp-{os.getpid()}-{batch_no:04d}.safetensors"
        try:
            if not self._make_room(size):
                return False
            self.folder.mkdir(parents=True, exist_ok=True)
            tensors = {}
            for i, (k, v) in enumerate(prefix):
                tensors[f"k{i}"] = k.detach().contiguous()
                tensors[f"v{i}"] = v.detach().contiguous()
            save_file(tensors, str(tmp), metadata={"key": self.key, "batch": str(batch_no), "layers": str(len(prefix))})
            tmp.replace(self._file(batch_no))
        except Exception:  # noqa: BLE001 - the store only saves time: a failed write is a batch not kept
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            return False
        return True

    def touch(self) -> None:
        """Mark this key as just used (the last to be evicted)."""
        try:
            os.utime(self.folder)
        except OSError:
            pass

    def _make_room(self, size: int) -> bool:
        """Remove crashed writes' leftovers, then the least recently used other keys, until `size` more bytes
        fit the budget."""
        if size > self.max_bytes:
            return False
        if not self.root.is_dir():
            return True
        now = time.time()
        for tmp in self.root.glob("*/.tmp-*"):
            if now - tmp.stat().st_mtime > STALE_TMP_S:
                tmp.unlink(missing_ok=True)
        folders = [f for f in self.root.iterdir() if f.is_dir()]
        used = sum(folder_bytes(f) for f in folders)
        others = sorted((f for f in folders if f.name != self.key), key=lambda f: f.stat().st_mtime)
        while used + size > self.max_bytes and others:
            old = others.pop(0)
            used -= folder_bytes(old)
            shutil.rmtree(old, ignore_errors=True)
        return used + size <= self.max_bytes
