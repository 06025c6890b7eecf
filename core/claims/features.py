"""The claims about where the features come from and how the model errs (Tour steps 7-8, Numbers,
Behaviour): number embeddings and representations, training with frozen rows, errors that are
multiples of 10. Each rule is written in its function's docstring and re-derived by tests."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from core.claims.base import Claim, judged, pct, periods, seeds, task_of
from core.paper import ACCURACY, OUTLIER_PERIODS
from core.runs.origin import built_control, rows_trained, run_origin, seed_of_manifest
from core.runs.reader import Table
from core.runs.summaries import best_probe_layer, number_summary


def rows_origin(run) -> dict:
    """Whose number rows a run's model has. `inherited`: the rows started as a pre-trained model's own vectors (a
    number-token fine-tuning's: its base model's representation of each number; a transplant's: another model's rows
    or representation, frozen). `moved`: the median over the numbers of how far training moved each row, relative to
    its start's norm, with `cosine` the median cosine between row and start: 0 and 1 where the recipe froze the rows
    (they cannot move), the `number_rows_origin` table's medians where they were trained (core.training.row_start),
    None where that table is absent. `source`: where they came from, in words."""
    origin = run_origin(run.manifest)
    recipe = origin["recipe"] or {}
    spec, freeze = recipe.get("number_tokens"), recipe.get("freeze") or {}
    if origin["kind"] == "fine-tuned" and spec:
        base = ((run.manifest.get("model") or {}).get("provenance") or {}).get("base_provenance") or {}
        model = str(base.get("model") or recipe.get("init_from", "?")).split(" (")[0]  # its maker's name left out
        source = f"{model}'s after block {spec.get('layer', '?')} of {spec.get('context', '?')!r}"
        frozen = not rows_trained(recipe)
    elif origin["kind"] == "transplanted":
        donor = str(freeze.get("source", "?")).rstrip("/").split("/")[-1]  # models/smollm2-135m: smollm2-135m
        source = (f"{donor}'s after block {freeze.get('layer', '?')} of {freeze.get('context', '?')!r}"
                  if freeze.get("kind") == "representation" else f"{donor}'s number embeddings")
        frozen = True
    else:
        return {"inherited": False, "source": "", "moved": None, "cosine": None}
    if frozen:
        return {"inherited": True, "source": source, "moved": 0.0, "cosine": 1.0}
    table = run.table(Table.NUMBER_ROWS_ORIGIN) if run.has(Table.NUMBER_ROWS_ORIGIN) else None
    if table is None or table.empty:
        return {"inherited": True, "source": source, "moved": None, "cosine": None}
    return {"inherited": True, "source": source, "moved": float(table["moved"].median()),
            "cosine": float(table["cosine"].median())}


def origin_sentence(o: dict) -> str:
    """The reason's words for inherited rows: whose they are and how far training moved them."""
    if o["moved"] is None:
        moved = "how far training moved them is not measured in this run"
    elif o["moved"] == 0.0 and o["cosine"] == 1.0:
        moved = "they were kept frozen: moved 0%"
    else:
        moved = f"training moved them by a median {o['moved']:.0%} of their norm"
    return f"the rows are inherited from pre-training's representation, {o['source']}; {moved}"


#: The probe that reads each of the paper's periods: n mod T for T = 2, 5, 10; period 2.5 is a harmonic of n mod 5.
PERIOD_MODULUS = {2.0: 2, 2.5: 5, 5.0: 5, 10.0: 10}


def separated_moduli(probes: pd.DataFrame, layer: int) -> set[int]:
    """The moduli whose linear probe separates the numbers at `layer`: the split band of its kappa (mean ± 2 sd /
    sqrt(splits), over its held-out splits: a spread of the splits, not a confidence interval) lies wholly above the
    band of every control modulus (mod 3 and mod 7, which the paper's features do not encode)."""
    at = probes[probes["layer"] == layer]
    half = 2 * at["kappa_sd"] / np.sqrt(at["n_splits"].clip(lower=1))
    control = (at["role"] == "control").to_numpy()
    if not control.any():
        return set()
    bar = float((at["kappa_mean"] + half)[control].max())
    low = (at["kappa_mean"] - half).to_numpy()
    return {int(m) for m, lo, c in zip(at["modulus"], low, control) if not c and lo > bar}


