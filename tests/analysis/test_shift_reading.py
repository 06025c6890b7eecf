"""Reading a phase shift against the stream (core.analysis.shift_reading), re-derived from planted outcomes."""

import numpy as np
import pandas as pd
import pytest

from core.analysis.phase_shift import wilson_interval
from core.analysis.shift_reading import read_shifts, stream_shares

N = 400
DS = (1, 2, 5)


def planted(stream_moves: dict, module_moves: dict, control_moves=None, control_stays=0.9, module_stays=None):
    """A phase_shift table and its per-question answers: per d, which questions' last digits moved under the stream's
    shift, the module's, and one random control per draw (boolean arrays over N questions)."""
    rows, answers = [], []

    def add(kind, layer, d, control, draw, moved, stayed):
        i = len(rows)
        rows.append({"kind": kind, "layer": layer, "period_set": "all", "d": d, "control": control, "draw": draw,
                     "n": N, "moved": moved.mean(), "stayed": stayed.mean(), "elsewhere": 0.0,
                     "residue_moved": moved.mean(), "edit_size": 0.5, "kept": 10, "full_rank": 10, "misfit": 0.01})
        answers.append(pd.DataFrame({"condition": i, "example": np.arange(N), "residue_moved": moved,
                                     "stayed": stayed}))

    for d in DS:
        s = stream_moves[d]
        add("resid", 2, d, False, -1, s, ~s)
        m = module_moves[d]
        add("mlp", 1, d, False, -1, m, module_stays[d] if module_stays else ~m)
        for draw, c in enumerate(control_moves[d] if control_moves else []):
            add("mlp", 1, d, True, draw, c, np.arange(N) < control_stays * N)
    return pd.DataFrame(rows), pd.concat(answers, ignore_index=True)


def test_the_relative_share_is_the_module_s_share_over_the_stream_s_at_each_d_averaged_over_the_d_read():
    rng = np.random.default_rng(0)
    stream = {1: rng.random(N) < 0.98, 2: rng.random(N) < 0.8, 5: rng.random(N) < 0.5}
    module = {d: stream[d] & (rng.random(N) < 0.6) for d in DS}
    controls = {d: [rng.random(N) < 0.02, rng.random(N) < 0.04] for d in DS}
    shift, answers = planted(stream, module, controls)
    assert stream_shares(shift, "all") == pytest.approx({d: stream[d].mean() for d in DS})
    t = read_shifts(shift, answers, "all", read_d=[1, 2])  # d = 5 not read
    mlp = t[t["kind"] == "mlp"].iloc[0]
    ratios = {d: module[d].sum() / stream[d].sum() for d in DS}
    for d in DS:
        assert mlp[f"relative_d{d}"] == pytest.approx(ratios[d])
        assert mlp[f"share_d{d}"] == pytest.approx(module[d].mean())
    assert mlp["relative"] == pytest.approx((ratios[1] + ratios[2]) / 2)
    assert mlp["relative_low"] < mlp["relative"] < mlp["relative_high"]
    assert mlp["share"] == pytest.approx((module[1].sum() + module[2].sum()) / (2 * N))
    per_draw = [np.mean([controls[d][k].sum() / stream[d].sum() for d in (1, 2)]) for k in range(2)]
    assert mlp["control_relative"] == pytest.approx(np.mean(per_draw))
    assert mlp["control_relative_sd"] == pytest.approx(np.std(per_draw, ddof=1)) and mlp["draws"] == 2
    stream_row = t[t["kind"] == "resid"].iloc[0]
    assert stream_row["relative"] == pytest.approx(1.0) and stream_row["draws"] == 0


def test_the_interval_resamples_questions_not_shifts():
    """A question's three shifts move together here: the interval must be as wide as N questions allow, wider than
    one that counted 3N independent shifts (by about sqrt(3))."""
    rng = np.random.default_rng(1)
    stream = {d: np.ones(N, bool) for d in DS}
    same = rng.random(N) < 0.5
    shift, answers = planted(stream, {d: same for d in DS})
    mlp = read_shifts(shift, answers, "all", read_d=DS).query("kind == 'mlp'").iloc[0]
    width = mlp["relative_high"] - mlp["relative_low"]
    questions = np.subtract(*wilson_interval(same.mean(), N)[::-1])
    shifts = np.subtract(*wilson_interval(same.mean(), 3 * N)[::-1])
    assert width == pytest.approx(questions, rel=0.2) and width > 1.4 * shifts


def test_a_control_that_leaves_fewer_answers_in_place_than_the_edit_is_no_control():
    stream = {d: np.ones(N, bool) for d in DS}
    module = {d: np.arange(N) < 0.7 * N for d in DS}  # moves 70%, leaves the other 30% in place
    quiet = {d: [np.zeros(N, bool)] for d in DS}
    works = read_shifts(*planted(stream, module, quiet, control_stays=0.9), "all", read_d=DS)
    breaks = read_shifts(*planted(stream, module, quiet, control_stays=0.1), "all", read_d=DS)
    assert works.query("kind == 'mlp'")["control_works"].iloc[0]
    row = breaks.query("kind == 'mlp'").iloc[0]
    assert not row["control_works"]
    assert row["control_stayed"] == pytest.approx(0.1) and row["stayed"] == pytest.approx(0.3)
