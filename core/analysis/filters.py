"""Fourier filters on module outputs: the paper's definition A.6 (docs/method.md, "Filter"), with numpy.

For a module output x in R^D and a set G of frequencies to remove, the filter returns the y
closest to x whose logits have no component at those frequencies:

    y = argmin ||x - y||^2  subject to  (F W_U y)_i = 0 for every row i of F with frequency in G.

With A = F[G rows] W_U, that is the orthogonal projection onto the null space of A:
y = x - Q Q^T x, Q an orthonormal basis of A's row space (from an SVD, in float64). When Q
spans all of R^D (a model narrower than the number of removed rows) the filter erases the
output entirely; `ProjectionFilter.erased` says so and evaluation results carry the flag.

Low-pass removes the high band (k >= tau), high-pass removes the low band (1 <= k < tau),
keep-one-frequency removes every non-constant frequency but one. The constant row is never
removed (docs/method.md, "Frequency bands", "Keep one frequency"); the random-subspace controls
are in docs/method.md, "Controls". Nothing here runs a model: `core.analysis.filter_hooks` applies a
filter to a model's attention and/or MLP outputs, `core.analysis.evaluation` evaluates under filters,
`core.analysis.ablations` names which filter goes on which modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from core.analysis.fourier import FourierBasis, as_array, band_frequencies
from core.errors import CoreError


def rank_tolerance(s_max: float, shape: tuple[int, int], weight_dtype=None) -> float:
    """Singular values at or below this count as zero: numpy's matrix_rank convention,
    S.max() * max(M, N) * eps, with eps of the dtype the weights are stored in (their rounding
    error, not float64's, is what an SVD of the stored weights sees)."""
    return float(s_max) * max(shape) * _eps(weight_dtype)


def _eps(dtype) -> float:
    if dtype is None:
        return float(np.finfo(np.float32).eps)
    name = str(dtype).replace("torch.", "")
    if name == "bfloat16":
        return 2.0**-7
    try:
        return float(np.finfo(np.dtype(name)).eps)
    except TypeError:
        return float(np.finfo(np.float32).eps)


def unembedding_rank(unembedding, weight_dtype=None) -> int:
    """The rank of W_U's number rows, counting singular values above `rank_tolerance`."""
    W_U, weight_dtype = _unembedding_matrix(unembedding, weight_dtype)
    return _rank(np.linalg.svd(W_U, compute_uv=False), W_U.shape, weight_dtype)


def _unembedding_matrix(unembedding, weight_dtype=None) -> tuple[np.ndarray, object]:
    """(W_U as a float64 array, the dtype the model stores it in) from an array, a tensor or an Unembed."""
    weight_dtype = weight_dtype if weight_dtype is not None else _weight_dtype(unembedding)
    matrix = unembedding if hasattr(unembedding, "shape") else getattr(unembedding, "weight", unembedding)
    return as_array(matrix), weight_dtype


def _rank(singular_values: np.ndarray, shape: tuple[int, int], weight_dtype) -> int:
    """How many singular values stand above `rank_tolerance`."""
    s = singular_values
    return int((s > rank_tolerance(s.max(), shape, weight_dtype)).sum()) if s.size and s.max() > 0 else 0


def _weight_dtype(unembedding):
    """The dtype the model stores W_U in: an Unembed's, a tensor's `weight_dtype` tag, else the array's own."""
    tagged = getattr(unembedding, "weight_dtype", None)
    if tagged is not None:
        return tagged
    return getattr(unembedding, "dtype", None)


@dataclass(eq=False)
class ProjectionFilter:
    """Projection onto the null space of F[removed rows] W_U."""

    removed: tuple[int, ...]  # frequencies removed
    basis_name: str
    q: np.ndarray  # (D, rank) orthonormal columns spanning the row space of A
    width: int
    #: Q as a float32 tensor per device, made by `core.analysis.filter_hooks.device_q` when a hook first needs it.
    device_copies: dict = field(default_factory=dict, repr=False)

    @property
    def rank(self) -> int:
        return int(self.q.shape[1])

    @property
    def erased(self) -> bool:
        """True when the constraint leaves only y = 0: the module output is wiped out."""
        return self.rank >= self.width

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Filter vectors (last axis D) with numpy, in float64."""
        x = np.asarray(x, dtype=float)
        if self.erased:
            return np.zeros_like(x)
        return x - (x @ self.q) @ self.q.T


def projection_filter(unembedding, basis: FourierBasis, removed: Sequence[int], weight_dtype=None) -> ProjectionFilter:
    """The filter that removes the frequencies `removed` from what W_U reads off a module output.

    `unembedding`: W_U's number rows (p, D) as an array or tensor, or a `core.models.unembed.Unembed`. The
    rank of A = F[removed] W_U counts singular values above `rank_tolerance` for the dtype the
    weights are stored in (`weight_dtype`, else the one the unembedding carries).
    """
    W_U, weight_dtype = _unembedding_matrix(unembedding, weight_dtype)
    if W_U.ndim != 2 or W_U.shape[0] != basis.p:
        raise CoreError(f"the unembedding must have {basis.p} number rows, got shape {W_U.shape}")
    removed = tuple(sorted({int(k) for k in removed}))
    if any(k < 1 or k > basis.n_freq for k in removed):
        raise CoreError(f"frequencies to remove must lie in 1..{basis.n_freq} (the constant is never removed)")
    D = W_U.shape[1]
    rows = basis.rows_of(removed)
    if len(rows) == 0:
        return ProjectionFilter(removed, basis.name, np.zeros((D, 0)), D)
    A = basis.matrix[rows] @ W_U
    _, s, vt = np.linalg.svd(A, full_matrices=False)
    rank = _rank(s, A.shape, weight_dtype)
    return ProjectionFilter(removed, basis.name, vt[:rank].T.copy(), D)


def random_subspace_filter(unembedding, rank: int, seed: int, weight_dtype=None) -> ProjectionFilter:
    """A control for a frequency filter of rank r: remove a random r-dimensional subspace instead.

    The subspace is drawn uniformly (Haar) from the row space of W_U's number rows, the directions
    W_U reads (a subspace drawn from all of R^D would be mostly invisible to W_U and change nothing
    a frequency filter could change). When r reaches the rank of W_U the whole row space is removed.
    """
    W_U, weight_dtype = _unembedding_matrix(unembedding, weight_dtype)
    D = W_U.shape[1]
    if rank >= D:
        return ProjectionFilter((), "random", np.eye(D), D)
    if rank <= 0:
        return ProjectionFilter((), "random", np.zeros((D, 0)), D)
    _, s, vt = np.linalg.svd(W_U, full_matrices=False)
    r_w = _rank(s, W_U.shape, weight_dtype)
    row_space = vt[:r_w].T  # (D, r_w)
    if rank >= r_w:
        return ProjectionFilter((), "random", row_space.copy(), D)
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((r_w, rank))
    q, r = np.linalg.qr(g)
    q = q * np.sign(np.diag(r))  # Haar-uniform orthonormal columns
    return ProjectionFilter((), "random", row_space @ q, D)


def low_pass(unembedding, basis: FourierBasis, tau: int) -> ProjectionFilter:
    """Keep frequencies below tau: remove the high band k >= tau."""
    return projection_filter(unembedding, basis, band_frequencies(basis, "high", tau))


def high_pass(unembedding, basis: FourierBasis, tau: int) -> ProjectionFilter:
    """Keep frequencies at or above tau: remove the low band 1 <= k < tau."""
    return projection_filter(unembedding, basis, band_frequencies(basis, "low", tau))


def keep_frequency(unembedding, basis: FourierBasis, k: int) -> ProjectionFilter:
    """Keep one frequency k (and the constant): remove every other frequency."""
    if not 1 <= int(k) <= basis.n_freq:
        raise CoreError(f"frequency to keep must lie in 1..{basis.n_freq}, got {k}")
    return projection_filter(unembedding, basis, [j for j in basis.frequencies if j != int(k)])
