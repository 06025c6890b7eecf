"""The helix's causal test (Kantamneni & Tegmark 2025): does the helix fit of an operand carry what the model uses of
it? Activation patching (core.analysis.patching) at the first operand's token instead of the answer position.

Pairs: each question (a, b) of the run's split against the same question with its FIRST operand one more (one less at
the largest operand), the same phrasing, so the answers differ by one. At layer l the corrupted prompt's stream
h(l) at its first operand's token is replaced by (`CONDITIONS`), each built on the mean vector of the question's own
phrasing over the training half (the words before the operand change its vector; a reconstruction from the number
alone must not be charged for them):

* "activation": the clean prompt's own h(l) there: what any reconstruction of it can restore at most;
* "helix": the phrasing's mean plus the helix fit of a alone, C B(a) + c (core.analysis.helix: n, and cos and sin of
  2 pi n / T for T = 2, 5, 10, 100), fitted by least squares on the operand vectors, less their phrasing's mean, of
  the questions whose a lies in the training half of the numbers (`split_numbers`, stratified by n mod 100), and read
  only on pairs whose a lies in the other half: it predicts the vector from the number, for numbers it never saw;
* "line": the same with the line alone (n, no circles): what the circles add is helix minus line;
* "pca": the clean h(l) less its phrasing's mean kept in its top-r principal directions (r the helix's rank), fitted
  on the same training half: it reads the clean vector itself, not the number;
* "random": the same in a random r-dimensional subspace (`RANDOM_DRAWS` seeded draws, each its own row; a reader
  averages them and shows their spread);
* "mean": the phrasing's mean vector alone, the same for every number: rank 0, the floor.

What is read is activation patching's: the share of the logit difference logit(a + b) - logit(a' + b) recovered,
(mean patched - mean corrupted) / (mean clean - mean corrupted) over the held-out pairs, and the share of pairs whose
answer moves back. Its interval resamples the held-out operands, not the pairs (a cluster bootstrap: every pair of
one operand shares its vector, so the operands are what a new sample would redraw). At layer 0 the "activation"
patch makes the corrupted prompt the clean one, so it restores everything there (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from core.analysis.ablations import Condition, RowPatch
from core.analysis.evaluation import evaluate_conditions
from core.analysis.helix import (
    LINE,
    PERIODS,
    fit_helix,
    fit_pca,
    helix_reconstruct,
    pca_reconstruct,
    random_subspace,
    split_numbers,
)
from core.analysis.patching import bootstrap_shares, recovered_share, share_interval
from core.errors import CoreError
from core.models.capture import capture
from core.models.names import RESID
from core.tasks import Example, number_space, with_operands

CONDITIONS = ("activation", "helix", "line", "pca", "random", "mean")
RANDOM_DRAWS = 3
RANDOM_SEED = 20250
SPLIT_SEED = 0
#: The columns of the helix patching table: one row per layer, condition and draw (draw 0 but for "random").
HELIX_PATCH_COLUMNS = ("layer", "condition", "draw", "rank", "n", "recovered", "recovered_low", "recovered_high",
                       "moved")


def operand_corrupted(example: Example, max_operand: int) -> Example | None:
    """`example` with its first operand one more (one less at `max_operand`), the same phrasing; None where the answer
    stays the same or leaves the task's numbers (a product with an operand 0, or past p - 1)."""
    a = example.a + 1 if example.a < max_operand else example.a - 1
    other = with_operands(example, a, example.b)
    if other.answer == example.answer or other.answer >= number_space(example.task, max_operand):
        return None
    return other


def operand_prefix(text: str, example: Example) -> str:
    """The prompt `text` (as the model reads it) cut just after the first operand of its question: its last token is
    the operand's. The first operand comes first in every phrasing (core.tasks)."""
    start = text.rfind(example.question)
    at = example.question.find(str(example.a)) if start >= 0 else -1
    if at < 0:
        raise CoreError(f"the prompt {text!r} does not ask {example.question!r} with its first operand {example.a}")
    return text[: start + at + len(str(example.a))]


@dataclass
class OperandPairs:
    """The pairs the test reads: the clean and corrupted prompts, their answers, the first operands, and how far from
    the end each prompt's first-operand token lies (`back`, 1 = the last token)."""

    clean: list[str]
    corrupt: list[str]
    clean_answers: np.ndarray
    corrupt_answers: np.ndarray
    operands: np.ndarray
    back: np.ndarray
    prefixes: list[str]
    contexts: np.ndarray  # the phrasing of each question (its words around the operands)


