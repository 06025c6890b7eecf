"""Tour step 9, "the same waves, another operation": one run of each task (addition, multiplication, addition in the
reverse-Polish format) side by side, each measured as its own task's claims measure it, beside the paper's
multiplication finding. The runs are chosen by `operation_runs`; the verdict rule is in `claim_operations`'s
docstring. The frames the step's figures draw are computed here too (`operation_accuracy`, `period_ratios`,
`module_carriers`), so the figures and the sentences read the same numbers. No Streamlit here."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from core.analysis.fourier import BASELINE_RATIO, ratio_bar, reachable_ratio
from core.analysis.phase import SHORT_PERIODS, locked
from core.claims.accuracy import commonest_answer_of, validation_accuracy
from core.claims.base import Claim, pct, periods, same_period, task_of
from core.claims.shift_rule import causal_test, shift_summary
from core.paper import ACCURACY, MULTIPLICATION_ACCURACY_VAL, MULTIPLICATION_OUTLIER_PERIODS, OUTLIER_PERIODS
from core.runs.origin import run_origin
from core.runs.reader import Table
from core.runs.summaries import MODULE_NAMES
from core.tasks import task_name

#: The tasks the step compares, in the order it shows them.
OPERATIONS = ("addition", "multiplication", "reverse-polish")
#: The periods the step's figure reads for every run: addition's four and the one multiplication adds.
COMPARED_PERIODS = tuple(sorted(set(OUTLIER_PERIODS) | set(MULTIPLICATION_OUTLIER_PERIODS), reverse=True))
#: The model kind the step prefers when the sidebar's run has no twin for every task: planted (Fourier-frozen), tied.
FALLBACK_KIND = ("planted", True)


def model_kind(run) -> tuple[str, bool | None]:
    """What kind of model a run's is (core.runs.origin kind, tied embeddings): runs alike in this are compared."""
    return run_origin(run.manifest)["kind"], (run.manifest.get("model") or {}).get("tied_embeddings")


def operation_runs(runs: list, chosen) -> dict:
    """One run per task of OPERATIONS that has a run with module spectra (single-token numbers), by task: the
    sidebar's run (`chosen`) for its own task; for the others the run of the same kind of model (model_kind), so
    that only the operation differs. When not every task has a run of that kind, the Fourier-frozen (planted,
    tied) runs, else each task's first run in display order."""
    usable = [r for r in runs if r.has(Table.MODULE_SPECTRA) and r.has(Table.EXAMPLES)]
    by_task = {t: [r for r in usable if task_of(r) == t] for t in OPERATIONS}
    by_task = {t: rs for t, rs in by_task.items() if rs}
    kinds = ([model_kind(chosen)] if chosen in usable else []) + [FALLBACK_KIND]
    for kind in kinds:
        alike = {t: [r for r in rs if model_kind(r) == kind] for t, rs in by_task.items()}
        if all(alike.values()):
            picked = {t: rs[0] for t, rs in alike.items()}
            if chosen in usable and model_kind(chosen) == kind:
                picked[task_of(chosen)] = chosen
            return picked
    return {t: rs[0] for t, rs in by_task.items()}


#: A kind of model (core.runs.origin kind) in a few words.
KIND_WORDS = {
    "planted": "Fourier-frozen",
    "transplanted": "frozen pre-trained rows",
    "self-pretrained": "pre-trained here",
    "scratch": "from-scratch",
    "fine-tuned": "fine-tuned real LLM",
    "external": "pre-trained real LLM",
}


def kind_name(run) -> str:
    """A run's kind of model (`model_kind`) in words, with its depth: "2-layer Fourier-frozen (...), tied"."""
    kind, tied = model_kind(run)
    ties = {True: ", tied", False: ", untied"}.get(tied, "") if kind in ("planted", "transplanted") else ""
    return f"{run.n_layers}-layer {KIND_WORDS.get(kind, kind)}{ties}"


def missing_of_kind(runs: list, chosen) -> list[str]:
    """The tasks of OPERATIONS (other than `chosen`'s own) with no usable run (module spectra and examples) of
    `chosen`'s kind of model among `runs`: why `operation_runs` shows runs of another kind. Empty when every task has
    one."""
    usable = [r for r in runs if r.has(Table.MODULE_SPECTRA) and r.has(Table.EXAMPLES)]
    kind = model_kind(chosen)
    return [t for t in OPERATIONS if t != task_of(chosen)
            and not any(task_of(r) == t and model_kind(r) == kind for r in usable)]


def short_name(run) -> str:
    """A run's model as the step names it: its label without "(demo, trained here)" and without the task."""
    label = str(run.manifest.get("label", run.name)).replace(" (demo, trained here)", "")
    for word in (", multiplication", ", reverse-Polish addition", ", reverse-polish"):
        label = label.replace(word, "")
    return label


# ----------------------------------------------------------------------------- the frames the figures draw


