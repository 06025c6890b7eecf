"""The chain of fine-tuning stages, read from recipes alone (JSON, no torch: the dashboard uses it).

A number-token recipe may start from an earlier stage's delta (`lora.init_delta`); that stage's
folder holds its own recipe.json, and so on down to a first stage. `earlier_stage` names the stage
a recipe continues; `retrain_commands` lists what has to be trained, earliest first, to give back a
model whose delta is missing.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.models.source import project_path

DELTA_FILE = "delta.safetensors"  # a fine-tuned model's delta in its folder (core.training.delta)


def earlier_stage(recipe: dict) -> Path | None:
    """The model folder of the stage a fine-tuning recipe starts from (the folder of its
    `lora.init_delta`), absolute; None for a first stage."""
    start = (recipe.get("lora") or {}).get("init_delta")
    return project_path(start).parent if start else None


def retrain_commands(folder: Path) -> list[tuple[str, bool]]:
    """(the `python -m core train` command, whether it needs a GPU) for each stage that has to be
    trained to give back the model of `folder` (whose recipe.json names it), earliest first: a recipe
    that starts from an earlier stage's delta needs that stage retrained first when its delta is not
    here, and so on down the chain. A recipe trained on a GPU gets `--device cuda`."""
    commands, seen, folder = [], set(), Path(folder)
    while folder not in seen and (folder / "recipe.json").is_file():
        seen.add(folder)
        spec = json.loads((folder / "recipe.json").read_text())
        gpu = spec.get("device") == "cuda"
        command = f"python -m core train --recipe {spec.get('name')}" + (" --device cuda" if gpu else "")
        commands.insert(0, (command, gpu))
        earlier = earlier_stage(spec)
        if earlier is None or (earlier / DELTA_FILE).exists():  # a first stage, or the earlier stage's delta is here
            break
        folder = earlier
    return commands
