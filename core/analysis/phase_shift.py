"""Phase shift: a causal test of which module computes the answer's last digit (docs/method.md#phase-shift).

Phase locking (core.analysis.phase) says that a module's short wave *follows* the answer; it does not
say that the answer *depends* on it. The phase shift edits one module's output x (attention or MLP of
one layer, or the residual stream after a layer) at the answer position so that the waves of a set of
periods S (e.g. T = 2, 2.5, 5, 10) move by d numbers along the number line, and nothing else that the
unembedding reads changes. If the module computes the last digit, the model's answer moves from y to
y + d; if the module's waves are a by-product, the answer stays.

Definition. With A = F W_U (the paper's Fourier basis F, rows i with frequency k_i, times W_U's p
number rows, centred over the numbers as phase locking centres the logits: a constant shift changes
no prediction, and the paper's cosine rows do not sum to zero), the logits' Fourier coefficients are
A x. Frequency k's wave s sin(w x) + c cos(w x),
w = 2 pi k / (p - 1), translated by d is s' sin(w x) + c' cos(w x) with

    s' = s cos(w d) + c sin(w d),     c' = c cos(w d) - s sin(w d)

(substitute x - d and expand: the peak phi = atan2(s, c) becomes phi + w d). Write R_d for that
rotation on the (sin, cos) rows of the frequencies in S. The edit is the least-norm change

    delta = argmin ||delta||^2  subject to  A_S delta = (R_d - I) A_S x  and  A_O delta = 0,

where O are the other non-constant rows (every other frequency is left as it was; the constant row is
free: a constant shift of the logits changes no prediction). With C = [A_S; A_O] and its pseudo-
inverse C^+, the solution is delta = C^+ [(R_d - I) A_S x; 0] = G (R_d - I) A_S x, G = C^+[:, S]: a
fixed linear map of x, of rank at most 2 |S|, in the row space of W_U (the directions W_U reads).
When C's rows are dependent (W_U of low rank, or the paper's basis, which is not exactly orthonormal
on p = 521 points) the constraints may not all be met; `PhaseShift.misfit` is the relative residual
of the constraints over every x (0: met exactly).

The capped edit. Where W_U is ill-conditioned the least-norm edit can be many times the output it edits
(C's weak singular directions are divided by small singular values), and such an edit tests its own size,
not the module's waves. With C = U S V^T, the edit that keeps C's k strongest directions is
delta_k = V_k S_k^-1 U_k[S]^T (R_d - I) A_S x; its size ||delta_k(x)|| grows with k (each direction adds an
orthogonal part). The capped edit keeps the most directions whose median size over the module's own
answer-position outputs is at most EDIT_CAP times ||x|| (`ShiftDecomposition.capped_edit`); the constraints
along the dropped directions are not met, and `misfit` says by how much. The cap was fixed before any model
was read with it.

The control moves the same module output by the same norm in a random direction u of W_U's row space:
x + ||delta(x)|| u. Several draws of u give the control's spread. How a module's shift is read against the
whole stream's and against its controls is core.analysis.shift_reading's; the verdict is
core.claims.last_digit's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.analysis.filters import rank_tolerance
from core.analysis.fourier import FourierBasis, as_array
from core.analysis.phase import period_frequencies
from core.errors import CoreError

#: The period sets the precompute shifts: parity, the last digit's mod 5 / mod 10, and all four short periods.
PERIOD_SETS = {"2": (2.0,), "5,10": (5.0, 10.0), "all": (2.0, 2.5, 5.0, 10.0)}
#: The shifts d (numbers) the precompute tries.
SHIFTS = (1, 2, 5)
#: Random-direction control draws per condition (their mean and spread are reported).
CONTROL_DRAWS = 3
CONTROL_SEED = 31337
#: The capped edit: the median edit is at most this many times the norm of the output it edits (the module's
#: output at the answer position). Set before the capped edit was run on any model (docs/verdicts.md).
EDIT_CAP = 1.0


@dataclass(eq=False)
class PhaseShift:
    """The edit x -> x + delta(x), delta(x) = left @ (right @ x) (module docstring).

    With `direction` set (a unit vector), it is the control instead: x -> x + ||delta(x)|| direction.
    `width`, `rank` and `erased` let it stand where evaluation expects a filter.
    """

    periods: tuple[float, ...]
    d: int
    left: np.ndarray  # (D, r)
    right: np.ndarray  # (r, D)
    misfit: float
    direction: np.ndarray | None = None
    #: C's singular directions kept (the capped edit keeps fewer than `full_rank`; 0: not recorded).
    kept: int = 0
    full_rank: int = 0
    #: The median of ||delta(x)|| / ||x|| over the outputs the cap was set on (NaN: not measured).
    edit_size: float = float("nan")
    #: float32 copies per device, made by core.analysis.filter_hooks when a hook first needs them.
    device_copies: dict | None = None

    def __post_init__(self):
        if self.device_copies is None:
            self.device_copies = {}

    @property
    def width(self) -> int:
        return int(self.left.shape[0])

    @property
    def rank(self) -> int:
        return int(self.left.shape[1])

    @property
    def erased(self) -> bool:
        return False

    @property
    def is_control(self) -> bool:
        return self.direction is not None

    def delta(self, x: np.ndarray) -> np.ndarray:
        """The least-norm edit of vectors x (last axis D), float64."""
        x = np.asarray(x, dtype=np.float64)
        return (x @ self.right.T) @ self.left.T

    def apply(self, x: np.ndarray) -> np.ndarray:
        """x edited (the shift, or the control of the same norm), float64."""
        x = np.asarray(x, dtype=np.float64)
        delta = self.delta(x)
        if self.direction is not None:
            delta = np.linalg.norm(delta, axis=-1, keepdims=True) * self.direction
        return x + delta

    def control(self, direction: np.ndarray) -> "PhaseShift":
        """The control of this shift: the same norm, along the unit vector `direction`."""
        u = np.asarray(direction, dtype=np.float64)
        if u.shape != (self.width,):
            raise CoreError(f"the control direction must have {self.width} entries, got shape {u.shape}")
        return PhaseShift(self.periods, self.d, self.left, self.right, self.misfit, u / np.linalg.norm(u), self.kept,
                          self.full_rank, self.edit_size)


def rotation(k: int, d: float, p: int) -> np.ndarray:
    """The 2x2 map of frequency k's (sin, cos) coefficients that translates its wave by d numbers."""
    a = 2 * np.pi * k * d / (p - 1)
    return np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])


