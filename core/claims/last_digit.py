"""Tour step 3, "which module computes the last digit": a causal test where the model's weights are here
(the `phase_shift` table, core.analysis.phase_shift), phase locking over every question beside it, and
phase locking alone for runs cached without weights. The rule is in `claim_module_waves`'s docstring,
re-derived from the raw tables by tests/claims/test_tour.py."""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.phase import locked
from core.analysis.phase_shift import EDIT_CAP
from core.claims.base import Claim, is_short, judged, pct
from core.claims.shift_rule import (
    CAUSAL_SHARE,
    CONTROL_MAX,
    STREAM_FLOOR,
    causal_test,
    group_summary,
    shift_summary,
)
from core.runs.reader import Table

SAID_MODULES = 6

PAPER = (
    "For 15 + 93, GPT-2-XL's MLP 33 favours every even number (period 2) and its attention 40 the numbers that end "
    "like 108 (periods 5 and 10); removing attention's high frequencies costs far more than the MLPs' (Table 1): "
    "attention classifies the last digit."
)
_NAMES = {"attn": "attention", "mlp": "MLP", "resid": "the residual stream after layer", "final": "the final logits"}
_MOD = {2.0: "parity (mod 2)", 2.5: "mod 2.5", 5.0: "mod 5", 10.0: "mod 10", 104.0: "mod 104", 520.0: "mod 520"}


def _who(kind: str, layer: int) -> str:
    return f"{_NAMES[kind]} {int(layer)}"


def module_locks(run) -> pd.DataFrame:
    """The attention and MLP rows of `phase_locking` that lock (core.analysis.phase.locked) at a short period,
    strongest first."""
    t = run.table(Table.PHASE_LOCKING)
    t = t[t["kind"].isin(["attn", "mlp"]) & t["period"].map(is_short)]
    return t[locked(t)].sort_values("locking", ascending=False).reset_index(drop=True)


