"""The helix (Kantamneni & Tegmark 2025, "Language models use trigonometry to do addition"): does a layer hold each
number n on a generalized helix, its vector approximately C @ B(n) + intercept, with the basis

    B(n) = [n / n_max, cos(2 pi n / T), sin(2 pi n / T) for T in the periods (2, 5, 10, 100)]

(a linear part and one circle per period; torch-free, pure numpy, float64 inside)?

* **Scaling**: the linear column is n / n_max (n_max = the number of numbers, N, by default), so every column lies in
  [-1, 1] and the least-squares problem is well conditioned.
* **Zero columns**: sin(2 pi n / T) is 0 at every integer n when 2 / T is a whole number, which for a period T >= 2
  means T = 2 alone (cos(pi n) = (-1)^n is kept). That column is dropped, not fitted: the default basis has rank 8,
  not 9 (`basis_columns` names the kept and dropped columns). Periods below 2 are refused: on integers they alias to
  a period above 2.
* **The fit**: for each layer and split, C and the intercept are fitted by least squares on the training numbers;
  the reading is the fraction of the variance of the *held-out* numbers explained, 1 - SSE / SST, both sums taken
  around the TRAINING mean (a fit that predicts worse than that mean scores below 0).
* **Splits**: "stratified" (the default) groups the numbers by n mod M (M = the longest period, rounded: 100), shuffles
  each group (seeded) and deals it alternately to the two halves, so every residue class mod 100 (hence mod 2, 5, 10)
  has numbers on both sides. A plain random half ("random") does not promise that: of 0..520 the residues 21..99
  have 5 numbers each, all on one side with probability 2 / 2^5 = 1/16, so about 5 of the 100 classes are one-sided
  in a typical split (every class mod 10, with 52 numbers or more, is two-sided in practice).
* **Against it**: PCA of the same rank r, fitted on the training half (its top-r directions), scored by projecting the
  held-out vectors (centred on the training mean) onto them. On the training half PCA of rank r is an UPPER bound for
  any rank-r linear reconstruction (Eckart-Young), the helix's included; but PCA reads the vector itself while the
  helix predicts it from n alone. Both are reported; the reading is the ratio helix / PCA (how much of what r
  directions can hold the number's value places there). **Null**: the same helix fit with the basis rows assigned to a
  seeded random permutation of the numbers ("helix_shuffled"), and the line alone ("line": n / n_max, rank 1), since
  the shuffle destroys the line as well as the circles: the circles show only where the helix explains more than the
  line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from core.errors import CoreError, choices

PERIODS = (2, 5, 10, 100)
VIEW_PERIODS = (10, 100)
N_SPLITS = 5
SPLITS = ("stratified", "random")
MODELS = ("helix", "pca", "helix_shuffled", "line")
#: The periods of the line alone (the helix without its circles): what shuffling the numbers also destroys, so the
#: circles show only where the helix explains more than the line (core.claims.helix).
LINE = ()
#: Why the fits run on one BLAS thread: their matrices are small (N/2 x D), and on a 2-core machine with other work
#: running OpenBLAS's two threads waited on each other: 4 layers of helix_fit_table took 18 s on 2 threads, 0.9 s on 1.
ONE_BLAS_THREAD = 1
NON_FINITE = "the number vectors hold non-finite values; recapture them in float32 (number_representations)"
#: helix_fit: one row per (layer, model); explained_* are fractions of the held-out variance (mean and sample sd over
#: the splits), train_explained_mean the same on the training half.
FIT_COLUMNS = ("layer", "model", "rank", "explained_mean", "explained_sd", "train_explained_mean", "n_train", "n_test",
               "n_splits")
#: helix_points: one row per (period, number) on the best layer: the number's centred vector (x, y, z) and its helix
#: fit (fit_x, fit_y, fit_z) in the orthonormalised directions of that period's circle (x, y) and the linear part (z).
POINT_COLUMNS = ("layer", "period", "number", "x", "y", "z", "fit_x", "fit_y", "fit_z")


@dataclass(frozen=True, eq=False)
class HelixFit:
    """A fitted helix: vector(n) ~ coefficients @ helix_basis([n], periods, n_max=n_max)[0] + intercept."""

    numbers: np.ndarray  # (n_train,) the numbers it was fitted on
    periods: tuple[float, ...]
    n_max: float  # the linear column is n / n_max
    columns: tuple[str, ...]  # the basis columns kept (`basis_columns`)
    coefficients: np.ndarray  # C, (D, rank) float64: column j is basis column j's direction in the stream
    intercept: np.ndarray  # (D,) float64

    @property
    def rank(self) -> int:
        return len(self.columns)


@dataclass(frozen=True, eq=False)
class PcaFit:
    """The top-`rank` principal directions of some vectors: reconstruct = mean + (v - mean) @ W @ W.T."""

    mean: np.ndarray  # (D,) float64
    directions: np.ndarray  # W, (D, rank) float64, orthonormal columns

    @property
    def rank(self) -> int:
        return self.directions.shape[1]


# ----------------------------------------------------------------------------- the basis


def check_periods(periods) -> tuple[float, ...]:
    """The periods as a tuple of floats, each 2 or more and none twice; a CoreError otherwise."""
    periods = tuple(float(T) for T in periods)
    if not periods:
        raise CoreError("the helix needs at least one period, e.g. (2, 5, 10, 100)")
    bad = [T for T in periods if not np.isfinite(T) or T < 2]
    if bad:
        raise CoreError(f"helix periods must be 2 or more (on whole numbers a shorter period aliases to a longer one), "
                        f"got {bad}")
    if len(set(periods)) != len(periods):
        raise CoreError(f"a helix period is given twice in {periods}; give each once")
    return periods


def periods_or_line(periods) -> tuple[float, ...]:
    """`check_periods`, or () for the line alone (`LINE`)."""
    return () if len(tuple(periods)) == 0 else check_periods(periods)


def zero_sine(T: float) -> bool:
    """Whether sin(2 pi n / T) is 0 at every whole number n: 2 / T is a whole number (for T >= 2: T = 2 alone)."""
    ratio = 2.0 / T
    return abs(ratio - round(ratio)) < 1e-12


def basis_columns(periods=PERIODS) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(kept, dropped) column names of the basis: "n" then "cos T", "sin T" per period, the identically zero
    sin T (`zero_sine`) dropped. For (2, 5, 10, 100): 8 kept, ("sin 2",) dropped."""
    kept, dropped = ["n"], []
    for T in periods_or_line(periods):
        name = f"{T:g}"
        kept.append(f"cos {name}")
        (dropped if zero_sine(T) else kept).append(f"sin {name}")
    return tuple(kept), tuple(dropped)


