"""A run's progress on disk, so that an interrupted run resumes where it stopped.

A checkpoint is a folder: the weights being trained (`model.safetensors` for a model trained here,
`trainable.safetensors` for a fine-tuning's new rows and factors), the optimiser's tensors
(`optimizer.safetensors`) and, in `progress.json`, the optimiser's scalars, the scheduler and what
the caller keeps (epoch, step, log, time). Nothing is pickled. It is written into FOLDER.tmp and
then renamed, so a run killed while saving leaves the previous checkpoint whole.

`unique_tensors` is the one place that decides which tensors of a state dict are the same tensor
(tied weights, written once) and which are different tensors that happen to share a storage.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

CHECKPOINT = "checkpoint"  # the checkpoint's folder inside a run's output folder
OPTIMIZER_FILE = "optimizer.safetensors"
PROGRESS_FILE = "progress.json"


def _view_key(t: torch.Tensor) -> tuple:
    """What makes two tensors the same tensor: the same storage, read from the same offset with the
    same shape and strides. The storage alone is not enough: a fused weight split into parts gives
    views of one storage that hold different numbers."""
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def unique_tensors(state: dict) -> dict:
    """`state` (name -> tensor) with each tensor once, under its first name: tied weights (one tensor
    under two names) are kept once, distinct views of one storage are all kept. Empty tensors are
    always kept (they may share a null pointer without being the same)."""
    seen, out = set(), {}
    for name, t in state.items():
        key = _view_key(t) if t.numel() else ("empty", name)
        if key in seen:
            continue
        seen.add(key)
        out[name] = t
    return out


def save_checkpoint(folder: Path, weights_file: str, tensors: dict, opt, sched, progress: dict) -> None:
    """Write `tensors` (each tied tensor once, every one copied to the CPU), the optimiser and the
    scheduler, and `progress` (JSON) into `folder`, replacing what was there."""
    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    weights = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in unique_tensors(tensors).items()}
    save_file(weights, str(tmp / weights_file))
    opt_tensors, opt_scalars = {}, {}
    for i, st in opt.state_dict()["state"].items():
        for name, val in st.items():
            if hasattr(val, "shape") and val.ndim > 0:
                opt_tensors[f"{i}.{name}"] = val.cpu().contiguous()
            else:
                opt_scalars[f"{i}.{name}"] = float(val)
    save_file(opt_tensors, str(tmp / OPTIMIZER_FILE))
    meta = {**progress, "scheduler": sched.state_dict(), "optimizer_scalars": opt_scalars}
    (tmp / PROGRESS_FILE).write_text(json.dumps(meta, default=float))
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)


def load_checkpoint(folder: Path, weights_file: str) -> tuple[dict, dict]:
    """(the saved tensors, the saved progress) of the checkpoint in `folder`."""
    return load_file(str(folder / weights_file)), json.loads((folder / PROGRESS_FILE).read_text())


def restore_optimizer(folder: Path, progress: dict, opt, sched) -> None:
    """Optimiser state from `folder/optimizer.safetensors` and the scalars in `progress`, the scheduler
    from `progress`, and each group's learning rate set to the scheduled one (a fresh optimiser holds
    the first warm-up step's)."""
    sd = opt.state_dict()
    state: dict = {}
    for key, val in load_file(str(folder / OPTIMIZER_FILE)).items():
        i, name = key.split(".", 1)
        state.setdefault(int(i), {})[name] = val
    for key, val in progress["optimizer_scalars"].items():
        i, name = key.split(".", 1)
        state.setdefault(int(i), {})[name] = torch.tensor(val) if name == "step" else val
    sd["state"] = state
    opt.load_state_dict(sd)
    sched.load_state_dict(progress["scheduler"])
    for group, lr in zip(opt.param_groups, sched.get_last_lr()):
        group["lr"] = lr
