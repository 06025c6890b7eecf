"""t-SNE / k-means pictures of the number embeddings (the dashboard's embedding page draws them).

Kept apart from `core.analysis.embeddings` (the spectra) because it needs scikit-learn, which the
dashboard need not load to show a run's tables.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from sklearn.manifold import TSNE

from core.analysis.fourier import as_array
from core.errors import CoreError


def embedding_clusters(embedding, n_clusters: int = 10, seed: int = 0, perplexity: float = 30.0) -> pd.DataFrame:
    """t-SNE coordinates and k-means clusters of the number embeddings.

    k-means runs on the embeddings themselves (not on the 2-D picture), so a cluster means
    "close in the model's space". Columns: number, x, y, cluster, last_digit.
    """
    W = as_array(embedding)
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
