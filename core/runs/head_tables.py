"""The head stage of a run: the `head_spectra` and `head_locking` tables (core.analysis.heads), over every question.

Each attention head's result at the answer position, z_h W_O^h, is read through the unembedding's number rows as a
module's output is (core.runs.measure): its mean spectrum in both bases, and its phase locking at the phase stage's
periods with the same shuffle null (the run's dataset seed, `NULL_SHUFFLES` shuffles), the heads its family. One
streaming capture pass; a model whose heads cannot be read (a post-norm layout, an attention without an output
projection: `core.models.parts.ModelParts.require_heads`) has no head tables (`has_heads`).
"""

from __future__ import annotations

import time

import pandas as pd

from core.analysis.heads import HEAD_LOCKING_COLUMNS, HEAD_SPECTRA_COLUMNS, read_heads
from core.analysis.phase import NULL_SHUFFLES, PHASE_PERIODS, period_frequencies

#: Version of the stage's measurement (the manifest's `heads.version`).
HEAD_VERSION = 1
#: The stage's tables, with the columns each must have (the frames carry these, in this order).
HEAD_TABLE_COLUMNS = {"head_spectra": HEAD_SPECTRA_COLUMNS, "head_locking": HEAD_LOCKING_COLUMNS}


def has_heads(loaded, p: int) -> bool:
    """Whether the stage applies: the model's heads can be read one by one, and the number line 0..p-1 has at least
    one of the phase periods as a frequency."""
    return loaded.parts.has_heads and bool(period_frequencies(p, PHASE_PERIODS))


def head_tables(loaded, texts, answers, p: int, opts, log=print) -> dict[str, pd.DataFrame]:
    """{"head_spectra": ..., "head_locking": ...} over every one of `texts` (the prompts as the model reads them) and
    their `answers`. `opts`: the run's PrecomputeOptions (batch_size, dataset_seed, progress are read; the seed is the
    phase stage's, so both nulls shuffle the answers alike)."""
    parts = loaded.parts
    parts.require_heads("the head tables")
    log(f"heads: {parts.n_layers} layers x {parts.n_heads} heads, {len(texts)} prompts")
    t0 = time.time()
    tables = read_heads(loaded, texts, answers, p, opts.batch_size, opts.dataset_seed, NULL_SHUFFLES, opts.progress)
    log(f"heads: done in {time.time() - t0:.1f} s")
    return tables


def head_note(loaded, n: int) -> dict:
    """What the manifest says about the head tables."""
    parts = loaded.parts
    return {"version": HEAD_VERSION, "n": int(n), "n_heads": parts.n_heads, "head_dim": parts.head_dim,
            "shuffles": NULL_SHUFFLES}


def write_head_tables(writer, loaded, texts, answers, p: int, opts, log=print) -> dict:
    """The head tables over every one of `texts` into `writer`'s staging folder; the manifest's note on them."""
    for name, frame in head_tables(loaded, texts, answers, p, opts, log).items():
        writer.write(name, frame)
    return head_note(loaded, len(texts))
