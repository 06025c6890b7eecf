"""The helix view of a run (Kantamneni & Tegmark 2025) in words computed from its tables, beside the Fourier view.

Two readings, each with its rule:

* **the fit** (`helix_fit`): does the helix's periodic part explain held-out numbers? Shuffling the numbers destroys
  the line (the numbers' size) as well as the circles, so the test is against the line alone: `circles_fit`, the
  helix's held-out variance explained minus the line's is more than twice their combined standard deviation over
  the splits. The shuffle and PCA of the same rank (read from the vectors themselves, not from n) are shown beside.
* **the causal test** (`helix_patching`): put in for the first operand, do the circles carry what the model uses?
  `circles_used`: the helix's recovered share's interval lies wholly above the line's (the same fit without its
  circles). The operand's own activation is what any reconstruction can restore at most; the phrasing's mean vector
  (rank 0) is the floor; the random subspaces of the helix's rank keep about rank / width of the vector, so they sit
  near that floor and are shown, not tested against.

The Fourier view's side is step 7's (core.claims.features: a period counts where its probe separates the numbers);
`helix_summary` puts the two side by side with the numbers of each.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.helix import best_layer
from core.claims.base import pct
from core.runs.reader import RunReader, Table

#: How many combined standard deviations the helix must clear its shuffle by.
SHUFFLE_MARGIN = 2.0


def fit_at(fit: pd.DataFrame, layer: int) -> dict[str, tuple[float, float]]:
    """{model: (mean, sd)} of the held-out variance explained at `layer`."""
    rows = fit[fit["layer"] == layer]
    return {m: (float(r["explained_mean"]), float(r["explained_sd"])) for m, r in rows.set_index("model").iterrows()}


def circles_fit(at: dict[str, tuple[float, float]]) -> bool:
    """The module docstring's rule for the fit: helix minus line above `SHUFFLE_MARGIN` combined sds."""
    (h, hs), (line, ls) = at["helix"], at["line"]
    return h - line > SHUFFLE_MARGIN * float(np.hypot(hs, ls))


def patch_rows(patched: pd.DataFrame, layer: int) -> dict:
    """One layer of the causal test: each condition's share and interval, the random draws' mean, spread and highest
    high end."""
    rows = patched[patched["layer"] == layer]
    one = {c: rows[rows["condition"] == c].iloc[0] for c in ("activation", "helix", "line", "pca", "mean")
           if (rows["condition"] == c).any()}
    random = rows[rows["condition"] == "random"]
    return {**one, "random_mean": float(random["recovered"].mean()),
            "random_sd": float(random["recovered"].std(ddof=0)), "random_top": float(random["recovered_high"].max()),
            "draws": len(random)}


def circles_used(layer_rows: dict) -> bool:
    """The module docstring's rule for the causal test at one layer: the helix's interval above the line's."""
    return float(layer_rows["helix"]["recovered_low"]) > float(layer_rows["line"]["recovered_high"])


def best_patch_layer(patched: pd.DataFrame) -> int:
    """The patched layer where the helix restores most."""
    helix = patched[patched["condition"] == "helix"]
    return int(helix.loc[helix["recovered"].idxmax(), "layer"])


def helix_summary(run: RunReader) -> str:
    """The helix view of this run in a few sentences, every number from its tables (module docstring)."""
    fit = run.table(Table.HELIX_FIT)
    layer = best_layer(fit)
    at = fit_at(fit, layer)
    (h, _), (pca, _), (shuffled, _), (line, _) = at["helix"], at["pca"], at["helix_shuffled"], at["line"]
    rank = int(fit.loc[(fit["layer"] == layer) & (fit["model"] == "helix"), "rank"].iloc[0])
    periods = (run.manifest.get("helix") or {}).get("periods")
    circles = f"circles of periods {', '.join(f'{T:g}' for T in periods)}" if periods else "circles"
    words = [f"The helix fits best at layer {layer}: a line plus {circles} (rank {rank}) explains {pct(h, 0)} of the "
             f"variance of numbers it was not fitted on; the line alone {pct(line, 0)}, the helix on shuffled numbers "
             f"{pct(shuffled, 0)}, PCA of the same rank read from the vectors themselves {pct(pca, 0)}"
             + (" — the circles add to the line." if circles_fit(at) else " — the circles add nothing clear to the "
                "line.")]
    if run.has(Table.HELIX_PATCHING):
        patched = run.table(Table.HELIX_PATCHING)
        best = best_patch_layer(patched)
        r = patch_rows(patched, best)
        n, helix = int(r["helix"]["n"]), r["helix"]
        words.append(
            f"Put in for the first operand at layer {best} (over {n:,} pairs whose operand the fit never saw), the "
            f"helix restores {pct(helix['recovered'], 0)} of the logit difference ({pct(helix['recovered_low'], 0)} to "
            f"{pct(helix['recovered_high'], 0)}); the line alone {pct(r['line']['recovered'], 0)}, the operand's own "
            f"activation {pct(r['activation']['recovered'], 0)}, its top {int(r['pca']['rank'])} principal directions "
            f"{pct(r['pca']['recovered'], 0)}, the phrasing's mean vector alone {pct(r['mean']['recovered'], 0)}, "
            f"{r['draws']} random subspaces of rank {int(r['pca']['rank'])} {pct(r['random_mean'], 0)} on average.")
        used = sorted(int(x) for x in patched["layer"].unique() if circles_used(patch_rows(patched, int(x))))
        words.append(f"The circles restore more than the line alone at layer{'s' if len(used) > 1 else ''} "
                     f"{', '.join(map(str, used))}." if used else
                     "At no patched layer do the circles restore more than the line alone.")
    return " ".join(words)


