"""The neuron-level test (Nikankin et al. 2024, "Arithmetic without algorithms: language models solve math with a bag
of heuristics"): is each MLP neuron's activation at the answer position a helix of the sum s = a + b, or a pattern of
the operands' digits? Pure numpy, float64 inside; the model's side (capture, ablation) is core.runs.neuron_run.

Two fits of each neuron's activation x(q) over the questions q = (a, b), each by least squares with an intercept:

* **helix of a + b** (`helix_features`, rank 8): s / s_max and cos, sin of 2 pi s / T for T in 2, 5, 10, 100 (the
  sine of period 2 is 0 at every whole number and is left out, as core.analysis.helix does): the Fourier reading
  (Zhou et al.; Kantamneni & Tegmark) in which the neuron reads the sum as waves.
* **operand-digit heuristics** (`heuristic_features`): 0/1 indicators, one per value, of a's units digit, a's tens
  digit, a's hundreds digit, the same three of b, and of the sum's units digit and hundreds digit (s // 100): Nikankin
  et al.'s "operand digit" and "result digit" patterns. Each group of indicators sums to 1 with the intercept; the
  least-squares solution of least norm is used (`np.linalg.lstsq`), so the redundancy does not matter.

What the two can and cannot tell apart, by construction: a function of the sum's last digit (waves of period 2, 5
and 10 of s) lies in both spans (the units-digit indicators of s hold every such function; the helix holds the
harmonics 1, 2 and 5 of them); a wave of period 100 of s, or the size of s, is not an additive pattern of operand
digits (cos(x + y) = cos x cos y - sin x sin y) and the heuristics fit it poorly; a pattern of one operand's digit is
not a function of s and the helix fits it poorly. So a neuron whose activation is a long-period helix of s scores
R^2 near 1 on the helix and low on the heuristics, a neuron that fires on a's units digit the reverse, and a
neuron that fires on s's last digit scores high on both (the tests plant each).

**Score**: R^2 on held-out questions: the questions are split in two seeded halves (`split_questions`), both fits are
made on the first, and R^2 = 1 - SSE / SST on the second, SST around the FIRST half's mean (a fit worse than that
mean scores below 0). A neuron constant on the questions (SST = 0) scores 0 on both.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.helix import PERIODS, helix_basis
from core.errors import CoreError

#: The groups of indicator columns of the heuristics: (name, which number, digit place as 10**place).
HEURISTIC_GROUPS = (("a units", "a", 0), ("a tens", "a", 1), ("a hundreds", "a", 2),
                    ("b units", "b", 0), ("b tens", "b", 1), ("b hundreds", "b", 2),
                    ("a+b units", "s", 0), ("a+b hundreds", "s", 2))
FIT_SEED = 0
#: The two fits, by name, as the `neuron_fits` table's columns hold them.
FITS = ("helix_r2", "heuristic_r2")
#: neuron_fits: one row per neuron of the layers read (layer counted from 1, neuron from 0).
NEURON_FIT_COLUMNS = ("layer", "neuron", "helix_r2", "heuristic_r2", "n_fit", "n_scored")


def check_operands(a, b) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) as int arrays of one length, non-negative; a CoreError otherwise."""
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if len(a) != len(b) or len(a) == 0:
        raise CoreError(f"one pair of operands per question: got {len(a)} first and {len(b)} second operands")
    if (a < 0).any() or (b < 0).any() or (a != np.round(a)).any() or (b != np.round(b)).any():
        raise CoreError("the neuron fits read whole, non-negative operands")
    return a.astype(np.int64), b.astype(np.int64)


def helix_features(a, b, periods=PERIODS, s_max: float | None = None) -> np.ndarray:
    """The helix of s = a + b, (questions, rank): core.analysis.helix.helix_basis of s with n_max = `s_max` (default
    the largest s, at least 1)."""
    a, b = check_operands(a, b)
    s = a + b
    return helix_basis(s, periods, n_max=float(s_max if s_max is not None else max(int(s.max()), 1)))


def heuristic_features(a, b) -> tuple[np.ndarray, tuple[str, ...]]:
    """(indicators (questions, columns) float64, column names): for each group of `HEURISTIC_GROUPS` one 0/1 column per
    digit value that occurs among the questions, e.g. "a units = 3"."""
    a, b = check_operands(a, b)
    numbers = {"a": a, "b": b, "s": a + b}
    cols, names = [], []
    for name, which, place in HEURISTIC_GROUPS:
        digit = numbers[which] // 10 ** place if place == 2 else (numbers[which] // 10 ** place) % 10
        for value in np.unique(digit):
            cols.append((digit == value).astype(np.float64))
            names.append(f"{name} = {int(value)}")
    return np.stack(cols, axis=1), tuple(names)


