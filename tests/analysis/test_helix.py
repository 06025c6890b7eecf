"""The helix (core.analysis.helix): the fit against its definition on a planted helix and on noise, PCA of the same
rank as a bound, the basis without its zero column, reconstruction, the splits, the 3-D view, the tables of a run
and the figures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.figures.helix import helix_fit_chart, helix_view_chart, view_projection
from core.analysis.helix import (
    FIT_COLUMNS,
    POINT_COLUMNS,
    basis_columns,
    best_layer,
    fit_helix,
    fit_pca,
    helix_basis,
    helix_fit_table,
    helix_points,
    helix_reconstruct,
    one_sided_classes,
    pca_reconstruct,
    random_subspace,
    split_numbers,
)
from core.errors import CoreError
from core.runs.helix_tables import helix_tables_from_vectors

N = 521


def planted_helix(n: int = N, width: int = 24, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    """(n, width) vectors exactly C @ B(n) + intercept (C random, full column rank), plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    B = helix_basis(np.arange(n), n_max=n)
    C = rng.normal(size=(width, B.shape[1]))
    return B @ C.T + rng.normal(size=width) + noise * rng.normal(size=(n, width))


def by_model(table: pd.DataFrame, layer: int) -> pd.Series:
    return table[table["layer"] == layer].set_index("model")["explained_mean"]


def test_basis_drops_the_sine_that_is_zero_at_every_whole_number():
    kept, dropped = basis_columns((2, 5, 10, 100))
    assert kept == ("n", "cos 2", "cos 5", "sin 5", "cos 10", "sin 10", "cos 100", "sin 100") and dropped == ("sin 2",)
    B = helix_basis(np.arange(N), n_max=N)
    assert B.shape == (N, 8) and np.linalg.matrix_rank(B) == 8
    assert np.abs(B).max(axis=0).min() > 0.5  # no column is (nearly) zero
    np.testing.assert_allclose(B[:, 1], (-1.0) ** np.arange(N), atol=1e-12)
    assert B[:, 0].max() < 1  # the linear column scaled by n_max
    assert basis_columns((2.5, 10))[1] == ()  # sin(2 pi n / 2.5) is not zero on whole numbers


def test_a_planted_helix_is_explained_on_held_out_numbers_and_beats_its_shuffle():
    layers = np.stack([planted_helix(noise=0.05), np.random.default_rng(1).normal(size=(N, 24))])
    table = helix_fit_table(layers)
    assert tuple(table.columns) == FIT_COLUMNS and len(table) == 2 * 4
    assert set(table.loc[table["model"] != "line", "rank"]) == {8} and set(table["n_splits"]) == {5}
    assert set(table.loc[table["model"] == "line", "rank"]) == {1}
    assert (table["n_train"] + table["n_test"] == N).all()
    helix = by_model(table, 0)
    assert helix["helix"] > 0.99 and helix["helix_shuffled"] < 0.1
    assert helix["line"] < helix["helix"] - 0.3  # the planted circles explain what the line alone cannot
    noise = table[table["layer"] == 1].set_index("model")
    assert abs(noise.loc["helix", "explained_mean"]) < 0.1
    shuffled = noise.loc["helix_shuffled"]
    assert noise.loc["helix", "explained_mean"] < shuffled["explained_mean"] + 3 * shuffled["explained_sd"] + 0.01
    assert best_layer(table) == 0


def test_pca_of_the_same_rank_bounds_the_helix_on_the_training_half():
    rng = np.random.default_rng(2)
    layers = np.stack([planted_helix(noise=0.5), rng.normal(size=(N, 24)), planted_helix(noise=3.0, seed=3)])
    table = helix_fit_table(layers, n_splits=3)
    train = table.pivot(index="layer", columns="model", values="train_explained_mean")
    assert (train["pca"] >= train["helix"] - 1e-12).all()
    assert (train["pca"] >= train["helix_shuffled"] - 1e-12).all()