#: How the causal test's conditions are named on screen.
CONDITION_NAMES = {"activation": "the operand's own activation", "helix": "its helix fit (from the number alone)",
                   "line": "the line alone (no circles)", "pca": "its top principal directions (same rank)",
                   "random": "a random subspace (same rank)", "mean": "the phrasing's mean vector (rank 0)"}


def helix_patch_frame(run: RunReader, layer: int) -> pd.DataFrame:
    """The causal test at one layer as the page shows it: what was put in, the share restored with its interval,
    the answers moved back; the random subspaces' draws as one row (their mean, and the range of the draws)."""
    rows = run.table(Table.HELIX_PATCHING)
    rows = rows[rows["layer"] == layer]
    out = []
    for condition, name in CONDITION_NAMES.items():
        r = rows[rows["condition"] == condition]
        if r.empty:
            continue
        if len(r) > 1:
            span = f"draws {pct(r['recovered'].min(), 0)} to {pct(r['recovered'].max(), 0)}"
        else:
            span = f"{pct(r['recovered_low'].iloc[0], 0)} to {pct(r['recovered_high'].iloc[0], 0)}"
        out.append({"put in for the operand": name, "rank": int(r["rank"].iloc[0]),
                    "restored": pct(r["recovered"].mean(), 0), "95% interval": span,
                    "answers moved back": pct(r["moved"].mean(), 0)})
    return pd.DataFrame(out)


def helix_layers(run: RunReader) -> list[int]:
    """The layers the causal test patched."""
    return sorted(int(x) for x in run.table(Table.HELIX_PATCHING)["layer"].unique())


def views_side_by_side(run: RunReader, fourier: dict) -> tuple[pd.DataFrame, str]:
    """Step 7's two readings of the numbers at the layer its claim reads (`fourier`: that claim's numbers: layer,
    the periods it counts, the probes' kappa), as a small table and one sentence. They agree where both see
    periodic structure there or neither does: the Fourier view counts at least one of the periods 2, 5, 10, and the
    helix's circles explain more held-out variance than the line alone (`circles_fit`)."""
    fit = run.table(Table.HELIX_FIT)
    layers = sorted(int(x) for x in fit["layer"].unique())
    layer = min(layers, key=lambda x: abs(x - int(fourier.get("layer", 0))))
    at = fit_at(fit, layer)
    counted = [T for T in fourier.get("short_found", []) if float(T) in (2.0, 5.0, 10.0)]
    kappa = (fourier.get("kappa") or {}).get(10)
    helix_sees, fourier_sees = circles_fit(at), bool(counted)
    rows = [{"view": "Fourier spikes a probe separates",
             "this run": (f"periods {', '.join(f'{T:g}' for T in counted)}" if counted else "none")
             + (f" (mod 10: kappa {kappa:.2f})" if kappa is not None else "")},
            {"view": "Helix fit, held-out numbers",
             "this run": f"{pct(at['helix'][0], 0)} explained (line alone {pct(at['line'][0], 0)})"}]
    if run.has(Table.HELIX_PATCHING):
        patched = run.table(Table.HELIX_PATCHING)
        best = best_patch_layer(patched)
        r = patch_rows(patched, best)
        rows.append({"view": f"Helix put in for an operand (layer {best})",
                     "this run": f"{pct(r['helix']['recovered'], 0)} restored "
                                 f"(line alone {pct(r['line']['recovered'], 0)})"})
    agree = helix_sees == fourier_sees
    fourier_words = "counts periods " + ", ".join(f"{T:g}" for T in counted) if fourier_sees else "counts no period"
    helix_words = "circles add to the line" if helix_sees else "circles add nothing clear to the line"
    sentence = (f"At layer {layer} the two views {'agree' if agree else 'disagree'}: the Fourier view {fourier_words}, "
                f"and the helix's {helix_words} ({pct(at['helix'][0], 0)} against {pct(at['line'][0], 0)} of held-out "
                "variance).")
    return pd.DataFrame(rows), sentence