def helix_basis(numbers, periods=PERIODS, *, n_max: float) -> np.ndarray:
    """The design matrix (len(numbers), rank) float64: the columns `basis_columns(periods)[0]`, i.e. n / n_max,
    then cos(2 pi n / T) and sin(2 pi n / T) for each period T, without the sine that is 0 at every whole number
    (T = 2). No intercept column: the fits add their own."""
    periods = periods_or_line(periods)
    n = np.asarray(numbers, dtype=np.float64).reshape(-1)
    if not np.isfinite(n_max) or n_max <= 0:
        raise CoreError(f"n_max scales the linear column n / n_max and must be positive, got {n_max}")
    if not np.isfinite(n).all():
        raise CoreError("the helix basis needs finite numbers")
    cols = [n / n_max]
    for T in periods:
        angle = 2 * np.pi * n / T
        cols.append(np.cos(angle))
        if not zero_sine(T):
            cols.append(np.sin(angle))
    return np.stack(cols, axis=1)


# ----------------------------------------------------------------------------- fits


def as_vectors(vectors, numbers) -> tuple[np.ndarray, np.ndarray]:
    """(vectors as (N, D) float64, numbers as (N,) int), checked to match and be finite."""
    V = np.asarray(vectors, dtype=np.float64)
    n = np.asarray(numbers).reshape(-1)
    if V.ndim != 2 or V.shape[0] != len(n):
        raise CoreError(f"expected one vector per number, an ({len(n)}, D) array, got shape {V.shape}")
    if not np.isfinite(V).all():
        raise CoreError(NON_FINITE)
    return V, n


