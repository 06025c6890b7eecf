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

The control moves the same module output by the same norm in a random direction u of W_U's row space:
x + ||delta(x)|| u. Several draws of u give the control's spread. A module "computes the last digit"
when shifting it moves most answers and its control moves almost none (core.claims.mechanism).
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
        return PhaseShift(self.periods, self.d, self.left, self.right, self.misfit, u / np.linalg.norm(u))


def rotation(k: int, d: float, p: int) -> np.ndarray:
    """The 2x2 map of frequency k's (sin, cos) coefficients that translates its wave by d numbers."""
    a = 2 * np.pi * k * d / (p - 1)
    return np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])


def phase_shift(unembedding, basis: FourierBasis, periods, d: int) -> PhaseShift:
    """The least-norm edit that translates the waves of `periods` by `d` numbers (module docstring).

    `unembedding`: W_U's p number rows (p, D), an array or tensor. `basis`: the paper's basis on p numbers
    (its rows are the constraints). A period that is not a frequency of the basis is refused. The
    pseudo-inverse drops singular values below the float32 rounding of the stored weights (numpy's
    matrix_rank convention, as `core.analysis.filters.rank_tolerance`): a smaller cut would amplify
    rounding noise of a low-rank W_U into an edit of enormous norm.
    """
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
    right = R @ A_S  # (|S|, D): the change asked of the shifted coefficients
    C = np.vstack([A_S, A_O])
    G = np.linalg.pinv(C, rcond=rank_tolerance(1.0, C.shape))[:, : len(shifted_rows)]  # (D, |S|)
    asked = np.vstack([right, np.zeros((len(other_rows), W_U.shape[1]))])
    got = C @ G @ right
    scale = np.linalg.norm(asked)
    misfit = float(np.linalg.norm(got - asked) / scale) if scale > 0 else 0.0
    return PhaseShift(tuple(float(t) for t in periods), int(d), G, right, misfit)


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