@dataclass(eq=False)
class ShiftDecomposition:
    """What every edit of one (periods, d) on one W_U shares: the constraint matrix C = [A_S; A_O]'s SVD
    (U, s, Vt, its numerical rank `rank`), and `right` = (R_d - I) A_S, the change asked of the shifted rows."""

    periods: tuple[float, ...]
    d: int
    U: np.ndarray  # (rows, r)
    s: np.ndarray  # (r,)
    Vt: np.ndarray  # (r, D)
    right: np.ndarray  # (|S|, D)
    rank: int

    @property
    def shifted_rows(self) -> int:
        return int(self.right.shape[0])

    def edit(self, kept: int | None = None) -> PhaseShift:
        """The edit that keeps C's `kept` strongest singular directions (all `rank` when None): the least-norm
        solution within them; the constraints along the dropped directions are not met (`misfit`)."""
        k = self.rank if kept is None else int(min(max(kept, 1), self.rank))
        S = self.shifted_rows
        left = self.Vt[:k].T @ (self.U[:S, :k] / self.s[:k]).T  # (D, |S|) = C_k^+[:, S]
        asked = np.linalg.norm(self.right)
        # C left right = U_k U_k[:S]^T right: what the edit achieves of [right; 0] (over every x, Frobenius)
        achieved = self.U[:, :k] @ (self.U[:S, :k].T @ self.right)
        wanted = np.vstack([self.right, np.zeros((self.U.shape[0] - S, self.right.shape[1]))])
        misfit = float(np.linalg.norm(achieved - wanted) / asked) if asked > 0 else 0.0
        return PhaseShift(self.periods, self.d, left, self.right, misfit, kept=k, full_rank=self.rank)

    def edit_sizes(self, outputs: np.ndarray) -> np.ndarray:
        """(rank, n): ||delta_k(x)|| / ||x|| for every number k of kept directions (row k - 1) and every
        output x (rows of `outputs`). The size grows with k: each kept direction adds an orthogonal part."""
        x = np.asarray(outputs, dtype=np.float64)
        coefficients = (self.U[: self.shifted_rows].T @ (self.right @ x.T)) / self.s[:, None]  # (r, n)
        norms = np.sqrt(np.cumsum(coefficients**2, axis=0))
        return norms / np.maximum(np.linalg.norm(x, axis=1), 1e-30)[None, :]

    def capped_edit(self, outputs: np.ndarray, cap: float = EDIT_CAP) -> PhaseShift:
        """The edit of the most directions whose median size over `outputs` (a module's answer-position outputs)
        is at most `cap` times the output it edits (module docstring); `edit_size` records that median."""
        medians = np.median(self.edit_sizes(outputs), axis=1)
        fits = np.flatnonzero(medians <= cap)
        kept = int(fits.max()) + 1 if fits.size else 1
        edit = self.edit(kept)
        edit.edit_size = float(medians[kept - 1])
        return edit


