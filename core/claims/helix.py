"""The helix view of a run (Kantamneni & Tegmark 2025) in words computed from its tables, beside the Fourier view.

Two readings, each with its rule:

* **the fit** (`helix_fit`): does the helix's periodic part explain held-out numbers? Shuffling the numbers destroys
  the line (the numbers' size) as well as the circles, so the test is against the line alone: `circles_fit`, the
  helix's held-out variance explained minus the line's is more than twice their combined standard deviation over
  the splits. The shuffle and PCA of the same rank (read from the vectors themselves, not from n) are shown beside.
* **the causal test** (`helix_patching`): put in for the first operand, do the circles carry what the model uses?
  `circles_used`: the helix's recovered share's interval lies wholly above the line's (the same fit without its
  circles). The summary reads one patched layer, chosen from the fit alone before any outcome
  (`chosen_patch_layer`: the patched layer nearest the layer the helix fits best), states each share against the
  floor and puts PCA of the same rank beside the helix, at that layer and over every patched layer. The operand's
  own activation is what any reconstruction can restore at most; the phrasing's mean vector (rank 0, the average
  operand vector of questions worded the same way: no number in it) is the floor; the random subspaces of the
  helix's rank keep about rank / width of the vector, so they sit
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


def chosen_patch_layer(fit: pd.DataFrame, patched: pd.DataFrame) -> int:
    """The patched layer the summary reads, chosen before any patching outcome is read: the patched layer nearest the
    layer the helix FITS best (`best_layer` of `helix_fit`, held-out variance of the numbers), the lower on a tie.
    Never the layer where the helix happens to restore most (a choice by the outcome would flatter it)."""
    target = best_layer(fit)
    layers = sorted(int(x) for x in patched["layer"].unique())
    return min(layers, key=lambda x: (abs(x - target), x))


def points(delta: float) -> str:
    """A difference of shares in words: "9 points above" / "3 points below" / "level with"."""
    n = round(100 * float(delta))
    return "level with" if n == 0 else f"{abs(n)} point{'s' * (abs(n) != 1)} {'above' if n > 0 else 'below'}"


def span_points(values) -> str:
    """A range of differences of shares in points: "9 to 45 points" (one value: "9 points")."""
    low, high = (round(100 * float(v)) for v in (min(values), max(values)))
    return f"{low} points" if low == high else f"{low} to {high} points"


def span(values) -> str:
    """A range of shares as "52-56%" (one value: "52%")."""
    low, high = (round(100 * float(v)) for v in (min(values), max(values)))
    return f"{low}%" if low == high else f"{low}-{high}%"


def patch_sentences(fit: pd.DataFrame, patched: pd.DataFrame) -> list[str]:
    """The causal test in words: at the layer `chosen_patch_layer` picks, each condition's share, the helix's and
    PCA's gains above the floor (the phrasing's mean vector alone), and the same three over every patched layer."""
    layer = chosen_patch_layer(fit, patched)
    r = patch_rows(patched, layer)
    n, helix, rank = int(r["helix"]["n"]), r["helix"], int(r["pca"]["rank"])
    floor, pca = float(r["mean"]["recovered"]), float(r["pca"]["recovered"])
    layers = sorted(int(x) for x in patched["layer"].unique())
    by = {c: [float(patch_rows(patched, x)[c]["recovered"]) for x in layers] for c in ("helix", "pca", "mean")}
    return [
        f"Put in for the first operand at layer {layer} (the patched layer nearest the layer the helix fits best, "
        f"chosen before any patch was read; {n:,} pairs whose operand the fit never saw), the phrasing's mean vector "
        f"alone (the average first-operand vector of the questions worded the same way: it holds no number) already "
        f"restores {pct(floor, 0)} of the logit difference: that is the floor. The helix restores "
        f"{pct(helix['recovered'], 0)} ({pct(helix['recovered_low'], 0)} to {pct(helix['recovered_high'], 0)}), "
        f"{points(float(helix['recovered']) - floor)} the floor; PCA of the same rank {rank}, read from the vector "
        f"itself, {pct(pca, 0)} ({points(pca - floor)}); the line alone "
        f"{pct(r['line']['recovered'], 0)}, the operand's own activation {pct(r['activation']['recovered'], 0)}, "
        f"{r['draws']} random subspaces of rank {rank} {pct(r['random_mean'], 0)} on average.",
        f"Over the patched layers {', '.join(map(str, layers))}, above a floor of {span(by['mean'])}: the helix adds "
        f"{span_points([h - f for h, f in zip(by['helix'], by['mean'])])}, PCA of rank {rank} "
        f"{span_points([q - f for q, f in zip(by['pca'], by['mean'])])} (the helix restores {span(by['helix'])}, PCA "
        f"{span(by['pca'])}).",
    ]


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
        words += patch_sentences(fit, patched)
        used = sorted(int(x) for x in patched["layer"].unique() if circles_used(patch_rows(patched, int(x))))
        words.append(f"The circles restore more than the line alone at layer{'s' if len(used) > 1 else ''} "
                     f"{', '.join(map(str, used))}." if used else
                     "At no patched layer do the circles restore more than the line alone.")
    if run.has(Table.HELIX_CLOCK):
        words.append(clock_sentence(run.table(Table.HELIX_CLOCK)))
    return " ".join(words)


def clock_sentence(clock: pd.DataFrame) -> str:
    """The Clock test (`helix_clock`: the helix of the answer a + b at the answer position) in one sentence: at every
    layer it patched, the shares the helix, PCA of the same rank, the floor (the phrasing's mean) and the position's
    own stream restore, each layer's in the same order."""
    layers = sorted(int(x) for x in clock["layer"].unique())
    rows = [patch_rows(clock, x) for x in layers]
    each = lambda c: ", ".join(pct(r[c]["recovered"], 0) for r in rows)  # noqa: E731
    rank = int(rows[0]["pca"]["rank"])
    return (f"The Clock test (does the answer position hold a + b on a helix? {int(rows[0]['helix']['n']):,} pairs, "
            f"the second operand one more, whose answer the fit never saw): put in at the answer position at layers "
            f"{', '.join(map(str, layers))}, the helix of a + b restores {each('helix')} of the logit difference; PCA "
            f"of the same rank {rank} {each('pca')}; the phrasing's mean vector alone (the floor: no number in it) "
            f"{each('mean')}; the position's own stream {each('activation')}.")


#: How the causal test's conditions are named on screen.
CONDITION_NAMES = {"activation": "the operand's own activation", "helix": "its helix fit (from the number alone)",
                   "line": "the line alone (no circles)", "pca": "its top principal directions (same rank)",
                   "random": "a random subspace (same rank)",
                   "mean": "the phrasing's mean vector, no number in it (rank 0: the floor)"}


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
        best = chosen_patch_layer(fit, patched)
        r = patch_rows(patched, best)
        rows.append({"view": f"Helix put in for an operand (layer {best}, nearest the best fit)",
                     "this run": f"{pct(r['helix']['recovered'], 0)} restored (no-number floor "
                                 f"{pct(r['mean']['recovered'], 0)}, PCA of the same rank "
                                 f"{pct(r['pca']['recovered'], 0)})"})
    agree = helix_sees == fourier_sees
    fourier_words = "counts periods " + ", ".join(f"{T:g}" for T in counted) if fourier_sees else "counts no period"
    helix_words = "circles add to the line" if helix_sees else "circles add nothing clear to the line"
    sentence = (f"At layer {layer} the two views {'agree' if agree else 'disagree'}: the Fourier view {fourier_words}, "
                f"and the helix's {helix_words} ({pct(at['helix'][0], 0)} against {pct(at['line'][0], 0)} of held-out "
                "variance).")
    return pd.DataFrame(rows), sentence
