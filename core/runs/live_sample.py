"""The fixed sample a live filter reads on a large split, and its running estimate (no torch: the pages import it).

A live filter on a split of more than LIVE_SAMPLE questions, on a model large enough that every
question takes seconds (`reads_sample`), reads, unless asked for every question, `live_sample` of
them in batches of LIVE_SAMPLE_BATCH, and reports `running_estimate` after each batch: the accuracy
so far with its 95% Wilson interval, which narrows as the batches come in.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.phase_shift import wilson_interval

#: A live filter on a larger split reads this many questions (a fixed stratified sample) unless asked for all.
LIVE_SAMPLE = 512
#: The sizes of the sample's batches (core.models.capture.prepare_batches): a first batch of 64 (stratified on its
#: own, `live_sample`) for a running estimate within seconds even with no prefix stored, then the other 448 at once,
#: since each batch pays the 30 layers' per-call overhead again (docs/speed.md: a warm filter of the default run on
#: one thread took 2.41 s in batches of 64, 1.70 s in 256, 1.72 s in 512).
LIVE_SAMPLE_BATCH = (64, LIVE_SAMPLE - 64)
#: Strata of the sample: the answer's range cut into this many equal bins.
SAMPLE_STRATA = 10
#: Models at least this large (about 12 x layers x width^2 parameters in their blocks) read the sample: on the
#: 2-layer demo models (10 M) every question takes under a second, on 30 layers of 576 (119 M) about 11 s.
SAMPLE_FROM_PARAMS = 30_000_000


def reads_sample(n_questions: int, n_layers: int, width: int, sample_size: int | None = None) -> bool:
    """Whether a live filter reads the fixed sample (of `sample_size`, default LIVE_SAMPLE) rather than every
    question by default: the split is larger than the sample and the model's blocks hold at least
    SAMPLE_FROM_PARAMS parameters."""
    size = LIVE_SAMPLE if sample_size is None else sample_size
    return n_questions > size and 12 * int(n_layers) * int(width) ** 2 >= SAMPLE_FROM_PARAMS


def live_sample(examples: pd.DataFrame, n: int = LIVE_SAMPLE, seed: int = 0, strata: int = SAMPLE_STRATA):
    """A fixed, stratified sample of `n` rows of `examples` (columns include `answer`), in an order whose
    every prefix is itself close to stratified; the whole table (in its order) when it has at most `n` rows.

    Strata: the answers' range cut into `strata` bins of equal width (the answer's size is what a
    filter of the low frequencies moves). Each stratum gets its share of `n` by largest remainders and
    draws that many rows without replacement (numpy's generator seeded with `seed`). Order: a row that
    is the j-th of the m_s drawn from its stratum gets the key (j + 0.5) / m_s, and rows are sorted by
    key (ties by stratum), so after k rows every stratum has given k x its share, within one row.
    """
    if len(examples) <= n:
        return examples
    answers = examples["answer"].to_numpy()
    lo, hi = int(answers.min()), int(answers.max())
    bins = np.minimum(((answers - lo) * strata) // max(hi - lo + 1, 1), strata - 1)
    sizes = np.bincount(bins, minlength=strata)
    exact = sizes * n / len(examples)
    take = np.floor(exact).astype(int)
    short = n - take.sum()
    take[np.argsort(-(exact - take), kind="stable")[:short]] += 1
    rng = np.random.default_rng(seed)
    rows, keys, stratum = [], [], []
    for s in range(strata):
        members = np.flatnonzero(bins == s)
        if take[s] == 0:
            continue
        drawn = rng.choice(members, size=take[s], replace=False)
        rows.append(drawn)
        keys.append((np.arange(take[s]) + 0.5) / take[s])
        stratum.append(np.full(take[s], s))
    rows, keys, stratum = np.concatenate(rows), np.concatenate(keys), np.concatenate(stratum)
    order = np.lexsort((stratum, keys))
    return examples.iloc[rows[order]]


def running_estimate(correct: int, n: int, total: int) -> dict:
    """The accuracy over the first `n` of `total` questions with its 95% Wilson interval (what the page shows
    while a computation runs)."""
    low, high = wilson_interval(correct / n, n) if n else (0.0, 1.0)
    return {"done": int(n), "total": int(total), "correct": int(correct), "accuracy": correct / n if n else None,
            "low": float(low), "high": float(high)}

