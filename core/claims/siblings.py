"""One pre-trained model fine-tuned two ways, read side by side on one step.

The default run trains the top 12 of SmolLM2's 30 blocks and its number rows; the paper trained the whole
model. Where both runs are here (the same base model, task and split: `core.runs.origin.fine_tuning_siblings`),
steps 3, 4 and 6 put each run's verdict beside the other's. Every row is that run's own claim, computed from its
own tables by the step's one rule (`core.claims.registry.run_claims`): nothing here judges, it only lines up.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from core.claims.base import VERDICT_LABELS, Claim
from core.claims.periods import claim_periods
from core.runs.origin import fine_tuning_siblings, trained_short

#: A run without the narrow test's table (cached without its weights, or a task the paper's Table 1 is not about).
NO_NARROW_TEST = Claim("periods", "", "No narrow test on this run.", "not tested",
                       headline="No narrow test on this run.")


def training_siblings(run, runs: list) -> list:
    """The runs of `runs` whose model is `run`'s pre-trained model fine-tuned another way (same task and split),
    in `runs`' order; [] for a run that is not such a fine-tuning."""
    others = [r for r in runs if r.name != run.name]
    return [others[i] for i in fine_tuning_siblings(run.manifest, [r.manifest for r in others])]


def sibling_table(step: str, run, siblings: list, claims_of: Callable) -> pd.DataFrame:
    """One row per run (`run` first, then `siblings`): what its fine-tuning trained (short: "top 12 of 30 blocks +
    rows", "whole model"), `step`'s verdict, its accuracy on its split, and the step's headline as that run's own
    claim states them."""
    rows = []
    for r in [run, *siblings]:
        claims = claims_of(r)
        claim, accuracy = claims[step], claims["accuracy"].numbers.get("accuracy")
        rows.append({
            "trained": trained_short(r.manifest),
            "verdict": VERDICT_LABELS[claim.verdict],
            f"accuracy % ({r.split})": None if accuracy is None else round(100 * float(accuracy), 2),
            "what it shows": claim.short,
        })
    return pd.DataFrame(rows)


def sibling_caption(run, siblings: list) -> str:
    """The table's one-line caption: which model, trained which ways."""
    count = {2: "two", 3: "three", 4: "four"}.get(1 + len(siblings), str(1 + len(siblings)))
    return f"One pre-trained model fine-tuned {count} ways: each row is that run's own verdict, by this step's rule."



def sibling_rows(run, siblings: list, claims_of: Callable) -> list[tuple[str, list]]:
    """Steps 3, 4 and 6 and step 6's narrow test, each with its claim on `run` and on each of `siblings` (that
    run's own, `claims_of` or `claim_periods`): the document's table of one model fine-tuned two ways."""
    steps = [("3. which module", lambda r: claims_of(r)["module_waves"]),
             ("4. spectra", lambda r: claims_of(r)["spectra"]),
             ("6. Table 1", lambda r: claims_of(r)["ablations"]),
             ("6. periods only", lambda r: claim_periods(r) or NO_NARROW_TEST)]
    return [(label, [get(r) for r in [run, *siblings]]) for label, get in steps]
