"""Which layers a run's model was trained in, read from its recipe (torch-free, for the patching stage and the
Patching page): the groups of sites patched together (core.analysis.patching.group_site) and the layers the page
marks as frozen.

Rule (`trained_layers`): a number-token fine-tuning of a pre-trained model (core.training.finetune) trained the
1-based layers above the blocks no stage of its chain trained (core.runs.origin.never_trained_blocks: 18 frozen of
30 on the default run, so layers 19 to 30, blocks.18..blocks.29); every other model trained here, and a model with no
recipe, counts every layer 1..L (a 2-layer demo: "every layer").
"""

from __future__ import annotations

from core.runs.origin import never_trained_blocks, recipe_of


def trained_layers(source: str | None, n_layers: int) -> tuple[int, int, bool]:
    """(first, last, from_recipe): the 1-based layers the model in folder `source` was trained in, and whether its
    recipe says that some lower blocks were never trained (module docstring)."""
    recipe = recipe_of({"source": source}) if source else None
    if not recipe or recipe.get("number_tokens") is None:
        return 1, int(n_layers), False
    frozen = never_trained_blocks(recipe)
    if not 0 < frozen < n_layers:
        return 1, int(n_layers), False
    return frozen + 1, int(n_layers), True


def trained_layers_of(manifest: dict) -> tuple[int, int, bool]:
    """`trained_layers` of a cached run, read from its manifest (the model's folder and its layers)."""
    model = (manifest or {}).get("model") or {}
    return trained_layers(model.get("source"), int((manifest or {}).get("n_layers") or model.get("n_layers") or 0))