def claim_module_waves(run) -> Claim:
    """Step 3. Paper: for 15 + 93 in GPT-2-XL, MLP 33 favours even numbers and attention 40 the numbers
    congruent to 108 mod 5 and 10; Table 1 says attention's high frequencies carry the last digit.

    With the model's weights (the `phase_shift` and `phase_shift_answers` tables): each module's waves of periods
    2, 2.5, 5 and 10 are shifted by d = 1, 2, 5 numbers (the capped least-norm edit, core.analysis.phase_shift: its
    median size at most EDIT_CAP times the module's output) over every question (a deep model: every module on a
    screen of the fixed sample's first questions, and every condition, controls included, for the modules the
    screen keeps and the stream on the whole sample, core.runs.sampled_design; a module read only on the screen has
    no controls and cannot pass). The positive control is the whole residual stream after the last layer: a d is
    read when its shift moves the last digit for at least STREAM_FLOOR of the questions. A module's relative share
    is the share of questions whose last digit moved by d as a fraction of the stream's at the same d, averaged over
    the read d, with a 95% interval that resamples questions (core.analysis.shift_reading). A module *computes the
    last digit* when that interval's lower end is >= CAUSAL_SHARE, its random edits of the same size reach at most
    CONTROL_MAX of the stream's (mean over draws), and they leave at least as many answers in place as its shift
    (else they are no control); it *does not* when the interval's upper end is below CAUSAL_SHARE.
    Groups (the paper's claim is about attention as a whole): where the run holds the group tables
    (core.runs.group_shift), every attention output, and separately every MLP output, of a group of layers (the
    layers a fine-tuning trained, the last third, every layer) is shifted together over every question of the split,
    each module by its own capped edit, against the stream after the group's last layer and random edits of the same
    size per module (one direction a draw); a group is read by the same rule as one module, with the same thresholds.
    Verdict: agrees when some attention group or layer computes the last digit; partly when only MLP groups or
    layers do (the modules' roles reversed); does not when no group or layer does although the stream does; not
    tested when shifting the stream itself moves the last digit for fewer than STREAM_FLOOR at every d (the edit
    has no hold on this model). A run cached before the capped edit (no `phase_shift_answers`, its weights not
    here to read it again) is read by the earlier rule (`earlier_shift_summary`), and its reason says so.
    Without weights (only `phase_locking`): a module *locks* to T (core.analysis.phase.locked) when R is
    above the family-wise shuffle threshold and >= 0.3, its phase is not constant, and its wave favours the
    answer (peak within a quarter period). Verdict: agrees when some MLP locks to T = 2 and some attention
    to T = 5 or 10; partly when any attention or MLP locks to a short period; does not otherwise, which
    becomes "not tested" when the table rests only on a cached sample (a few examples can show a lock but
    not its absence)."""
    table = run.table(Table.PHASE_LOCKING)
    locks = module_locks(run)
    n = int(table["n"].iloc[0])
    whole = bool((run.manifest.get("phase_locking") or {}).get("whole_split", True))
    split = (run.manifest.get("task") or {}).get("split", "test")
    if table["locking"].isna().all():
        return judged(Claim("module_waves", PAPER, f"Only {n} example: no locking can be measured.", "not tested",
                            "phase locking needs at least 2 examples", {"n": n}), run)
    said = _lock_sentences(locks, table)
    lock_text = (f"all {n} {split} questions" if whole else f"only the {n} cached questions")
    lock_sentence = f"Phase locking over {lock_text}: " + "; ".join(said) + "."
    if causal_test(run):
        return judged(_causal_claim(run, locks, lock_sentence, split, n, whole), run)
    mlp2 = locks[(locks["kind"] == "mlp") & np.isclose(locks["period"], 2.0)]
    attn510 = locks[(locks["kind"] == "attn") & locks["period"].isin([5.0, 10.0])]
    if len(mlp2) and len(attn510):
        verdict = "agrees"
    elif len(locks):
        verdict = "partly"
    else:
        verdict = "does not" if whole else "not tested"
    reason = _lock_reason(verdict, locks, mlp2, attn510)
    if not whole:
        bars = table[table["period"].map(is_short)].groupby("period")["null_95"].first()
        reason = (reason + "; " if reason else "") + (
            f"only {n} questions could be read (the model's weights are not here), so the chance threshold is high "
            f"(R above {bars.min():.2f} to {bars.max():.2f} by period)"
        )
    reason = (reason + "; " if reason else "") + (
        "this verdict rests on correlation (locking) only: " + (
            "the causal phase-shift test was left out of this run (precompute --stages)"
            if (run.manifest.get("not_computed") or {}).get("phase_shift") else
            "the causal phase-shift test needs the model's weights here, and a precompute with them"))
    first = said[0] if said else "no module's short wave follows the answer"
    return judged(Claim(
        "module_waves", PAPER, lock_sentence + _final_logits_sentence(table), verdict, reason,
        {"locks": locks.to_dict("records"), "n": n, "whole_split": whole, "causal": None},
        headline=f"Locking over {lock_text}: {first}.",
    ), run)


