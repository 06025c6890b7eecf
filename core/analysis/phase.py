"""Phase locking: which module's wave of period T follows the answer mod T, over every example.

The paper shows, for one example (15 + 93), that MLP 33's logits favour even numbers and attention
40's the numbers congruent to 108 mod 5 and 10. One example cannot tell a module that *computes*
(a + b) mod T from one that writes the same wave whatever the question (a bias). This module
measures it over all the examples of a run (docs/method.md, "Phase locking"):

* For a module output x (attention or MLP of a layer, the residual stream after a layer, or the
  final number logits) the number logits are l = W_U x (no final norm: the paper's convention),
  centred over the numbers first: a constant shift changes no prediction, and on 521 points the
  paper's basis is not orthogonal to a constant (every cosine row sums to sqrt(2/520)), so an
  uncentred mean would leak into every cosine coefficient and pull each phase toward 0.
* Frequency k = (p - 1) / T of the paper's basis has a sine coefficient s and a cosine coefficient
  c; the wave s sin(w x) + c cos(w x), w = 2 pi k / (p - 1), peaks at x = phi / w (mod T) with
  phi = atan2(s, c).
* Locking R = |mean over examples of exp(i (phi - w y))|, y = a + b. R = 1 when the wave's peak
  always sits at a fixed distance from the answer mod T; about 1/sqrt(n) by chance. The offset
  (in numbers) is that distance: the peak is at y + offset (mod T), so |offset| near T/2 means the
  wave pushes the answer's own residue down.
* `constant_phase` = |mean exp(i phi)|: near 1 when the wave is the same whatever the answer is
  (a bias, not a computation). A low R alone does not mean a bias: the phase may follow something
  else (an operand, say).
* `energy_share`: of the module's non-constant Fourier energy, summed over examples, the share
  at frequency k.
* The null: answers shuffled across examples (`NULL_SHUFFLES` permutations); for each, the maximum
  R over every module of the run at each period. `null_95` is, per period, the 1 - 0.05 / J
  quantile of that maximum (J periods, Bonferroni across periods), so a locking above it anywhere
  in the table happens by chance with probability at most 5% (family-wise over modules and
  periods). The threshold is per period because the answers a + b are not uniform over the number
  line (a triangle peaked at 260): at long periods a module that writes the *same* wave for every
  question already reaches R = |mean exp(-i w y)| (about 0.37 at T = 520), while at T = 2..10 the
  answers are nearly uniform mod T and chance is about 1/sqrt(n). One pooled maximum would let the
  long periods set the bar for the short ones.

Per example only the sin / cos coefficients at the few periods are kept (`PhaseAccumulator`), never
the p logits, so the memory is examples x modules x periods.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from core.analysis.fourier import fourier_basis, magnitudes_from_coefficients, transform
from core.errors import CoreError
from core.models.names import ATTN, FINAL, MLP, RESID

#: Version of the phase measurement; a run whose tables carry another (its manifest's `phase_locking`)
#: gets them anew from `precompute` or `upgrade`, nothing else recomputed. 2: logits centred first.
PHASE_VERSION = 2
#: The periods tested (paper basis, p = 521: frequencies 260, 208, 104, 52, 5, 1).
PHASE_PERIODS = (2.0, 2.5, 5.0, 10.0, 104.0, 520.0)
#: Periods that classify the last digit (the paper's "high-frequency" outliers).
SHORT_PERIODS = (2.0, 2.5, 5.0, 10.0)
NULL_SHUFFLES = 2000
FAMILY_ALPHA = 0.05
#: A module "locks" to T when R exceeds the family-wise null, R is at least MIN_LOCKING (beyond chance is
#: not enough: with 3,419 examples R = 0.06 passes the null but means the phase barely follows the
#: answer), its phase is not constant (constant_phase below MAX_CONSTANT_PHASE: a wave that is the same
#: for every question is a bias), and its wave favours the answer: the peak lies within a quarter period
#: of it, cos(2 pi offset / T) > 0 (a wave locked with its trough on the answer pushes the answer's own
#: residue down). There is no energy floor: the final logits of a model that is right on every question
#: carry only 0.7-2.2% of their non-constant energy at each short period, so a floor of a few percent
#: rejects real carriers; whether a wave matters is the phase-shift test's job (core.analysis.phase_shift).
MIN_LOCKING = 0.3
MAX_CONSTANT_PHASE = 0.9
#: Tops of the per-example wave-peak table: the sum of the top-k components of the final logits.
WAVE_TOPS = (5, 10)


def period_frequencies(p: int, periods=PHASE_PERIODS) -> dict[float, int]:
    """{period: frequency k} for the periods that are an exact frequency of the paper's basis on p numbers."""
    span, K = p - 1, (p - 1) // 2
    out = {}
    for t in periods:
        k = int(round(span / t))
        if 1 <= k <= K and abs(span / k - t) < 1e-9:
            out[float(t)] = k
    return out


