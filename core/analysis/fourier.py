"""Fourier bases over the number line 0..p-1, spectra, periods, bands and top-k waves.

Two bases, both with rows ordered [constant, sin k=1, cos k=1, sin k=2, cos k=2, ...]:

* ``"paper"``: the paper's definition A.3. w_k = 2 pi k / (p - 1), rows sqrt(1/(p-1)) and
  sqrt(2/(p-1)) sin / cos (w_k x) for k = 1..floor((p-1)/2). Period T_k = (p-1)/k, so p = 521
  gives exactly 520, 260, ..., 10, 5, 2.5, 2. It is not orthonormal on p points (x = 0 and
  x = p-1 coincide on every wave and, for odd p, sin(pi x) is a zero row), so its transpose is
  only an approximate inverse.
* ``"dft"``: the orthonormal real DFT on p points. w_k = 2 pi k / p, rows sqrt(1/p),
  sqrt(2/p) sin / cos, and for even p a last row (-1)^x / sqrt(p). Period T_k = p/k. Its
  transpose is its exact inverse.

Frequencies are indexed by k = 1..K (K = floor((p-1)/2), plus p/2 for the even DFT). The
constant (k = 0) is left out of every spectrum: shifting all logits by a constant changes no
prediction. Bands use a cutoff tau: low = 1 <= k < tau, high = k >= tau (docs/method.md#frequency-bands).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from core.errors import CoreError, choices

BASES = ("paper", "dft")


@dataclass(frozen=True, eq=False)
class FourierBasis:
    """A real Fourier basis: `matrix` is (rows x p); row i has frequency `freq[i]`."""

    name: str
    p: int
    matrix: np.ndarray  # (rows, p) float64
    freq: np.ndarray  # (rows,) int: 0 for the constant row
    kind: np.ndarray  # (rows,) str: "const", "sin", "cos"

    @property
    def n_freq(self) -> int:
        """K, the highest frequency; frequencies run 1..K."""
        return int(self.freq.max())

    @property
    def frequencies(self) -> np.ndarray:
        return np.arange(1, self.n_freq + 1)

    def period(self, k) -> np.ndarray:
        """Period T of frequency k on the number line (in numbers)."""
        k = np.asarray(k, dtype=float)
        span = self.p - 1 if self.name == "paper" else self.p
        with np.errstate(divide="ignore"):
            return span / k

    def frequency_of_period(self, period: float) -> int:
        """The frequency k whose period is nearest to `period`."""
        ks = self.frequencies
        return int(ks[np.argmin(np.abs(self.period(ks) - period))])

    def rows_of(self, frequencies) -> np.ndarray:
        """Indices of the rows (sin and cos) whose frequency is in `frequencies`."""
        return np.flatnonzero(np.isin(self.freq, np.asarray(list(frequencies), dtype=int)))


def as_array(matrix) -> np.ndarray:
    """A matrix given as a numpy array or a torch tensor (no torch import needed), as a float64 array."""
    if hasattr(matrix, "detach"):
        matrix = matrix.detach().float().cpu().numpy()
    return np.asarray(matrix, dtype=float)


def check_basis_name(name: str) -> None:
    if name not in BASES:
        raise CoreError(f"unknown Fourier basis {name!r}: choose one of {choices(BASES)}")


@lru_cache(maxsize=16)
def fourier_basis(p: int, name: str = "paper") -> FourierBasis:
    """The basis `name` over the number line 0..p-1."""
    check_basis_name(name)
    if p < 3:
        raise CoreError(f"a Fourier basis needs at least 3 numbers, got p = {p}")
    x = np.arange(p, dtype=float)
    span = p - 1 if name == "paper" else p
    K = (p - 1) // 2
    rows = [np.full(p, np.sqrt(1.0 / span))]
    freq, kind = [0], ["const"]
    for k in range(1, K + 1):
        w = 2 * np.pi * k / span
        rows += [np.sqrt(2.0 / span) * np.sin(w * x), np.sqrt(2.0 / span) * np.cos(w * x)]
        freq += [k, k]
        kind += ["sin", "cos"]
    if name == "dft" and p % 2 == 0:
        rows.append(np.cos(np.pi * x) / np.sqrt(p))
        freq.append(p // 2)
        kind.append("cos")
    matrix = np.vstack(rows)
    matrix.setflags(write=False)
    return FourierBasis(name, p, matrix, np.array(freq), np.array(kind))


def transform(basis: FourierBasis, values: np.ndarray) -> np.ndarray:
    """Coefficients F u of vectors over the number line (last axis has length p)."""
    values = np.asarray(values, dtype=float)
    if values.shape[-1] != basis.p:
        raise CoreError(f"expected vectors over {basis.p} numbers, got last axis {values.shape[-1]}")
    # one matrix product over every vector: a stacked (..., p) product runs as one small product per leading index,
    # many times slower for (batch, layers, heads, p)
    flat = values.reshape(-1, basis.p) @ basis.matrix.T
    return flat.reshape(values.shape[:-1] + (basis.matrix.shape[0],))


def inverse(basis: FourierBasis, coefficients: np.ndarray) -> np.ndarray:
    """F^T c: exact inverse for the DFT, the paper's approximate inverse for its basis."""
    return np.asarray(coefficients, dtype=float) @ basis.matrix


