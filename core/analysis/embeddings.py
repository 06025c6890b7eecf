"""Number-embedding spectra (docs/method.md, "Embedding spectrum") with a permutation null model.

Embedding spectrum: W_E (p x D) holds the input-embedding rows of the numbers 0..p-1. Apply the
Fourier transform along the number axis to every column (F W_E) and take the L2 norm of each
row: one magnitude per Fourier row; per frequency k, sqrt(|sin_k row|^2 + |cos_k row|^2).
A pre-trained model shows outliers at periods 2, 2.5, 5, 10; a model trained from scratch none.

There is no null model in the paper: "outlier" is judged by eye. Here the spectrum comes with a
permutation null model: the same spectrum with the rows of W_E shuffled (numbers relabelled at
random), which keeps every row but destroys any order along the number line. A frequency is an
outlier when it exceeds a threshold that controls the family-wise error over all K frequencies at
5%: each permutation's spectrum is divided by the permutations' mean spectrum (so frequencies with
one Fourier row and frequencies with two are on one scale), its maximum over frequencies is taken,
and the threshold at k is the 95th percentile of those maxima times the mean at k. A pure-noise
embedding then has any outlier at all in about 5% of cases (a per-frequency 95th percentile would
flag about 5% of its frequencies, 13 of 260, every time).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.fourier import FourierBasis, as_array, magnitudes_from_coefficients
from core.errors import CoreError


def embedding_spectrum(embedding, basis: FourierBasis) -> np.ndarray:
    """Magnitude per frequency k = 1..K of the number embedding (p x D)."""
    W = _matrix(embedding, basis.p)
    coefficients = basis.matrix @ W  # (rows, D)
    row_norms = np.linalg.norm(coefficients, axis=1)
    return magnitudes_from_coefficients(basis, row_norms)


#: Permutations of the null model (at least 1,000: the 95th percentile of a maximum needs them).
N_PERMUTATIONS = 1000
FAMILY_WISE_ALPHA = 0.05


def _compact(W: np.ndarray) -> np.ndarray:
    """A (p, r) matrix with the same row-space geometry as W (W W^T equal), r = rank of W.

    The spectrum only needs the norms of the rows of F P W for permutations P, and
    ||F P W||_rows = ||F P U S||_rows when W = U S V^T: one SVD makes every permutation cheaper
    (a tied demo model's W_U has rank 11 in 640 columns).
    """
    if W.shape[1] <= 8:
        return W
    U, S, _ = np.linalg.svd(W, full_matrices=False)
    keep = S > S.max() * max(W.shape) * np.finfo(float).eps if S.size and S.max() > 0 else np.zeros_like(S, bool)
    return U[:, keep] * S[keep] if keep.any() else W[:, :1] * 0


def permutation_null(
    embedding,
    basis: FourierBasis,
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
    alpha: float = FAMILY_WISE_ALPHA,
) -> tuple[np.ndarray, np.ndarray]:
    """(mean, family-wise threshold) per frequency k = 1..K, from row-shuffled embeddings.

    The threshold controls the chance that a shuffled embedding has *any* frequency above it at
    `alpha`: it is the (1 - alpha) quantile of max_k (spectrum_k / mean_k) over the permutations,
    times mean_k.
    """
    if n_permutations < 1:
        raise CoreError(f"the null model needs at least one permutation, got {n_permutations}")
    W = _compact(_matrix(embedding, basis.p))
    rng = np.random.default_rng(seed)
    spectra = np.empty((n_permutations, basis.n_freq))
    for i in range(n_permutations):
        spectra[i] = embedding_spectrum(W[rng.permutation(basis.p)], basis)
    mean = spectra.mean(axis=0)
    safe = np.where(mean > 0, mean, 1.0)
    max_ratio = (spectra / safe).max(axis=1)
    return mean, np.quantile(max_ratio, 1 - alpha) * safe


def spectrum_table(embedding, basis: FourierBasis, n_permutations: int = N_PERMUTATIONS, seed: int = 0) -> pd.DataFrame:
    """Long table: k, period, magnitude, null_mean, null_threshold (family-wise 5% over all
    frequencies, see `permutation_null`), outlier (magnitude above the threshold)."""
    mags = embedding_spectrum(embedding, basis)
    null_mean, threshold = permutation_null(embedding, basis, n_permutations, seed)
    ks = basis.frequencies
    return pd.DataFrame(
        {
            "k": ks,
            "period": basis.period(ks),
            "magnitude": mags,
            "null_mean": null_mean,
            "null_threshold": threshold,
            "outlier": mags > threshold,
        }
    )


def top_periods(table: pd.DataFrame, top: int = 6) -> list[float]:
    """Periods of the `top` largest magnitudes (k > 0), largest first."""
    return [float(x) for x in table.sort_values("magnitude", ascending=False)["period"].head(top)]


def _matrix(embedding, p: int) -> np.ndarray:
    W = as_array(embedding)
    if W.ndim != 2 or W.shape[0] != p:
        raise CoreError(f"expected an embedding of {p} number rows, got shape {W.shape}")
    return W
