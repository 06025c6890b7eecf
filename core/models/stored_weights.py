"""The number rows of W_U (and the final norm's gain) as the model's files store them: what every filter is built from.

Every Fourier filter, keep-one, random and energy-matched control and period filter is a projection built from W_U's
number rows, with a rank that counts singular values above a tolerance (`core.analysis.filters.rank_tolerance`). A
model loaded in bfloat16 or float16 holds W_U rounded to that dtype, and that rounding alone changes the filters
(built from bfloat16-rounded rows, the low band of the Fourier-frozen demo has rank 98 instead of 5; with bfloat16's
own tolerance every filter has rank 0). So the rows are read from the model's safetensors files, at the precision
they are stored in, before the cast (`load_model` with any `dtype`), and held in float32 (every stored float16,
bfloat16 or float32 value is exact in float32): the filters of a run in bfloat16 are the filters of the same model in
float32, with float32's tolerance (`FILTER_DTYPE`).

Rule: a file tensor is used only when it is the model's own parameter: cast to the dtype the model runs in, the rows
read must equal the model's rows (a checkpoint whose names differ, or a conversion on load, is never mistaken for
it). Only the rows of the number tokens of every convention are kept, never the whole vocabulary. When no file holds
them (a model built in memory, `wrap_model`), the model's own rows are used, in the dtype it holds them in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch
from huggingface_hub import snapshot_download
from safetensors import safe_open

#: The dtype the filters' W_U is held in when read from the files (and whose eps sets the rank tolerance).
FILTER_DTYPE = torch.float32
#: File rows checked against the model's own rows before they are trusted.
CHECKED_ROWS = 16


@dataclass(eq=False)
class StoredRows:
    """Rows of the output embedding as stored in the model's files, float32 on the CPU, by token id, and the final
    norm's gain as stored (None when the files hold none or the model has none)."""

    index: dict  # token id -> row of `matrix`
    matrix: torch.Tensor  # (n, D) float32
    stored_dtype: str  # the dtype of the file tensor ("float32", "float16", "bfloat16")
    key: str  # the file tensor's name
    gain: torch.Tensor | None = None  # (D,) float32

    def rows(self, ids) -> torch.Tensor | None:
        """The rows of the token ids `ids` (p, D) float32, or None when one of them was not read."""
        ids = [int(i) for i in torch.as_tensor(ids).reshape(-1).tolist()]
        if any(i not in self.index for i in ids):
            return None
        return self.matrix[torch.as_tensor([self.index[i] for i in ids], dtype=torch.long)]

    def describe(self) -> str:
        """What the manifest says about where the filters' W_U comes from."""
        return f"{self.key} as stored in the model's files ({self.stored_dtype}), held in float32"


def weight_files(source: str, folder: Path | None, local: bool, revision: str | None) -> list[Path]:
    """The safetensors files of a model: a local folder's, or the hub snapshot transformers just read (empty when
    they cannot be found: the filters then use the model's own rows)."""
    if local and folder is not None:
        return sorted(Path(folder).glob("*.safetensors"))
    try:
        snapshot = snapshot_download(source, revision=revision, local_files_only=True,
                                     allow_patterns=["*.safetensors"])
    except Exception:  # not in the local cache under that name: nothing to read
        return []
    return sorted(Path(snapshot).glob("*.safetensors"))


def parameter_names(model, tensor) -> list[str]:
    """Every name the parameter `tensor` has in `model` (a tied output embedding has two), and each without the
    base model's prefix (checkpoints of the base model store it so)."""
    names = [name for name, w in model.named_parameters(remove_duplicate=False) if w is tensor]
    prefix = str(getattr(model, "base_model_prefix", "") or "")
    stripped = [n[len(prefix) + 1:] for n in names if prefix and n.startswith(prefix + ".")]
    return names + [n for n in stripped if n not in names]


def read_stored_rows(model, files: Iterable[Path], ids: Iterable[int], final_norm=None) -> StoredRows | None:
    """The rows `ids` of the model's output embedding as its files store them (module docstring), with the final
    norm's gain; None when no file holds a tensor that matches the model's own."""
    head = model.get_output_embeddings().weight
    wanted = sorted({int(i) for i in ids})
    found = _find_tensor(files, parameter_names(model, head))
    if found is None or not wanted:
        return None
    path, key = found
    with safe_open(str(path), framework="pt") as f:
        part = f.get_slice(key)
        shape = part.get_shape()
        if len(shape) != 2 or tuple(shape) != tuple(head.shape) or max(wanted) >= shape[0]:
            return None
        stored = torch.cat([part[i:i + 1] for i in wanted])
    if not _matches(stored, head, wanted):
        return None
    rows = StoredRows({i: r for r, i in enumerate(wanted)}, stored.to(FILTER_DTYPE), str(stored.dtype).removeprefix(
        "torch."), key)
    gain = getattr(final_norm, "weight", None) if final_norm is not None else None
    if isinstance(gain, torch.Tensor):
        rows.gain = _stored_parameter(files, model, gain)
    return rows


def _find_tensor(files: Iterable[Path], names: list[str]) -> tuple[Path, str] | None:
    """(file, key) of the first of `names` some file holds."""
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as f:
                keys = set(f.keys())
        except Exception:  # an unreadable file: transformers has loaded the model, so it is not one of its weights
            continue
        for name in names:
            if name in keys:
                return path, name
    return None


def _matches(stored: torch.Tensor, weight, wanted: list[int]) -> bool:
    """Whether the file rows, cast to the model's dtype, are the model's own rows (checked on a few of them)."""
    if weight.is_meta:  # offloaded: trusted by its name alone
        return True
    step = max(1, len(wanted) // CHECKED_ROWS)
    picks = list(range(0, len(wanted), step))
    mine = weight.detach()[torch.as_tensor([wanted[i] for i in picks], device=weight.device)].cpu()
    return bool(torch.equal(stored[picks].to(weight.dtype), mine))


def _stored_parameter(files: Iterable[Path], model, tensor) -> torch.Tensor | None:
    """A whole (small) parameter as its file stores it, float32, if it matches the model's own."""
    found = _find_tensor(files, parameter_names(model, tensor))
    if found is None:
        return None
    path, key = found
    with safe_open(str(path), framework="pt") as f:
        value = f.get_tensor(key)
    if value.shape != tensor.shape:
        return None
    if not tensor.is_meta and not torch.equal(value.to(tensor.dtype), tensor.detach().cpu()):
        return None
    return value.to(FILTER_DTYPE)