def magnitudes_from_coefficients(basis: FourierBasis, coefficients: np.ndarray) -> np.ndarray:
    """Per-frequency magnitude sqrt(sin_k^2 + cos_k^2) for k = 1..K (last axis becomes K)."""
    sq = np.asarray(coefficients, dtype=float) ** 2
    K = basis.n_freq
    if len(basis.freq) == 2 * K + 1 and (basis.freq[1::2] == basis.frequencies).all():
        # rows [const, sin 1, cos 1, ..., sin K, cos K]: each pair added where it lies
        pairs = sq[..., 1:].reshape(sq.shape[:-1] + (K, 2))
        return np.sqrt(pairs[..., 0] + pairs[..., 1])
    out = np.zeros(sq.shape[:-1] + (K,))
    # np.add.at over the last axis: sum the squared rows of each frequency.
    for kind in ("sin", "cos"):
        rows = np.flatnonzero(basis.kind == kind)
        out[..., basis.freq[rows] - 1] += sq[..., rows]
    return np.sqrt(out)


def frequency_magnitudes(basis: FourierBasis, values: np.ndarray) -> np.ndarray:
    """Per-frequency magnitudes of vectors over the number line: (..., p) -> (..., K)."""
    return magnitudes_from_coefficients(basis, transform(basis, values))


def band_frequencies(basis: FourierBasis, band: str, tau: int) -> np.ndarray:
    """Frequencies of a band: low = 1 <= k < tau, high = k >= tau."""
    check_tau(basis, tau)
    ks = basis.frequencies
    if band == "low":
        return ks[ks < tau]
    if band == "high":
        return ks[ks >= tau]
    raise CoreError(f"unknown band {band!r}: choose 'low' or 'high'")


def check_tau(basis: FourierBasis, tau: int) -> None:
    if not (2 <= int(tau) <= basis.n_freq):
        raise CoreError(
            f"cutoff tau = {tau} is out of range for {basis.p} numbers: choose 2..{basis.n_freq} "
            f"(low = 1 <= k < tau, high = k >= tau)"
        )


def band_energy_share(magnitudes: np.ndarray, tau: int) -> tuple[float, float]:
    """Share of the squared magnitude below and at-or-above the cutoff (k = 1..K along the last axis)."""
    sq = np.asarray(magnitudes, dtype=float) ** 2
    total = sq.sum()
    if total == 0:
        return 0.0, 0.0
    low = sq[..., : tau - 1].sum()
    return float(low / total), float(1 - low / total)


