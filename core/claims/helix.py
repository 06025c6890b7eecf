"""The helix view of a run (Kantamneni & Tegmark 2025) in words computed from its tables, beside the Fourier view.

Two readings, each with its rule:

* **the fit** (`helix_fit`): at the layer where the helix explains most held-out variance, is it above its shuffle
  (the same basis on numbers shuffled)? `fit_beats_shuffle`: the helix's mean over splits minus the shuffle's is
  more than twice their combined standard deviation. PCA of the same rank is the ceiling any rank-r subspace reaches
  reading the vectors themselves; the share helix / PCA says how much of that ceiling a function of n alone reaches.
* **the causal test** (`helix_patching`): at each patched layer the helix "carries what the model uses" beyond a
  subspace of its rank only where its recovered share's interval lies above every random subspace's draw
  (`beats_random`: its low end above the highest draw's high end). How much of what the activation itself restores
  it restores is helix / activation; the mean vector (rank 0) is the floor every reconstruction starts from.

The Fourier view's side is step 7's (core.claims.features: a period counts where its probe separates the numbers);
`helix_summary` puts the two side by side with the numbers of each.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.runs.reader import RunReader, Table

#: How many combined standard deviations the helix must clear its shuffle by.
SHUFFLE_MARGIN = 2.0


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def fit_at(fit: pd.DataFrame, layer: int) -> dict[str, tuple[float, float]]:
    """{model: (mean, sd)} of the held-out variance explained at `layer`."""
    rows = fit[fit["layer"] == layer]
    return {m: (float(r["explained_mean"]), float(r["explained_sd"])) for m, r in rows.set_index("model").iterrows()}


def best_fit_layer(fit: pd.DataFrame) -> int:
    """The layer whose helix explains the most held-out variance (the lowest on a tie)."""
    helix = fit[fit["model"] == "helix"]
    return int(helix.loc[helix["explained_mean"] == helix["explained_mean"].max(), "layer"].min())


def fit_beats_shuffle(at: dict[str, tuple[float, float]]) -> bool:
    """The module docstring's rule for the fit: helix minus shuffle above `SHUFFLE_MARGIN` combined sds."""
    (h, hs), (s, ss) = at["helix"], at["helix_shuffled"]
    return h - s > SHUFFLE_MARGIN * float(np.hypot(hs, ss))


def patch_rows(patched: pd.DataFrame, layer: int) -> dict:
    """One layer of the causal test: each condition's share and interval, the random draws' mean, spread and highest
    high end."""
    rows = patched[patched["layer"] == layer]
    one = {c: rows[rows["condition"] == c].iloc[0] for c in ("activation", "helix", "pca", "mean")
           if (rows["condition"] == c).any()}
    random = rows[rows["condition"] == "random"]
    return {**one, "random_mean": float(random["recovered"].mean()),
            "random_sd": float(random["recovered"].std(ddof=0)), "random_top": float(random["recovered_high"].max()),
            "draws": len(random)}


def beats_random(layer_rows: dict) -> bool:
    """The module docstring's rule for the causal test at one layer."""
    return float(layer_rows["helix"]["recovered_low"]) > layer_rows["random_top"]


def best_patch_layer(patched: pd.DataFrame) -> int:
    """The patched layer where the helix restores most."""
    helix = patched[patched["condition"] == "helix"]
    return int(helix.loc[helix["recovered"].idxmax(), "layer"])


def helix_summary(run: RunReader) -> str:
    """The helix view of this run in a few sentences, every number from its tables (module docstring)."""
    fit = run.table(Table.HELIX_FIT)
    layer = best_fit_layer(fit)
    at = fit_at(fit, layer)
    (h, _), (pca, _), (shuffled, _) = at["helix"], at["pca"], at["helix_shuffled"]
    rank = int(fit.loc[(fit["layer"] == layer) & (fit["model"] == "helix"), "rank"].iloc[0])
    words = [f"The helix fits best at layer {layer}: a line plus circles of periods "
             f"{', '.join(f'{T:g}' for T in (run.manifest.get('helix') or {}).get('periods', (2, 5, 10, 100)))} "
             f"(rank {rank}) explains {pct(h)} of the variance of numbers it was not fitted on, PCA of the same rank "
             f"{pct(pca)}, the helix on shuffled numbers {pct(shuffled)}"
             + (" — above its shuffle." if fit_beats_shuffle(at) else " — not clearly above its shuffle.")]
    if run.has(Table.HELIX_PATCHING):
        patched = run.table(Table.HELIX_PATCHING)
        best = best_patch_layer(patched)
        r = patch_rows(patched, best)
        n, helix = int(r["helix"]["n"]), r["helix"]
        words.append(
            f"Put in for the first operand at layer {best} (over {n:,} pairs whose operand the fit never saw), the "
            f"helix restores {pct(helix['recovered'])} of the logit difference ({pct(helix['recovered_low'])} to "
            f"{pct(helix['recovered_high'])}); the operand's own activation {pct(r['activation']['recovered'])}, its "
            f"top {rank} principal directions {pct(r['pca']['recovered'])}, {r['draws']} random subspaces of that "
            f"rank {pct(r['random_mean'])} on average (spread {pct(r['random_sd'])}), the mean vector alone "
            f"{pct(r['mean']['recovered'])}.")
        held = sorted(int(x) for x in patched["layer"].unique() if beats_random(patch_rows(patched, int(x))))
        words.append(f"The helix restores more than every random subspace of its rank at layer"
                     f"{'s' if len(held) > 1 else ''} {', '.join(map(str, held))}." if held else
                     "At no patched layer does the helix restore more than a random subspace of its rank.")
    return " ".join(words)


