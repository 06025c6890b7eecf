"""The patching stage of a run (core.runs.precompute, `--stages patching`): activation patching between every
question of the run's split and its corrupted partner (core.analysis.patching: the second operand one more, the
answer's last digit changed, the same phrasing), at every stream and module site; the table `patching`.

The stream and module sites are read over every pair the split has (a question whose partner leaves the last digit
as it was has none); each attention head (where the heads can be read) over a seeded sample of `HEAD_PAIRS` of them
(15 + 93 always in), since a head is one site of heads x layers (270 on SmolLM2-135M, about 7 ms a pair each on two
CPU cores). Each row's `n` says over how many pairs it was read, and its interval is over those pairs; the
manifest's `patching` says how many, the pairing rule and the version.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from core.analysis.pairs import corrupted_text, pair_examples
from core.analysis.patching import Site, module_sites, patch_pairs, patching_table
from core.models.names import HEAD
from core.runs.cache import RunWriter
from core.tasks import RUNNING_EXAMPLE, example_id, subsample

#: The version of the patching table: a run whose table is of another version is given a new one.
PATCH_VERSION = 1
#: The pairs each head is read over (a seeded sample of the split's pairs), and the seed.
HEAD_PAIRS = 300
HEAD_SEED = 0
PAIR_RULE = ("each question paired with the same question, second operand one more (one less at the largest "
             "operand), the same phrasing; pairs whose answers share their last digit are left out")


def patch_run(loaded, examples, texts, p: int, max_operand: int, batch_size: int, progress=None, log=print):
    """The `patching` table over every pair of the run's questions `examples` (their prompts `texts` as the model
    reads them); None where no question has a partner."""
    t0 = time.time()
    text_of = {e.id: t for e, t in zip(examples, texts)}
    pairs = pair_examples(examples, max_operand)

    def patched(chosen, sites):
        clean = [text_of[c.id] for c, _ in chosen]
        corrupt = [corrupted_text(text_of[c.id], c, k) for c, k in chosen]
        result = patch_pairs(loaded, clean, corrupt, np.array([c.answer for c, _ in chosen]),
                             np.array([k.answer for _, k in chosen]), p, sites, batch_size, progress)
        log(f"patching: {len(sites)} sites over {result.n} pairs of {len(examples)} questions "
            f"({time.time() - t0:.0f}s)")
        return patching_table(result)

    if not pairs:
        log(f"patching: left out: none of the {len(examples)} questions has a partner ({PAIR_RULE})")
        return None
    tables = [patched(pairs, module_sites(loaded.n_layers))]
    if loaded.parts.has_heads:
        tables.append(patched(head_sample(pairs, examples[0].task), head_sites(loaded)))
    return pd.concat(tables, ignore_index=True)


def head_sites(loaded) -> list[Site]:
    """Every head of every layer (core.analysis.patching.module_sites' heads)."""
    return [s for s in module_sites(loaded.n_layers, loaded.parts.n_heads) if s.kind == HEAD]


def head_sample(pairs: list, task: str) -> list:
    """The pairs the heads are read over: a seeded sample of `HEAD_PAIRS` (all when there are fewer), the running
    example's pair always in, in the pairs' own order."""
    chosen = subsample([c for c, _ in pairs], HEAD_PAIRS, HEAD_SEED, [example_id(task, *RUNNING_EXAMPLE)])
    ids = {c.id for c in chosen}
    return [(c, k) for c, k in pairs if c.id in ids]


def patch_note(table, n_questions: int) -> dict:
    """What the manifest says of the `patching` table: its version, the pairs it read of how many questions, the
    pairing rule."""
    heads = table[table["kind"] == HEAD]
    return {"version": PATCH_VERSION, "pairs": int(table["n"].iloc[0]) if len(table) else 0,
            "head_pairs": int(heads["n"].iloc[0]) if len(heads) else 0, "questions": int(n_questions),
            "rule": PAIR_RULE}


def write_patch_table(writer: RunWriter, loaded, examples, texts, p: int, opts, log) -> dict:
    """The `patching` table into the staging folder; returns the manifest's note on it."""
    table = patch_run(loaded, examples, texts, p, opts.max_operand, opts.batch_size, opts.progress, log)
    if table is None:
        return {"version": PATCH_VERSION, "pairs": 0, "questions": len(examples), "rule": PAIR_RULE}
    writer.write("patching", table)
    return patch_note(table, len(examples))