def operand_pairs(tokenizer, examples: Sequence[Example], texts: Sequence[str], max_operand: int) -> OperandPairs:
    """Every question's pair (`operand_corrupted`) whose two prompts put their first operand at the same token and
    whose cut prompt tokenizes as the start of the whole one; the others are left out."""
    kept = {k: [] for k in ("clean", "corrupt", "ca", "ka", "a", "back", "prefix", "context")}
    for e, text in zip(examples, texts):
        other = operand_corrupted(e, max_operand)
        if other is None:
            continue
        corrupt = text[: text.rfind(e.question)] + other.question + text[text.rfind(e.question) + len(e.question):]
        prefix = operand_prefix(text, e)
        ids, cut, alt = (tokenizer(t)["input_ids"] for t in (text, prefix, corrupt))
        if len(ids) != len(alt) or ids[: len(cut)] != cut:
            continue
        values = (text, corrupt, e.answer, other.answer, e.a, len(ids) - len(cut) + 1, prefix, e.phrasing)
        for key, value in zip(kept, values):
            kept[key].append(value)
    if not kept["clean"]:
        raise CoreError("no question puts its first operand at one token in both prompts of its pair: the helix test "
                        "needs numbers that are single tokens")
    return OperandPairs(kept["clean"], kept["corrupt"], np.array(kept["ca"]), np.array(kept["ka"]),
                        np.array(kept["a"]), np.array(kept["back"]), kept["prefix"], np.array(kept["context"]))


def answer_pairs(tokenizer, examples: Sequence[Example], texts: Sequence[str], max_operand: int) -> OperandPairs:
    """The Clock test's pairs (Kantamneni & Tegmark's "Clock": does the answer position hold the answer, a + b, on a
    helix?): each question against the same question with its SECOND operand one more (one less at `max_operand`), the
    same phrasing, so the answers differ by one. The site is the answer position (`back` 1), the number fitted there
    is the clean question's answer (a + b for addition), and the "prefix" captured is the whole prompt (its last token
    is the answer position). Pairs whose two prompts differ in token length are left out."""
    kept = {k: [] for k in ("clean", "corrupt", "ca", "ka", "n", "prefix", "context")}
    for e, text in zip(examples, texts):
        b = e.b + 1 if e.b < max_operand else e.b - 1
        other = with_operands(e, e.a, b)
        if other.answer == e.answer or other.answer >= number_space(e.task, max_operand):
            continue
        at = text.rfind(e.question)
        corrupt = text[:at] + other.question + text[at + len(e.question):]
        if len(tokenizer(text)["input_ids"]) != len(tokenizer(corrupt)["input_ids"]):
            continue
        for key, value in zip(kept, (text, corrupt, e.answer, other.answer, e.answer, text, e.phrasing)):
            kept[key].append(value)
    if not kept["clean"]:
        raise CoreError("no question's pair (second operand one more) keeps its prompt's token length: the Clock test "
                        "needs numbers that are single tokens")
    return OperandPairs(kept["clean"], kept["corrupt"], np.array(kept["ca"]), np.array(kept["ka"]),
                        np.array(kept["n"]), np.ones(len(kept["clean"]), dtype=np.int64), kept["prefix"],
                        np.array(kept["context"]))


def clock_layers(n_layers: int) -> tuple[int, ...]:
    """The layers the Clock test patches at the answer position: every sixth of the depth from half of it to the end
    (15, 20, 25, 30 of 30; 1, 2 of 2), where the answer is being computed (before, the answer position's stream is
    the same in both prompts but for what attention has brought in)."""
    return tuple(sorted({max(1, round(n_layers * f / 6)) for f in range(3, 7)}))


def patch_layers(n_layers: int) -> tuple[int, ...]:
    """The layers the test patches: 0 and every sixth of the depth up to two thirds (0, 5, 10, 15, 20 of 30)."""
    return tuple(sorted({0, *(round(n_layers * f / 6) for f in range(1, 5))}))