def counted_periods(spikes, probes: pd.DataFrame, layer: int) -> list[float]:
    """The paper's periods a features verdict counts: a spectrum outlier (a spike) whose modulus's probe separates
    the numbers at the same layer (`separated_moduli`). A spike alone is not yet a mechanism: the same spikes appear
    in models of every kind and in raw counts of how often numbers occur (Fu et al. 2026), so a spike the probe
    cannot separate is not counted. Its limit: periods 2.5 and 5 share the mod-5 probe, and n mod 10 is fixed by n mod 2
    and n mod 5, so period 10's probe separates wherever those two do; the gate tells a spike with no linear code
    from one with a code, not period 10's own feature from the other two."""
    separated = separated_moduli(probes, layer)
    return [float(t) for t in spikes if PERIOD_MODULUS.get(float(t)) in separated]


def spikes_said(spikes, counted) -> str:
    """'2, 5 and 10 (separable by their probes: 2, 5)' for the measured text."""
    if not spikes:
        return "none"
    listed = ", ".join(f"{t:g}" for t in spikes)
    sep = ", ".join(f"{t:g}" for t in counted) or "none"
    return f"{listed} (separable by their probes, so counted: {sep})"


def _feature_verdict(origin: str, n_short: int, inherited: dict | None = None) -> tuple[str, str]:
    """(verdict, reason) from how many of periods 2, 2.5, 5, 10 count (`counted_periods`): planted -> not tested; from
    scratch -> agrees with none; otherwise (pre-trained, and rows inherited from pre-training: `rows_origin`, whose
    words the reason gives) agrees with 3 or 4, partly with 1 or 2, does not with none."""
    if origin == "planted":
        return "not tested", "these periods were planted by hand, so finding them proves nothing about pre-training"
    if origin == "scratch":
        return ("agrees" if n_short == 0 else "does not"), ""
    reason = origin_sentence(inherited) if inherited and inherited["inherited"] else ""
    return ("agrees" if n_short >= 3 else "partly" if n_short >= 1 else "does not"), reason


def digit_derived(run) -> str:
    """Why the number vectors carry period 10 by construction, if they do: rows inherited from (or read at) the
    hidden state at the last digit token of a model that splits numbers into digits. "" when not."""
    origin = run_origin(run.manifest)
    recipe = origin["recipe"] or {}
    inherited = ((origin["kind"] == "fine-tuned" and recipe.get("number_tokens"))
                 or (origin["kind"] == "transplanted" and (recipe.get("freeze") or {}).get("kind") == "representation"))
    if inherited:
        return ("the rows are read at the last digit's token of a model that reads numbers digit by digit, so they "
                "hold the last digit (periods 10, 5, 2.5, 2)")
    if (run.manifest.get("number_representations") or {}).get("single_token") is False:
        return (
            "its tokenizer writes numbers as digits, so the vector at a number's last token depends on its last digit "
            "by construction"
        )
    return ""


def digit_verdict(run, verdict: str, reason: str, kappa: dict | None = None) -> tuple[str, str]:
    """Where a digit-splitting tokenizer built the periods in (`digit_derived`), finding them could not have failed:
    "agrees" and "partly" become "not tested", the reason's measured clause first (the probes' Cohen's kappa for
    n mod 2, 5, 10, where the run has them), then why, then whose rows they are (`reason`). "does not" stays (it
    could fail)."""
    why = digit_derived(run)
    if not why or verdict not in ("agrees", "partly"):
        return verdict, (f"{reason}; {why}" if reason and why else reason or why)
    mods = [m for m in (2, 5, 10) if kappa and m in kappa]
    first = (f"linear probes read n mod {', '.join(map(str, mods))} at Cohen's kappa "
             f"{', '.join(f'{kappa[m]:.2f}' for m in mods)}; " if mods else "")
    said = f"{first}this could not have failed: {why}"
    return "not tested", (f"{said}; {reason}" if reason else said)