def operation_accuracy(shown: dict) -> pd.DataFrame:
    """Per run: operation, run, split ("validation" where it was chosen on it, the run's own split), accuracy, the
    commonest answer and its share on that split (a model that always says it), and the paper's accuracy for the
    task with its split."""
    rows = []
    for task, run in shown.items():
        val, _ = validation_accuracy(run)
        own = run.split
        scores = [("validation", "val", val)] if val is not None else []
        scores.append(({"val": "validation"}.get(own, own), own, float(run.table(Table.EXAMPLES)["correct"].mean())))
        multiplication = task == "multiplication"
        for said, split, acc in scores:
            common, share = commonest_answer_of(run, split)
            rows.append({
                "operation": task_name(task), "run": short_name(run), "split": said, "accuracy": acc,
                "commonest answer": common, "commonest share": share,
                "paper accuracy": (MULTIPLICATION_ACCURACY_VAL if multiplication else ACCURACY["GPT-2-XL fine-tuned"])
                / 100,
                "paper split": "validation" if multiplication else "test",
            })
    return pd.DataFrame(rows)


def period_ratios(run, wanted=COMPARED_PERIODS, last_layers: int = 15) -> pd.DataFrame:
    """Per module (attention, MLP) and period of `wanted`: its mean Fourier magnitude over the last min(15, L)
    layers (paper basis), what W_U alone gives random vectors of the same energy there (`module_spectra_baseline`),
    and their ratio (NaN without the baseline table); `bar`: the ratio the period needs
    (core.analysis.fourier.ratio_bar: 2, or less where W_U leaves less room); `above`: ratio >= bar."""
    spec = run.table(Table.MODULE_SPECTRA)
    spec = spec[(spec["basis"] == "paper") & spec["module"].isin(["attn", "mlp"])]
    keep = list(range(max(1, run.n_layers - last_layers + 1), run.n_layers + 1))
    spec = spec[spec["layer"].isin(keep)]
    line = spec.drop_duplicates("k")[["k", "period"]]
    ks = {t: int(k) for t in wanted for k, x in zip(line["k"], line["period"]) if same_period(x, t)}
    mean = spec[spec["k"].isin(ks.values())].groupby(["module", "k"])["magnitude"].mean()
    base = bars = None
    if run.has(Table.MODULE_SPECTRA_BASELINE):
        b = run.table(Table.MODULE_SPECTRA_BASELINE)
        b = b[(b["basis"] == "paper") & b["layer"].isin(keep)]
        base = b.groupby(["module", "k"])["magnitude"].mean()
        bars = pd.concat({m: pd.Series(ratio_bar(reachable_ratio(base.loc[m])), index=base.loc[m].index)
                          for m in base.index.get_level_values(0).unique()})
    rows = []
    for module in ("attn", "mlp"):
        for t, k in ks.items():
            m = float(mean.get((module, k), np.nan))
            bl = float(base.get((module, k), np.nan)) if base is not None else np.nan
            ratio = m / bl if bl and np.isfinite(bl) and bl > 0 else np.nan
            bar = float(bars.get((module, k), BASELINE_RATIO)) if bars is not None else BASELINE_RATIO
            rows.append({"module": MODULE_NAMES[module], "period": float(t), "period T": f"{t:.3g}", "k": k,
                         "magnitude": m, "baseline": bl, "ratio": ratio, "bar": bar,
                         "above": bool(np.isfinite(ratio) and ratio >= bar)})
    return pd.DataFrame(rows)


def module_carriers(run, top: int = 4, causal: bool = True) -> tuple[pd.DataFrame, str]:
    """Which modules carry the short waves (periods 2, 2.5, 5, 10), strongest first (at most `top`): with the
    model's weights (and `causal`), the share of questions whose last digit moves when a module's short waves are
    shifted (the phase shift, core.claims.last_digit.shift_summary) beside random edits of the same size; else the
    module's strongest locking R at a short period (phase_locking). Returns (frame, measure) where measure is
    "phase shift" or "locking"; frame columns: module, kind, layer, value, control, carries (and relative: the value
    is a share of the whole stream's shift, the current rule)."""
    if causal and causal_test(run):
        s = shift_summary(run)
        s = s[s["kind"].isin(["attn", "mlp"])].sort_values("read", ascending=False).head(top)
        frame = pd.DataFrame({"kind": s["kind"], "layer": s["layer"], "value": s["read"], "control": s["read_control"],
                              "relative": s["read_of"] == "stream",
                              "carries": s["causal"]})
        measure = "phase shift"
    else:
        t = run.table(Table.PHASE_LOCKING)
        t = t[t["kind"].isin(["attn", "mlp"]) & t["period"].isin(SHORT_PERIODS)].copy()
        t["carries"] = locked(t)
        g = t.groupby(["kind", "layer"]).agg(value=("locking", "max"), control=("null_95", "max"),
                                             carries=("carries", "any")).reset_index()
        frame = g.sort_values("value", ascending=False).head(top)
        measure = "locking"
    frame = frame.reset_index(drop=True)
    frame.insert(0, "module", [f"{'attention' if k == 'attn' else 'MLP'} {int(layer)}"
                               for k, layer in zip(frame["kind"], frame["layer"])])
    return frame, measure


# ----------------------------------------------------------------------------- the claim