def _causal_claim(run, locks, lock_sentence: str, split: str, n: int, whole: bool) -> Claim:
    summary = shift_summary(run)
    groups = group_summary(run)
    relative = bool((summary["rule"] == "relative").all())
    modules = summary[summary["kind"].isin(["attn", "mlp"])]
    stream = summary[summary["kind"] == "resid"]
    judged_sites = modules if groups is None else pd.concat([groups[groups["kind"] != "resid"], modules])
    causal = judged_sites[judged_sites["causal"]].sort_values("read", ascending=False)
    attn, mlp = causal[causal["kind"] == "attn"], causal[causal["kind"] == "mlp"]
    if relative:
        stream_moves = bool(len(stream) and stream["read_d"].iloc[0])
    else:
        stream_moves = bool(len(stream) and stream["causal"].any())
    if groups is not None:
        stream_moves = stream_moves or bool(groups["read_d"].iloc[0])
    if not stream_moves:
        verdict = "not tested"
    elif len(attn):
        verdict = "agrees"
    elif len(mlp):
        verdict = "partly"
    else:
        verdict = "does not"
    questions = int(run.table(Table.EXAMPLES).shape[0])
    design = run.manifest.get("design")
    if design:
        questions = int(design["sample"])
        read = (f"on a fixed sample of {questions} of the {design['n_split']:,} {split} questions (a screen of every "
                f"module on {design['screen']} of them kept the {design['screen_keep']} whose last digit moved most; "
                "the others were read only there, without controls)")
    else:
        read = f"over all {questions} {split} questions"
    ranked = modules.sort_values("read", ascending=False)
    said = (_relative_sentence if relative else _earlier_sentence)(ranked, stream, read)
    n_split = int((design or {}).get("n_split", questions))
    if groups is not None:
        said = _group_sentence(groups, n_split, split) + " One module at a time. " + said
    measured = said + " " + lock_sentence
    reason = _causal_reason(verdict, attn if verdict == "agrees" else mlp, judged_sites, stream, relative,
                            groups is not None)
    top = ranked.iloc[0]
    sample = f"a {questions}-question sample" if design else f"{questions} questions"
    if groups is not None and bool(groups["read_d"].iloc[0]):
        headline = _group_headline(groups, n_split, split)
    elif relative and top["read_of"] != "stream":
        headline = (f"Shifting the whole stream's short waves moves the last digit for under {pct(STREAM_FLOOR)} of "
                    f"{sample} at every d: the edit has no hold on this model to judge a module by.")
    elif relative:
        headline = (f"Shifting {_who(top['kind'], top['layer'])}'s short waves moves the last digit {pct(top['read'])} "
                    f"as often as shifting the whole stream does, over {sample} (random edits of the same size: "
                    f"{pct(top['read_control'])}).")
    else:
        headline = (f"Shifting {_who(top['kind'], top['layer'])}'s short waves moves the last digit of "
                    f"{pct(top['share'])} of {sample} (random edits: {pct(top['control'])}; the earlier rule).")
    return Claim(
        "module_waves", PAPER, measured, verdict, reason,
        {"locks": locks.to_dict("records"), "n": n, "whole_split": whole, "causal": summary.to_dict("records"),
         "groups": None if groups is None else groups.to_dict("records"),
         "questions": questions, "rule": "relative" if relative else "earlier"},
        headline=headline,
    )


_GROUP_KIND = {"attn": "attention", "mlp": "MLPs"}


def group_name(row) -> str:
    """'all attention of layers 19-30' / 'all MLPs of layers 1-30' for a row of the group summary."""
    first, last = int(row["first_layer"]), int(row["layer"])
    layers = f"layer {last}" if first == last else f"layers {first}-{last}"
    return f"all {_GROUP_KIND[row['kind']]} of {layers}"


def _group_sentence(groups: pd.DataFrame, n_split: int, split: str) -> str:
    """The groups' measurement: the stream's shift per d over every question, then each group's share of it with its
    interval and its random edits of the same size (mean and sd over draws)."""
    stream = groups[groups["kind"] == "resid"].iloc[0]
    all_d = [int(c[len("share_d"):]) for c in groups.columns if c.startswith("share_d")]
    read_d = [int(d) for d in str(stream["read_d"]).split(", ") if d]
    text = (f"Groups, over all {n_split:,} {split} questions: shifting the short waves (periods 2, 2.5, 5, 10) of the "
            f"whole stream after layer {int(stream['layer'])} by d = {' / '.join(map(str, all_d))} moves the last "
            f"digit by d for {_by_d(stream, 'stream', all_d)} of them")
    if not read_d:
        return text + f", under {pct(STREAM_FLOOR)} at every d: no group is judged."
    parts = []
    for r in groups[groups["kind"] != "resid"].to_dict("records"):
        ctrl = f"random edits {pct(r['read_control'])}"
        if r["draws"] > 1 and not np.isnan(r["control_relative_sd"]):
            ctrl += f" (sd {100 * r['control_relative_sd']:.1f} points)"
        parts.append(f"{group_name(r)} together, {pct(r['read'])} of the stream's ({pct(r['read_low'])} to "
                     f"{pct(r['read_high'])}; {ctrl})")
    return text + ". Shifting " + "; ".join(parts) + "."


def groups_measured(run) -> str:
    """Every group's share of the stream's shift, with its interval and random edits, in one sentence ("" for a run
    without the group tables)."""
    groups = group_summary(run)
    if groups is None:
        return ""
    sites = groups[groups["kind"] != "resid"]
    said = "; ".join(f"{group_name(r)}, {pct(r['read'])} of the stream's ({pct(r['read_low'])} to "
                     f"{pct(r['read_high'])}; random edits {pct(r['read_control'])})" for r in sites.to_dict("records"))
    return (f"Shifting the short waves of a group of modules together, over all {int(sites['n'].max()):,} "
            f"{run.split} questions: {said}.")