def claim_embeddings(run, basis: str = "paper") -> Claim:
    """Step 7. Paper: number embeddings of pre-trained GPT-2-XL, Phi-2, RoBERTa have outliers at
    periods 2, 2.5, 5, 10; trained from scratch, none.
    Measured: which of 2, 2.5, 5, 10 are outliers (family-wise null) of the input number rows, and which of those
    the layer-0 probe of their modulus separates (`counted_periods`: only those count).
    Verdict by origin, counting only the periods `counted_periods` keeps: planted features -> not tested (we put
    them there); from scratch -> agrees when none counts; pre-trained, or rows inherited from pre-training (a fine-
    tuning's or a transplant's, alike: the reason says whose they are and how far training moved them,
    `rows_origin`) -> agrees with 3 or 4 of them, partly with 1 or 2, does not with none; where a
    digit-splitting tokenizer built the periods in (`digit_derived`), "not tested" in place of agrees or partly:
    finding them could not have failed (`digit_verdict`)."""
    spec = run.table(Table.EMBEDDING_SPECTRUM)
    spec = spec[(spec["basis"] == basis) & (spec["matrix"] == "input")]
    outl = spec[spec["outlier"]]
    spikes = sorted({t for t in OUTLIER_PERIODS if (np.isclose(outl["period"], t, atol=0.05)).any()})
    found = counted_periods(spikes, run.table(Table.NUMBER_PROBES), 0)  # layer 0: the rows themselves
    top = [float(t) for t in outl.sort_values("magnitude", ascending=False)["period"].head(6)]
    origin = run_origin(run.manifest)["kind"]
    verdict, reason = _feature_verdict(origin, len(found), rows_origin(run))
    if origin == "self-pretrained" and verdict != "agrees":
        reason = "pre-training a 2-layer model on a small synthetic corpus did not produce them"
    probes = run.table(Table.NUMBER_PROBES)
    at0 = probes[(probes["layer"] == 0) & (probes["role"] != "control")]
    verdict, reason = digit_verdict(run, verdict, reason, dict(zip(at0["modulus"].astype(int), at0["kappa_mean"])))
    measured = (
        f"{len(outl)} of {len(spec)} frequencies of the input number rows stand above the shuffled-numbers threshold"
        + (f" (top periods {periods(top)})" if top else "")
        + f"; of 2, 2.5, 5 and 10: {spikes_said(spikes, found)}."
    )
    return Claim(
        "embeddings",
        "The number embeddings of pre-trained GPT-2-XL, Phi-2 and RoBERTa have outliers at periods 2, 2.5, 5 and 10; "
        "the same model trained from scratch has none.",
        measured,
        verdict,
        reason,
        {"outliers": int(len(outl)), "short_found": found, "spikes": spikes, "origin": origin},
        headline=(
            f"Periods {', '.join(f'{t:g}' for t in found)} in the number rows: spectrum outliers the probes separate."
            if found
            else f"Spikes at {', '.join(f'{t:g}' for t in spikes)} in the number rows, but no probe separates them."
            if spikes
            else "No spectrum outlier at periods 2, 2.5, 5 or 10 in the number rows."
        ),
    )


def claim_numbers(run, basis: str = "paper") -> Claim:
    """Numbers step. Paper: pre-trained models' number embeddings have outliers at periods 2, 2.5,
    5, 10 (GPT-2-XL, Phi-2, RoBERTa...); from scratch none. The paper looks at the embedding only;
    the run's tables hold every layer's representation of the numbers (core.analysis.numbers).
    Measured: at the layer where probes read n mod 2, 5, 10, 100 best, which of 2, 2.5, 5, 10 are
    spectrum outliers (family-wise null), and the probes' kappas there (controls mod 3, 7); a spike counts only where
    its modulus's probe separates the numbers there (`counted_periods`).
    Verdict by origin, as for the embeddings: planted -> not tested; from scratch -> agrees when none
    of the four counts at layer 0; otherwise (rows inherited from pre-training included, the reason saying
    whose they are and how far they moved) agrees with 3 or 4 of them at the best layer, partly with 1 or 2, does
    not with none; "not tested" in place of agrees or partly where a digit-splitting tokenizer built the periods in
    (`digit_verdict`: a vector read at the last digit's token holds that digit, so the periods and the probes for n mod
    2, 5, 10 could not have failed); "does not" stays."""

    spectrum, probes = run.table(Table.NUMBER_SPECTRUM), run.table(Table.NUMBER_PROBES)
    origin = run_origin(run.manifest)["kind"]
    layer = 0 if origin == "scratch" else best_probe_layer(probes)
    s = number_summary(spectrum, probes, layer, basis)
    found = counted_periods(s["short_periods"], probes, layer)
    verdict, reason = _feature_verdict(origin, len(found), rows_origin(run))
    kap = s["kappa"]
    verdict, reason = digit_verdict(run, verdict, reason, {int(m): float(k) for m, k in kap.items()})
    reads = ", ".join(f"mod {t} {kap[t]:.2f}" for t in sorted(kap) if t not in s["controls"])
    ctl = ", ".join(f"mod {t} {kap[t]:.2f}" for t in s["controls"])
    info = run.manifest.get("number_representations") or {}
    where = "the embedding" if layer == 0 else f"layer {layer}"
    measured = (
        f"At {where}{' (where the probes read best)' if origin != 'scratch' else ''}: {s['n_outliers']} of "
        f"{s['n_frequencies']} frequencies above the shuffled-numbers threshold; of 2, 2.5, 5 and 10: "
        f"{spikes_said(s['short_periods'], found)}. Probe kappa {reads} "
        f"(Cohen's kappa: 1 is perfect, 0 is guessing; the controls {ctl}"
        + (": below 0, the nearest numbers in this representation do not share n's remainder)"
           if min(kap[t] for t in s["controls"]) < 0 else ", which should read nothing)")
        + (f", numbers read in {info['context']!r}." if info.get("context") else ".")
    )
    return Claim(
        "numbers",
        "The number embeddings of pre-trained GPT-2-XL, Phi-2 and RoBERTa have outliers at periods 2, 2.5, 5 and 10; "
        "the same model trained from scratch has none.",
        measured,
        verdict,
        reason,
        {
            "layer": layer,
            "short_found": found,
            "spikes": s["short_periods"],
            "outliers": s["n_outliers"],
            "kappa": kap,
            "origin": origin,
        },
        headline=(
            f"At {where}: periods {', '.join(f'{t:g}' for t in found)} spike and their probes separate them (n mod 10 "
            f"at kappa {kap.get(10, float('nan')):.2f})."
            if found
            else f"At {where}: spikes at {', '.join(f'{t:g}' for t in s['short_periods'])}, but no probe separates "
            "them."
            if s["short_periods"]
            else f"At {where}: no spectrum outlier at periods 2, 2.5, 5 or 10."
        ),
    )