def shift_decomposition(unembedding, basis: FourierBasis, periods, d: int) -> ShiftDecomposition:
    """The SVD behind every edit of `periods` by `d` (module docstring). `unembedding`: W_U's p number rows
    (p, D), an array or tensor. `basis`: the paper's basis on p numbers (its rows are the constraints). A period
    that is not a frequency of the basis is refused. Singular values below the float32 rounding of the stored
    weights are dropped (numpy's matrix_rank convention, as `core.analysis.filters.rank_tolerance`): a smaller
    cut would amplify rounding noise of a low-rank W_U into an edit of enormous norm."""
    W_U = as_array(getattr(unembedding, "weight", unembedding))
    if W_U.ndim != 2 or W_U.shape[0] != basis.p:
        raise CoreError(f"the unembedding must have {basis.p} number rows, got shape {W_U.shape}")
    freqs = period_frequencies(basis.p, periods)
    missing = [t for t in periods if float(t) not in freqs]
    if missing:
        raise CoreError(f"periods {missing} are not frequencies of the basis on {basis.p} numbers")
    W_U = W_U - W_U.mean(0, keepdims=True)  # centred logits, as phase locking reads them (core.analysis.phase)
    A = basis.matrix @ W_U  # (rows, D)
    shifted_rows, blocks = [], []
    for k in freqs.values():
        sin_row = int(np.flatnonzero((basis.freq == k) & (basis.kind == "sin"))[0])
        cos_row = int(np.flatnonzero((basis.freq == k) & (basis.kind == "cos"))[0])
        shifted_rows += [sin_row, cos_row]
        blocks.append(rotation(k, d, basis.p) - np.eye(2))
    other_rows = [i for i in range(len(basis.freq)) if basis.freq[i] > 0 and i not in shifted_rows]
    A_S, A_O = A[shifted_rows], A[other_rows]
    R = np.zeros((len(shifted_rows), len(shifted_rows)))
    for j, block in enumerate(blocks):
        R[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = block
    C = np.vstack([A_S, A_O])
    U, s, Vt = np.linalg.svd(C, full_matrices=False)
    rank = int((s > rank_tolerance(float(s.max()) if s.size else 0.0, C.shape)).sum()) if s.size else 0
    if rank == 0:
        raise CoreError("W_U's number rows carry no wave: no phase shift can be made")
    periods = tuple(float(t) for t in periods)
    return ShiftDecomposition(periods, int(d), U[:, :rank], s[:rank], Vt[:rank], R @ A_S, rank)


def phase_shift(unembedding, basis: FourierBasis, periods, d: int) -> PhaseShift:
    """The least-norm edit that translates the waves of `periods` by `d` numbers, every direction of C kept
    (module docstring; `shift_decomposition(...).capped_edit(outputs)` bounds its size)."""
    return shift_decomposition(unembedding, basis, periods, d).edit()


def random_direction(unembedding, seed: int) -> np.ndarray:
    """A unit vector drawn uniformly from the row space of W_U's number rows (what W_U reads)."""
    W_U = as_array(getattr(unembedding, "weight", unembedding))
    _, s, vt = np.linalg.svd(W_U, full_matrices=False)
    rank = int((s > rank_tolerance(s.max(), W_U.shape)).sum()) if s.size else 0
    if rank == 0:
        raise CoreError("W_U's number rows are all zero: no direction is read")
    g = np.random.default_rng(seed).standard_normal(rank)
    u = vt[:rank].T @ g
    return u / np.linalg.norm(u)


def moved_periods(periods, d: int) -> tuple[float, ...]:
    """The periods a shift by d numbers moves: those d is not a whole multiple of (a wave of period T moves by d/T of
    a turn, which is no move at all when d/T is whole)."""
    return tuple(float(t) for t in periods if abs(d / t - round(d / t)) > 1e-9)


def residue_modulus(periods) -> int:
    """The whole-number period whose residue a shift of `periods` moves: 10 when 10 is among them, else the largest
    whole one (2 for parity alone)."""
    whole = [int(round(t)) for t in periods if abs(t - round(t)) < 1e-9]
    if not whole:
        raise CoreError(f"no whole-number period among {periods}")
    return max(whole)


def shift_outcomes(before: np.ndarray, after: np.ndarray, d: int, p: int, modulus: int) -> dict:
    """Where the answers went when the waves were shifted by d: over the questions whose answer before, y,
    has y + d on the number line (n of them), the shares that moved to y + d, stayed at y, went elsewhere,
    and whose residue mod `modulus` moved by d (the last digit followed, whatever the magnitude did)."""
    before, after = np.asarray(before, dtype=np.int64), np.asarray(after, dtype=np.int64)
    keep = before + d <= p - 1
    b, a = before[keep], after[keep]
    n = int(keep.sum())
    if n == 0:
        nan = float("nan")
        return {"n": 0, "moved": nan, "stayed": nan, "elsewhere": nan, "residue_moved": nan}
    moved = a == b + d
    stayed = a == b
    return {
        "n": n,
        "moved": float(moved.mean()),
        "stayed": float(stayed.mean()),
        "elsewhere": float((~moved & ~stayed).mean()),
        "residue_moved": float(((a - b - d) % modulus == 0).mean()),
    }


def wilson_interval(share: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a share observed on n examples."""
    if n <= 0 or not np.isfinite(share):
        return float("nan"), float("nan")
    centre = share + z * z / (2 * n)
    spread = z * np.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return float(max(0.0, (centre - spread) / (1 + z * z / n))), float(min(1.0, (centre + spread) / (1 + z * z / n)))