def fit_helix(vectors, numbers, periods=PERIODS, *, n_max: float) -> HelixFit:
    """Least-squares C and intercept of vectors ~ C @ B(n) + intercept over the given numbers (rows of `vectors`)."""
    V, n = as_vectors(vectors, numbers)
    B = helix_basis(n, periods, n_max=n_max)
    if len(n) <= B.shape[1] + 1:
        raise CoreError(f"a helix of rank {B.shape[1]} needs more than {B.shape[1] + 1} numbers to fit, got {len(n)}")
    b_mean, v_mean = B.mean(axis=0), V.mean(axis=0)
    coef, *_ = np.linalg.lstsq(B - b_mean, V - v_mean, rcond=None)  # (rank, D)
    return HelixFit(n.copy(), periods_or_line(periods), float(n_max), basis_columns(periods)[0], coef.T.copy(),
                    v_mean - b_mean @ coef)


def helix_reconstruct(fit: HelixFit, numbers) -> np.ndarray:
    """The fitted vectors C @ B(n) + intercept of the given numbers, (len(numbers), D) float64."""
    return helix_basis(numbers, fit.periods, n_max=fit.n_max) @ fit.coefficients.T + fit.intercept


def fit_pca(vectors, rank: int) -> PcaFit:
    """The mean and top-`rank` principal directions of the vectors (rows)."""
    V = np.asarray(vectors, dtype=np.float64)
    if V.ndim != 2 or not 1 <= rank <= min(V.shape):
        raise CoreError(f"PCA of rank {rank} needs an (N, D) array with N, D >= {rank}, got shape {V.shape}")
    mean = V.mean(axis=0)
    _, _, vt = np.linalg.svd(V - mean, full_matrices=False)
    return PcaFit(mean, vt[:rank].T.copy())


def pca_reconstruct(pca: PcaFit, vectors) -> np.ndarray:
    """The vectors keeping only their top-r directions: mean + (v - mean) @ W @ W.T, (N, D) float64."""
    centred = np.asarray(vectors, dtype=np.float64) - pca.mean
    return pca.mean + centred @ pca.directions @ pca.directions.T


def random_subspace(width: int, rank: int, seed: int = 0) -> np.ndarray:
    """A seeded random orthonormal basis (width, rank) float64 of a rank-dimensional subspace of R^width (QR of a
    Gaussian matrix): the control for a fitted subspace of the same rank."""
    if not 1 <= rank <= width:
        raise CoreError(f"a random subspace needs 1 <= rank <= width, got rank {rank} in width {width}")
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(width, rank)))
    return q * np.sign(np.diag(r))  # a unique basis for the seed (QR's signs fixed)


def explained(actual: np.ndarray, predicted: np.ndarray, centre: np.ndarray) -> float:
    """1 - SSE / SST, SST the sum of squares of `actual` around `centre` (the training mean)."""
    sst = float(np.sum((actual - centre) ** 2))
    return 1.0 - float(np.sum((actual - predicted) ** 2)) / sst if sst > 0 else 0.0


# ----------------------------------------------------------------------------- splits and the table