def claim_training(runs) -> Claim:
    """Step 8 (over every run with a training log). Paper: GPT-2-small reaches 53.95% from scratch
    and 100% with frozen pre-trained number embeddings (5 seeds).
    Measured: final validation accuracy, mean over seeds at each width, of runs with planted or
    transplanted frozen rows against runs from scratch. Verdict: agrees when a frozen-feature run
    reaches >= 95% and beats the scratch run of the same width by >= 20 points, with features
    transplanted from a pre-trained model; partly when the same holds with planted sinusoids (the
    rescue, but not by pre-trained features); does not when no frozen run beats scratch so. Only runs of the
    paper's task (addition in words) count: runs of the other tasks are compared on the Tour's last step; a control
    built with its modules held to bands (a recipe's `module_bands`) is not one of the paper's models and does not
    count."""
    rows = []
    for r in runs:
        if Table.TRAINING_LOG not in (r.manifest.get("tables") or {}) or task_of(r) != "addition":
            continue
        if seed_of_manifest(r.manifest) is not None:  # its log is in its shipped model's run
            continue
        if built_control(r.manifest):
            continue
        log = r.table(Table.TRAINING_LOG)
        log = log[log["split"] == "val"]
        if log.empty:
            continue
        widths = log["width"] if "width" in log.columns else pd.Series(r.manifest.get("width"), index=log.index)
        for w, g in log.groupby(widths):
            final = g[g["epoch"] == g["epoch"].max()]
            rows.append(
                {
                    "label": r.manifest.get("label", "?"),
                    "kind": run_origin(r.manifest)["kind"],
                    "tied": (r.manifest.get("model") or {}).get("tied_embeddings"),
                    "width": int(w),
                    "accuracy": float(final["accuracy"].mean()),
                    "seeds": int(final["seed"].nunique()),
                    "epochs": int(g["epoch"].max()),
                }
            )
    table = pd.DataFrame(rows)
    paper = (
        f"GPT-2-small trained on addition reaches {ACCURACY['GPT-2-small from scratch']}% from scratch and "
        f"{ACCURACY['GPT-2-small, frozen pre-trained embeddings']:.0f}% with GPT-2's pre-trained number embeddings "
        "frozen in (5 seeds)."
    )
    if table.empty or not (table["kind"] == "scratch").any():
        return Claim(
            "training",
            paper,
            "No run with a training log from scratch to compare with.",
            "not tested",
            "needs training logs of the demo models",
            {"table": rows},
        )
    best = None
    for kind in ("transplanted", "planted"):
        frozen = table[(table["kind"] == kind) & (table["tied"] != False)]  # noqa: E712 (None: unknown, counts as tied)
        for fr in frozen.itertuples():
            sc = table[(table["kind"] == "scratch") & (table["width"] == fr.width)]
            if sc.empty:
                continue
            s = sc.iloc[0]
            gap = fr.accuracy - s["accuracy"]
            if best is None or (fr.accuracy >= 0.95 and gap >= 0.2 and not best[3]):
                best = (fr, s, kind, fr.accuracy >= 0.95 and gap >= 0.2)
        if best is not None and best[3]:
            break
    if best is None:
        return Claim(
            "training",
            paper,
            "No frozen-feature run shares a width with a run from scratch.",
            "not tested",
            "",
            {"table": rows},
        )
    fr, s, kind, rescued = best
    verdict = ("agrees" if kind == "transplanted" else "partly") if rescued else "does not"
    measured = (
        f"After {fr.epochs} epochs at width {fr.width}: {fr.label} {pct(fr.accuracy)} ({seeds(fr.seeds)}) "
        f"against {s['label']} {pct(s['accuracy'])} ({seeds(s['seeds'])}) on validation."
    )
    gain = 100 * (fr.accuracy - s["accuracy"])
    given = "a pre-trained model's number representations" if kind == "transplanted" else "sinusoids"
    reason = (f"{given}, frozen in, take the same network from {pct(s['accuracy'])} to {pct(fr.accuracy)} "
              f"({gain:+.1f} points)")
    reason += {"agrees": ": at least 95% and 20 points up, as the rule asks",
               "partly": ": the rescue the rule asks (at least 95% and 20 points up), but by sinusoids planted by "
                         "hand, not by features a model learned in pre-training",
               "does not": "; the rule asks at least 95% and 20 points up"}[verdict]
    return Claim("training", paper, measured, verdict, reason, {"table": rows, "kind": kind})