def wave_coefficients(p: int, logits: np.ndarray, ks) -> np.ndarray:
    """(..., p) logits -> (..., len(ks), 2): the paper basis's (sin, cos) coefficients at each k.

    At k = (p - 1) / 2 (period 2) the sine row is sin(pi x) = 0 on the integers; its coefficient is
    set to exactly 0, so the phase is 0 (even numbers favoured) or pi (odd) by the cosine's sign.
    """
    basis = fourier_basis(p, "paper")
    ks = [int(k) for k in ks]
    logits = np.asarray(logits, dtype=np.float64)
    logits = logits - logits.mean(-1, keepdims=True)  # a constant shift changes no prediction (module docstring)
    rows = np.array([[np.flatnonzero((basis.freq == k) & (basis.kind == kind))[0] for kind in ("sin", "cos")]
                     for k in ks])
    coef = logits @ basis.matrix[rows.reshape(-1)].T
    coef = coef.reshape(coef.shape[:-1] + (len(ks), 2))
    for j, k in enumerate(ks):
        if 2 * k == p - 1:
            coef[..., j, 0] = 0.0
    return coef


def nonconstant_energy(p: int, logits: np.ndarray) -> np.ndarray:
    """(..., p) -> (...): sum over frequencies k >= 1 of sin_k^2 + cos_k^2 (paper basis) of the centred logits."""
    basis = fourier_basis(p, "paper")
    logits = np.asarray(logits, dtype=np.float64)
    logits = logits - logits.mean(-1, keepdims=True)
    return (magnitudes_from_coefficients(basis, transform(basis, logits)) ** 2).sum(-1)


def module_order(n_layers: int) -> list[tuple[str, int]]:
    """The (kind, layer) order of the phase table: attention 1..L, MLP 1..L, residual 0..L, final logits."""
    L = int(n_layers)
    return ([(ATTN, l) for l in range(1, L + 1)] + [(MLP, l) for l in range(1, L + 1)]
            + [(RESID, l) for l in range(L + 1)] + [(FINAL, L)])


class PhaseAccumulator:
    """Collects, batch by batch, each example's coefficients at the tested periods for every module.

    `modules` is the ordered list of (kind, layer) the arrays passed to `add` follow.
    """

    def __init__(self, p: int, n_examples: int, modules: list[tuple[str, int]], periods=PHASE_PERIODS):
        self.p = p
        self.freqs = period_frequencies(p, periods)
        if not self.freqs:
            raise CoreError(f"none of the periods {periods} is a frequency of the basis on {p} numbers")
        self.modules = list(modules)
        M, J = len(self.modules), len(self.freqs)
        self.coef = np.zeros((n_examples, M, J, 2), dtype=np.float32)
        self.energy = np.zeros((n_examples, M), dtype=np.float64)
        self.seen = np.zeros(n_examples, dtype=bool)

    def add(self, indices, logits: np.ndarray) -> None:
        """logits: (batch, modules, p) number logits of the examples `indices`, modules in `self.modules` order."""
        logits = np.asarray(logits, dtype=np.float64)
        if logits.shape[1:] != (len(self.modules), self.p):
            raise CoreError(f"internal: expected (batch, {len(self.modules)}, {self.p}) logits, got {logits.shape}")
        idx = np.asarray(indices)
        self.coef[idx] = wave_coefficients(self.p, logits, list(self.freqs.values()))
        self.energy[idx] = nonconstant_energy(self.p, logits)
        self.seen[idx] = True

    def table(self, answers, seed: int = 0, shuffles: int = NULL_SHUFFLES) -> pd.DataFrame:
        if not self.seen.all():
            raise CoreError(f"internal: {int((~self.seen).sum())} examples have no coefficients")
        return locking_table(self.coef, self.energy, self.modules, self.freqs, answers, self.p, seed, shuffles)


@dataclass(frozen=True)
class Locking:
    """R, offset (numbers) and constant phase for every module and period: arrays (modules, periods)."""

    locking: np.ndarray
    offset: np.ndarray
    constant_phase: np.ndarray


def phase_locking(coef: np.ndarray, answers, ks, p: int) -> Locking:
    """coef: (n, modules, periods, 2) sin/cos coefficients; answers: (n,) y = a + b."""
    y = np.asarray(answers, dtype=np.float64)
    w = 2 * np.pi * np.asarray(list(ks), dtype=np.float64) / (p - 1)  # (J,)
    coef = np.asarray(coef, dtype=np.float64)
    z = np.exp(1j * np.arctan2(coef[..., 0], coef[..., 1]))  # (n, M, J)
    mean = (z * np.exp(-1j * w[None, :] * y[:, None])[:, None, :]).mean(0)  # (M, J)
    periods = 2 * np.pi / w
    offset = np.angle(mean) / w[None, :]
    offset = (offset + periods / 2) % periods - periods / 2  # into [-T/2, T/2)
    return Locking(np.abs(mean), offset, np.abs(z.mean(0)))


