"""The attribution stage of a run (core.runs.precompute, `--stages attribution`): attribution patching
(core.analysis.attribution, one forward and backward pass per pair) between every question of the run's split and its
corrupted partner, the pairs exact patching reads (core.runs.patch_run: the second operand one more, the answer's last
digit changed, the same phrasing); the table `attribution`.

Every site exact patching reads (the stream, each attention and MLP output, and each head where the heads can be read)
is estimated over every pair of the split, heads included (on a deep model's sampled design exact patching reads the
heads over a sample; a head's estimate costs nothing more). Each row's `n` says over how many pairs; the manifest's
`attribution` says how many, the pairing rule and the version. Its agreement with exact patching is read by
core.claims.attribution.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from core.analysis.attribution import attribute_pairs, attribution_table, every_site
from core.analysis.pairs import corrupted_text, pair_examples
from core.runs.cache import RunWriter
from core.runs.patch_run import PAIR_RULE

#: The version of the attribution table: a run whose table is of another version is given a new one.
ATTRIBUTION_VERSION = 1


def attribution_run(loaded, examples, texts, p: int, max_operand: int, batch_size: int, progress=None,
                    log=print) -> pd.DataFrame | None:
    """The `attribution` table over every pair of the run's questions `examples` (their prompts `texts` as the model
    reads them); None where no question has a partner."""
    t0 = time.time()
    pairs = pair_examples(examples, max_operand)
    if not pairs:
        log(f"attribution: left out: none of the {len(examples)} questions has a partner ({PAIR_RULE})")
        return None
    text_of = {e.id: t for e, t in zip(examples, texts)}
    clean = [text_of[c.id] for c, _ in pairs]
    corrupt = [corrupted_text(text_of[c.id], c, k) for c, k in pairs]
    sites = every_site(loaded)
    result = attribute_pairs(loaded, clean, corrupt, np.array([c.answer for c, _ in pairs]),
                             np.array([k.answer for _, k in pairs]), p, sites, batch_size, progress)
    log(f"attribution: {len(sites)} sites over {result.n} pairs of {len(examples)} questions "
        f"({time.time() - t0:.0f}s)")
    return attribution_table(result)


def attribution_note(table: pd.DataFrame | None, n_questions: int) -> dict:
    """What the manifest says of the `attribution` table: its version, the pairs it read of how many questions, the
    pairing rule."""
    pairs = int(table["n"].iloc[0]) if table is not None and len(table) else 0
    return {"version": ATTRIBUTION_VERSION, "pairs": pairs, "questions": int(n_questions), "rule": PAIR_RULE}


def write_attribution_table(writer: RunWriter, loaded, examples, texts, p: int, opts, log) -> dict:
    """The `attribution` table into the staging folder; returns the manifest's note on it."""
    table = attribution_run(loaded, examples, texts, p, opts.max_operand, opts.batch_size, opts.progress, log)
    if table is not None:
        writer.write("attribution", table)
    return attribution_note(table, len(examples))
