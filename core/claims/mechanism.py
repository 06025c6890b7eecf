"""The claims about the mechanism (Tour steps 2, 5, 6): logit lens, waves, ablations (step 1 is
core.claims.accuracy's, step 3 core.claims.last_digit's, step 4 core.claims.spectra's, imported here for old
callers). A step the paper did not measure on the run's task is
"not tested" (core.claims.base.unreported). Each rule is written in its function's docstring and
re-derived from the raw tables by tests/claims/test_tour.py."""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.phase_shift import wilson_interval
from core.claims.base import (
    Claim,
    judged,
    pct,
    periods,
    running_example_of,
    structural_reason,
)
from core.claims.periods import claim_periods, table1_energy
from core.claims.spectra import claim_multiplication_spectra as claim_multiplication_spectra  # step 4, re-exported
from core.claims.spectra import claim_spectra as claim_spectra
from core.paper import TABLE1_GPT2_XL, TABLE1_TAU
from core.runs.reader import Table
from core.runs.summaries import error_distribution, nearest_tau, table1
from core.tasks import expression_of_id

#: The approximate-before-exact gap must open by this fraction of the depth (GPT-2-XL: layers 20-30 of 48).
LENS_DEPTH = 0.75


def claim_logit_lens(run, final_norm: bool = False) -> Claim:
    """Step 2. Paper: in GPT-2-XL (48 layers) layers 20-30 are rarely exact but usually within 10.
    Measured: per layer, within ±10 minus exact (the gap), over the layers before the last.
    Verdict: agrees when some layer l <= 0.75 L (LENS_DEPTH) is within ±10 for at least half the
    prompts and exact for at least 25 points fewer, and the last layer is exact for at least 25 points
    more than that layer (exactness arrives late); partly when the largest gap before the last layer is
    at least 10 points (at any depth) and the last layer is exact for at least 10 points more than the
    gap's layer; else does not. A model of at most 2 layers "does not apply" whatever its one inner layer reads (no
    middle to read: every 2-layer run alike).
    (Without the last-layer condition a model that is off by one at every layer, the last included, would
    pass the gap test.)"""
    table = run.table(Table.LAYER_ACCURACY)
    acc = table[table["final_norm"] == final_norm].sort_values("layer")
    other = table[(table["final_norm"] != final_norm) & (table["layer"] == acc["layer"].max())]
    L = int(acc["layer"].max())
    inner = acc[acc["layer"] < L]
    gap = (inner["within_10"] - inner["exact"]) if len(inner) else pd.Series([0.0])
    best = inner.loc[gap.idxmax()] if len(inner) else acc.iloc[-1]
    g = float(gap.max()) if len(inner) else 0.0
    last = acc.iloc[-1]
    early = inner[
        (inner["layer"] <= LENS_DEPTH * L)
        & (inner["within_10"] >= 0.5)
        & (inner["within_10"] - inner["exact"] >= 0.25)
        & (float(last["exact"]) - inner["exact"] >= 0.25)
    ]
    if len(early):
        verdict = "agrees"
        best = early.loc[(early["within_10"] - early["exact"]).idxmax()]
        g = float(best["within_10"] - best["exact"])
    elif g >= 0.10 and float(last["exact"]) - float(best["exact"]) >= 0.10:
        verdict = "partly"
    else:
        verdict = "does not"
    measured = (
        f"Largest gap before the last layer: at layer {int(best['layer'])} of {L}, {pct(best['within_10'])} within "
        "±10 but "
        f"{pct(best['exact'])} exact; at the last layer, {pct(last['exact'])} exact"
    )
    if len(other):  # the same layer read the other way, so the lens's last layer is not mistaken for the model's answer
        how = (
            "W_U applied directly, as the paper does; through the final norm, as the model reads it:"
            if not final_norm
            else "through the final norm; W_U applied directly, as the paper does:"
        )
        measured += f" ({how} {pct(other['exact'].iloc[0])})"
    measured += "."
    reason = ""
    if L <= 2:  # the claim is about depth: a model this shallow cannot show it, whatever its one inner layer reads
        verdict = "does not apply"
        reason = f"with {L} layers there is no middle: the answer is either not there yet or already exact"
        measured = f"Does not apply to a model of {L} layers: no middle layer to read (the figure shows each one)."
    elif verdict == "does not" and g >= 0.10:
        reason = (f"the answer is approximated before the last layer, but the last layer is not much more exact "
                  f"({pct(last['exact'])} against {pct(best['exact'])}): exactness does not arrive late")
    elif verdict == "does not":
        reason = f"with {L} layers there is no middle: the answer is either not there yet or already exact"
    elif verdict == "partly" and g >= 0.25 and float(best["within_10"]) >= 0.5 and int(best["layer"]) > LENS_DEPTH * L:
        reason = (
            f"the gap opens only at layer {int(best['layer'])} of {L} ({int(best['layer']) / L:.0%} of the depth, "
            f"later than the {LENS_DEPTH:.0%} the rule allows); in GPT-2-XL it is there from layer 20 of 48"
        )
    elif verdict == "partly" and g >= 0.25 and float(best["within_10"]) >= 0.5:
        more = float(last["exact"]) - float(best["exact"])
        reason = (f"the answer is approximated by layer {int(best['layer'])} of {L}, but the last layer is only "
                  f"{100 * more:.1f} points more exact than it (the rule asks 25): exactness arrives only partly late")
    elif verdict == "partly":
        reason = "the answer is approximated before it is exact, but not for most prompts"
    return judged(Claim(
        "logit_lens",
        "In fine-tuned GPT-2-XL (48 layers), layers 20 to 30 are rarely exactly right but usually within ±10: the "
        "answer is approximated first and made exact only in the last layers.",
        measured,
        verdict,
        reason,
        {
            "layer": int(best["layer"]),
            "gap": g,
            "within_10": float(best["within_10"]),
            "exact": float(best["exact"]),
            "depth": LENS_DEPTH,
        },
        headline=measured if verdict == "does not apply" else (
            f"At layer {int(best['layer'])} of {L}: {pct(best['within_10'])} within ±10, {pct(best['exact'])} exact."
        ),
    ), run)


