"""A 30-layer stand-in for the default run, which any clone can make without training.

The default run's model (SmolLM2-135M fine-tuned with number tokens) is rebuilt from its shipped delta
(`python -m core rebuild smollm2-addition-cpu`); the speed figures of docs/speed.md were measured on this
untrained stand-in of the same size, made before that delta shipped. `make_standin` builds what its
recipe starts from: the imported SmolLM2-135M with one token per number 0..p-1 added (" 108"), each
new row set as the recipe sets it before training (`core.training.finetune.initial_number_rows`: the
base model's own representation of n after the recipe's block, centred if the recipe says so, scaled to
the mean norm of its other rows), tied to the unembedding, and nothing trained. Its answers are mostly
wrong; its shapes, tokens and costs are the default run's.

    python -m core standin [--recipe smollm2-addition-cpu] [--base models/smollm2-135m] [--out models/smollm2-standin]
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from core.errors import CoreError
from core.models.loading import load_model
from core.models.packages import import_hint
from core.models.source import read_provenance
from core.tasks import number_space
from core.training.delta import merged_model, write_model_folder
from core.training.finetune import initial_number_rows
from core.training.recipe import Recipe

DEFAULT_RECIPE = "smollm2-addition-cpu"
DEFAULT_OUT = "models/smollm2-standin"


def make_standin(recipe: str | Recipe = DEFAULT_RECIPE, base: str | None = None, out: str | Path = DEFAULT_OUT,
                 force: bool = False, log=print) -> Path:
    """Write the untrained stand-in of `recipe` (a number-token recipe, or its name) into `out`; returns the
    folder. An existing stand-in is kept unless `force`."""
    recipe = recipe if isinstance(recipe, Recipe) else Recipe.load(recipe)
    spec = recipe.number_token_config()
    if spec is None or not recipe.init_from:
        raise CoreError(f"recipe {recipe.name} adds no number tokens to a base model: it has no stand-in")
    base = base or recipe.init_from
    if not Path(base).is_dir():
        raise CoreError(f"the base model {base} is not here; {import_hint(base)}")
    out = Path(out)
    if any(out.glob("model*.safetensors")) and not force:
        log(f"{out} already holds a stand-in: nothing to do (--force makes it again)")
        return out
    t0 = time.time()
    p = number_space(recipe.task, recipe.max_operand)
    loaded = load_model(base, device="cpu", dtype="float32")
    base_rows = loaded.model.get_input_embeddings().weight.detach().numpy()
    rows = initial_number_rows(loaded, p, spec.layer, spec.context, base_rows, centre=spec.centre, log=log)
    del loaded
    # no LoRA factors: the merge only adds the tokens and sets their rows
    model, tokenizer = merged_model(base, {"number_rows": torch.from_numpy(rows)}, {"p": p, "alpha": 1, "rank": 1})
    write_model_folder(out, model, tokenizer, {
        "kind": "stand-in",
        "label": f"{recipe.name} before training (stand-in for speed measurements)",
        "recipe": recipe.name,
        "base": str(base),
        "base_provenance": read_provenance(Path(base)) or {},
        "number_rows": f"block {spec.layer} representation of {spec.context!r}, scaled; nothing trained",
    })
    log(f"stand-in written to {out} in {time.time() - t0:.0f}s ({p} number tokens added, nothing trained)")
    return out