def groups_answer(run) -> str:
    """What the groups say, for a class: which kind of module, together, decides the last digit (by the rule of
    `claim_module_waves`), against the paper's GPT-2-XL ("" for a run without the group tables)."""
    groups = group_summary(run)
    if groups is None:
        return ""
    sites = groups[(groups["kind"] != "resid") & groups["causal"]]
    kinds = set(sites["kind"])
    if not groups["read_d"].iloc[0]:
        return "the edit has no hold: shifting the whole stream moves the last digit for under half the questions"
    if kinds == {"mlp"}:
        return ("the MLPs, together, decide the last digit with their short waves, and attention, together, does not: "
                "GPT-2-XL's division of labour, reversed")
    if kinds == {"attn"}:
        return "attention, together, decides the last digit with its short waves, as the paper found in GPT-2-XL"
    if kinds:
        return "attention and the MLPs, each kind together, decide the last digit with their short waves"
    return "no group of modules decides the last digit with its short waves, though the whole stream's do"


def headline_groups(groups: pd.DataFrame) -> pd.DataFrame:
    """The group of each kind step 3's headline quotes and its figure draws: the layers a fine-tuning trained where
    there are some, else every layer (several layers: a group of one layer is that layer's own bar)."""
    sites = groups[(groups["kind"] != "resid") & (groups["first_layer"] < groups["layer"])]
    chosen = "trained" if (sites["group"] == "trained").any() else "every layer"
    return sites[sites["group"] == chosen].reset_index(drop=True)


def _group_headline(groups: pd.DataFrame, n_split: int, split: str) -> str:
    """The headline groups (MLPs first), each as a share of the stream's shift, with their random edits."""
    rows = headline_groups(groups).sort_values("kind", ascending=False).to_dict("records")
    said = "; ".join(f"{group_name(r)}, {pct(r['read'])} (random edits {pct(r['read_control'])})" for r in rows)
    return (f"Over all {n_split:,} {split} questions, shifting a group's short waves together moves the last digit "
            f"this often, counting what shifting the whole stream's short waves does as 100%: {said}.")


def _by_d(row, prefix: str, ds) -> str:
    return " / ".join(f"{100 * row[f'{prefix}_d{d}']:.0f}" for d in ds) + "%"


def _relative_sentence(ranked: pd.DataFrame, stream: pd.DataFrame, read: str) -> str:
    """The measurement read by the current rule: the positive control per d, then each module's share per d and
    relative to the stream's, the controls, and the edits' size."""
    all_d = [int(c[len("share_d"):]) for c in ranked.columns if c.startswith("share_d")]
    s = stream.iloc[0]
    read_d = [int(d) for d in str(s["read_d"]).split(", ") if d]
    ds = " / ".join(str(d) for d in all_d)
    text = (f"Positive control: shifting the waves of periods 2, 2.5, 5 and 10 of the whole residual stream after "
            f"layer {int(s['layer'])} by d = {ds} numbers, {read}, moves the answer's last digit by d for "
            f"{_by_d(s, 'stream', all_d)} of them")
    unread = [d for d in all_d if d not in read_d]
    if unread:
        text += (f" (d = {', '.join(map(str, unread))} not read: under {pct(STREAM_FLOOR)}, too little hold to judge "
                 "a module by)")
    of_stream = bool(read_d)
    of = " of the stream's" if of_stream else ""
    parts = [f"{_who(r.kind, r.layer)} {_by_d(r._asdict(), 'share', all_d)}"
             + (f", {pct(r.read)}{of} ({pct(r.read_low)} to {pct(r.read_high)})" if of_stream else "")
             for r in ranked.head(SAID_MODULES).itertuples()]
    text += ". Each module's own shift moves it for " + "; ".join(parts)
    if len(ranked) > SAID_MODULES:
        text += (f"; at most {pct(ranked['read'].iloc[SAID_MODULES])}{of} for each of the other "
                 f"{len(ranked) - SAID_MODULES}")
    if of_stream:
        text += (" (a module's share as a fraction of the stream's at the same d, averaged over the d read; 95% "
                 "interval resampling questions)")
    else:
        text += ". No d is read, so no module is judged"
    ctrl = ranked["read_control"].dropna()
    if len(ctrl):
        text += f". Random edits of the same size: {pct(ctrl.min())} to {pct(ctrl.max())}{of or ' of the questions'}"
    sizes = ranked["edit_size"].dropna()
    if len(sizes):
        capped = ranked[ranked["kept"] < ranked["full_rank"]]
        text += (f". Each edit is capped at {EDIT_CAP:g} times the module's output (median size "
                 f"{sizes.min():.2f} to {sizes.max():.2f} times)")
        if len(capped):
            text += (f"; {len(capped)} of {len(ranked)} modules' edits keep only {int(capped['kept'].min())} to "
                     f"{int(capped['kept'].max())} of W_U's {int(capped['full_rank'].max())} directions, so the "
                     f"other waves move by up to {pct(capped['misfit'].max())} of the asked change")
    return text + "."