#: How the causal test's conditions are named on screen.
CONDITION_NAMES = {"activation": "the operand's own activation", "helix": "its helix fit (from the number alone)",
                   "pca": "its top principal directions (same rank)", "random": "a random subspace (same rank)",
                   "mean": "the mean vector (rank 0)"}


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
            span = f"draws {pct(r['recovered'].min())} to {pct(r['recovered'].max())}"
        else:
            span = f"{pct(r['recovered_low'].iloc[0])} to {pct(r['recovered_high'].iloc[0])}"
        out.append({"put in for the operand": name, "rank": int(r["rank"].iloc[0]),
                    "restored": pct(r["recovered"].mean()), "95% interval": span,
                    "answers moved back": pct(r["moved"].mean())})
    return pd.DataFrame(out)


def helix_layers(run: RunReader) -> list[int]:
    """The layers the causal test patched."""
    return sorted(int(x) for x in run.table(Table.HELIX_PATCHING)["layer"].unique())


def views_side_by_side(run: RunReader, fourier: dict) -> tuple[pd.DataFrame, str]:
    """Step 7's two readings of the numbers at the layer its claim reads (`fourier`: that claim's numbers: layer,
    the periods it counts, the probes' kappa), as a small table and one sentence. They agree where both see
    periodic structure there or neither does: the Fourier view counts at least one of the periods 2, 5, 10, and the
    helix explains more held-out variance than its shuffle (`fit_beats_shuffle`)."""
    fit = run.table(Table.HELIX_FIT)
    layers = sorted(int(x) for x in fit["layer"].unique())
    layer = min(layers, key=lambda x: abs(x - int(fourier.get("layer", 0))))
    at = fit_at(fit, layer)
    counted = [T for T in fourier.get("short_found", []) if float(T) in (2.0, 5.0, 10.0)]
    kappa = (fourier.get("kappa") or {}).get(10)
    helix_sees, fourier_sees = fit_beats_shuffle(at), bool(counted)
    rows = [{"view": "Fourier (this step)", "what it reads": "spikes whose probe separates n mod T",
             "at this layer": (f"periods {', '.join(f'{T:g}' for T in counted)}" if counted else "none")
             + (f"; n mod 10 read at kappa {kappa:.2f}" if kappa is not None else "")},
            {"view": "Helix (Kantamneni & Tegmark 2025)", "what it reads": "a line plus circles, fitted on half the "
             "numbers", "at this layer": f"{pct(at['helix'][0])} of held-out variance (PCA of its rank "
             f"{pct(at['pca'][0])}, shuffled {pct(at['helix_shuffled'][0])})"}]
    if run.has(Table.HELIX_PATCHING):
        patched = run.table(Table.HELIX_PATCHING)
        best = best_patch_layer(patched)
        r = patch_rows(patched, best)
        rows.append({"view": "Helix, put in for an operand", "what it reads": f"share of the answer restored "
                     f"(layer {best})", "at this layer": f"{pct(r['helix']['recovered'])} (own activation "
                     f"{pct(r['activation']['recovered'])}, random subspaces {pct(r['random_mean'])})"})
    agree = helix_sees == fourier_sees
    fourier_words = "counts periods " + ", ".join(f"{T:g}" for T in counted) if fourier_sees else "counts no period"
    helix_words = "explains more than its shuffle" if helix_sees else "is not clearly above its shuffle"
    sentence = (f"At layer {layer} the two views {'agree' if agree else 'disagree'}: the Fourier view {fourier_words}, "
                f"and the helix {helix_words} ({pct(at['helix'][0])} against {pct(at['helix_shuffled'][0])}).")
    return pd.DataFrame(rows), sentence
