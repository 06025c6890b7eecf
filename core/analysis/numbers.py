"""How a model represents the numbers 0..N-1, layer by layer, whatever its tokenizer.

Representation: for each n the text `context.format(n=n)` ("The number 108" by default) is run
through the model, and the vector at its last token (the last digit for a digit-splitting
tokenizer, the number itself for a single-token one) is kept at every layer. Layer 0 is the input
embedding of that last token (for a single-token model: exactly its number-embedding row), layer
l = 1..L the residual stream after block l.

Per layer two measurements:

* **spectrum**: `core.analysis.embeddings.spectrum_table` of the (N x D) matrix, in both Fourier bases,
  against the row-permutation null model that controls the family-wise error over all
  frequencies (the maximum over frequencies, 1,000 shuffles);
* **linear probes**: for each modulus T, a multinomial logistic regression reads n mod T from the
  representation, trained on 80% of the numbers and scored on the held-out 20% with Cohen's kappa
  (0 = chance, 1 = perfect), over 5 seeded splits (mean and standard deviation). The moduli 2, 5,
  10, 100 are the paper's periods; 3 and 7 are controls (periods the paper does not find: a high
  kappa there means the probe reads something other than a Fourier feature, such as the number's
  size, or that the representation encodes them too).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from joblib import Parallel, delayed
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import cohen_kappa_score

from core.analysis.embeddings import N_PERMUTATIONS, spectrum_table
from core.analysis.fourier import BASES, fourier_basis
from core.errors import CoreError
from core.models.capture import capture, progress_bar
from core.models.names import RESID

DEFAULT_N = 521
DEFAULT_CONTEXT = "The number {n}"
FALLBACK_CONTEXT = "{n}"
TARGET_MODULI = (2, 5, 10, 100)
CONTROL_MODULI = (3, 7)
N_SPLITS = 5
TEST_SHARE = 0.2
PROBE_C = 10.0  # inverse L2 penalty of the probes, on features scaled to unit root-mean-square norm


@dataclass
class NumberRepresentations:
    vectors: np.ndarray  # (L + 1, N, D) float32: layer 0 = embedding of the last token, l = output of block l
    context: str
    tokens_per_number: np.ndarray  # (N,) how many tokens the number itself takes in the context
    single_token: bool  # every number 0..N-1 is one token

    @property
    def n_layers(self) -> int:
        return self.vectors.shape[0] - 1

    @property
    def n_numbers(self) -> int:
        return self.vectors.shape[1]

    def describe(self) -> str:
        most = int(self.tokens_per_number.max())
        how = "one token each" if self.single_token else f"up to {most} tokens each (digits split)"
        return f"numbers 0..{self.n_numbers - 1} in the context {self.context!r}, {how}; vector at the last token"


def choose_context(tokenizer, template: str | None = None) -> str:
    """The context to read numbers in: `template` if given, else "The number {n}" unless the
    tokenizer would read one of its words as unknown (a demo model's small vocabulary), then "{n}"."""
    if template is not None:
        if "{n}" not in template or not template.rstrip().endswith("{n}"):
            raise CoreError(
                f"the number context must end with {{n}} (the number is read at its last token), got {template!r}"
            )
        return template
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is not None and unk in tokenizer(DEFAULT_CONTEXT.format(n=7), add_special_tokens=False)["input_ids"]:
        return FALLBACK_CONTEXT
    return DEFAULT_CONTEXT


def number_representations(
    loaded, n_numbers: int = DEFAULT_N, context: str | None = None, batch_size: int = 64, progress=None
) -> NumberRepresentations:
    """The last-token vector of every number 0..n_numbers-1 at every layer (see the module doc)."""
    if n_numbers < 3:
        raise CoreError(f"number representations need at least 3 numbers, got {n_numbers}")
    tok = loaded.tokenizer
    context = choose_context(tok, context)
    texts = [context.format(n=n) for n in range(n_numbers)]
    prefix = context[: context.index("{n}")]
    base = tok(prefix, add_special_tokens=False)["input_ids"] if prefix else []
    ids = tok(texts, add_special_tokens=False)["input_ids"]
    # the number's tokens: those after the part the text shares with the context's own prefix (an
    # added token " 15" swallows the space that the prefix alone ends with)
    per_number = np.array([len(x) - _shared_prefix(base, x) for x in ids])
    full = tok(texts)["input_ids"]  # as the model reads them (with BOS where the tokenizer adds one)
    if any(len(f) < len(x) or f[len(f) - len(x):] != x for f, x in zip(full, ids)):
        raise CoreError(
            "the tokenizer adds tokens after the text (an end-of-text token?); the last token would not be the number's"
        )
    last = torch.as_tensor([x[-1] for x in ids])
    with torch.no_grad():
        resid = capture(loaded, texts, batch_size, streams=(RESID,), progress=progress)[RESID]  # (N, L+1, D)
        weight = loaded.model.get_input_embeddings().weight
        embedded = weight.detach()[last.to(weight.device)].float().cpu().numpy()
    vectors = np.concatenate([embedded[None], resid[:, 1:].transpose(1, 0, 2)], axis=0).astype(np.float32)
    if not np.isfinite(vectors).all():
        half = loaded.model.get_input_embeddings().weight.dtype in (torch.float16, torch.bfloat16)
        raise CoreError("the model produced non-finite hidden states for the number contexts: " + (
            "half precision overflows on some models, try --dtype float32" if half else
            "its weights are finite, so an activation overflowed even in float32; check the model on a plain prompt"))
    return NumberRepresentations(vectors, context, per_number, bool((per_number == 1).all()))


def _shared_prefix(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# ----------------------------------------------------------------------------- measurements


def number_spectrum_table(
    reps: NumberRepresentations | np.ndarray, seed: int = 0, n_permutations: int | None = None, workers: int = 1
) -> pd.DataFrame:
    """Per layer and basis: k, period, magnitude, null_mean, null_threshold, outlier. `workers` > 1 computes that
    many (layer, basis) spectra side by side (joblib's worker processes, one BLAS thread each)."""
    vectors = reps.vectors if isinstance(reps, NumberRepresentations) else np.asarray(reps)
    jobs = [(layer, b) for layer in range(len(vectors)) for b in BASES]
    shuffles = n_permutations or N_PERMUTATIONS
    if workers > 1:
        tables = Parallel(n_jobs=workers)(
            delayed(layer_spectrum)(vectors[layer], b, shuffles, seed) for layer, b in jobs
        )
    else:
        tables = [layer_spectrum(vectors[layer], b, shuffles, seed) for layer, b in jobs]
    for (layer, b), t in zip(jobs, tables):
        t.insert(0, "basis", b)
        t.insert(0, "layer", layer)
    return pd.concat(tables, ignore_index=True)


def layer_spectrum(matrix: np.ndarray, basis: str, n_permutations: int, seed: int) -> pd.DataFrame:
    """`spectrum_table` of one layer's (N x D) representations, centred over the numbers, in one basis."""
    centred = matrix - matrix.mean(axis=0, keepdims=True)
    return spectrum_table(centred, fourier_basis(matrix.shape[0], basis), n_permutations, seed)


def probe_kappas(
    features: np.ndarray, modulus: int, n_splits: int = N_SPLITS, seed: int = 0, test_share: float = TEST_SHARE
) -> np.ndarray:
    """Cohen's kappa on held-out numbers of a logistic-regression probe for n mod `modulus`, per split.

    Numbers are rows 0..N-1 of `features`. Each split holds out a seeded random `test_share` of the
    numbers. Features are centred on the training numbers and divided by one scale, their root mean
    squared norm, so the geometry is kept and the penalty (C = PROBE_C) means the same at every layer
    however large the residual stream grows.
    """
    X = np.asarray(features, dtype=np.float64)
    n = X.shape[0]
    if modulus < 2 or modulus > n // 2:
        raise CoreError(f"modulus {modulus} needs 2 <= T <= N/2 = {n // 2}")
    y = np.arange(n) % modulus
    kappas = np.empty(n_splits)
    for s in range(n_splits):
        order = np.random.default_rng((seed, s)).permutation(n)
        n_test = max(1, int(round(test_share * n)))
        test, train = order[:n_test], order[n_test:]
        centre = X[train].mean(axis=0)
        scale = np.sqrt(np.mean(np.sum((X[train] - centre) ** 2, axis=1))) or 1.0
        probe = LogisticRegression(max_iter=1000, C=PROBE_C, tol=1e-4)
        probe.fit((X[train] - centre) / scale, y[train])
        predicted = probe.predict((X[test] - centre) / scale)
        kappas[s] = cohen_kappa_score(y[test], predicted, labels=np.arange(modulus))
    return np.nan_to_num(kappas, nan=0.0)


def number_probes_table(
    reps: NumberRepresentations | np.ndarray, moduli=TARGET_MODULI, controls=CONTROL_MODULI, n_splits: int = N_SPLITS,
    seed: int = 0, progress=None, workers: int = 1,
) -> pd.DataFrame:
    """Per layer and modulus: kappa_mean, kappa_sd over the splits, and whether the modulus is a control.
    `workers` > 1 fits that many probes side by side (joblib's worker processes; each probe is seeded on its
    own, so the table is the same whatever the number of workers)."""
    vectors = reps.vectors if isinstance(reps, NumberRepresentations) else np.asarray(reps)
    rows = []
    n = vectors.shape[1]
    pairs = [(T, "paper period") for T in moduli] + [(T, "control") for T in controls]
    pairs = [(T, role) for T, role in pairs if 2 <= T <= n // 2]  # a modulus needs two numbers per class at least
    jobs = [(layer, T, role) for layer in range(vectors.shape[0]) for T, role in pairs]
    bar = progress_bar(len(jobs), "probes", progress)
    if workers > 1:
        fitted = Parallel(n_jobs=workers, return_as="generator")(
            delayed(probe_kappas)(vectors[layer], T, n_splits, seed) for layer, T, _ in jobs
        )
    else:
        fitted = (probe_kappas(vectors[layer], T, n_splits, seed) for layer, T, _ in jobs)
    for (layer, T, role), k in zip(jobs, fitted):
        rows.append({"layer": layer, "modulus": T, "role": role, "kappa_mean": float(k.mean()),
                     "kappa_sd": float(k.std(ddof=1)) if len(k) > 1 else 0.0, "n_splits": n_splits})
        bar.update(1)
    bar.close()
    return pd.DataFrame(rows)


def representation_tables(loaded, n_numbers: int = DEFAULT_N, context: str | None = None, seed: int = 0,
                          batch_size: int = 64, log=print, progress=None,
                          workers: int = 1) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """`number_spectrum`, `number_probes` (each computed by `workers` processes) and a summary dict (context, tokens per
    number) for a model."""
    t0 = time.time()
    reps = number_representations(loaded, n_numbers, context, batch_size, progress)
    log(f"number representations: {reps.describe()} ({time.time() - t0:.0f}s)")
    spectrum = number_spectrum_table(reps, seed, workers=workers)
    log(f"number spectra with null model: {reps.n_layers + 1} layers x 2 bases ({time.time() - t0:.0f}s)")
    probes = number_probes_table(reps, seed=seed, progress=progress, workers=workers)
    log(f"number probes: {len(probes)} (layer, modulus) pairs ({time.time() - t0:.0f}s)")
    info = {
        "context": reps.context,
        "n_numbers": reps.n_numbers,
        "single_token": reps.single_token,
        "max_tokens_per_number": int(reps.tokens_per_number.max()),
        "n_permutations": N_PERMUTATIONS,
        "description": reps.describe(),
    }
    return spectrum, probes, info


def transplant_matrix(vectors: np.ndarray, width: int, seed: int = 0) -> np.ndarray:
    """Rows for a model `width` wide from representations (N x D): centred, unit rows, then mapped by
    a fixed seeded isometry R^D -> R^width (orthonormal columns), which keeps every angle and length."""
    X = np.asarray(vectors, dtype=np.float64)
    X = X - X.mean(axis=0, keepdims=True)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    if (norms == 0).any():
        raise CoreError("a centred number representation is zero; two numbers share one vector")
    X = X / norms
    d = X.shape[1]
    if d > width:
        raise CoreError(
            f"cannot map {d}-wide representations isometrically into a {width}-wide model; use width >= {d}"
        )
    Q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(width, d)))
    return (X @ Q.T).astype(np.float32)
