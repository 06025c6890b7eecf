"""The phase-shift rule, in one place for one module and for a group of modules: the thresholds, and the reading
of a run's `phase_shift` (one module at a time) or `group_shift` (groups of layers, core.runs.group_shift) table
by them. The verdicts that use the reading are core.claims.last_digit's (step 3); the rule is written in
`core.claims.last_digit.claim_module_waves`'s docstring and re-derived by tests/claims/test_tour.py."""

from __future__ import annotations

from collections import OrderedDict

import pandas as pd

from core.analysis.phase_shift import wilson_interval
from core.analysis.shift_reading import read_shifts, stream_shares
from core.runs.reader import Table

#: A module computes the last digit when shifting its short waves moves the last digit of at least this share of
#: what shifting the whole stream moves at the same d (the lower end of the 95% interval over questions) ...
CAUSAL_SHARE = 0.5
#: ... while random edits of the same size move it for at most this share of what the stream's shift moves (the
#: mean over the control's draws; an answer moved at random lands on the shifted last digit about 1 time in 10),
#: and leave at least as many answers in place as the shift does (else they break the model: no control).
CONTROL_MAX = 0.15
#: A shift d is read when shifting the whole stream (the positive control) moves the last digit for at least this
#: share of the questions at that d: below it the edit has too little hold at that d to judge a module by.
STREAM_FLOOR = 0.5
#: The period set the verdict reads: all four short periods moved together.
CAUSAL_SET = "all"


def causal_test(run) -> bool:
    """Whether the run holds the causal test the verdict reads: the shift of all four short periods (its weights were
    here, and its number line has periods 2.5, 5 and 10)."""
    return run.has(Table.PHASE_SHIFT) and bool((run.table(Table.PHASE_SHIFT)["period_set"] == CAUSAL_SET).any())


#: Summaries already read, by the content of the tables they were read from (the bootstrap takes most of a second a
#: run, and the claim, the step's figure and the comparison of operations all ask for it).
_SUMMARIES: OrderedDict = OrderedDict()
_SUMMARIES_KEPT = 32


def shift_summary(run) -> pd.DataFrame:
    """`read_shift_summary` of the run, read once per content of its two phase-shift tables (a hash of each: a run
    rebuilt on disk, or hand-made tables under an old name, are read afresh). A copy: the caller may change it."""
    shift = run.table(Table.PHASE_SHIFT)
    answers = run.table(Table.PHASE_SHIFT_ANSWERS) if run.has(Table.PHASE_SHIFT_ANSWERS) else None
    key = tuple(None if f is None else (f.shape, int(pd.util.hash_pandas_object(f, index=False).sum()))
                for f in (shift, answers))
    if key not in _SUMMARIES:
        _SUMMARIES[key] = read_shift_summary(shift, answers)
        while len(_SUMMARIES) > _SUMMARIES_KEPT:
            _SUMMARIES.popitem(last=False)
    _SUMMARIES.move_to_end(key)
    return _SUMMARIES[key].copy()


def read_shift_summary(shift: pd.DataFrame, answers: pd.DataFrame | None, keys=("kind", "layer")) -> pd.DataFrame:
    """Per edited module (kind, layer) of the shift of all four short periods, by the rule of `claim_module_waves`:
    `read` (what the rule compares with CAUSAL_SHARE), `read_low`, `read_high` (its 95% interval), `read_control`
    (the random edits' `read`, mean over draws), `read_of` ("stream": a share of the stream's shift; "questions": a
    share of the questions, where the stream's shift holds at no d and nothing is judged), `causal`, `not_causal`,
    `rule` ("relative": the current rule;
    "earlier": a run whose per-question outcomes were not kept), `share` and `control` (the last digit moved,
    pooled over the shifts read), `n`, `draws`, `control_sd`; under the current rule also the per-d shares
    (share_d{d}, stream_d{d}, relative_d{d}), `read_d`, `stayed`, `control_stayed`, `control_works`, and the edit's
    `edit_size`, `kept`, `full_rank`, `misfit` (core.analysis.shift_reading). `answers`: the run's
    `phase_shift_answers`, None for a run cached without them (read by `earlier_shift_summary`). `keys`: the
    columns that tell the edited sites apart (a group table's: group, kind, first_layer, layer)."""
    if answers is None:
        return earlier_shift_summary(shift)
    stream = stream_shares(shift, CAUSAL_SET)
    read_d = [d for d, share in sorted(stream.items()) if share >= STREAM_FLOOR]
    t = read_shifts(shift, answers, CAUSAL_SET, read_d, keys=keys)
    t["read"], t["read_low"], t["read_high"] = t["relative"], t["relative_low"], t["relative_high"]
    t["read_control"] = t["control_relative"]
    t["causal"] = (t["read_low"] >= CAUSAL_SHARE) & (t["read_control"] <= CONTROL_MAX) & t["control_works"]
    t["not_causal"] = t["read_high"] < CAUSAL_SHARE
    t["read_of"] = "stream"
    if not read_d:  # the stream's shift holds at no d: nothing is judged against it; the raw shares are shown
        raw = earlier_shift_summary(shift, keys).set_index(list(keys))
        at = pd.MultiIndex.from_frame(t[list(keys)])
        for column in ("read", "read_low", "read_high", "read_control"):
            t[column] = raw[column].reindex(at).to_numpy()
        t["causal"] = t["not_causal"] = False
        t["read_of"] = "questions"
    t["read_d"] = ", ".join(str(d) for d in read_d)
    t["rule"] = "relative"
    return t