def split_questions(n: int, seed: int = FIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(fit, scored): a seeded random half of 0..n-1 and the rest, each sorted."""
    if n < 4:
        raise CoreError(f"the neuron fits need at least 4 questions (two to fit, two to score), got {n}")
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2:])


def held_out_r2(features: np.ndarray, activations: np.ndarray, fit: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """Each column's held-out R^2 (module docstring) of the activations (questions, neurons) fitted by least squares
    on `features` (questions, columns) plus an intercept over the `fit` rows, scored on the `scored` rows."""
    X = np.asarray(features, dtype=np.float64)
    Y = np.asarray(activations, dtype=np.float64)
    if Y.ndim != 2 or X.ndim != 2 or X.shape[0] != Y.shape[0]:
        raise CoreError(f"one row of features per question and one column per neuron: got features {X.shape}, "
                        f"activations {Y.shape}")
    if not np.isfinite(Y).all():
        raise CoreError("the neuron activations hold non-finite values: capture them again in float32")
    x_mean, y_mean = X[fit].mean(axis=0), Y[fit].mean(axis=0)
    coef, *_ = np.linalg.lstsq(X[fit] - x_mean, Y[fit] - y_mean, rcond=None)
    predicted = (X[scored] - x_mean) @ coef + y_mean
    sse = ((Y[scored] - predicted) ** 2).sum(axis=0)
    sst = ((Y[scored] - y_mean) ** 2).sum(axis=0)
    safe = np.where(sst > 0, sst, 1.0)
    return np.where(sst > 0, 1.0 - sse / safe, 0.0)


def neuron_fit_table(activations: dict[int, np.ndarray], a, b, seed: int = FIT_SEED,
                     periods=PERIODS) -> pd.DataFrame:
    """`NEURON_FIT_COLUMNS`: both fits' held-out R^2 of every neuron of every layer. `activations`: layer (counted
    from 1) -> (questions, neurons), row q the question (a[q], b[q]); one split of the questions for all of them."""
    a, b = check_operands(a, b)
    fit, scored = split_questions(len(a), seed)
    helix = helix_features(a, b, periods)
    digits, _ = heuristic_features(a, b)
    frames = []
    for layer, acts in sorted(activations.items()):
        acts = np.asarray(acts)
        if acts.ndim != 2 or acts.shape[0] != len(a):
            raise CoreError(f"layer {layer}: expected ({len(a)}, neurons) activations, got {acts.shape}")
        frames.append(pd.DataFrame({
            "layer": int(layer), "neuron": np.arange(acts.shape[1]),
            "helix_r2": held_out_r2(helix, acts, fit, scored), "heuristic_r2": held_out_r2(digits, acts, fit, scored),
            "n_fit": len(fit), "n_scored": len(scored)}))
    if not frames:
        raise CoreError("no layer's activations to fit")
    return pd.concat(frames, ignore_index=True)[list(NEURON_FIT_COLUMNS)]


def top_neurons(fits: pd.DataFrame, column: str, k: int) -> pd.DataFrame:
    """The k rows of `fits` with the highest `column` (ties broken by layer, then neuron)."""
    if column not in FITS:
        raise CoreError(f"rank neurons by one of {', '.join(FITS)}, not {column!r}")
    if not 1 <= k <= len(fits):
        raise CoreError(f"k = {k}: choose 1..{len(fits)} neurons")
    return fits.sort_values([column, "layer", "neuron"], ascending=[False, True, True], kind="stable").head(k)


def random_neurons(fits: pd.DataFrame, like: pd.DataFrame, seed) -> pd.DataFrame:
    """The control of the set of neurons `like` (rows of `fits`): as many neurons of `fits` in each layer as `like`
    holds there, drawn uniformly without replacement within the layer (seeded), so the control has the set's size and
    its layers in the same numbers."""
    if not len(like):
        raise CoreError("a random control copies the layers of a set of neurons: the set is empty")
    layers = fits["layer"].to_numpy()
    rng = np.random.default_rng(seed)
    picked = []
    for layer, count in sorted(like["layer"].value_counts().items()):
        rows = np.flatnonzero(layers == layer)
        if count > len(rows):
            raise CoreError(f"MLP {layer}: {count} neurons asked of its {len(rows)}")
        picked.append(rng.choice(rows, int(count), replace=False))
    return fits.iloc[np.sort(np.concatenate(picked))]


def with_matches(table: pd.DataFrame) -> pd.DataFrame:
    """The `neurons` table (core.runs.neuron_run) with its `matches` column; a table of version 1 (random sets drawn
    over every layer read, one control for both top sets) gets "" there."""
    return table if "matches" in table.columns else table.assign(matches="")


def control_draws(table: pd.DataFrame, k: int, selection: str) -> tuple[pd.DataFrame, bool]:
    """(rows, in its layers) of the `neurons` table: the random draws that control the top-k set `selection` (helix,
    heuristic), those drawn in its layers (`matches`); in a table of version 1, the one set of draws over every layer
    read (and False)."""
    rows = with_matches(table)
    rows = rows[(rows["k"] == k) & (rows["selection"] == "random")]
    in_layers = bool((rows["matches"] != "").any())
    return (rows[rows["matches"] == selection] if in_layers else rows), in_layers


def last_digit_shift(predictions, reference) -> float:
    """The share of questions whose predicted answer's last digit differs from the unedited model's."""
    p, r = np.asarray(predictions), np.asarray(reference)
    if len(p) != len(r) or len(p) == 0:
        raise CoreError("last-digit shift: one prediction per question on both sides")
    return float(np.mean(p % 10 != r % 10))