def split_numbers(n_numbers: int, seed, split: str = "stratified", modulus: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) halves of 0..n_numbers-1, seeded (see the module doc): "stratified" deals each residue class
    mod `modulus` alternately to the two sides after a seeded shuffle; "random" a random half."""
    rng = np.random.default_rng(seed)
    if split == "random":
        order = rng.permutation(n_numbers)
        half = n_numbers // 2
        return np.sort(order[half:]), np.sort(order[:half])
    if split != "stratified":
        raise CoreError(f"unknown split {split!r}: choose one of {choices(SPLITS)}")
    side = np.empty(n_numbers, dtype=bool)
    start = 0  # the side that gets a class's first member alternates, so the halves differ by one number at most
    for r in range(modulus):
        members = rng.permutation(np.arange(r, n_numbers, modulus))
        side[members] = (np.arange(len(members)) + start) % 2 == 0
        start += len(members) % 2
    return np.flatnonzero(side), np.flatnonzero(~side)


def one_sided_classes(train, test, modulus: int) -> int:
    """How many residue classes mod `modulus` present among the numbers have numbers on one side only."""
    a, b = set(np.asarray(train) % modulus), set(np.asarray(test) % modulus)
    return len(a ^ b)


def check_layers(vectors, periods) -> np.ndarray:
    """The (L + 1, N, D) representations as float64, with enough numbers for the periods; a CoreError otherwise."""
    V = np.asarray(vectors, dtype=np.float64)
    if V.ndim != 3:
        raise CoreError(f"expected the numbers' vectors by layer, an (L + 1, N, D) array, got shape {V.shape}")
    n = V.shape[1]
    longest = max(check_periods(periods))
    rank = len(basis_columns(periods)[0])
    need = max(int(np.ceil(2 * longest)), 2 * (rank + 2))
    if n < need:
        raise CoreError(f"the helix fit needs at least {need} numbers for periods up to {longest:g} (a period at most "
                        f"half the numbers, each half more numbers than the {rank} basis columns), got {n}: capture "
                        f"more numbers (n_numbers) or leave the longest periods out")
    if not np.isfinite(V).all():
        raise CoreError(NON_FINITE)
    return V


def layer_scores(V: np.ndarray, periods, n_max: float, train, test, perm) -> dict[str, tuple[float, float]]:
    """model -> (held-out explained, training explained) of one layer (N, D) and one split."""
    numbers = np.arange(V.shape[0])
    out = {}
    for model, labels, shape in (("helix", numbers, periods), ("helix_shuffled", perm, periods),
                                 ("line", numbers, LINE)):
        fit = fit_helix(V[train], labels[train], shape, n_max=n_max)
        centre = V[train].mean(axis=0)
        out[model] = (explained(V[test], helix_reconstruct(fit, labels[test]), centre),
                      explained(V[train], helix_reconstruct(fit, labels[train]), centre))
    pca = fit_pca(V[train], len(basis_columns(periods)[0]))
    out["pca"] = (explained(V[test], pca_reconstruct(pca, V[test]), pca.mean),
                  explained(V[train], pca_reconstruct(pca, V[train]), pca.mean))
    return out


def helix_fit_table(vectors, periods=PERIODS, n_splits: int = N_SPLITS, seed: int = 0, split: str = "stratified",
                    n_max: float | None = None) -> pd.DataFrame:
    """The helix against PCA of the same rank and the shuffled helix, by layer: one row per (layer, model), the
    columns FIT_COLUMNS. `vectors`: (L + 1, N, D), row n the number n (`NumberRepresentations.vectors`). Each split
    (seeded by (seed, split index)) is used for all three models and every layer; the shuffle's permutation is seeded
    per split too. `split`: "stratified" (every class mod the longest period on both sides) or "random" (the module
    doc). n_max defaults to N."""
    V = check_layers(vectors, periods)
    if n_splits < 1:
        raise CoreError(f"n_splits must be 1 or more, got {n_splits}")
    n = V.shape[1]
    n_max = float(n if n_max is None else n_max)
    modulus = int(round(max(check_periods(periods))))
    splits = [split_numbers(n, (seed, s), split, modulus) for s in range(n_splits)]
    perms = [np.random.default_rng((seed, s, 1)).permutation(n) for s in range(n_splits)]
    rank = len(basis_columns(periods)[0])
    rows = []
    for layer in range(V.shape[0]):
        with threadpool_limits(ONE_BLAS_THREAD, user_api="blas"):  # small matrices: see ONE_BLAS_THREAD
            scores = [layer_scores(V[layer], periods, n_max, tr, te, p) for (tr, te), p in zip(splits, perms)]
        for model in MODELS:
            held = np.array([s[model][0] for s in scores])
            rows.append({
                "layer": layer, "model": model, "rank": 1 if model == "line" else rank,
                "explained_mean": float(held.mean()),
                "explained_sd": float(held.std(ddof=1)) if n_splits > 1 else 0.0,
                "train_explained_mean": float(np.mean([s[model][1] for s in scores])),
                "n_train": len(splits[0][0]), "n_test": len(splits[0][1]), "n_splits": n_splits,
            })
    return pd.DataFrame(rows, columns=list(FIT_COLUMNS))


def best_layer(fit_table: pd.DataFrame) -> int:
    """The layer whose helix explains the most held-out variance (the lowest such layer on a tie)."""
    helix = fit_table[fit_table["model"] == "helix"]
    if helix.empty:
        raise CoreError("the helix_fit table has no helix rows; build it with helix_fit_table")
    top = helix["explained_mean"].max()
    return int(helix.loc[helix["explained_mean"] == top, "layer"].min())


# ----------------------------------------------------------------------------- the 3-D view


def period_axes(fit: HelixFit, period: float) -> np.ndarray:
    """(D, 3) orthonormal axes of one period's view: Gram-Schmidt (QR) of C[:, cos T], C[:, sin T] and C[:, n] in
    that order, so x, y span the circle's plane and z is the linear direction's part orthogonal to it."""
    name = f"{float(period):g}"
    if f"sin {name}" not in fit.columns or f"cos {name}" not in fit.columns:
        raise CoreError(f"period {name} has no circle in this fit (its columns: {', '.join(fit.columns)}); "
                        "a 3-D view needs a period with both cos and sin, e.g. 10 or 100")
    pick = [fit.columns.index(c) for c in (f"cos {name}", f"sin {name}", "n")]
    q, r = np.linalg.qr(fit.coefficients[:, pick])
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)  # each axis points along its own direction


def helix_points(vectors, layer: int, periods=PERIODS, view_periods=VIEW_PERIODS,
                 n_max: float | None = None) -> pd.DataFrame:
    """The 3-D view of one layer (POINT_COLUMNS): the helix is fitted on ALL the numbers (a picture, not a test: the
    held-out test is `helix_fit_table`), and each number's vector and its fit, centred on the numbers' mean, are
    projected on `period_axes` of each view period."""
    V = check_layers(vectors, periods)
    if not 0 <= layer < V.shape[0]:
        raise CoreError(f"layer {layer} is not in 0..{V.shape[0] - 1}")
    numbers = np.arange(V.shape[1])
    with threadpool_limits(ONE_BLAS_THREAD, user_api="blas"):
        fit = fit_helix(V[layer], numbers, periods, n_max=float(V.shape[1] if n_max is None else n_max))
    mean = V[layer].mean(axis=0)
    fitted = helix_reconstruct(fit, numbers) - mean
    frames = []
    for T in view_periods:
        axes = period_axes(fit, T)
        data, curve = (V[layer] - mean) @ axes, fitted @ axes
        frames.append(pd.DataFrame({
            "layer": layer, "period": float(T), "number": numbers, "x": data[:, 0], "y": data[:, 1], "z": data[:, 2],
            "fit_x": curve[:, 0], "fit_y": curve[:, 1], "fit_z": curve[:, 2],
        }))
    return pd.concat(frames, ignore_index=True)[list(POINT_COLUMNS)]
