"""One pre-trained model fine-tuned two ways, read side by side on one step.

The default run trains the top 12 of SmolLM2's 30 blocks and its number rows; the paper trained the whole
model. Where both runs are here (the same base model, task and split: `core.runs.origin.fine_tuning_siblings`),
steps 3, 4 and 6 put each run's verdict beside the other's. Every row is that run's own claim, computed from its
own tables by the step's one rule (`core.claims.registry.run_claims`): nothing here judges, it only lines up.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from core.claims.base import VERDICT_LABELS
from core.runs.origin import fine_tuning_siblings, trained_part

def training_siblings(run, runs: list) -> list:
    """The runs of `runs` whose model is `run`'s pre-trained model fine-tuned another way (same task and split),
    in `runs`' order; [] for a run that is not such a fine-tuning."""
    others = [r for r in runs if r.name != run.name]
    return [others[i] for i in fine_tuning_siblings(run.manifest, [r.manifest for r in others])]


def sibling_table(step: str, run, siblings: list, claims_of: Callable) -> pd.DataFrame:
    """One row per run (`run` first, then `siblings`): what its fine-tuning trained, its accuracy on its split,
    and `step`'s verdict and headline as that run's own claim states them."""
    rows = []
    for r in [run, *siblings]:
        claims = claims_of(r)
        claim, accuracy = claims[step], claims["accuracy"].numbers.get("accuracy")
        rows.append({
            "trained": trained_part(r.manifest),
            f"accuracy % ({r.split})": None if accuracy is None else round(100 * float(accuracy), 2),
            "verdict": VERDICT_LABELS[claim.verdict],
            "what it shows": claim.short,
        })
    return pd.DataFrame(rows)


def sibling_caption(run, siblings: list) -> str:
    """The table's one-line caption: which model, trained which ways."""
    shown = [run, *siblings]
    ways = " and ".join(f"“{trained_part(r.manifest)}”" for r in shown)
    count = {2: "two", 3: "three", 4: "four"}.get(len(shown), str(len(shown)))
    return (f"The same pre-trained model fine-tuned {count} ways ({ways} trained): each row is that run's own verdict, "
            "from its own tables, by this step's rule.")