#: Share of examples whose top-5 sum must peak at the answer for "agrees"; for "partly", the top-10 sum's
#: share (WAVES_PARTLY_TOP10) or the top-5 sum's (WAVES_PARTLY_TOP5).
WAVES_AGREE, WAVES_PARTLY_TOP10, WAVES_PARTLY_TOP5 = 0.75, 0.75, 0.25


def claim_waves(run, top: int = 5) -> Claim:
    """Step 5. Paper: the top-5 Fourier components of the final logits for 15 + 93: long waves put a
    bump near 108, short ones (periods 2, 5, 10) pick the exact number; their sum peaks at 108.
    Measured over every example of the split (`wave_peaks`): the share whose top-5 sum (paper basis)
    peaks at the answer, and the same for the top 10; the running example's periods are shown too.
    Verdict: agrees when the top-5 sum peaks at the answer for at least 75% of the examples; partly
    when the top-10 sum does for at least 75%, or the top-5 for at least 25%; else does not. When the
    table rests on the run's cached sample only, each threshold is read off the 95% Wilson interval
    instead of the point: a level is reached when the interval's lower end reaches it and ruled out when
    its upper end stays below it, so a sample can fail as well as pass; a level neither reached nor ruled
    out leaves the verdict "not tested"."""
    peaks = run.table(Table.WAVE_PEAKS)
    share = {int(t): float(g["at_answer"].mean()) for t, g in peaks.groupby("top")}
    n = int((peaks["top"] == top).sum())
    s5, s10 = share.get(top, 0.0), share.get(10, 0.0)
    verdict = (
        "agrees"
        if s5 >= WAVES_AGREE
        else "partly"
        if (s10 >= WAVES_PARTLY_TOP10 or s5 >= WAVES_PARTLY_TOP5)
        else "does not"
    )
    acc = float(run.table(Table.EXAMPLES)["correct"].mean())
    whole = n == len(run.table(Table.EXAMPLES))
    (lo5, hi5), (lo10, hi10) = wilson_interval(s5, n), wilson_interval(s10, n)
    if not whole:
        if lo5 >= WAVES_AGREE:
            verdict = "agrees"
        elif hi5 < WAVES_AGREE and (lo10 >= WAVES_PARTLY_TOP10 or lo5 >= WAVES_PARTLY_TOP5):
            verdict = "partly"
        elif hi10 < WAVES_PARTLY_TOP10 and hi5 < WAVES_PARTLY_TOP5:
            verdict = "does not"
        else:
            verdict = "not tested"
    waves = run.table(Table.FINAL_WAVES)
    r = running_example_of(run)
    sub = waves[(waves["example_id"] == r.name) & (waves["basis"] == "paper") & (waves["rank"] <= top)]
    top_periods = [float(t) for t in sub.groupby("rank")["period"].first().sort_index()] if len(sub) else []
    measured = (
        f"Over {'all ' if whole else 'only the '}{n} examples, the sum of the top {top} components peaks at the "
        "answer for "
        f"{pct(s5)} and of the top 10 for {pct(s10)} (the model itself is right on {pct(acc)})."
    )
    if top_periods:
        measured += f" For {expression_of_id(r.name)} the top {top} periods are {periods(top_periods)}."
    reason = ""
    if verdict != "agrees":
        reason = waves_reason(s5, s10, top)
    if not whole:
        reason += (
            f"; only {n} examples could be read (the model's weights are not here): the shares could be as high as "
            f"{pct(hi5)} and {pct(hi10)} (95% interval)"
        )
    return judged(Claim(
        "waves",
        "For 15 + 93, the top 5 Fourier components of GPT-2-XL's final logits: long waves put a bump near 108, short "
        "waves (periods 2, 5, 10) pick 108 out of it; their sum peaks at 108.",
        measured,
        verdict,
        reason,
        {"share_top5": s5, "share_top10": s10, "n": n, "periods": top_periods, "accuracy": acc},
        headline=f"The top 5 waves peak at the answer for {pct(s5)} of {n} questions, the top 10 for {pct(s10)}.",
    ), run)


