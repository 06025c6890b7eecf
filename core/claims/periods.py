"""Table 1 with power: the periods-only ablation (core.runs.period_ablation) read against its energy-matched controls.

The rule is in `claim_periods`'s docstring and re-derived from the raw table by tests/claims/test_periods.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.period_filters import READINGS
from core.analysis.phase_shift import wilson_interval
from core.claims.accuracy import does_the_task
from core.claims.base import Claim, pct
from core.paper import TABLE1_TAU
from core.runs.reader import Table
from core.runs.summaries import nearest_tau, table1

#: A removal matters when it costs at least this many times the controls' spread below their mean ...
SPREAD_TIMES = 2.0
#: ... and at least this much accuracy (a share) below it, with its 95% interval's upper end under every draw.
MIN_DROP = 0.01
#: A removal's test has power when its random controls cost at most this much accuracy (a share) below the unedited
#: model: where random directions of the same energy already break the model, a removal cannot be told from them.
POWER_COST = 0.10

PAPER = ("Removing attention's high frequencies (tau = 50) costs GPT-2-XL far more than removing the MLPs' "
         "(Table 1): attention carries the last digit in the short waves of periods 2, 5 and 10, the MLPs the size "
         "of the answer in the long ones.")
_KIND = {"attn": "attention", "mlp": "the MLPs", "both": "attention and MLPs"}


def period_summary(run) -> pd.DataFrame | None:
    """One row per removal (modules, slice, reading): accuracy with its 95% Wilson interval (low, high), the
    energy-matched controls' mean, sd, lowest draw and count, the drop below the controls' mean, and `matters` by the
    rule of `claim_periods`; None for a run without the table."""
    if not run.has(Table.PERIOD_ABLATION):
        return None
    t = run.table(Table.PERIOD_ABLATION)
    t = t[t["slice"] != "none"]
    rows = []
    for (modules, slice_name, reading), g in t.groupby(["modules", "slice", "reading"], sort=False):
        edit, controls = g[~g["control"].astype(bool)].iloc[0], g[g["control"].astype(bool)]["accuracy"]
        accuracy, n = float(edit["accuracy"]), int(edit["n"])
        low, high = wilson_interval(accuracy, n)
        mean = float(controls.mean()) if len(controls) else np.nan
        sd = float(controls.std(ddof=1)) if len(controls) > 1 else np.nan
        lowest = float(controls.min()) if len(controls) else np.nan
        drop = mean - accuracy
        matters = bool(len(controls) > 1 and high < lowest and drop >= max(MIN_DROP, SPREAD_TIMES * sd))
        rows.append({"modules": modules, "slice": slice_name, "reading": reading, "frequencies": edit["frequencies"],
                     "rank": int(edit["rank"]), "energy_share": float(edit["energy_share"]), "accuracy": accuracy,
                     "low": low, "high": high, "n": n, "control_mean": mean, "control_sd": sd,
                     "control_lowest": lowest, "draws": int(len(controls)), "drop": drop, "matters": matters})
    return pd.DataFrame(rows)


def _row(summary: pd.DataFrame, modules: str, slice_name: str, reading: str = READINGS[0]):
    hit = summary[(summary["modules"] == modules) & (summary["slice"] == slice_name) & (summary["reading"] == reading)]
    return hit.iloc[0] if len(hit) else None


def claim_periods(run) -> Claim | None:
    """Table 1 at any width. Paper: removing attention's high frequencies costs far more than removing the MLPs'.

    Rule (read on W_U as the paper reads it, over every question of the split): a removal *matters* when its
    accuracy is below its energy-matched random controls of the same rank (core.runs.period_ablation) by at least
    SPREAD_TIMES times their sd over draws and at least MIN_DROP, and its 95% Wilson interval's upper end is below
    every draw; its *cost* is how far it is below its controls' mean; a removal's test has *power* when its controls
    cost at most POWER_COST below the unedited model. Verdict: not tested when the model does not do the task (its
    own accuracy on the run's split below "partly": core.claims.accuracy.does_the_task, never step 1's verdict) or
    attention's periods test has no power; does not when removing attention's periods does not matter, or when
    removing the MLPs' periods matters (with power) and costs more than removing attention's (the roles reversed);
    agrees when attention's periods matter and the MLPs' low slice (the long waves of the answer's size) matters
    with power; partly otherwise. None for a run without the table, and for a multiplication run (the paper's Table
    1 is addition's)."""
    summary = period_summary(run)
    if summary is None or run.task == "multiplication" or summary.empty:  # the paper's Table 1 is addition's
        return None
    attn, mlp = _row(summary, "attn", "periods"), _row(summary, "mlp", "periods")
    mlp_low = _row(summary, "mlp", "low slice")
    if attn is None or mlp is None:
        return None
    base = float(run.table(Table.PERIOD_ABLATION).query("slice == 'none'")["accuracy"].iloc[0])

    def powered(row) -> bool:
        return row is not None and row["control_mean"] >= base - POWER_COST

    reversed_roles = powered(mlp) and mlp["matters"] and mlp["drop"] > attn["drop"]
    fails_task = not does_the_task(run)
    if fails_task or not powered(attn):
        verdict = "not tested"
    elif not attn["matters"] or reversed_roles:
        verdict = "does not"
    elif powered(mlp_low) and mlp_low["matters"]:
        verdict = "agrees"
    else:
        verdict = "partly"
    n = int(attn["n"])
    measured = (f"Over all {n:,} {run.split} questions, {base_sentence(run)}; removing only the paper's periods "
                f"(rank {int(attn['rank'])}): " + "; ".join(
                    _said(r) for r in (attn, mlp, mlp_low, _row(summary, "attn", "low slice"),
                                       _row(summary, "attn", "high slice"), _row(summary, "mlp", "high slice"))
                    if r is not None) + ".")
    gained = [r for r in (_row(summary, "attn", "periods", READINGS[1]), _row(summary, "mlp", "periods", READINGS[1]))
              if r is not None]
    if gained:
        measured += " Read through the final norm's gain: " + "; ".join(_said(r) for r in gained) + "."
    reason = (f"the model does not do the task ({base_sentence(run)}): it shows nothing of how the task is done"
              if fails_task else _reason(verdict, attn, mlp, mlp_low, powered(mlp_low),
                                         same_as_controls(attn) and periods_hold_what_w_u_reads(run, attn)))
    headline = (f"Removing only the periods 2, 2.5, 5, 10 from attention leaves {pct(attn['accuracy'])} (random "
                f"directions of the same size: {pct(attn['control_mean'])}); from the MLPs, {pct(mlp['accuracy'])} "
                f"({pct(mlp['control_mean'])}).")
    return Claim("periods", PAPER, measured, verdict, reason, {"summary": summary.to_dict("records")},
                 headline=headline)


def base_sentence(run) -> str:
    t = run.table(Table.PERIOD_ABLATION)
    return f"the model answers {pct(float(t[t['slice'] == 'none']['accuracy'].iloc[0]))} with nothing removed"


def _said(r) -> str:
    what = {"periods": "periods 2, 2.5, 5, 10", "low slice": f"the low slice (k = {r['frequencies']})",
            "high slice": f"the high slice (k = {r['frequencies']})"}[r["slice"]]
    return (f"{what} from {_KIND[r['modules']]} {pct(r['accuracy'])} ({pct(r['low'])} to {pct(r['high'])}) against "
            f"{pct(r['control_mean'])} ± {100 * r['control_sd']:.1f} for its controls"
            + (", beyond them" if r["matters"] else ""))


#: Controls that land on the removal itself: their draws' sd and their mean's distance from its accuracy both under
#: this share (half a point): the module writes nothing W_U reads outside what is removed.
SAME_AS_CONTROLS = 0.005


def same_as_controls(row) -> bool:
    """Whether the removal's energy-matched controls score what the removal scores (SAME_AS_CONTROLS), over two draws
    or more: the draws are the removal itself where it also holds all that W_U reads of the module
    (`periods_hold_what_w_u_reads`); a floor (every removal of that energy breaking the model) scores alike too."""
    return bool(row["draws"] > 1 and row["control_sd"] < SAME_AS_CONTROLS
                and abs(row["control_mean"] - row["accuracy"]) < SAME_AS_CONTROLS)


def table1_energy(t1: pd.DataFrame) -> dict:
    """{(modules, band removed): (the share of the module outputs' energy the band removes, its control's)} of a
    `table1` frame, for attention and the MLPs and each band, where the run measured them (empty for runs cached
    before)."""
    if not {"energy removed %", "control energy removed %"} <= set(t1.columns):
        return {}
    rows = t1.set_index(["modules", "removed"])
    return {(m, r): (float(rows.loc[(m, r), "energy removed %"]) / 100,
                     float(rows.loc[(m, r), "control energy removed %"]) / 100)
            for m in ("attn", "mlp") for r in ("low", "high") if (m, r) in rows.index}


def periods_hold_what_w_u_reads(run, row) -> bool:
    """Whether the removal `row` (a module's periods) holds all but SAME_AS_CONTROLS of what W_U reads of that module's
    output: its energy share against the module's two Table 1 bands together (the ablation table's energy at the tau
    nearest TABLE1_TAU; False for a run without it)."""
    if not run.has(Table.ABLATIONS):
        return False
    ab = run.table(Table.ABLATIONS)
    energy = table1_energy(table1(ab, nearest_tau(ab, TABLE1_TAU)))
    bands = [(row["modules"], band) for band in ("low", "high")]
    if not all(b in energy for b in bands):
        return False
    read = sum(energy[b][0] for b in bands)
    return read > 0 and float(row["energy_share"]) >= (1 - SAME_AS_CONTROLS) * read


def _reason(verdict: str, attn, mlp, mlp_low, low_powered: bool, coincide: bool = False) -> str:
    if verdict == "agrees":
        return ""
    if verdict == "not tested" and coincide:
        return (f"every random draw that removes as much of attention's energy as its periods leaves what they leave "
                f"({pct(attn['control_mean'])} ± {100 * attn['control_sd']:.1f} against {pct(attn['accuracy'])}): "
                "the periods hold all of attention's output that W_U reads (the rest lies in directions W_U ignores), "
                "so the draws are these periods themselves and cannot tell them from other directions of that "
                "energy")
    if verdict == "not tested":
        return (f"random directions that remove as much of attention's energy as its periods already leave only "
                f"{pct(attn['control_mean'])}, so the test cannot tell the periods from any directions of that size")
    if not attn["matters"]:
        return (f"removing attention's periods leaves {pct(attn['accuracy'])}, within what random directions that "
                f"remove as much of its energy leave ({pct(attn['control_mean'])} ± {100 * attn['control_sd']:.1f})")
    if verdict == "does not":
        return (f"removing the MLPs' periods costs more beyond its controls ({100 * mlp['drop']:.1f} points: "
                f"{pct(mlp['accuracy'])} left against {pct(mlp['control_mean'])}) than removing attention's "
                f"({100 * attn['drop']:.1f} points): the roles are reversed")
    if mlp_low is None:
        return "attention's periods matter, but this run has no low slice of the MLPs to test the long waves with"
    if not low_powered:
        return (f"attention's periods matter, but random directions of the MLPs' low slice's energy already leave "
                f"{pct(mlp_low['control_mean'])}, so the long waves cannot be tested")
    return (f"attention's periods matter, but removing the MLPs' low slice (the longest waves) "
            f"leaves {pct(mlp_low['accuracy'])}, within its controls ({pct(mlp_low['control_mean'])})")


def period_table(run) -> pd.DataFrame:
    """The periods-only ablation as a table to read, one row a removal, every cell text: from which modules, what
    (the paper's periods, the low slice, the high slice; W_U read through the final norm's gain marked), its rank and
    share of the outputs' energy, the accuracy with its 95% interval, the energy-matched controls (mean ± sd over
    draws), and whether it goes beyond them by the rule of `claim_periods`. Empty without the table."""
    summary = period_summary(run)
    if summary is None or summary.empty:
        return pd.DataFrame()
    what = {"periods": "periods 2, 2.5, 5, 10", "low slice": "low slice", "high slice": "high slice"}
    return pd.DataFrame({  # what and where first, then the answer, then how the removal was built
        "what": [what[s] + (" (through the norm's gain)" if r == READINGS[1] else "")
                 for s, r in zip(summary["slice"], summary["reading"])],
        "removed from": [_KIND[m] for m in summary["modules"]],
        "accuracy %": [f"{100 * a:.1f} ({100 * lo:.1f}-{100 * hi:.1f})"
                       for a, lo, hi in zip(summary["accuracy"], summary["low"], summary["high"])],
        "random, same energy %": [f"{100 * m:.1f} ± {100 * s:.1f}"
                                  for m, s in zip(summary["control_mean"], summary["control_sd"])],
        "beyond random": ["yes" if m else "no" for m in summary["matters"]],
        "k": summary["frequencies"],
        "rank": summary["rank"].astype(int),
        "energy %": [f"{100 * e:.1f}" for e in summary["energy_share"]],
    })


def period_caption(run) -> str:
    """The sentence under `period_table`."""
    summary = period_summary(run)
    if summary is None or summary.empty:
        return ""
    return (f"Each removal acts on every layer's output at the answer position, over all {int(summary['n'].max()):,} "
            f"{run.split} questions; random: as much energy removed in directions W_U reads, "
            f"{int(summary['draws'].max())} draws; beyond random means {SPREAD_TIMES:g} standard deviations and "
            f"{100 * MIN_DROP:g} point below the draws' mean.")