def _earlier_sentence(ranked: pd.DataFrame, stream: pd.DataFrame, read: str) -> str:
    """The measurement read by the earlier rule (pooled shares, uncapped edit)."""
    parts = [f"{_who(r.kind, r.layer)} {pct(r.share)}" for r in ranked.head(SAID_MODULES).itertuples()]
    if len(ranked) > SAID_MODULES:
        parts.append(f"and at most {pct(ranked['share'].iloc[SAID_MODULES])} for each of the other "
                     f"{len(ranked) - SAID_MODULES}")
    ctrl = ranked["control"]
    text = (f"Shifting each module's waves of periods 2, 2.5, 5 and 10 by d = 1, 2 or 5 numbers, {read}: the last "
            f"digit of the answer moves by d for {', '.join(parts)} (random edits of the same size: {pct(ctrl.min())} "
            f"to {pct(ctrl.max())}).")
    if len(stream):
        s = stream.iloc[0]
        text += f" Shifting the whole stream after layer {int(s['layer'])} moves it for {pct(s['share'])}."
    return text


def site_name(row) -> str:
    """A row of a shift summary by name: a group ('all attention of layers 19-30') or one module ('MLP 24')."""
    return group_name(row) if isinstance(row.get("group"), str) else _who(row["kind"], row["layer"])


def _causal_reason(verdict: str, computes: pd.DataFrame, sites: pd.DataFrame, stream: pd.DataFrame,
                   relative: bool, with_groups: bool = False) -> str:
    """Why the verdict: the site that computes the last digit (`computes`: the attention sites that do, agrees; the
    MLP sites, partly), the strongest site short of the rule (does not), the stream without hold (not tested); and any
    site whose random edits break the model more than its shift. `sites`: the groups (with_groups) and the single
    modules judged."""
    what = "group or single layer" if with_groups else "single attention or MLP layer"
    if verdict in ("agrees", "partly"):  # the site named: a headline group where one computes it, else the strongest
        # single module or group of several layers (a group of one layer is that layer's own module, named so)
        grouped = (computes[computes["group"].isin(["trained", "every layer"])] if "group" in computes
                   else computes.iloc[:0])
        several = computes["first_layer"] != computes["layer"] if "first_layer" in computes else None  # NaN: a module
        strongest = computes[several] if several is not None and several.any() else computes
        named = (grouped if len(grouped) else strongest).iloc[0].to_dict()
        moved = (f"{site_name(named)}: {pct(named['read'])}"
                 + (" of the stream's" if relative else "")
                 + (f" (95% interval from {pct(named['read_low'])})" if "read_low" in named else "")
                 + f", above the {pct(CAUSAL_SHARE, 0)} bar")
        reason = (f"{moved}: {site_name(named)}'s short waves compute the last digit, as in GPT-2-XL"
                  if verdict == "agrees"
                  else f"{moved}: the short waves compute the last digit, as in GPT-2-XL, but through MLPs, not "
                  "attention")
    elif verdict == "does not":
        counted = sites[sites["control_works"].astype(bool)] if "control_works" in sites else sites
        best = (counted if len(counted) else sites).sort_values("read", ascending=False).iloc[0].to_dict()
        reason = (f"no {what}'s short waves decide the last digit, though the stream's do: "
                  f"the strongest, {site_name(best)}, reaches {pct(best['read'])}"
                  + (" of the stream's" if relative else "")
                  + f" (interval up to {pct(best['read_high'])}), under {pct(CAUSAL_SHARE)}")
    elif relative:
        reason = (f"shifting the whole residual stream moves the last digit for fewer than {pct(STREAM_FLOOR)} of the "
                  "questions at every d, so the edit has no hold on this model")
    else:
        reason = "shifting the whole residual stream does not move the answers, so the edit has no hold on this model"
    if relative:  # a site not counted for its controls, where counting it would have changed the verdict
        broken = sites[(sites["read_low"] >= CAUSAL_SHARE) & ~sites["control_works"].astype(bool)
                       & (sites["draws"] > 0)]
        if verdict == "agrees":  # counting it could not change an agreement
            broken = broken.iloc[:0]
        elif verdict == "partly":  # only an attention site counted would have changed it
            broken = broken[broken["kind"] == "attn"]
        for r in broken.head(2).to_dict("records"):
            reason += ("; " if reason else "") + (
                f"{site_name(r)}'s random edits leave {pct(r['control_stayed'])} of answers in place against "
                f"{pct(r['stayed'])} for its shift: they break the model more than the shift does, so they are no "
                "control and it is not counted")
    else:
        reason += ("; " if reason else "") + (
            "read by the earlier rule (the share pooled over d, not relative to the stream, and an uncapped edit): "
            "the model's weights are not here to read it by the current one")
    return reason


