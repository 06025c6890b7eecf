"""Reading a phase shift against its positive control (docs/method.md#phase-shift): per module and per d, the
share of questions whose last digit moved, as a fraction of what shifting the whole residual stream moves at
the same d on the same questions, with an interval that resamples questions.

Inputs are a run's `phase_shift` table (one row a condition: a module, a period set, a shift d, the edit or one
of its random controls) and its `phase_shift_answers` table (one row a condition and a question: whether the
answer's last digit moved by d, whether the answer stayed). Only the questions whose answer y has y + d on the
number line are read at d.

For a module m and a shift d, with s_d(m) the share of questions whose last digit moved and s_d(stream) the
stream's on the same questions,

    r_d(m) = s_d(m) / s_d(stream)        r(m) = mean of r_d(m) over the d that are read

(the caller says which d are read: those at which the stream's own shift holds). The 95% interval of r(m) is
the percentile bootstrap over questions: BOOTSTRAP_DRAWS resamples of the module's questions with replacement,
each question carrying all its shifts and the stream's on it, so a question's three shifts are not counted as
three independent observations. A random control's relative share is the same ratio for one draw of the
control direction; the controls' mean and spread are over draws. `stayed` is the share of answers left in
place (pooled over the read d): a control that leaves fewer answers in place than the edit it controls breaks
the model more than the edit does, and is no control (`control_works`).

Numpy and pandas only; the thresholds that turn this into a verdict are core.claims.last_digit's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Resamples of the questions behind each relative share's interval.
BOOTSTRAP_DRAWS = 1000
BOOTSTRAP_SEED = 20241
#: The resid rows are the positive control: the whole stream after the last layer.
STREAM = "resid"


def stream_shares(shift: pd.DataFrame, period_set: str) -> dict[int, float]:
    """The stream's own share at each d (its last digit moved by d, over every question it read)."""
    t = shift[(shift["period_set"] == period_set) & (shift["kind"] == STREAM) & ~shift["control"]]
    return {int(r.d): float(r.residue_moved) for r in t.itertuples()}


def read_shifts(shift: pd.DataFrame, answers: pd.DataFrame, period_set: str, read_d, seed: int = BOOTSTRAP_SEED,
                draws: int = BOOTSTRAP_DRAWS, keys=("kind", "layer")) -> pd.DataFrame:
    """One row per edited module of `period_set` (module docstring), or per edited group of modules where `keys`
    names the columns that tell the groups apart (the `group_shift` table: group, kind, first_layer, layer; the
    stream is its rows of kind "resid"): the keys, n (questions), share (the last
    digit moved, pooled over the read d), share_d{d} / stream_d{d} / relative_d{d} for every d of the table,
    relative with relative_low / relative_high (95% bootstrap over questions), the random controls' share,
    control_sd, draws, control_relative, control_relative_sd, stayed, control_stayed, control_works, and the edit's
    edit_size, kept, full_rank and misfit (the largest size and misfit and the fewest kept directions over d)."""
    t = shift.reset_index(drop=True)
    t = t[t["period_set"] == period_set]
    read_d = sorted(int(d) for d in read_d)
    all_d = sorted(int(d) for d in t["d"].unique())
    outcome = _outcomes(answers)
    stream = t[(t["kind"] == STREAM) & ~t["control"]]
    stream_rows = {int(r.d): int(i) for i, r in zip(stream.index, stream.itertuples())}
    rows, resamples = [], {}  # n -> its resample weights: every module of n questions gets the same draws
    keys = list(keys)
    for key, mine in t.groupby(keys, sort=False):
        edit = mine[~mine["control"]]
        edit_rows = {int(r.d): int(i) for i, r in zip(edit.index, edit.itertuples())}
        questions = np.unique(np.concatenate([outcome[i][0] for i in edit_rows.values() if i in outcome] or [[]]))
        n = len(questions)
        if n not in resamples:  # the same draws whatever the order
            resamples[n] = _resample_weights(np.random.default_rng(seed), n, draws)
        weights = resamples[n]

        def counts(row, what):  # (hits on the sample, hits per bootstrap draw) of one condition on these questions
            vec = _on(outcome, row, questions, what)
            return float(vec.sum()), weights @ vec

        def eligible(row):
            return _on(outcome, row, questions, "eligible")

        stream_hits = {d: counts(stream_rows[d], "moved") for d in all_d if d in stream_rows}
        record = {**{k: (int(v) if isinstance(v, (int, np.integer)) else v) for k, v in zip(keys, key)}, "n": n}
        ratios, boot = [], []
        hits_read = elig_read = stayed_read = 0.0
        for d in all_d:
            if d not in edit_rows or d not in stream_hits:
                continue
            hits, hits_b = counts(edit_rows[d], "moved")
            elig = float(eligible(edit_rows[d]).sum())
            s_hits, s_hits_b = stream_hits[d]
            record[f"share_d{d}"] = hits / elig if elig else np.nan
            record[f"stream_d{d}"] = s_hits / elig if elig else np.nan
            record[f"relative_d{d}"] = hits / s_hits if s_hits else np.nan
            if d in read_d:
                ratios.append(record[f"relative_d{d}"])
                with np.errstate(divide="ignore", invalid="ignore"):
                    boot.append(hits_b / s_hits_b)
                hits_read += hits
                elig_read += elig
                stayed_read += counts(edit_rows[d], "stayed")[0]
        record["share"] = hits_read / elig_read if elig_read else np.nan
        record["stayed"] = stayed_read / elig_read if elig_read else np.nan
        record["relative"] = float(np.mean(ratios)) if ratios else np.nan
        if boot:
            spread = np.nanmean(np.vstack(boot), axis=0)
            record["relative_low"], record["relative_high"] = (float(v) for v in np.nanpercentile(spread, [2.5, 97.5]))
        else:
            record["relative_low"] = record["relative_high"] = np.nan
        record.update(_controls(mine[mine["control"]], outcome, questions, stream_hits, read_d))
        record["control_works"] = bool(record["draws"] > 0 and record["control_stayed"] >= record["stayed"])
        read_edits = edit[edit["d"].isin(read_d)] if read_d else edit
        for column, how in (("edit_size", "max"), ("kept", "min"), ("full_rank", "max"), ("misfit", "max")):
            record[column] = read_edits[column].agg(how) if column in read_edits and len(read_edits) else np.nan
        rows.append(record)
    return pd.DataFrame(rows)


