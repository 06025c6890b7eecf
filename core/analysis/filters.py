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
    S.max() * max(M, N) * eps, with eps of the dtype W_U is held in (its rounding error, not
    float64's, is what an SVD of those weights sees). A loaded model's W_U is read from its files
    and held in float32 whatever dtype the model runs in (`core.models.loading.LoadedModel.unembedding`),
    so a run in bfloat16 has float32's tolerance and float32's filters."""
    return float(s_max) * max(shape) * _eps(weight_dtype)


def check_tolerance(shape: tuple[int, int], weight_dtype) -> None:
    """Refuse a rank tolerance that is at least the largest singular value (max(M, N) * eps >= 1): every singular
    value would count as zero and every filter would silently remove nothing (a W_U of 521 number rows held in
    bfloat16: 521 * 2^-7 > 1)."""
    if max(shape) * _eps(weight_dtype) >= 1:
        name = str(weight_dtype).replace("torch.", "")
        raise CoreError(
            f"W_U's number rows are held in {name}, too coarse to build a filter from: at {max(shape)} rows {name}'s "
            "rank tolerance counts every singular value as zero. Load the model with load_model (it reads W_U from "
            "the model's files, whatever --dtype it runs in) or pass a float32 model (model.float()) to wrap_model."
        )


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
    check_tolerance(shape, weight_dtype)
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


def removed_energy_share(flt: ProjectionFilter, second_moment: np.ndarray) -> float:
    """The share of the module outputs' energy a filter removes: tr(Q^T C Q) / tr(C), with C = sum of x x^T
    over the outputs it acts on (`second_moment`, D x D), so the share is sum ||Q Q^T x||^2 / sum ||x||^2."""
    C = np.asarray(second_moment, dtype=float)
    total = float(np.trace(C))
    if total <= 0:
        return float("nan")
    if flt.erased:
        return 1.0
    return float(np.sum((C @ flt.q) * flt.q)) / total  # tr(Q^T C Q) through one matrix product (BLAS)


#: The tilt exponent of an energy-matched control is searched in [-MATCH_TILT, MATCH_TILT] (eigenvalues
#: scaled to the largest), by this many bisection steps.
MATCH_TILT, MATCH_STEPS = 24.0, 60
#: A matched control counts as matched within this share of the energy (half a percentage point).
MATCH_TOLERANCE = 0.005
#: The version of the matched draw: 2 computes the tilted subspace in the eigenbasis with its rows sorted, so that
#: weak directions are not lost to rounding (a run's manifest records the version its controls were drawn with;
#: `core.runs.ablation_grid.redraw_unmatched_controls` draws again the controls an older version left unmatched).
MATCH_DRAW_VERSION = 2


@dataclass(frozen=True)
class MatchedDraw:
    """An energy-matched random control: its filter, the tilt it took, the share it removes and the target."""

    flt: ProjectionFilter
    tilt: float
    share: float
    target: float

    @property
    def matched(self) -> bool:
        """Within half a percentage point of the target (False: the target lies beyond the reachable range)."""
        return abs(self.share - self.target) <= MATCH_TOLERANCE


def energy_matched_filter(
    unembedding, rank: int, seed: int, second_moment: np.ndarray, target_share: float, weight_dtype=None
) -> MatchedDraw:
    """A control for a band filter matched in rank *and* removed energy (docs/method.md#controls).

    A band filter of rank r removes the share s* = tr(Q_b^T C Q_b) / tr(C) of the module outputs' energy
    (`removed_energy_share`), often far more than a Haar-random r-dimensional subspace of W_U's row space
    removes, because module outputs are not isotropic. The matched control draws its subspace from a
    tilted Gaussian instead: with V an orthonormal basis of W_U's row space (r_w columns), C_w = V^T C V =
    U diag(lambda) U^T and Z a seeded r_w x r standard normal matrix (the same draw as
    `random_subspace_filter` with this seed),

        Q(a) = V orth(U diag((lambda / lambda_max)^(a / 2)) U^T Z).

    a = 0 is the rank-only control itself; a > 0 leans the directions towards the outputs' strongest
    directions (a -> inf: the top r eigenvectors, the most energy any r directions W_U reads can remove),
    a < 0 towards the weakest. For the fixed Z, share(a) = tr(Q(a)^T C Q(a)) / tr(C) is continuous in a, so
    bisection on [-MATCH_TILT, MATCH_TILT] finds a with share(a) = s* whenever s* lies between the two
    ends; otherwise the nearer end is kept and `MatchedDraw.matched` is False. The directions stay random
    (a Gaussian draw) but carry as much of the outputs' energy as the band does, so a band that hurts more
    than its matched control hurts because of *which* directions it removes, not how much it removes.

    Q(a) is computed as V U orth(diag(...) U^T Z) (the same subspace), with the rows of diag(...) U^T Z taken
    largest weight first: outputs of lower rank than the width leave eigenvalues at the 1e-12 floor, weighted
    far below the rest at large |a|, and only this order keeps them from being lost to rounding, which made
    share(a) fall again towards a = -MATCH_TILT (tests/analysis/test_matched_controls.py).
    """
    W_U, weight_dtype = _unembedding_matrix(unembedding, weight_dtype)
    D = W_U.shape[1]
    C = np.asarray(second_moment, dtype=float)
    if C.shape != (D, D):
        raise CoreError(f"the second moment must be {D} x {D} (the module output's width), got {C.shape}")
    base = random_subspace_filter(W_U, rank, seed, weight_dtype)
    _, s, vt = np.linalg.svd(W_U, full_matrices=False)
    r_w = _rank(s, W_U.shape, weight_dtype)
    if rank <= 0 or rank >= r_w or base.erased:  # nothing to choose: no directions, or the whole row space
        return MatchedDraw(base, 0.0, removed_energy_share(base, C), float(target_share))
    V = vt[:r_w].T
    lam, U = np.linalg.eigh(V.T @ C @ V)
    lam = np.clip(lam / max(lam.max(), np.finfo(float).tiny), 1e-12, None)
    z = np.random.default_rng(seed).standard_normal((r_w, rank))  # as random_subspace_filter draws it
    uz = U.T @ z

    def draw(tilt: float) -> tuple[ProjectionFilter, float]:
        # orth(D U^T Z) in the eigenbasis, its rows taken largest weight first: Householder QR with rows sorted
        # is row-wise backward stable, so directions weighted 1e-100 below the others still count (multiplied
        # back by U first, they are lost to rounding and share(tilt) stops being monotone)
        weight = lam ** (tilt / 2)
        order = np.argsort(-weight, kind="stable")
        q, r = np.linalg.qr(weight[order, None] * uz[order])
        flt = ProjectionFilter((), "random", V @ (U[:, order] @ (q * np.sign(np.diag(r)))), D)
        return flt, removed_energy_share(flt, C)

    lo, hi = -MATCH_TILT, MATCH_TILT
    (f_lo, s_lo), (f_hi, s_hi) = draw(lo), draw(hi)
    if target_share <= s_lo:
        return MatchedDraw(f_lo, lo, s_lo, float(target_share))
    if target_share >= s_hi:
        return MatchedDraw(f_hi, hi, s_hi, float(target_share))
    for _ in range(MATCH_STEPS):
        mid = (lo + hi) / 2
        f_mid, s_mid = draw(mid)
        if s_mid < target_share:
            lo = mid
        else:
            hi, f_hi, s_hi = mid, f_mid, s_mid
    return MatchedDraw(f_hi, hi, s_hi, float(target_share))


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