def _lock_sentences(locks: pd.DataFrame, table: pd.DataFrame) -> list[str]:
    """What the locking table says the modules track: the two strongest modules of each kind, and the
    periods no module of a kind tracks."""
    said = []
    for kind in ("mlp", "attn"):
        mine = locks[locks["kind"] == kind]
        for layer in list(dict.fromkeys(mine["layer"]))[:2]:
            rows = mine[mine["layer"] == layer].sort_values("period", ascending=False)
            what = ", ".join(f"{_MOD[float(r.period)]} (R = {r.locking:.2f})" for r in rows.itertuples())
            said.append(f"{_who(kind, layer)} tracks the answer {what}")
    present = set(table["period"])
    for kind, wanted, what in (("attn", (5.0, 10.0), "mod 5 or 10"), ("mlp", (2.0,), "parity")):
        if present.isdisjoint(wanted):
            said.append(f"periods {' and '.join(f'{t:g}' for t in wanted)} are not on this number line")
        elif not locks[(locks["kind"] == kind) & locks["period"].isin(wanted)].shape[0]:
            said.append(f"no {_NAMES[kind]} layer tracks {what}")
    return said


def _final_logits_sentence(table: pd.DataFrame) -> str:
    """The final logits' strongest short wave that follows the answer beyond chance (any size), if any."""
    final = table[(table["kind"] == "final") & table["period"].map(is_short)].sort_values("locking", ascending=False)
    final_locks = final[final["locking"] > final["null_95"]] if len(final) else final
    if len(final_locks):
        f = final_locks.iloc[0]
        return (
            f" The final logits track the answer {_MOD[float(f['period'])]} at R = {f['locking']:.2f} "
            f"({pct(f['energy_share'])} of their wave energy)."
        )
    if len(final):
        return " No short wave of the final logits follows the answer beyond chance."
    return ""


def _lock_reason(verdict: str, locks: pd.DataFrame, mlp2: pd.DataFrame, attn510: pd.DataFrame) -> str:
    """Why a locking-only verdict is what it is: a reversed split of the modules is said as such."""
    mlp_short = locks[(locks["kind"] == "mlp") & locks["period"].isin([5.0, 10.0])]
    attn_two = locks[(locks["kind"] == "attn") & np.isclose(locks["period"], 2.0)]
    if verdict == "partly" and len(mlp_short) and not len(attn510):
        r = mlp_short.iloc[0]
        reason = (f"a module follows the last digit, as in GPT-2-XL, but it is {_who(r['kind'], r['layer'])} "
                  f"({_MOD[float(r['period'])]}), not an attention layer")
        if len(attn_two) and not len(mlp2):
            first = attn_two.iloc[0]
            reason += f", and parity is carried by {_who(first['kind'], first['layer'])}, not an MLP"
        return reason
    if verdict == "partly":
        return "short waves follow the answer, but not split between the modules as in GPT-2-XL"
    if verdict == "does not":
        return "no attention or MLP wave of period 2, 2.5, 5 or 10 follows the answer beyond chance"
    return ""