def waves_reason(s5: float, s10: float, top: int = 5) -> str:
    """Why the top-`top` sum falls short of "agrees", in words its own shares warrant ("more than half" above 50%,
    "few" below 25%), each beside its number; and what ten waves add, when they add anything."""
    if s5 >= WAVES_AGREE:  # a sample whose interval reaches below the bar: the point alone would agree
        said = (f"the top {top} waves place the answer for {pct(s5)} of the questions read, but too few were read to "
                f"tell it from the {pct(WAVES_AGREE)} the rule asks")
    elif s5 > 0.5:
        said = (f"the top {top} waves place the answer for more than half the questions ({pct(s5)}), short of the "
                f"{pct(WAVES_AGREE)} the rule asks")
    elif s5 >= 0.25:
        said = f"the top {top} waves place the answer for at most half the questions ({pct(s5)})"
    else:
        said = f"the top {top} waves place the answer for few questions ({pct(s5)})"
    if s10 > s5:
        return f"{said}; ten waves do for {pct(s10)}"
    return f"{said}, and ten waves do no better ({pct(s10)}): the final logits need more waves than a few"


#: Opposite-band cells must keep this share of the unfiltered accuracy; the paper's cells must fall
#: this far (accuracy, absolute) below both their opposite cell and their random control.
KEEP_SHARE, DROP = 0.90, 0.10

#: A module whose opposite band holds less than this share of the energy its two bands remove together carries
#: (nearly) nothing W_U reads outside its paper band: a control matched to that band's energy must remove the band
#: itself, so the paper cell cannot fall below it (no power, `ablation_pattern`).
SOLE_BAND_SHARE = 0.01


def sole_band_modules(energy: dict) -> set[str]:
    """The modules whose paper band (MLP: low, attention: high) holds all but SOLE_BAND_SHARE of what their two bands
    remove: `energy` is {(module, band removed): (share of the module's output energy the band removes, its
    control's)}."""
    out = set()
    for module, paper_band, other_band in (("mlp", "low", "high"), ("attn", "high", "low")):
        if (module, paper_band) in energy and (module, other_band) in energy:
            own, other = energy[(module, paper_band)][0], energy[(module, other_band)][0]
            if own > 0 and other < SOLE_BAND_SHARE * (own + other):
                out.add(module)
    return out