#: Errors needed for a behaviour verdict, and the one-sided binomial level against the 10% base rate.
MIN_ERRORS, BEHAVIOUR_ALPHA, BASE_RATE = 20, 0.01, 0.10


def claim_behaviour(run) -> Claim:
    """Behaviour. Paper: the errors of prompted LLMs are mostly multiples of 10 (4-shot GPT-J 93%,
    Phi-2 73%; 0-shot GPT-3.5 and GPT-4 100%): the last digit is right, the size is off.
    Measured: of the run's wrong numeric answers (the model unfiltered; for a k-shot run, the most
    shots), the share whose error is a multiple of 10. The null: an error with no last-digit
    structure is a multiple of 10 one time in 10. Verdict: not tested with fewer than 20 wrong
    answers; agrees when the share is at least 50% and above 10% by a one-sided binomial test at
    p < 0.01; partly when only the test passes; else does not."""

    ea = run.table(Table.ERROR_ANALYSIS)
    if "model" in set(ea["source"]):
        row, what = ea[ea["source"] == "model"].iloc[0], "unfiltered"
    else:
        shots = ea[ea["source"].str.endswith("-shot")]
        row = shots.loc[shots["source"].str.removesuffix("-shot").astype(int).idxmax()]
        what = row["source"]
    wrong = int(row.get("n_wrong_numbers", row["n_wrong"]))
    share = float(row["share_multiple_of_10"]) if wrong else float("nan")
    paper = (
        "The errors of prompted LLMs are mostly multiples of 10: 4-shot GPT-J 93%, Phi-2 73%; GPT-3.5 and GPT-4 "
        "100%. The last digit is right and the size is off."
    )
    if wrong < MIN_ERRORS:
        return judged(Claim(
            "behaviour",
            paper,
            f"The model ({what}) makes {wrong} wrong numeric answers of {int(row['n'])}: too few to judge.",
            "not tested",
            f"fewer than {MIN_ERRORS} errors",
            {"n_wrong": wrong},
        ), run)
    hits = int(round(share * wrong))
    p_value = float(binomtest(hits, wrong, BASE_RATE, alternative="greater").pvalue)
    significant = p_value < BEHAVIOUR_ALPHA
    verdict = "agrees" if significant and share >= 0.5 else "partly" if significant else "does not"
    within2 = row.get("share_within_2")
    measured = (
        f"Of {wrong} wrong answers ({what}), {pct(share)} are off by a multiple of 10 (chance: 10%; one-sided "
        f"binomial p = {p_value:.2g})" + (f"; {pct(within2)} are off by at most 2." if pd.notna(within2) else ".")
    )
    reason = ""
    if verdict == "partly":  # the rule's own reason: beyond chance, short of half
        reason = f"more than chance (p = {p_value:.2g}), but {pct(share)} is short of the half that 'agrees' needs"
    if verdict == "does not" and pd.notna(within2) and within2 >= 0.5:
        reason = (
            "its errors are off-by-one or two: the size is right and the last digit is off, the opposite of the paper's"
        )
    if verdict == "does not" and not reason:
        reason = f"no more multiples of 10 than chance would give (p = {p_value:.2g})"
    return judged(Claim(
        "behaviour",
        paper,
        measured,
        verdict,
        reason,
        {"n_wrong": wrong, "share_multiple_of_10": share, "p_value": p_value, "source": what},
        headline=f"{pct(share)} of {wrong} wrong answers are off by a multiple of 10 (chance: 10%).",
    ), run)
