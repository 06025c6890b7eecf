"""One pre-trained model fine-tuned two ways, read side by side on one step.

The default run trains the top 12 of SmolLM2's 30 blocks and its number rows; the paper trained the whole
model. Where both runs are here (the same base model, task and split: `core.runs.origin.fine_tuning_siblings`),
steps 3, 4 and 6 draw the bars each run's verdict rests on beside the other's (`recipe_bars`, app.figures.recipes),
with one sentence on where they differ (`recipe_sentence`). Every row is that run's own claim, computed from its
own tables by the step's one rule (`core.claims.registry.run_claims`): nothing here judges, it only lines up.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from core.claims.base import VERDICT_LABELS, Claim
from core.claims.periods import claim_periods
from core.claims.spectra import ATTN_SHORT_LAYERS, MLP_LOW_LAYERS
from core.runs.origin import fine_tuning_siblings, trained_short

#: A run without the narrow test's table (cached without its weights, or a task the paper's Table 1 is not about).
NO_NARROW_TEST = Claim("periods", "", "No narrow test on this run.", "not tested",
                       headline="No narrow test on this run.")


def training_siblings(run, runs: list) -> list:
    """The runs of `runs` whose model is `run`'s pre-trained model fine-tuned another way (same task and split),
    in `runs`' order; [] for a run that is not such a fine-tuning."""
    others = [r for r in runs if r.name != run.name]
    return [others[i] for i in fine_tuning_siblings(run.manifest, [r.manifest for r in others])]


def sibling_rows(run, siblings: list, claims_of: Callable) -> list[tuple[str, list]]:
    """Steps 3, 4 and 6 and step 6's narrow test, each with its claim on `run` and on each of `siblings` (that
    run's own, `claims_of` or `claim_periods`): the document's table of one model fine-tuned two ways."""
    steps = [("3. which module", lambda r: claims_of(r)["module_waves"]),
             ("4. spectra", lambda r: claims_of(r)["spectra"]),
             ("6. Table 1", lambda r: claims_of(r)["ablations"]),
             ("6. periods only", lambda r: claim_periods(r) or NO_NARROW_TEST)]
    return [(label, [get(r) for r in [run, *siblings]]) for label, get in steps]


# ----------------------------------------------------------------------------- the two recipes as one figure

#: What each step's comparison draws (the quantity its verdict rests on): the bars' axis, and what the tick on each
#: bar is. Every value is read from the run's own claim (`numbers`), never measured again here.
RECIPE_AXES = {
    "module_waves": ("last digit moved, as % of the whole stream's shift", "random edits of the same size"),
    "spectra": ("layers (of the last 15 read)", "what the rule asks"),
    "ablations": ("accuracy % with it removed", "as many random directions removed"),
}
#: The bars each step compares, in order: the label on the chart and what it means in a sentence.
RECIPE_BARS = {
    "module_waves": {"attention": "shifting attention's short waves", "MLP": "shifting the MLPs' short waves"},
    "spectra": {"MLP low band": "layers whose MLP holds 10 points more of the low band than attention",
                "attention low band": "layers whose attention holds 10 points more of the low band than the MLP",
                "attention periods": "attention layers carrying a period 2 to 10 above the W_U bar"},
    "ablations": {"MLP low": "removing the MLPs' low band", "MLP high": "removing the MLPs' high band",
                  "attention low": "removing attention's low band", "attention high": "removing attention's high band",
                  "MLP periods": "removing only the MLPs' periods 2, 2.5, 5, 10",
                  "attention periods": "removing only attention's periods 2, 2.5, 5, 10"},
}


def _percent(x) -> float | None:
    try:
        return None if x is None else round(100 * float(x), 1)
    except (TypeError, ValueError):
        return None


def _wave_bars(claim: Claim) -> dict:
    """Step 3: the headline groups' (the layers the fine-tuning trained, else every layer) share of the stream's
    shift, with their random edits (`core.claims.last_digit.headline_groups`, read from the claim's `groups`)."""
    groups = [g for g in (claim.numbers.get("groups") or []) if g.get("kind") in ("attn", "mlp")
              and g.get("first_layer", 0) < g.get("layer", 0)]
    chosen = "trained" if any(g.get("group") == "trained" for g in groups) else "every layer"
    kinds = {"attn": "attention", "mlp": "MLP"}
    return {kinds[g["kind"]]: (_percent(g.get("read")), _percent(g.get("read_control")))
            for g in groups if g.get("group") == chosen}