def same_split_taus(magnitudes: np.ndarray, tau: int, floor: float = 0.001) -> tuple[int, int, float]:
    """The cutoffs that split spectra as `tau` does, to within `floor` of their energy: (lowest, highest, share of
    the energy at the frequencies between them). `magnitudes`: k = 1..K along the last axis, any leading axes
    (modules, layers) summed. Moving the cutoff from tau to t moves the energy of the frequencies between them from
    one band to the other; the range grows around tau while that stays within `floor`."""
    sq = np.asarray(magnitudes, dtype=float) ** 2
    per_k = sq.reshape(-1, sq.shape[-1]).sum(axis=0)
    total = per_k.sum()
    if total == 0:
        return tau, tau, 0.0
    below = np.concatenate([[0.0], np.cumsum(per_k / total)])  # below[t - 1]: the share of k < t
    top = len(per_k) + 1  # a cutoff above every frequency
    low = high = int(tau)
    while low > 1 and below[high - 1] - below[low - 2] <= floor:
        low -= 1
    while high < top and below[high] - below[low - 1] <= floor:
        high += 1
    return low, high, float(below[high - 1] - below[low - 1])


@dataclass(frozen=True)
class Wave:
    """One Fourier component of a vector, back on the number line."""

    k: int
    period: float
    magnitude: float
    values: np.ndarray  # (p,)


def top_components(basis: FourierBasis, values: np.ndarray, top: int = 5) -> list[Wave]:
    """The `top` frequencies of largest magnitude in one vector, each as a wave over 0..p-1.

    The wave of frequency k is F_k^T (F_k u): the vector's sin and cos coefficients of that
    frequency, sent back through the transpose of the basis (paper's Figure 4).
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 1:
        raise CoreError("top_components takes one vector over the number line")
    coefficients = transform(basis, values)
    mags = magnitudes_from_coefficients(basis, coefficients)
    order = np.argsort(-mags, kind="stable")[: max(0, int(top))]
    waves = []
    for idx in order:
        k = int(idx + 1)
        rows = basis.rows_of([k])
        wave = coefficients[rows] @ basis.matrix[rows]
        waves.append(Wave(k, float(basis.period(k)), float(mags[idx]), wave))
    return waves


def sparsity(magnitudes: np.ndarray, top: int = 5) -> float:
    """Share of the energy (squared magnitude) held by the `top` largest frequencies."""
    sq = np.sort(np.asarray(magnitudes, dtype=float) ** 2)[::-1]
    total = sq.sum()
    return float(sq[:top].sum() / total) if total > 0 else 0.0


#: A frequency is the module's own preference when it carries at least this many times what W_U's shape gives it
#: (a run's `module_spectra_baseline`, energy-matched), or less where W_U leaves less room (`ratio_bar`).
BASELINE_RATIO = 2.0


def reachable_ratio(baseline) -> np.ndarray:
    """Per frequency, the largest ratio to the baseline a module could reach with its energy: all of it at that
    frequency. The baseline is scaled to the module's energy (sum_j b_j^2 = sum_j m_j^2), so a module with everything
    at k has magnitude sqrt(sum_j b_j^2) there: the ratio sqrt(sum_j b_j^2) / b_k (for the mean over layers of one
    baseline shape, the same). Where W_U reads few frequencies (tied frozen rows) this is about 2 to 3."""
    b = np.asarray(baseline, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 0, np.sqrt((b**2).sum()) / b, np.inf)


def ratio_bar(reachable) -> np.ndarray:
    """The ratio a frequency needs to count as the module's own: BASELINE_RATIO, or the geometric midpoint between
    no preference (1x) and the reachable maximum, sqrt(reachable), where that is lower (a bar a module cannot reach
    would turn "cannot tell" into "does not")."""
    return np.minimum(BASELINE_RATIO, np.sqrt(np.asarray(reachable, dtype=np.float64)))
