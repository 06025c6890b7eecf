"""Whether a run's model can be computed live here, and if not, why and what to run (`live_model_folder`).

No torch: the Ablations page asks this on every render; the live engine (`core.runs.live_ablation`, torch)
loads only when a user asks for a live computation.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.files import PROJECT_ROOT, models_root
from core.models.source import fingerprint_folder
from core.training.stages import DELTA_FILE, rebuild_hint, retrain_commands

#: The largest model (about 12 L D^2 parameters) a live computation runs on a CPU.
MAX_LIVE_PARAMS = 150_000_000


def live_model_folder(manifest: dict, command_line: bool = False, moved_to: str | Path | None = None
                      ) -> tuple[Path | None, str]:
    """(folder, "") when the run's model can be run here, else (None, the reason). The dashboard loads models from
    the project's models/ only, up to MAX_LIVE_PARAMS; the command line (`command_line`) loads the model wherever
    the run recorded it, or from `moved_to` (`--model FOLDER`), of any size. Either way the weights must have the
    fingerprint the run was computed with."""
    model = manifest.get("model") or {}
    given = model.get("source_as_given") or ""
    root = models_root()
    folder = run_model_folder(manifest, moved_to)
    if folder is None:
        where = moved_to or given or model.get("source")
        return None, (f"the model ({where}) is not on this machine"
                      + ("" if moved_to or not command_line else "; if it moved, say where with --model FOLDER"))
    if not command_line and root not in folder.parents:
        return None, (f"the model folder is outside {root}, the only place the dashboard loads models from "
                      "(`python -m core ablate|shift` load it where it is)")
    if not any(f.name != DELTA_FILE for f in folder.glob("*.safetensors")):
        recipe = folder / "recipe.json"
        if (folder / DELTA_FILE).exists():  # `rebuildable_folder` for the dashboard
            return (
                None,
                "the fine-tuned weights are not on this machine (this run ships only the fine-tuning delta): "
                + rebuild_hint(folder),
            )
        how = ""
        if recipe.exists():  # its recipe, after the earlier stages it starts from if their deltas are not here either
            steps = retrain_commands(folder)
            shown = folder.relative_to(PROJECT_ROOT) if PROJECT_ROOT in folder.parents else folder
            again = ("; training does not give the same weights bit for bit, so compute the run again from the new "
                     f"ones: `python -m core precompute --model {shown}`")
            if len(steps) == 1:
                command, gpu = steps[0]
                how = f"; `{command}` trains them again " + ("on a GPU" if gpu else "on this CPU") + again
            else:
                how = (
                    "; "
                    + ", then ".join(f"`{c}`" + (" on a GPU" if gpu else "") for c, gpu in steps)
                    + " train them again (each stage starts from the one before)" + again
                )
        return None, f"the model's weights are not on this machine (this run ships without them{how})"

    try:
        fp = fingerprint_folder(folder)
    except OSError:
        return None, "the model folder cannot be read"
    if fp != model.get("fingerprint"):
        return None, f"the model's weights in {folder} differ from the ones this run was computed with"
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None, "the model folder has no readable config.json"
    width = config.get("n_embd") or config.get("hidden_size") or 0
    layers = config.get("n_layer") or config.get("num_hidden_layers") or 0
    if not command_line and 12 * layers * width * width > MAX_LIVE_PARAMS:
        return (
            None,
            f"the model is too large to run live on a CPU (about {12 * layers * width * width / 1e6:.0f}M parameters)",
        )
    return folder, ""


def run_model_folder(manifest: dict, moved_to: str | Path | None = None) -> Path | None:
    """The folder of the run's model on this machine (`moved_to`, else where the run recorded it), resolved; None
    when it is not here."""
    model = manifest.get("model") or {}
    candidates = [Path(moved_to).expanduser()] if moved_to else []
    for c in ([] if moved_to else (model.get("source_as_given") or "", model.get("source") or "")):
        if not c:
            continue
        path = Path(c)
        candidates.append(path if path.is_absolute() else PROJECT_ROOT / path)
    return next((c.resolve() for c in candidates if c.exists()), None)


def rebuildable_folder(manifest: dict) -> Path | None:
    """The run's model folder when the dashboard loads models from it and it holds a fine-tuning delta without the
    weights (`live_model_folder`'s reason is then `rebuild_hint`'s: `python -m core rebuild FOLDER` makes them); None
    otherwise, for a model that has its weights, that is elsewhere, or that has to be trained again."""
    folder = run_model_folder(manifest)
    if folder is None or models_root() not in folder.parents or not (folder / DELTA_FILE).is_file():
        return None
    return None if any(f.name != DELTA_FILE for f in folder.glob("*.safetensors")) else folder
