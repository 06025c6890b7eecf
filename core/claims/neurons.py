"""The neuron-level test of a run in words (core.runs.neuron_run: Nikankin et al.'s "bag of heuristics" question),
every number from its tables `neuron_fits` and `neurons`. The paper (Zhou et al. 2024) claims nothing about single
neurons, so this module gives a reading with no verdict: which fit explains more of the neurons' held-out variance,
and what mean-ablating the best-fitted neurons of each kind does beside random neurons of the same layers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.claims.base import pct
from core.runs.reader import RunReader, Table


def fit_counts(fits: pd.DataFrame) -> dict:
    """How many neurons each fit explains better (held-out R^2), their medians, and the layers read."""
    helix, heur = fits["helix_r2"].to_numpy(), fits["heuristic_r2"].to_numpy()
    return {"n": len(fits), "helix_better": int(np.sum(helix > heur)), "heuristic_better": int(np.sum(heur > helix)),
            "helix_median": float(np.median(helix)), "heuristic_median": float(np.median(heur)),
            "helix_top": float(helix.max()), "heuristic_top": float(heur.max()),
            "layers": (int(fits["layer"].min()), int(fits["layer"].max())), "n_fit": int(fits["n_fit"].iloc[0]),
            "n_scored": int(fits["n_scored"].iloc[0])}


def ablation_rows(table: pd.DataFrame, k: int) -> dict:
    """One k of the ablation: the helix's and the heuristics' sets (rows), the random draws' mean and sd."""
    rows = table[table["k"] == k]
    rand = rows[rows["selection"] == "random"]
    return {"helix": rows[rows["selection"] == "helix"].iloc[0],
            "heuristic": rows[rows["selection"] == "heuristic"].iloc[0],
            "random_accuracy": float(rand["accuracy"].mean()),
            "random_accuracy_sd": float(rand["accuracy"].std(ddof=1)) if len(rand) > 1 else 0.0,
            "random_shift": float(rand["last_digit_shift"].mean()),
            "random_shift_sd": float(rand["last_digit_shift"].std(ddof=1)) if len(rand) > 1 else 0.0,
            "draws": len(rand)}


def neuron_summary(run: RunReader) -> str:
    """The neuron-level test in a few sentences (module docstring), or "" where the run has no neuron tables."""
    if not (run.has(Table.NEURON_FITS) and run.has(Table.NEURONS)):
        return ""
    c = fit_counts(run.table(Table.NEURON_FITS))
    table = run.table(Table.NEURONS)
    note = run.manifest.get("neurons") or {}
    split = note.get("split", run.split)
    base = table[table["selection"] == "none"].iloc[0]
    first, last = c["layers"]
    read = c["n_fit"] + c["n_scored"]
    whole = int(run.n_examples or read)
    over = f"{read:,} {split} questions" if read >= whole else f"a seeded {read:,} of the {whole:,} {split} questions"
    words = [f"Of the {c['n']:,} neurons of MLPs {first}-{last} (counted from 1), read at the answer position over "
             f"{over} (fitted on {c['n_fit']:,}, scored on the other "
             f"{c['n_scored']:,}), a helix of a+b explains more held-out variance than the operand-digit patterns for "
             f"{c['helix_better']:,} and less for {c['heuristic_better']:,} (median held-out R² "
             f"{c['helix_median']:.2f} for the helix, {c['heuristic_median']:.2f} for the digit patterns; best neuron "
             f"{c['helix_top']:.2f} and {c['heuristic_top']:.2f})."]
    for i, k in enumerate(sorted(int(x) for x in table.loc[table["k"] > 0, "k"].unique())):
        r = ablation_rows(table, k)
        h, d = r["helix"], r["heuristic"]
        both = int(h["overlap"])
        lead = (f"Each neuron set to its mean, over {int(base['n']):,} {split} questions ({pct(base['accuracy'], 1)} "
                "correct unedited): the" if i == 0 else "The")
        words.append(
            f"{lead} {k} the helix fits best leave {pct(h['accuracy'], 1)} correct and change the last "
            f"digit of {pct(h['last_digit_shift'], 1)} of the answers; the {k} the digit patterns fit best "
            f"{pct(d['accuracy'], 1)} and {pct(d['last_digit_shift'], 1)} "
            f"({both} neuron{'' if both == 1 else 's'} in both sets); "
            f"{k} random neurons of the same layers {pct(r['random_accuracy'], 1)} (sd "
            f"{pct(r['random_accuracy_sd'], 1)} over {r['draws']} draws) and {pct(r['random_shift'], 1)}.")
    return " ".join(words)