def earlier_shift_summary(shift: pd.DataFrame, keys=("kind", "layer")) -> pd.DataFrame:
    """The rule a run was read by before the capped edit (phase-shift version 1, no per-question outcomes): the last
    digit moved, pooled over every d and question, its 95% Wilson interval against CAUSAL_SHARE, the random edits'
    mean over draws against CONTROL_MAX (both absolute, not relative to the stream)."""
    t = shift[shift["period_set"] == CAUSAL_SET].assign(hits=lambda f: f["residue_moved"] * f["n"])
    keys = list(keys)
    real = t[~t["control"]].groupby(keys, sort=False)[["hits", "n"]].sum()
    # each random draw's share pooled over its d and questions, then mean and spread over the draws
    draws = t[t["control"]].groupby([*keys, "draw"], sort=False)[["hits", "n"]].sum()
    per_draw = (draws["hits"] / draws["n"]).groupby(level=keys, sort=False).agg(["mean", "std", "size"])
    rows = []
    for key, sums in real.iterrows():
        n = int(sums["n"])
        share = float(sums["hits"]) / n if n else float("nan")
        low, high = wilson_interval(share, n)
        drawn = per_draw.loc[key] if key in per_draw.index else None
        count = int(drawn["size"]) if drawn is not None else 0
        control = float(drawn["mean"]) if count else float("nan")
        rows.append({
            **dict(zip(keys, key)), "share": share, "n": n, "control": control,
            "control_sd": float(drawn["std"]) if count > 1 else float("nan"), "draws": count,
            "read": share, "read_low": low, "read_high": high, "read_control": control,
            "causal": bool(low >= CAUSAL_SHARE and control <= CONTROL_MAX),
            "not_causal": bool(high < CAUSAL_SHARE),
            "rule": "earlier", "read_of": "questions",
        })
    return pd.DataFrame(rows)


#: The columns that tell a group of the `group_shift` table apart.
GROUP_KEYS = ("group", "kind", "first_layer", "layer")


def group_summary(run) -> pd.DataFrame | None:
    """`read_shift_summary` of the run's group shift (core.runs.group_shift), one row a group of modules of one kind
    and the stream after the groups' last layer (group "stream"), read by the same rule as one module; None for a run
    without the group tables. Cached like `shift_summary`."""
    if not (run.has(Table.GROUP_SHIFT) and run.has(Table.GROUP_SHIFT_ANSWERS)):
        return None
    shift, answers = run.table(Table.GROUP_SHIFT), run.table(Table.GROUP_SHIFT_ANSWERS)
    key = ("group",) + tuple((f.shape, int(pd.util.hash_pandas_object(f, index=False).sum())) for f in (shift, answers))
    if key not in _SUMMARIES:
        _SUMMARIES[key] = read_shift_summary(shift, answers, GROUP_KEYS)
        while len(_SUMMARIES) > _SUMMARIES_KEPT:
            _SUMMARIES.popitem(last=False)
    _SUMMARIES.move_to_end(key)
    return _SUMMARIES[key].copy()
