"""Where a number-token fine-tuning's rows started, rebuilt from the base model, and how far training moved them.

A number-token recipe (`core.training.finetune`) starts each new row as the base model's own representation of the
number (the hidden state at the last digit of `number_tokens.context` after block `number_tokens.layer`, centred over
the numbers where `centre`, scaled to the mean norm of the base model's rows). The start is a function of the base
model and the recipe alone, so it is rebuilt here exactly as training built it (`start_rows`), and the trained rows
are compared with it row by row (`rows_moved`): what a features step says of whose features they are.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.errors import CoreError
from core.models.loading import load_model
from core.models.source import project_path
from core.tasks import number_space
from core.training.delta import load_base
from core.training.finetune import initial_number_rows
from core.training.recipe import NumberTokens


def start_rows(first_stage: dict, log=print) -> np.ndarray:
    """The rows a number-token recipe's first stage (`first_stage`, its recipe dict) started from, (p, D) float32,
    computed from its base model (`init_from`) as `core.training.finetune.finetune` computes them."""
    name, base_folder = first_stage.get("name", "?"), first_stage.get("init_from")
    if not first_stage.get("number_tokens") or not base_folder:
        raise CoreError(f"recipe {name} does not start number rows from a base model")
    # the typed config: a key the recipe leaves out takes training's default
    spec = NumberTokens.parse(first_stage["number_tokens"], name, int(first_stage.get("n_layers") or 0))
    base = project_path(base_folder)
    if not base.is_dir():
        raise CoreError(f"the base model {base_folder} is not here: import it (python -m core import-model "
                        "smollm2-135m) to compare the trained rows with their start")
    p = number_space(first_stage.get("task", "addition"), int(first_stage.get("max_operand", 260)))
    base_rows = load_base(str(base)).get_input_embeddings().weight.detach().numpy()
    return initial_number_rows(load_model(str(base)), p, spec.layer, spec.context, base_rows, centre=spec.centre,
                               log=log)


def rows_moved(trained: np.ndarray, start: np.ndarray) -> pd.DataFrame:
    """One row per number n: the start's norm, how far training moved the row relative to it
    (||trained_n - start_n|| / ||start_n||) and the cosine between the two."""
    trained, start = np.asarray(trained, dtype=np.float64), np.asarray(start, dtype=np.float64)
    if trained.shape != start.shape:
        raise CoreError(f"the trained rows are {trained.shape}, their start {start.shape}: not the same numbers")
    start_norm = np.linalg.norm(start, axis=1)
    trained_norm = np.linalg.norm(trained, axis=1)
    safe = np.where(start_norm > 0, start_norm, np.nan)
    cosine = (trained * start).sum(1) / (safe * np.where(trained_norm > 0, trained_norm, np.nan))
    return pd.DataFrame({
        "number": np.arange(len(start)),
        "start_norm": start_norm,
        "moved": np.linalg.norm(trained - start, axis=1) / safe,
        "cosine": cosine,
    })