def test_reconstruction_reproduces_the_helix_and_pca_keeps_its_directions():
    V = planted_helix()
    train, test = split_numbers(N, 0)
    fit = fit_helix(V[train], train, n_max=N)
    assert fit.rank == 8 and fit.coefficients.shape == (24, 8) and fit.intercept.shape == (24,)
    np.testing.assert_allclose(helix_reconstruct(fit, test), V[test], atol=1e-8)
    np.testing.assert_allclose(pca_reconstruct(fit_pca(V[train], 8), V[test]), V[test], atol=1e-8)
    Q = random_subspace(24, 8, seed=4)
    np.testing.assert_allclose(Q.T @ Q, np.eye(8), atol=1e-12)
    np.testing.assert_array_equal(Q, random_subspace(24, 8, seed=4))


def test_the_stratified_split_puts_every_class_mod_100_on_both_sides_and_a_random_half_does_not():
    train, test = split_numbers(N, (0, 0))
    assert abs(len(train) - len(test)) <= 1 and len(np.union1d(train, test)) == N
    assert one_sided_classes(train, test, 100) == 0 and one_sided_classes(train, test, 10) == 0
    one_sided = [one_sided_classes(*split_numbers(N, (0, s), "random"), 100) for s in range(5)]
    assert max(one_sided) > 0  # about 5 of 100 classes in a random half of 0..520
    np.testing.assert_array_equal(split_numbers(N, (3, 1))[0], split_numbers(N, (3, 1))[0])


def test_the_view_of_an_exact_helix_has_its_data_on_the_fitted_curve():
    layers = np.stack([np.random.default_rng(5).normal(size=(N, 24)), planted_helix()])
    points = helix_points(layers, 1)
    assert tuple(points.columns) == POINT_COLUMNS and set(points["period"]) == {10.0, 100.0}
    for a, b in (("x", "fit_x"), ("y", "fit_y"), ("z", "fit_z")):
        np.testing.assert_allclose(points[a], points[b], atol=1e-8)
    seen = view_projection(points, azimuth=0, elevation=90)  # looking down the axis: the circle's plane
    np.testing.assert_allclose(seen["h"], points["y"], atol=1e-12)
    np.testing.assert_allclose(seen["v"], -points["x"], atol=1e-12)


def test_run_tables_from_vectors():
    layers = np.stack([planted_helix(n=240, noise=0.3, seed=s) for s in range(2)]).astype(np.float32)
    tables = helix_tables_from_vectors(layers, log=lambda line: None, n_splits=2)
    assert set(tables) == {"helix_fit", "helix_points"}
    assert tuple(tables["helix_fit"].columns) == FIT_COLUMNS and tuple(tables["helix_points"].columns) == POINT_COLUMNS
    assert set(tables["helix_points"]["layer"]) == {best_layer(tables["helix_fit"])}


@pytest.mark.parametrize("n_layers", [3, 31])
def test_the_figures_build(n_layers):
    rng = np.random.default_rng(n_layers)
    layers = np.stack([planted_helix(n=200, width=12, noise=float(s % 4), seed=s) for s in range(n_layers)])
    layers += 0.01 * rng.normal(size=layers.shape)
    table = helix_fit_table(layers, n_splits=2)
    chart, data, caption = helix_fit_chart(table, "a run", layer=best_layer(table))
    spec = chart.to_dict()
    assert spec["title"] and caption and len(data) == 4 * n_layers
    points = helix_points(layers, best_layer(table))
    for period in (10, 100):
        view, shown, words = helix_view_chart(points, period, azimuth=40, elevation=25, label="a run", numbers=(0, 99))
        assert view.to_dict()["title"] and words and len(shown) == 100


def test_bad_input_is_a_clear_error():
    with pytest.raises(CoreError, match="at least 200 numbers"):
        helix_fit_table(np.zeros((1, 50, 8)))
    with pytest.raises(CoreError, match="2 or more"):
        helix_basis(np.arange(10), periods=(1.5, 10), n_max=10)
    with pytest.raises(CoreError, match="twice"):
        basis_columns((10, 10))
    with pytest.raises(CoreError, match=r"\(L \+ 1, N, D\)"):
        helix_fit_table(np.zeros((521, 8)))
    with pytest.raises(CoreError, match="positive"):
        helix_basis(np.arange(10), n_max=0)
    with pytest.raises(CoreError, match="no circle"):
        helix_points(planted_helix()[None], 0, view_periods=(2,))
    with pytest.raises(CoreError, match="unknown split"):
        split_numbers(N, 0, "halves")