def _controls(controls: pd.DataFrame, outcome: dict, questions: np.ndarray, stream_hits: dict, read_d) -> dict:
    """The random controls of one module: share and relative share per draw (pooled / averaged over the read d),
    their mean and spread over draws, and the share of answers they left in place."""
    shares, relatives, stayed = [], [], []
    for _, draw in controls.groupby("draw"):
        hits = elig = kept = 0.0
        ratios = []
        for i, r in zip(draw.index, draw.itertuples()):
            d = int(r.d)
            if d not in read_d or int(i) not in outcome:
                continue
            h = float(_on(outcome, int(i), questions, "moved").sum())
            e = float(_on(outcome, int(i), questions, "eligible").sum())
            hits, elig = hits + h, elig + e
            kept += float(_on(outcome, int(i), questions, "stayed").sum())
            if stream_hits.get(d, (0.0,))[0]:
                ratios.append(h / stream_hits[d][0])
        if elig:
            shares.append(hits / elig)
            stayed.append(kept / elig)
            relatives.append(float(np.mean(ratios)) if ratios else np.nan)
    count = len(shares)
    return {
        "control": float(np.mean(shares)) if count else np.nan,
        "control_sd": float(np.std(shares, ddof=1)) if count > 1 else np.nan,
        "draws": count,
        "control_relative": float(np.mean(relatives)) if count else np.nan,
        "control_relative_sd": float(np.std(relatives, ddof=1)) if count > 1 else np.nan,
        "control_stayed": float(np.mean(stayed)) if count else np.nan,
    }


def _outcomes(answers: pd.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per condition row: (questions read, last digit moved, answer stayed), questions sorted."""
    out = {}
    a = answers.sort_values(["condition", "example"])
    for condition, g in a.groupby("condition", sort=False):
        out[int(condition)] = (g["example"].to_numpy(np.int64), g["residue_moved"].to_numpy(bool),
                               g["stayed"].to_numpy(bool))
    return out


def _on(outcome: dict, row: int, questions: np.ndarray, what: str) -> np.ndarray:
    """One condition's 0/1 vector over `questions` (0 where the question was not read at its d)."""
    vec = np.zeros(len(questions))
    if row not in outcome:
        return vec
    examples, moved, stayed = outcome[row]
    at = np.searchsorted(questions, examples)
    inside = (at < len(questions)) & (questions[np.minimum(at, len(questions) - 1)] == examples)
    value = {"moved": moved, "stayed": stayed, "eligible": np.ones(len(examples), bool)}[what]
    vec[at[inside]] = value[inside]
    return vec


def _resample_weights(rng, n: int, draws: int) -> np.ndarray:
    """(draws, n): how many times each question is drawn in each resample of n questions with replacement."""
    if n == 0:
        return np.zeros((draws, 0))
    picks = rng.integers(0, n, size=(draws, n))
    flat = (np.arange(draws)[:, None] * n + picks).ravel()
    return np.bincount(flat, minlength=draws * n).reshape(draws, n).astype(np.float64)