def locking_null(coef: np.ndarray, answers, ks, p: int, seed: int = 0, shuffles: int = NULL_SHUFFLES) -> np.ndarray:
    """For each of `shuffles` permutations of the answers, the largest R over all modules at each
    period. Returns the (shuffles, periods) maxima."""
    y = np.asarray(answers, dtype=np.float64)
    n = len(y)
    rng = np.random.default_rng(int(seed) + 104729)
    perms = np.stack([rng.permutation(n) for _ in range(int(shuffles))])  # (S, n)
    coef = np.asarray(coef, dtype=np.float64)
    z = np.exp(1j * np.arctan2(coef[..., 0], coef[..., 1]))  # (n, M, J)
    best = np.zeros((int(shuffles), len(ks)))
    for j, k in enumerate(ks):
        w = 2 * np.pi * k / (p - 1)
        rot = np.exp(-1j * w * y[perms])  # (S, n)
        best[:, j] = (np.abs(z[:, :, j].T @ rot.T) / n).max(0)  # (M, S) -> max over modules
    return best


def family_thresholds(null_maxima: np.ndarray, alpha: float = FAMILY_ALPHA) -> np.ndarray:
    """Per period, the 1 - alpha / J quantile of the shuffled maxima (J periods): family-wise level alpha."""
    J = null_maxima.shape[1]
    return np.quantile(null_maxima, 1 - alpha / J, axis=0)


def locking_table(
    coef, energy, modules, freqs: dict, answers, p: int, seed: int = 0, shuffles: int = NULL_SHUFFLES
) -> pd.DataFrame:
    """The `phase_locking` table: one row per (module, period); see the module docstring."""
    answers = np.asarray(answers)
    n = len(answers)
    if coef.shape[0] != n:
        raise CoreError(f"internal: coefficients of {coef.shape[0]} examples for {n} answers")
    ks = list(freqs.values())
    lock = phase_locking(coef, answers, ks, p)
    if n < 2:  # one example always "locks": no locking can be measured (NaN), and nothing can pass
        lock = Locking(np.full_like(lock.locking, np.nan), lock.offset, lock.constant_phase)
        null_95 = np.full(len(ks), np.nan)
    else:
        null_95 = family_thresholds(locking_null(coef, answers, ks, p, seed, shuffles))
    at_k = (coef.astype(np.float64) ** 2).sum(-1).sum(0)  # (M, J)
    total = np.maximum(energy.sum(0), 1e-300)  # (M,)
    rows = []
    for m, (kind, layer) in enumerate(modules):
        for j, period in enumerate(freqs):
            rows.append(
                {
                    "kind": kind,
                    "layer": int(layer),
                    "period": float(period),
                    "k": int(freqs[period]),
                    "locking": float(lock.locking[m, j]),
                    "offset": float(lock.offset[m, j]),
                    "constant_phase": float(lock.constant_phase[m, j]),
                    "energy_share": float(at_k[m, j] / total[m]),
                    "null_95": float(null_95[j]),
                    "n": int(n),
                    "shuffles": int(shuffles),
                }
            )
    return pd.DataFrame(rows)


def favours_answer(table: pd.DataFrame) -> pd.Series:
    """Rows whose wave peaks within a quarter period of the answer: cos(2 pi offset / T) > 0."""
    return np.cos(2 * np.pi * table["offset"] / table["period"]) > 0


def locked(table: pd.DataFrame) -> pd.Series:
    """Rows where the module locks (see MIN_LOCKING): R above the family-wise null and at least
    MIN_LOCKING, a phase that is not constant, and a wave that favours the answer (`favours_answer`)."""
    return ((table["locking"] > table["null_95"]) & (table["locking"] >= MIN_LOCKING)
            & (table["constant_phase"] < MAX_CONSTANT_PHASE) & favours_answer(table))


def wave_peaks(p: int, final_logits: np.ndarray, answers, example_ids, tops=WAVE_TOPS) -> pd.DataFrame:
    """Per example, where the sum of the top-k Fourier components of the final number logits peaks.

    The sum of the top-k waves (`core.analysis.fourier.top_components`, paper basis) is the coefficients of
    those k frequencies sent back through the basis's transpose. Columns: example_id, top, answer,
    peak, at_answer (the `wave_peaks` table).
    """
    basis = fourier_basis(p, "paper")
    coef = transform(basis, np.asarray(final_logits, dtype=np.float64))  # (n, rows)
    mags = magnitudes_from_coefficients(basis, coef)  # (n, K)
    order = np.argsort(-mags, axis=-1, kind="stable")
    answers = np.asarray(answers)
    frames = []
    for top in tops:
        chosen = np.zeros_like(mags, dtype=bool)
        np.put_along_axis(chosen, order[:, :top], True, axis=-1)
        row_on = np.zeros_like(coef, dtype=bool)
        nonconst = basis.freq > 0
        row_on[:, nonconst] = chosen[:, basis.freq[nonconst] - 1]
        total = np.where(row_on, coef, 0.0) @ basis.matrix  # (n, p)
        peak = total.argmax(-1)
        frames.append(pd.DataFrame({"example_id": list(example_ids), "top": int(top), "answer": answers, "peak": peak,
                                    "at_answer": peak == answers}))
    return pd.concat(frames, ignore_index=True)
