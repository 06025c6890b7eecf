"""The neuron-level test of a run in words (core.runs.neuron_run: Nikankin et al.'s "bag of heuristics" question),
every number from its tables `neuron_fits` and `neurons`. The paper (Zhou et al. 2024) claims nothing about single
neurons, so this module gives a reading with no verdict: which fit explains more of the neurons' held-out variance,
and what mean-ablating the best-fitted neurons of each kind does beside random neurons drawn in that set's layers, as
many in each (a table of version 1: drawn over every layer read).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.neurons import control_draws, with_matches
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


def control_rows(table: pd.DataFrame, k: int, selection: str) -> dict:
    """The mean and sd of the random draws that control the top-k set `selection` (core.analysis.neurons.control_draws),
    how many, and whether they were drawn in its layers."""
    rand, in_layers = control_draws(table, k, selection)
    sd = {c: float(rand[c].std(ddof=1)) if len(rand) > 1 else 0.0 for c in ("accuracy", "last_digit_shift")}
    return {"accuracy": float(rand["accuracy"].mean()), "accuracy_sd": sd["accuracy"],
            "shift": float(rand["last_digit_shift"].mean()), "shift_sd": sd["last_digit_shift"],
            "draws": len(rand), "in_layers": in_layers}


def set_words(row, n: int) -> str:
    """A set's accuracy and last-digit change in words, the change also as a count of the questions."""
    moved = int(round(float(row["last_digit_shift"]) * n))
    return (f"{pct(row['accuracy'], 2)} correct, the last digit changed for {pct(row['last_digit_shift'], 2)} "
            f"({moved:,})")


def neuron_summary(run: RunReader) -> str:
    """The neuron-level test in a few sentences (module docstring), or "" where the run has no neuron tables."""
    if not (run.has(Table.NEURON_FITS) and run.has(Table.NEURONS)):
        return ""
    c = fit_counts(run.table(Table.NEURON_FITS))
    table = with_matches(run.table(Table.NEURONS))
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
    n = int(base["n"])
    words.append(f"Each set's neurons were held at their mean activation over {n:,} {split} questions "
                 f"({pct(base['accuracy'], 2)} correct unedited).")
    for k in sorted(int(x) for x in table.loc[table["k"] > 0, "k"].unique()):
        rows = table[table["k"] == k]
        parts = []
        for selection, name in (("helix", "the helix fits"), ("heuristic", "the digit patterns fit")):
            top = rows[rows["selection"] == selection].iloc[0]
            r = control_rows(table, k, selection)
            where = "in its layers, as many in each" if r["in_layers"] else "of the layers read"
            lead = "The" if not parts else "the"
            parts.append(f"{lead} {k} {name} best leave {set_words(top, n)}, against {pct(r['accuracy'], 2)} correct "
                         f"(sd {pct(r['accuracy_sd'], 2)}) and {pct(r['shift'], 2)} changed for {k} random neurons "
                         f"{where} ({r['draws']} draws)")
        both = int(rows[rows["selection"] == "helix"].iloc[0]["overlap"])
        words.append("; ".join(parts) + f" ({both} neuron{'' if both == 1 else 's'} in both top sets).")
    return " ".join(words)


def neuron_headline(run: RunReader) -> str:
    """The neuron-level test in one sentence for a class (the rest in `neuron_summary`), or "" without its tables:
    which fit explains more of the neurons, and the most last digits any top set changes beside what random neurons
    in its layers change on average."""
    if not (run.has(Table.NEURON_FITS) and run.has(Table.NEURONS)):
        return ""
    c = fit_counts(run.table(Table.NEURON_FITS))
    table = with_matches(run.table(Table.NEURONS))
    n = int(table.loc[table["selection"] == "none", "n"].iloc[0])
    helix, digits = c["helix_better"], c["heuristic_better"]
    lead = (f"Digit patterns fit {digits:,} of the {c['n']:,} neurons better than a helix of a+b does" if digits > helix
            else f"A helix of a+b fits {helix:,} of the {c['n']:,} neurons better than digit patterns do"
            if helix > digits else f"A helix of a+b and digit patterns each fit {helix:,} of the {c['n']:,} neurons "
            "better")
    tops = table[table["selection"].isin(("helix", "heuristic"))]
    worst = tops.loc[tops["last_digit_shift"].idxmax()]
    k, selection = int(worst["k"]), str(worst["selection"])
    moved = int(round(float(worst["last_digit_shift"]) * n))
    control = control_rows(table, k, selection)
    name = "the helix fits" if selection == "helix" else "the digit patterns fit"
    where = "in the same layers" if control["in_layers"] else "of the layers read"
    return (f"{lead}. Holding the best-fitted neurons of either kind at their mean changes the last digit of at most "
            f"{moved:,} of the {n:,} answers (the {k} {name} best), against {control['shift'] * n:.1f} on average "
            f"for {k} random neurons {where}.")