#: Rows of each of step 3's tables of numbers (`module_shift_table`, `module_lock_table`).
TABLE_MODULES = 6
#: A module whose shift moved the last digit for less than this share (of the stream's, or of the questions) gets no
#: row of its own in `module_shift_table` (`module_waves_note` counts them).
MOVED_AT_ALL = 0.005


def module_shift_table(run, top: int = TABLE_MODULES) -> pd.DataFrame:
    """Step 3's phase shift as a table to read (the Waves page shows it instead of the claim's paragraph), one row a
    module, every cell text: the whole stream first (the positive control, where the shift was read against it),
    then up to `top` modules whose shift moved the last digit by at least `MOVED_AT_ALL` of what the rule reads (at
    least the one that moved it most). Columns: the last digit moved by d for each d read (%), what the rule reads (a
    share of the stream's shift, or of the questions, %) with its 95% interval, and random edits of the same size
    (%). Empty when the run holds no phase shift of the four short periods."""
    if not causal_test(run):
        return pd.DataFrame()
    summary = shift_summary(run)
    ds = [d for d in (1, 2, 5) if f"share_d{d}" in summary.columns]
    moved = f"moved, d = {'/'.join(map(str, ds))} (%)"
    relative = bool((summary["read_of"] == "stream").any())
    what = "of the stream's (%)" if relative else "of questions (%)"
    rows = []
    if relative and all(f"stream_d{d}" in summary.columns for d in ds):
        first = summary.iloc[0]
        rows.append({"module": f"whole stream {run.n_layers}",
                     moved: " / ".join(f"{100 * first[f'stream_d{d}']:.0f}" for d in ds), what: "100",
                     "random (%)": "–"})
    ranked = summary[summary["kind"].isin(["attn", "mlp"])].sort_values("read", ascending=False)
    some = ranked["read"] >= MOVED_AT_ALL
    for _, row in (ranked[some].head(top) if some.any() else ranked.head(1)).iterrows():
        rows.append({"module": _who(row["kind"], row["layer"]),
                     moved: " / ".join(f"{100 * row[f'share_d{d}']:.0f}" for d in ds),
                     what: f"{100 * row['read']:.1f} ({100 * row['read_low']:.1f} to {100 * row['read_high']:.1f})",
                     "random (%)": "–" if pd.isna(row["read_control"]) else f"{100 * row['read_control']:.1f}"})
    return pd.DataFrame(rows)


def group_shift_table(run) -> pd.DataFrame:
    """The group shift (core.runs.group_shift) as a table to read, one row a site, every cell text: the whole stream
    first (the positive control), then every group of attention and of MLPs. Columns: the last digit moved by d for
    each d (%), the share of the stream's shift with its 95% interval (resampled questions), random edits of the same
    size (mean and sd over draws, %), and the verdict of the rule for that group. Empty without the group tables."""
    groups = group_summary(run)
    if groups is None:
        return pd.DataFrame()
    ds = [d for d in (1, 2, 5) if f"share_d{d}" in groups.columns]
    moved = f"moved, d = {'/'.join(map(str, ds))} (%)"
    stream = groups[groups["kind"] == "resid"].iloc[0]
    rows = [{"shifted together": f"whole stream after layer {int(stream['layer'])}",
             moved: " / ".join(f"{100 * stream[f'stream_d{d}']:.0f}" for d in ds), "of the stream's (%)": "100",
             "random (%)": "–", "decides the last digit": "positive control"}]
    for row in groups[groups["kind"] != "resid"].to_dict("records"):
        sd = row["control_relative_sd"]
        rows.append({
            "shifted together": group_name(row),
            moved: " / ".join(f"{100 * row[f'share_d{d}']:.0f}" for d in ds),
            "of the stream's (%)": (f"{100 * row['read']:.1f} ({100 * row['read_low']:.1f} to "
                                    f"{100 * row['read_high']:.1f})") if stream["read_d"] else "not read",
            "random (%)": f"{100 * row['read_control']:.1f}" + ("" if pd.isna(sd) or not stream["read_d"]
                                                                else f" ± {100 * sd:.1f}"),
            "decides the last digit": _decides(row),
        })
    frame = pd.DataFrame(rows)  # the verdict beside the name: a narrow screen scrolls the figures, not the answer
    return frame[["shifted together", "decides the last digit", *[c for c in frame.columns
                                                                 if c not in ("shifted together",
                                                                              "decides the last digit")]]]