def opposite_cell(acc: float, ctrl: float, sd: float, base: float) -> str:
    """How a module's opposite-band cell reads (`claim_ablations` gives the rule): "harmless" (keeps 90% of the
    unfiltered accuracy), "against" (max(10, 2 sd) points below its random control of two draws or more: the band
    the paper calls harmless matters more than as many random directions), "no power" (not harmless, but its
    control breaks the model as much) or "harmful"."""
    if acc >= KEEP_SHARE * base:
        return "harmless"
    if np.isfinite(sd) and acc <= ctrl - max(DROP, 2 * sd):  # one draw has no spread to measure "well below" by
        return "against"
    return "no power" if ctrl < KEEP_SHARE * base else "harmful"


def ablation_pattern(cells: dict, base: float, sole: set[str] = frozenset()) -> dict:
    """Per module, whether it shows the paper's division of labour: True, False, or None (no power).

    cells: {(module, band): (accuracy, random-control accuracy (mean over draws), control sd (NaN: one draw))},
    band = the band removed. A failed test "has no power" where the random control of the same rank
    already breaks the model as much, unless the cell falls well below that control (then the band matters
    more than any: evidence against, not silence), and for the modules in `sole` whose paper cell hurts
    (`sole_band_modules`: the paper band is all the module writes that W_U reads, so a control matched to its energy
    removes all of that too); `claim_ablations` gives the rule.
    """
    out = {}
    for module, paper_band, other_band in (("mlp", "low", "high"), ("attn", "high", "low")):
        acc, ctrl, sd = cells.get((module, paper_band), (np.nan, np.nan, np.nan))
        other, other_ctrl, other_sd = cells.get((module, other_band), (np.nan, np.nan, np.nan))
        margin = max(DROP, 2 * sd) if np.isfinite(sd) else DROP
        opposite = opposite_cell(other, other_ctrl, other_sd, base)
        opposite_ok, opposite_powerless = opposite == "harmless", opposite == "no power"
        # below the opposite cell too, unless that cell has no power (then it is no yardstick)
        paper_ok = acc <= ctrl - margin and (acc <= other - DROP or opposite_powerless)
        # the control is at the floor, or removes all the module writes that W_U reads (`sole`, and the band's removal
        # hurts: a harmless removal says "does not" whatever the control does): no room to fall below it
        paper_powerless = not paper_ok and (ctrl < margin or (module in sole and acc < KEEP_SHARE * base))
        if opposite_ok and paper_ok:
            out[module] = True
        elif (opposite_ok or opposite_powerless) and (paper_ok or paper_powerless):
            out[module] = None
        else:
            out[module] = False
    return out


def informative_cells(ab: pd.DataFrame, tau, cells: dict, modules: list[str]) -> list[dict]:
    """The cells of the `modules` whose Table 1 test has no power that still say something: the band removed leaves
    at least max(10 points, 2 sd) less than its random control of two draws or more (matched to rank and energy, or,
    where that control is itself near the floor, the rank-only one): dicts of module, band, accuracy, control, sd,
    matched_on."""
    out = []
    for m in modules:
        for band in ("low", "high"):
            acc = cells.get((m, band), (np.nan,))[0]
            for kind, on in ((f"matched-{band}", "rank and energy"), (f"random-{band}", "rank")):
                draws = ab[(ab["modules"] == m) & (ab["removed"] == kind) & (ab["tau"] == tau)]["accuracy"]
                if len(draws) < 2:
                    continue
                mean, sd = float(draws.mean()), float(draws.std(ddof=1))
                if acc <= mean - max(DROP, 2 * sd):
                    out.append({"module": m, "band": band, "accuracy": float(acc), "control": mean, "sd": sd,
                                "matched_on": on})
                    break
    return out