def _spectra_bars(claim: Claim) -> dict:
    """Step 4, read layer by layer: how many layers pass each of the rule's counts, beside what the rule asks."""
    numbers = claim.numbers
    if "mlp_low_layers" not in numbers:
        return {}
    n = len(numbers.get("layers") or [])
    ask_mlp = float(np.ceil(MLP_LOW_LAYERS * n)) if n else None
    ask_attn = float(max(1, int(np.ceil(ATTN_SHORT_LAYERS * n)))) if n else None
    return {"MLP low band": (float(len(numbers["mlp_low_layers"])), ask_mlp),
            "attention low band": (float(len(numbers.get("attn_low_layers") or [])), None),
            "attention periods": (float(len(numbers.get("attn_short_layers") or [])), ask_attn)}


def _ablation_bars(claim: Claim, narrow: Claim | None) -> dict:
    """Step 6: accuracy with each band removed (Table 1) and with only the paper's periods removed (the narrow test,
    read through W_U), each beside its random control, from the claims' numbers."""
    accuracy, control = claim.numbers.get("accuracy") or {}, claim.numbers.get("control") or {}
    names = {"mlp-low": "MLP low", "mlp-high": "MLP high", "attn-low": "attention low", "attn-high": "attention high"}
    bars = {names[k]: (_percent(accuracy[k]), _percent(control.get(k))) for k in names if k in accuracy}
    for row in (narrow.numbers.get("summary") or []) if narrow is not None else []:
        if row.get("slice") == "periods" and row.get("reading") == "W_U" and row.get("modules") in ("attn", "mlp"):
            label = "MLP periods" if row["modules"] == "mlp" else "attention periods"
            bars[label] = (_percent(row.get("accuracy")), _percent(row.get("control_mean")))
    return bars


def recipe_bars(step: str, runs: list, claims_of: Callable, narrow_of: Callable = claim_periods) -> pd.DataFrame:
    """The bars `step`'s verdict rests on, for each of `runs` (the run shown first, then its siblings): one row a run
    and a bar, with `recipe` (what its fine-tuning trained, short), `verdict` (its own claim's label), `bar`, `value`
    and `reference` (the tick on the bar: `RECIPE_AXES`), both in the axis's unit; values a run's claim does not hold
    are left out. Every value is the run's own claim's number (`core.claims.registry.run_claims`; step 6's narrow
    test: `narrow_of`, `core.claims.periods.claim_periods`)."""
    rows = []
    for r in runs:
        claim = claims_of(r)[step]
        if step == "module_waves":
            bars = _wave_bars(claim)
        elif step == "spectra":
            bars = _spectra_bars(claim)
        else:
            bars = _ablation_bars(claim, narrow_of(r))
        for bar in RECIPE_BARS[step]:
            value, reference = bars.get(bar, (None, None))
            if value is not None:
                rows.append({"recipe": trained_short(r.manifest), "verdict": VERDICT_LABELS[claim.verdict],
                             "bar": bar, "value": value, "reference": reference, "split": r.split})
    return pd.DataFrame(rows, columns=["recipe", "verdict", "bar", "value", "reference", "split"])


def _said(value: float, step: str) -> str:
    if step == "spectra":
        return f"{value:.0f} layer{'' if value == 1 else 's'}"
    return f"{value:.1f}%"


def recipe_sentence(step: str, bars: pd.DataFrame) -> str:
    """The one sentence under the comparison, computed from `recipe_bars`: each recipe's verdict, then the bar on
    which the two runs differ most (the first two recipes), with both values; "" with fewer than two recipes."""
    recipes = list(dict.fromkeys(bars["recipe"]))
    if len(recipes) < 2:
        return ""
    verdicts = bars.drop_duplicates("recipe").set_index("recipe")["verdict"]
    a, b = recipes[:2]
    same = verdicts[a] == verdicts[b]
    said = (f"Both recipes: {verdicts[a]}" if same else f"{a.capitalize()}: {verdicts[a]}; {b}: {verdicts[b]}")
    wide = bars.pivot_table(index="bar", columns="recipe", values="value", aggfunc="first")[[a, b]].dropna()
    if wide.empty:
        return said + "."
    gap = (wide[a] - wide[b]).abs()
    top = gap.idxmax()
    if gap[top] == 0:
        return f"{said}, and the same on every bar."
    return (f"{said}; they differ most in {RECIPE_BARS[step][top]}: {_said(wide.loc[top, a], step)} against "
            f"{_said(wide.loc[top, b], step)} ({bars['split'].iloc[0]} split).")
