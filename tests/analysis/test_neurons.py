"""The neuron fits (core.analysis.neurons) against their definitions, on planted neurons: one that is a helix of a + b
scores R^2 near 1 on the helix and low on the heuristics, one that fires on an operand's digit the reverse, and one
that is a wave of the sum's last digit high on both (the overlap the module docstring states)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from core.analysis.neurons import (
    held_out_r2,
    helix_features,
    heuristic_features,
    last_digit_shift,
    neuron_fit_table,
    random_neurons,
    split_questions,
    top_neurons,
)
from core.errors import CoreError


@pytest.fixture(scope="module")
def questions():
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 261, 2000), rng.integers(0, 261, 2000)
    return a, b


def planted(a, b, noise=0.0, seed=0):
    s = a + b
    rng = np.random.default_rng(seed)
    return np.stack([
        np.cos(2 * np.pi * s / 100) + 0.5 * np.sin(2 * np.pi * s / 100) + s / 520,  # a helix of the sum (long period)
        (a % 10 == 3) + 0.7 * ((b // 10) % 10 == 4),  # operand digits
        np.cos(2 * np.pi * s / 10),  # a wave of the sum's last digit: in both spans
        rng.normal(size=len(a)),  # noise
    ], axis=1) + noise * rng.normal(size=(len(a), 4))


def test_helix_neuron_fits_the_helix_and_not_the_heuristics(questions):
    a, b = questions
    table = neuron_fit_table({22: planted(a, b, noise=0.01)}, a, b).set_index("neuron")
    assert table.loc[0, "helix_r2"] > 0.99
    assert table.loc[0, "heuristic_r2"] < 0.5


def test_heuristic_neuron_fits_the_heuristics_and_not_the_helix(questions):
    a, b = questions
    table = neuron_fit_table({22: planted(a, b, noise=0.01)}, a, b).set_index("neuron")
    assert table.loc[1, "heuristic_r2"] > 0.99
    assert table.loc[1, "helix_r2"] < 0.1


def test_last_digit_wave_is_in_both_spans_and_noise_in_neither(questions):
    a, b = questions
    table = neuron_fit_table({22: planted(a, b)}, a, b).set_index("neuron")
    assert table.loc[2, "helix_r2"] > 0.999 and table.loc[2, "heuristic_r2"] > 0.999
    assert table.loc[3, "helix_r2"] < 0.02 and table.loc[3, "heuristic_r2"] < 0.1


def test_held_out_r2_is_one_minus_sse_over_sst_around_the_fit_half_mean():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = X @ np.array([1.0, -2.0]) + 0.5 * rng.normal(size=40)
    fit, scored = split_questions(40)
    Xf = np.column_stack([np.ones(len(fit)), X[fit]])
    coef = np.linalg.lstsq(Xf, y[fit], rcond=None)[0]
    pred = np.column_stack([np.ones(len(scored)), X[scored]]) @ coef
    want = 1 - np.sum((y[scored] - pred) ** 2) / np.sum((y[scored] - y[fit].mean()) ** 2)
    assert held_out_r2(X, y[:, None], fit, scored)[0] == pytest.approx(want)


def test_constant_neuron_scores_zero_and_a_worse_than_mean_fit_below_zero():
    a, b = np.arange(40) * 3, np.arange(40)[::-1]
    fit, scored = split_questions(40)
    assert held_out_r2(helix_features(a, b), np.ones((40, 1)), fit, scored)[0] == 0.0
    y = np.zeros((40, 1))
    y[fit, 0] = np.arange(len(fit)) % 2  # fitted noise, held out flat but for one question
    y[scored[0], 0] = 1.0
    assert held_out_r2(np.random.default_rng(1).normal(size=(40, 12)), y, fit, scored)[0] < 0


def test_features_follow_their_definitions():
    a, b = np.array([7, 123, 260]), np.array([5, 48, 260])
    H = helix_features(a, b)
    s = a + b
    assert H.shape == (3, 8)
    assert np.allclose(H[:, 0], s / s.max())
    assert np.allclose(H[:, 1], np.cos(np.pi * s))  # cos 2; sin 2 is dropped
    assert np.allclose(H[:, 2:4], np.column_stack([np.cos(2 * np.pi * s / 5), np.sin(2 * np.pi * s / 5)]))
    X, names = heuristic_features(a, b)
    frame = pd.DataFrame(X, columns=names)
    assert list(frame["a units = 3"]) == [0, 1, 0] and list(frame["b tens = 4"]) == [0, 1, 0]
    assert list(frame["a+b units = 2"]) == [1, 0, 0] and list(frame["a+b hundreds = 5"]) == [0, 0, 1]
    assert np.allclose(X.sum(axis=1), 8)  # one value of each of the 8 groups


def test_selections_and_last_digit_shift():
    fits = pd.DataFrame({"layer": [22, 22, 23, 23], "neuron": [0, 1, 0, 1], "helix_r2": [0.1, 0.9, 0.5, 0.9],
                         "heuristic_r2": [0.8, 0.0, 0.2, 0.1]})
    assert list(map(tuple, top_neurons(fits, "helix_r2", 2)[["layer", "neuron"]].to_numpy())) == [(22, 1), (23, 1)]
    assert top_neurons(fits, "heuristic_r2", 1)["neuron"].tolist() == [0]
    # the control of a set: as many neurons in each of its layers as it holds there, drawn within the layer
    wide = pd.DataFrame({"layer": np.repeat([20, 21, 22], 50), "neuron": np.tile(np.arange(50), 3),
                         "helix_r2": 0.0, "heuristic_r2": 0.0})
    like = wide.iloc[[0, 1, 2, 100]]  # three of layer 20, one of layer 22, none of layer 21
    drawn = random_neurons(wide, like, 5)
    assert drawn["layer"].value_counts().to_dict() == {20: 3, 22: 1} and not drawn.duplicated().any()
    assert random_neurons(wide, like, 5).equals(drawn) and not random_neurons(wide, like, 6).equals(drawn)
    counts = pd.concat([random_neurons(wide, like, s) for s in range(200)])["neuron"].value_counts()
    assert counts.index.isin(range(50)).all() and len(counts) > 45  # uniform within the layer, not the set's own
    with pytest.raises(CoreError, match="of its 2"):
        random_neurons(fits, fits.iloc[[0, 1, 2]].assign(layer=22), 0)
    with pytest.raises(CoreError, match="empty"):
        random_neurons(fits, fits.iloc[:0], 0)
    assert last_digit_shift([12, 25, 30], [12, 24, 40]) == pytest.approx(1 / 3)
    with pytest.raises(CoreError, match="k = 5"):
        top_neurons(fits, "helix_r2", 5)
    with pytest.raises(CoreError, match="rank neurons"):
        top_neurons(fits, "accuracy", 1)