def helix_patching(loaded, pairs: OperandPairs, p: int, n_numbers: int, layers: Sequence[int] | None = None,
                   periods=PERIODS, batch_size: int = 32, progress=None) -> pd.DataFrame:
    """The table `HELIX_PATCH_COLUMNS` (module docstring): every condition at every layer of `layers` (default
    `patch_layers`), over the pairs whose first operand is in the held-out half of the numbers 0..n_numbers-1."""
    layers = tuple(patch_layers(loaded.n_layers) if layers is None else layers)
    if any(not 0 <= layer <= loaded.n_layers for layer in layers):
        raise CoreError(f"layers {layers}: this model's stream is read at layers 0..{loaded.n_layers}")
    train, test = split_numbers(n_numbers, SPLIT_SEED)
    fitted, held = np.isin(pairs.operands, train), np.isin(pairs.operands, test)
    if fitted.sum() <= 2 * len(periods) + 2 or held.sum() < 2:
        raise CoreError(f"{int(fitted.sum())} questions to fit the helix on and {int(held.sum())} to read it on: too "
                        "few; use a longer split")
    vectors = capture(loaded, pairs.prefixes, batch_size, (RESID,), progress)[RESID]  # (questions, L + 1, D)
    rows, labels = [], []
    conditions = [Condition(None)]
    for layer in layers:
        for condition, draw, values, rank in layer_patches(vectors[:, layer], pairs.operands, pairs.contexts, fitted,
                                                           held, periods, n_numbers):
            conditions.append(Condition(RowPatch(values.astype(np.float32), back=pairs.back[held]), modules=RESID,
                                        layer=layer))
            labels.append((layer, condition, draw, rank))
    texts = [pairs.clean[i] for i in np.flatnonzero(held)], [pairs.corrupt[i] for i in np.flatnonzero(held)]
    answers, contrast = pairs.clean_answers[held], pairs.corrupt_answers[held]
    clean = evaluate_conditions(loaded, texts[0], answers, p, [Condition(None)], batch_size=batch_size,
                                contrast=contrast, progress=progress, desc="helix: clean")[0]
    runs = evaluate_conditions(loaded, texts[1], answers, p, conditions, batch_size=batch_size, contrast=contrast,
                               progress=progress, desc="helix patching")
    patched = np.stack([r.gaps for r in runs[1:]])
    draws = bootstrap_shares(clean.gaps, runs[0].gaps, patched, groups=pairs.operands[held])
    for i, (layer, condition, draw, rank) in enumerate(labels):
        low, high = share_interval(draws[:, i])
        rows.append({"layer": layer, "condition": condition, "draw": draw, "rank": rank, "n": int(held.sum()),
                     "recovered": recovered_share(patched[i], clean.gaps, runs[0].gaps), "recovered_low": low,
                     "recovered_high": high, "moved": float(np.mean(runs[i + 1].predictions == answers))})
    return pd.DataFrame(rows, columns=list(HELIX_PATCH_COLUMNS))


def context_means(V: np.ndarray, contexts: np.ndarray, fitted: np.ndarray) -> np.ndarray:
    """Each question's phrasing mean over the `fitted` questions (the fitted questions' overall mean for a phrasing
    none of them has), (questions, D)."""
    overall = V[fitted].mean(axis=0)
    means = {c: V[fitted & (contexts == c)].mean(axis=0) if (fitted & (contexts == c)).any() else overall
             for c in np.unique(contexts)}
    return np.stack([means[c] for c in contexts])


def layer_patches(vectors: np.ndarray, operands: np.ndarray, contexts: np.ndarray, fitted: np.ndarray,
                  held: np.ndarray, periods, n_numbers: int):
    """(condition, draw, values for the held-out pairs, rank) of one layer: the module docstring's conditions, their
    fits made on the `fitted` questions' vectors alone, less each one's phrasing mean."""
    V = vectors.astype(np.float64)
    base = context_means(V, contexts, fitted)
    R = V - base
    helix = fit_helix(R[fitted], operands[fitted], periods, n_max=n_numbers - 1)
    line = fit_helix(R[fitted], operands[fitted], LINE, n_max=n_numbers - 1)
    rank = helix.rank
    pca = fit_pca(R[fitted], rank)
    floor, own = base[held] + pca.mean, R[held]
    yield "activation", 0, V[held], V.shape[1]
    yield "helix", 0, base[held] + helix_reconstruct(helix, operands[held]), rank
    yield "line", 0, base[held] + helix_reconstruct(line, operands[held]), 1
    yield "pca", 0, base[held] + pca_reconstruct(pca, own), rank
    for draw in range(RANDOM_DRAWS):
        Q = random_subspace(V.shape[1], rank, RANDOM_SEED + draw)
        yield "random", draw, floor + (own - pca.mean) @ Q @ Q.T, rank
    yield "mean", 0, floor, 0