def claim_ablations(run, tau: int = TABLE1_TAU) -> Claim:
    """Step 6. Paper (Table 1, tau = 50): removing the MLPs' low frequencies leaves GPT-2-XL 35.89% and
    attention's high ones 78.36%, while the opposite bands cost almost nothing (attention low 99.12%,
    MLP high 98.10%); MLP-low errors are multiples of 10, attention-high errors below 6.
    Measured at the cached tau nearest 50, each cell next to its random-subspace control: random directions
    W_U reads, removed from the same modules, as many as the band's rank and (where the run was computed with
    its weights at hand) tilted to remove the same share of the modules' output energy as the band does
    (`core.analysis.filters.energy_matched_filter`); older runs have rank-matched controls only, and say so,
    and a control whose draws remove, on average, more than half a point more or less energy than its band is
    named (`python -m core precompute` draws again any single draw that missed: core.runs.ablation_grid).
    A module shows the paper's pattern when its opposite-band cell keeps at least 90% of the
    unfiltered accuracy and its paper cell (MLP: low removed; attention: high removed) falls at least
    10 points below that opposite cell (unless that cell has no power, below) and at least max(10, 2 sd)
    points below its random control (the
    mean over the control's draws, sd their spread). An opposite cell that is not harmless while its
    own random control keeps less than 90% of the unfiltered accuracy has no power (a random subspace
    that large already breaks the model: the band is no worse than any), unless it falls max(10, 2 sd)
    points below that control, measured over two draws or more (the band the paper calls harmless
    matters more than as many random directions: evidence against the paper, and the reason says so;
    against one draw the reason says how far below it the cell is), and neither has a paper cell
    whose control is already within the margin of zero, nor one that hurts (under KEEP_SHARE of the unfiltered
    accuracy) while its band is all the module writes that W_U reads (its opposite band under SOLE_BAND_SHARE of the
    two bands' energy, controls matched on energy: a control removing as much energy removes all of that too,
    `sole_band_modules`); a module whose only failures are such is "no power", not "does not".
    Verdict: agrees when both modules show it, partly when one does, not tested when neither module's
    test has power, else does not (the reason names a module whose test had no power). Where neither module's
    test has power, the badge is the narrow test's (core.claims.periods.claim_periods: only the paper's periods
    removed, which random directions of the same energy do not break) unless that is "not tested" too, and Table 1
    stands beside it (`table1_verdict`); the cells of a module without power that still fall max(10, 2 sd) points
    below a random control are stated (`informative_cells`). The error shapes
    (multiples of 10 under MLP-low, below 6
    under attention-high) are reported beside it."""

    ab = run.table(Table.ABLATIONS)
    t = nearest_tau(ab, tau)
    t1 = table1(ab, t).set_index(["modules", "removed"])  # the numbers the Table 1 chart shows
    base = float(t1.loc[("none", "none"), "accuracy %"]) / 100
    cells = {}
    for m in ("attn", "mlp"):
        for r in ("low", "high"):
            row = t1.loc[(m, r)] if (m, r) in t1.index else None
            cells[(m, r)] = (
                (
                    float(row["accuracy %"]) / 100,
                    float(row["random control accuracy %"]) / 100,
                    float(row.get("random control sd", np.nan)) / 100,
                )
                if row is not None
                else (np.nan, np.nan, np.nan)
            )
    draws = int(t1["random control draws"].max()) if "random control draws" in t1.columns else 1
    matched_on = "rank and energy" if (t1.get("control matched on") == "rank and energy").any() else "rank"
    energy = table1_energy(t1.reset_index())
    sole = sole_band_modules(energy) if matched_on == "rank and energy" else set()
    pattern = ablation_pattern(cells, base, sole)
    shown = [v for v in pattern.values() if v]
    if len(shown) == len(pattern):
        verdict = "agrees"
    elif shown:
        verdict = "partly"
    elif all(v is None for v in pattern.values()):
        verdict = "not tested"
    else:
        verdict = "does not"
    errors = run.table(Table.ABLATION_ERRORS)
    shape = {}
    for key, (m, r) in {"mlp_low_mult10": ("mlp", "low"), "attn_high_below6": ("attn", "high")}.items():
        d = error_distribution(errors, m, r, t)
        total = d["count"].sum()
        if total:
            hit = (
                d.loc[d["multiple of 10"], "count"].sum()
                if key == "mlp_low_mult10"
                else d.loc[d["error"].abs() < 6, "count"].sum()
            )
            shape[key] = float(hit / total)

    def cell(m, r):
        acc, ctrl, sd = cells[(m, r)]
        spread = f" ± {100 * sd:.1f}" if np.isfinite(sd) else ""
        return f"{pct(acc)} (random control {pct(ctrl)}{spread})"

    # a matched control whose draws, on average, did not reach the band's share within half a point
    unmatched = [(m, r, band, ctrl) for (m, r), (band, ctrl) in energy.items() if abs(band - ctrl) > 0.005]
    measured = (
        f"At tau = {t}, unfiltered {pct(base)}: MLP low removed {cell('mlp', 'low')}, MLP high removed "
        f"{cell('mlp', 'high')}; "
        f"attention high removed {cell('attn', 'high')}, attention low removed {cell('attn', 'low')}"
        + (f" (controls: mean ± sd of {draws} random draws" if draws > 1 else " (controls: one random draw")
        + (", each matched to its band's rank and removed energy)." if matched_on == "rank and energy"
           else ", matched to its band's rank only: this run was cached without its weights' energy measure).")
    )
    if matched_on == "rank and energy" and unmatched:
        measured += " Not every control reached its band's energy (mean over its draws): " + "; ".join(
            f"{'MLP' if m == 'mlp' else 'attention'} {r} band {pct(band)} of the energy, its control {pct(ctrl)}"
            for m, r, band, ctrl in unmatched) + "."
    if "mlp_low_mult10" in shape:
        measured += f" Without the MLPs' low band, {pct(shape['mlp_low_mult10'])} of the errors are multiples of 10"
        measured += (
            f"; without attention's high band, {pct(shape['attn_high_below6'])} are below 6."
            if "attn_high_below6" in shape
            else "."
        )
    paper = TABLE1_GPT2_XL
    bits = []
    alone = [m for m in ("mlp", "attn") if pattern[m] is None and m in sole]
    if len(alone) == 2:  # one clause for both, not the same clause twice
        bits.append("neither module's test has power here: each writes nothing W_U reads outside its paper band (the "
                    f"MLPs' high band {pct(energy[('mlp', 'high')][0], 2)} of their energy, attention's low band "
                    f"{pct(energy[('attn', 'low')][0], 2)}), so random directions removing as much energy remove "
                    "that band itself")
    for m, other in (("mlp", "high"), ("attn", "low")):
        if pattern[m] or len(alone) == 2:  # shown, or said above for both
            continue
        acc_other = cells[(m, other)][0]
        name = "the MLPs'" if m == "mlp" else "attention's"
        acc_paper, ctrl_paper, sd_paper = cells[(m, paper_band := "low" if m == "mlp" else "high")]
        other_ctrl, other_sd = cells[(m, other)][1], cells[(m, other)][2]
        opposite = opposite_cell(acc_other, other_ctrl, other_sd, base)
        if pattern[m] is None and m in sole:
            said = (f"{name} test has no power here: its {paper_band} band is all it writes that W_U reads (the "
                    f"{other} band {pct(energy[(m, other)][0], 2)} of its energy), so random directions removing as "
                    "much energy remove all of that too")
            bits.append(said)
        elif pattern[m] is None:
            said = f"{name} test has no power here: as many random directions removed already break the model"
            if not np.isfinite(other_sd) and acc_other <= other_ctrl - DROP:
                said += (f" (removing its {other} band leaves {pct(acc_other)}, {100 * (other_ctrl - acc_other):.1f} "
                         f"points below its one random draw, {pct(other_ctrl)}: one draw has no spread to judge by)")
            bits.append(said)
        elif opposite == "against":
            bits.append(
                f"removing {name} {other} band costs {100 * (other_ctrl - acc_other):.1f} points more than as many "
                f"random directions ({pct(acc_other)} against {pct(other_ctrl)}): the band the paper finds harmless "
                "matters here (evidence against)"
            )
        elif opposite == "no power":  # no yardstick: the paper cell itself fell short of its control
            spread = f" ± {100 * sd_paper:.1f}" if np.isfinite(sd_paper) else ""
            need = max(DROP, 2 * sd_paper) if np.isfinite(sd_paper) else DROP
            gap = ctrl_paper - acc_paper
            where = (f"only {100 * gap:.1f} points below" if gap >= 0
                     else f"{100 * -gap:.1f} points above")  # the band hurts less than random directions
            bits.append(f"removing {name} {paper_band} band leaves {pct(acc_paper)}, {where} removing as many random "
                        f"directions ({pct(ctrl_paper)}{spread}), where the rule asks {100 * need:.1f} below")
        elif opposite == "harmful":
            bits.append(f"removing {name} {other} band is not harmless ({pct(acc_other)})")
        else:
            bits.append(
                f"{name} {'low' if m == 'mlp' else 'high'} band costs less than 10 points more than the opposite band "
                "or as many random directions"
            )
    reason = "; ".join(bits) if bits else ""
    if verdict != "agrees" and structural_reason(run):
        reason = f"{reason}; {structural_reason(run)}" if reason else structural_reason(run)
    table1_verdict, decided_by = verdict, "Table 1"
    informative = informative_cells(ab, t, cells, [m for m, v in pattern.items() if v is None])
    if informative:
        measured += " Cells that say something where the test has no power: " + "; ".join(
            f"removing {'the MLPs' if c['module'] == 'mlp' else 'attention'}'{'' if c['module'] == 'mlp' else 's'} "
            f"{c['band']} band leaves "
            f"{pct(c['accuracy'])} against {pct(c['control'])} ± {100 * c['sd']:.1f} for random directions of the "
            f"same {c['matched_on']}" for c in informative) + "."
    narrow = claim_periods(run) if verdict == "not tested" else None
    if narrow is not None and narrow.verdict != "not tested":  # the powered test decides where Table 1 cannot
        verdict, decided_by = narrow.verdict, "the narrow test"
        measured = (f"Decided by the narrow test (only the periods 2, 2.5, 5, 10 removed), since Table 1 has no "
                    f"power here: {narrow.headline} Table 1 beside it: {measured}")
        def silent_because(m: str) -> str:  # why module m's test had no power
            hurts = cells[(m, "low" if m == "mlp" else "high")][0] < KEEP_SHARE * base
            return ("a module's band is all it writes that W_U reads" if m in sole and hurts
                    else "as many random directions as a band already break the model")

        why = "; ".join(dict.fromkeys(silent_because(m) for m, v in pattern.items() if v is None))
        reason = f"{narrow.reason}; Table 1 cannot tell: {why}" if narrow.reason else ""
    return judged(Claim(
        "ablations",
        f"In GPT-2-XL (tau = 50) removing the MLPs' low frequencies leaves {paper[('mlp', 'low')][1]}% and attention's "
        f"high ones {paper[('attn', 'high')][1]}%, while the opposite bands cost almost nothing "
        f"({paper[('attn', 'low')][1]}%, {paper[('mlp', 'high')][1]}%): MLPs approximate, attention classifies.",
        measured,
        verdict,
        reason,
        {
            "tau": t,
            "base": base,
            "accuracy": {f"{m}-{r}": v[0] for (m, r), v in cells.items()},
            "control": {f"{m}-{r}": v[1] for (m, r), v in cells.items()},
            "control_sd": {f"{m}-{r}": v[2] for (m, r), v in cells.items()},
            "draws": draws,
            "matched_on": matched_on,
            "energy": {f"{m}-{r}": band for (m, r), (band, _) in energy.items()},
            "control_energy": {f"{m}-{r}": ctrl for (m, r), (_, ctrl) in energy.items()},
            "unmatched_controls": [f"{m}-{r}" for m, r, _, _ in unmatched],
            "pattern": pattern,
            "error_shape": shape,
            "table1_verdict": table1_verdict,
            "decided_by": decided_by,
            "informative": informative,
        },
        headline=f"MLP low removed: {cell('mlp', 'low')}; attention high removed: {cell('attn', 'high')}.",
    ), run)
