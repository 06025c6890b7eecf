"""Number-embedding spectra (PAPER.md section 3) and t-SNE / k-means pictures of the embeddings.

Embedding spectrum: W_E (p x D) holds the input-embedding rows of the numbers 0..p-1. Apply the
Fourier transform along the number axis to every column (F W_E) and take the L2 norm of each
row: one magnitude per Fourier row; per frequency k, sqrt(|sin_k row|^2 + |cos_k row|^2).
A pre-trained model shows outliers at periods 2, 2.5, 5, 10; a model trained from scratch none.

There is no null model in the paper: "outlier" is judged by eye. Here the spectrum comes with a
permutation baseline, the same spectrum with the rows of W_E shuffled (numbers relabelled at
random), whose mean and 95th percentile say how large a peak would be by chance.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.errors import CoreError
from core.fourier import FourierBasis, magnitudes_from_coefficients


def embedding_spectrum(embedding, basis: FourierBasis) -> np.ndarray:
    """Magnitude per frequency k = 1..K of the number embedding (p x D)."""
    W = _matrix(embedding, basis.p)
    coefficients = basis.matrix @ W  # (rows, D)
    row_norms = np.linalg.norm(coefficients, axis=1)
    return magnitudes_from_coefficients(basis, row_norms)


def permutation_baseline(embedding, basis: FourierBasis, n_permutations: int = 50, seed: int = 0):
    """Mean and 95th percentile, per frequency, of the spectrum of row-shuffled embeddings."""
    W = _matrix(embedding, basis.p)
    rng = np.random.default_rng(seed)
    spectra = np.stack([embedding_spectrum(W[rng.permutation(basis.p)], basis) for _ in range(n_permutations)])
    return spectra.mean(axis=0), np.percentile(spectra, 95, axis=0)


def spectrum_table(embedding, basis: FourierBasis, n_permutations: int = 50, seed: int = 0) -> pd.DataFrame:
    """Long table: k, period, magnitude, null_mean, null_p95, outlier (above the null's 95th pct)."""
    mags = embedding_spectrum(embedding, basis)
    null_mean, null_p95 = permutation_baseline(embedding, basis, n_permutations, seed)
    ks = basis.frequencies
    return pd.DataFrame(
        {
            "k": ks,
            "period": basis.period(ks),
            "magnitude": mags,
            "null_mean": null_mean,
            "null_p95": null_p95,
            "outlier": mags > null_p95,
        }
    )


def top_periods(table: pd.DataFrame, top: int = 6) -> list[float]:
    """Periods of the `top` largest magnitudes (k > 0), largest first."""
    return [float(x) for x in table.sort_values("magnitude", ascending=False)["period"].head(top)]


def embedding_clusters(embedding, n_clusters: int = 10, seed: int = 0, perplexity: float = 30.0) -> pd.DataFrame:
    """t-SNE coordinates and k-means clusters of the number embeddings.

    k-means runs on the embeddings themselves (not on the 2-D picture), so a cluster means
    "close in the model's space". Columns: number, x, y, cluster, last_digit.
    """
    from sklearn.cluster import KMeans
    from sklearn.manifold import TSNE

    W = _as_array(embedding)
    p = W.shape[0]
    if p < 4:
        raise CoreError(f"t-SNE needs at least 4 numbers, got {p}")
    perplexity = min(perplexity, (p - 1) / 3)
    xy = TSNE(n_components=2, perplexity=perplexity, random_state=seed, init="pca").fit_transform(W)
    labels = KMeans(n_clusters=min(n_clusters, p), n_init=10, random_state=seed).fit_predict(W)
    numbers = np.arange(p)
    return pd.DataFrame(
        {"number": numbers, "x": xy[:, 0], "y": xy[:, 1], "cluster": labels, "last_digit": numbers % 10}
    )


def _as_array(embedding) -> np.ndarray:
    if hasattr(embedding, "detach"):
        embedding = embedding.detach().float().cpu().numpy()
    return np.asarray(embedding, dtype=float)


def _matrix(embedding, p: int) -> np.ndarray:
    W = _as_array(embedding)
    if W.ndim != 2 or W.shape[0] != p:
        raise CoreError(f"expected an embedding of {p} number rows, got shape {W.shape}")
    return W