def claim_operations(shown: dict, claims_of: Callable) -> Claim:
    """Step 9. Paper (appendix): on multiplication, fine-tuned GPT-2-XL answers 74.58% of the validation questions
    (addition: 99.74% of the test questions) and its module logits have outliers at periods 2, 2.5, 3.33, 5 and 10
    (addition's: 2, 2.5, 5, 10); the appendix repeats the analysis for the format "15,93+".
    Measured, for one run of each task (`operation_runs`), by that run's own claims (`claims_of(run)`): its accuracy
    (validation where it was chosen on it, and its own split), which of its task's periods its modules carry above
    the W_U baseline, and which module carries the short waves (`module_carriers`).
    Verdict: the multiplication run's step-4 verdict (`claim_multiplication_spectra`: the paper's multiplication
    periods), the one finding of the paper this comparison can test; not tested without a multiplication run."""
    paper = (
        f"On multiplication, fine-tuned GPT-2-XL answers {MULTIPLICATION_ACCURACY_VAL}% of the validation questions "
        f"(addition: {ACCURACY['GPT-2-XL fine-tuned']}% of the test questions) and its module logits have outliers at "
        f"periods {periods(MULTIPLICATION_OUTLIER_PERIODS)} (addition's: {periods(OUTLIER_PERIODS)}). The appendix "
        "repeats the analysis for addition written \u201c15,93+\u201d."
    )
    sentences, found, carriers, moved, relative = [], {}, {}, [], []
    shifted = all(causal_test(r) for r in shown.values())  # one measure for every run
    for task, run in shown.items():
        acc = claims_of(run)["accuracy"].numbers
        wanted = MULTIPLICATION_OUTLIER_PERIODS if task == "multiplication" else OUTLIER_PERIODS
        ratios = period_ratios(run, wanted)
        have_baseline = bool(ratios["ratio"].notna().any())
        carried = sorted({float(t) for t in ratios.loc[ratios["above"], "period"]}, reverse=True)
        found[task] = carried if have_baseline else None
        frame, measure = module_carriers(run, causal=shifted)
        carrier = frame.iloc[0] if len(frame) else None
        carriers[task] = None if carrier is None else str(carrier["module"])
        val = acc.get("validation_accuracy")
        scores = (f"{pct(val)} on validation, " if val is not None else "") + f"{pct(acc['accuracy'])} on {run.split}"
        waves = (f"its modules carry {periods(carried) if carried else 'none'} of periods {periods(wanted)} above the "
                 "W_U baseline" if have_baseline else "no W_U baseline is cached for its spectra")
        if carrier is None:
            who = "no module's short waves were measured"
        elif measure == "phase shift":
            share = (f"{pct(carrier['value'])} as often as shifting the whole stream does, over" if carrier["relative"]
                     else f"for {pct(carrier['value'])} of")
            who = (f"shifting {carrier['module']}'s short waves moves the last digit {share} the {run.split} "
                   f"questions (random edits: {pct(carrier['control'])})")
            beyond = "" if carrier["carries"] else f"; random edits {pct(carrier['control'])}"
            of = "" if carrier["relative"] else " of questions"
            moved.append(f"{task_name(task)} {pct(carrier['value'])}{of} ({carrier['module']}{beyond})")
            relative.append(bool(carrier["relative"]))
        else:
            who = f"{carrier['module']} locks to a short period most (R = {carrier['value']:.2f})"
            moved.append(f"{task_name(task)} R = {carrier['value']:.2f} ({carrier['module']})")
        sentences.append(
            f"{task_name(task)[:1].upper()}{task_name(task)[1:]} ({short_name(run)}): {scores} (always answering "
            f"{acc['commonest_answer']}: {pct(acc['commonest_share'])}); {waves}; {who}."
        )
    mult = shown.get("multiplication")
    if mult is None:
        verdict, reason = "not tested", "no run of multiplication is here to compare"
    else:
        judged = claims_of(mult)["spectra"]
        verdict = judged.verdict
        carried, wanted = found.get("multiplication"), periods(MULTIPLICATION_OUTLIER_PERIODS)
        reason = (  # the evidence first: what the multiplication run carries, then its own step-4 reason
            f"the multiplication run ({short_name(mult)}) carries "
            + (f"{periods(carried) if carried else 'none'} of the paper's periods {wanted} above the W_U baseline"
               if carried is not None else f"periods {wanted} with no W_U baseline cached to read them against")
            + (f"; its spectra verdict: {judged.reason}" if judged.reason else ""))
    headline = (
        ("Shifting one module's short waves moves the last digit"
         + (", counting what shifting the whole stream does as 100%: " if any(relative) else ": ") if shifted
         else "Strongest lock to a short period: ")
        + ", ".join(moved) + "."
    )
    return Claim(
        "operations", paper, " ".join(sentences), verdict, reason,
        {"runs": {t: r.name for t, r in shown.items()}, "periods": found, "carriers": carriers,
         "carrier_measure": "phase shift" if shifted else "locking"},
        headline=headline,
        paper_short=(f"GPT-2-XL on multiplication: {MULTIPLICATION_ACCURACY_VAL}% (validation), outliers at periods "
                     f"{periods(MULTIPLICATION_OUTLIER_PERIODS)}."),
    )