def _decides(row) -> str:
    """A site's verdict by the rule, in a table cell: yes, no, or why it is not counted."""
    if not row["read_d"]:
        return "not read (the stream's shift has no hold)"
    if row["causal"]:
        return "yes"
    if row["not_causal"]:
        return "no"
    if row["read_low"] >= CAUSAL_SHARE and not row["control_works"]:
        return "not counted (controls break the model)"
    if row["read_low"] >= CAUSAL_SHARE:
        return "not counted (controls move it too)"
    return "undecided (interval spans the bar)"


def group_shift_caption(run) -> str:
    """The sentence under `group_shift_table`: what a group's shift is, how many questions it read, the rule."""
    groups = group_summary(run)
    if groups is None:
        return ""
    n = int(groups["n"].max())
    return (f"Every attention (or MLP) output of those layers shifted together, over {n:,} {run.split} questions "
            f"(95% intervals); random edits of the same size, mean ± sd of {int(groups['draws'].max())}. Yes: at least "
            f"{pct(CAUSAL_SHARE)} of the stream's (interval's low end), random edits at most {pct(CONTROL_MAX)}; no: "
            f"the interval's high end under {pct(CAUSAL_SHARE)}.")


def module_lock_table(run, top: int = TABLE_MODULES) -> pd.DataFrame:
    """The `top` attention and MLP modules whose wave locks most to a short period (2, 2.5, 5, 10), each with its
    strongest locking R, that period, and whether it beats the shuffle null (core.analysis.phase.locked)."""
    if not run.has(Table.PHASE_LOCKING):
        return pd.DataFrame()
    t = run.table(Table.PHASE_LOCKING)
    t = t[t["kind"].isin(["attn", "mlp"]) & t["period"].map(is_short)].copy()
    t["beats"] = locked(t)
    best = t.loc[t.groupby(["kind", "layer"])["locking"].idxmax()].sort_values("locking", ascending=False).head(top)
    return pd.DataFrame({"module": [_who(k, layer) for k, layer in zip(best["kind"], best["layer"])],
                         "locking R": [f"{r:.2f}" for r in best["locking"]],
                         "period": [f"{p:g}" for p in best["period"]],
                         "beyond chance": ["yes" if b else "no" for b in best["beats"]]})


def module_shift_caption(run) -> str:
    """The sentence under `module_shift_table`: what its rows are, how its interval was made (resampled questions
    where the rule reads a share of the stream's shift, Wilson's where it reads a share of the questions), the
    questions each shift read, and how many shifted modules moved the last digit for less than `MOVED_AT_ALL`."""
    if not causal_test(run):
        return ""
    summary = shift_summary(run)
    modules = summary[summary["kind"].isin(["attn", "mlp"])]
    relative = bool((summary["read_of"] == "stream").any())
    interval = "over resampled questions" if relative else "(Wilson)"
    said = ("The phase shift: " + ("the whole stream first (the positive control), then " if relative else "")
            + f"the modules that moved the last digit most; in %, with 95% intervals {interval}; random edits of the "
            "same size.")
    counts = " or ".join(f"{n:,}" for n in sorted({int(n) for n in modules["n"]}, reverse=True))
    said += f" Each shift read {counts} {run.split} questions."
    quiet = modules[modules["read"] < MOVED_AT_ALL]
    if len(quiet) and len(quiet) < len(modules):
        said += f" The other {len(quiet)} shifted modules moved the last digit for under {MOVED_AT_ALL:.1%} each."
    return said


def module_lock_note(run) -> str:
    """The sentence under `module_lock_table`: what it reads, over how many questions, against how many shuffles."""
    t = run.table(Table.PHASE_LOCKING)
    return (f"Locking: the modules whose wave of a short period (2, 2.5, 5, 10) follows the answer most, over "
            f"{int(t['n'].max()):,} {run.split} questions; beyond chance = above what {int(t['shuffles'].max()):,} "
            "shuffles of the answers reach.")
