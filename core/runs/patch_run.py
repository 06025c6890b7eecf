"""The patching stage of a run (core.runs.precompute, `--stages patching`): activation patching between the
questions of the run's split and their corrupted partners (core.analysis.patching), in both directions (denoising:
the clean prompt's activation into the corrupted run; noising: the other way) and for two contrasts (the second
operand one more, the answer's last digit changed; ten more, its tens digit changed: the magnitude half of the
paper), at every stream and module site and at two groups (the attention of the trained layers together, their MLPs
together: core.runs.patch_groups); the table `patching`.

Pairs (each row's `n` says over how many it was read, and its interval is over those pairs):

* denoising, contrast 1, the stream and module sites and the groups: every pair the split has (a question whose
  partner leaves the last digit as it was has none);
* each attention head (where the heads can be read), denoising, contrast 1, and noising at contrast 1 and both
  directions at contrast 10 (the stream and module sites and the groups): every pair, where the run reads every
  question (`pair_limits`: a 2-layer demo, a split of at most 512 questions, or `precompute --every-question`).
  A deep model's run of the sampled
  design (core.runs.sampled_design) reads a seeded sample instead: `HEAD_PAIRS` pairs for the heads, since a head is
  one site of heads x layers (270 on SmolLM2-135M: 21 minutes over 3,419 pairs on two CPU threads, 1.4 ms a head and
  pair), and `EXTRA_PAIRS` pairs of each contrast for the other readings (15 + 93 always in; every pair where there
  are fewer). `scripts/patching_upgrade.py RUN --every-pair` reads every pair on such a run too: the default run's
  table was made so.

The manifest's `patching` says how many, the pairing rules and the version. A table of version 1 (denoising at
contrast 1 only) is upgraded by adding what it lacks: its rows over the very pairs this stage reads are kept.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from core.analysis.pairs import corrupted_text, pair_examples
from core.analysis.patch_table import DENOISE, NOISE, PATCH_COLUMNS, with_defaults
from core.analysis.patching import Site, group_site, module_sites, patch_pairs, patching_table
from core.models.names import ATTN, HEAD, MLP
from core.runs.cache import RunWriter
from core.runs.patch_groups import trained_layers
from core.runs.sampled_design import design_for
from core.tasks import RUNNING_EXAMPLE, example_id, subsample

#: The version of the patching table: a run whose table is of another version is given a new one (2: noising, the
#: contrast 10 and the groups beside version 1's denoising at contrast 1).
PATCH_VERSION = 2
#: The pairs each head is read over (a seeded sample of the split's pairs), and the seed.
HEAD_PAIRS = 300
HEAD_SEED = 0
#: The pairs noising and the contrast 10 are read over (a seeded sample of that contrast's pairs, seed `HEAD_SEED`).
EXTRA_PAIRS = 200
#: (direction, contrast) read over the sample `EXTRA_PAIRS`, after denoising at contrast 1 over every pair.
EXTRA_READINGS = ((NOISE, 1), (DENOISE, 10), (NOISE, 10))
PAIR_RULE = ("each question paired with the same question, second operand one more (one less at the largest "
             "operand), the same phrasing; pairs whose answers share their last digit are left out")
TENS_RULE = ("each question paired with the same question, second operand ten more (ten less past the largest "
             "operand), the same phrasing; pairs whose answers share their tens digit are left out")


def group_sites(loaded) -> list[Site]:
    """The trained layers' attention together and their MLPs together (core.runs.patch_groups.trained_layers)."""
    first, last, _ = trained_layers(getattr(loaded, "source", None), loaded.n_layers)
    return [group_site(ATTN, first, last), group_site(MLP, first, last)]


def pair_limits(loaded, examples, every_question: bool = False) -> tuple[int | None, int | None]:
    """(head pairs, extra pairs) of a run of `loaded` over `examples`: None and None (every pair) where the run reads
    every question, `HEAD_PAIRS` and `EXTRA_PAIRS` where it reads a deep model's sampled design (module docstring)."""
    if design_for([e.answer for e in examples], loaded.n_layers, loaded.width, every_question) is None:
        return None, None
    return HEAD_PAIRS, EXTRA_PAIRS


def reads_enough(note: dict, loaded, examples, max_operand: int, every_question: bool) -> bool:
    """Whether a run's patching table, as its manifest's `note` (`patch_note`) says, read at least the pairs
    `pair_limits` asks of the heads and of each other reading: a table made while every run read samples there is
    made again on an upgrade (its denoising rows at contrast 1 kept)."""
    heads_limit, extra_limit = pair_limits(loaded, examples, every_question)
    task = examples[0].task if examples else "addition"
    if loaded.parts.has_heads:
        wanted = len(pair_sample(pair_examples(examples, max_operand), task, heads_limit))
        if int(note.get("head_pairs") or 0) < wanted:
            return False
    read = note.get("extra_pairs") or {}
    for direction, contrast in EXTRA_READINGS:
        wanted = len(pair_sample(pair_examples(examples, max_operand, contrast), task, extra_limit))
        if int(read.get(f"{direction}_{contrast}") or 0) < wanted:
            return False
    return True


def patch_run(loaded, examples, texts, p: int, max_operand: int, batch_size: int, progress=None, log=print,
              previous=None, extra_pairs: int | None = EXTRA_PAIRS, head_pairs: int | None = HEAD_PAIRS):
    """The `patching` table over the pairs of the run's questions `examples` (their prompts `texts` as the model
    reads them; the pairs each reading takes: module docstring); None where no question has a partner at contrast 1.
    `previous`, an older table of this run: its denoising rows at contrast 1 read over the same number of the same
    pairs are kept instead of recomputed. `extra_pairs` and `head_pairs`: the samples noising and the contrast 10,
    and the heads, read (None: every pair; `pair_limits` gives a run's)."""
    t0 = time.time()
    text_of = {e.id: t for e, t in zip(examples, texts)}
    task = examples[0].task if examples else "addition"
    old = with_defaults(previous) if previous is not None and len(previous) else None

    def patched(chosen, sites, direction=DENOISE, contrast=1):
        clean = [text_of[c.id] for c, _ in chosen]
        corrupt = [corrupted_text(text_of[c.id], c, k) for c, k in chosen]
        result = patch_pairs(loaded, clean, corrupt, np.array([c.answer for c, _ in chosen]),
                             np.array([k.answer for _, k in chosen]), p, sites, batch_size, progress, direction)
        log(f"patching ({direction}, second operand {contrast} more): {len(sites)} sites over {result.n} pairs of "
            f"{len(examples)} questions ({time.time() - t0:.0f}s)")
        return patching_table(result, contrast=contrast)

    def kept(kinds, n):
        if old is None:
            return None
        rows = old[(old["direction"] == DENOISE) & (old["contrast"] == 1) & old["kind"].isin(kinds)]
        if not len(rows) or (rows["n"] != n).any():
            return None
        log(f"patching: {len(rows)} denoising rows over the same {n} pairs kept from the run's earlier table")
        return rows[list(PATCH_COLUMNS)]

    pairs = pair_examples(examples, max_operand)
    if not pairs:
        log(f"patching: left out: none of the {len(examples)} questions has a partner ({PAIR_RULE})")
        return None
    groups = group_sites(loaded)
    singles = module_sites(loaded.n_layers)
    single_kinds = sorted({s.kind for s in singles})
    tables = [kept(single_kinds, len(pairs))]
    if tables[0] is None:
        tables = [patched(pairs, singles)]
    tables.append(patched(pairs, groups))
    if loaded.parts.has_heads:
        sample = pair_sample(pairs, task, head_pairs)
        heads = kept([HEAD], len(sample))
        tables.append(heads if heads is not None else patched(sample, head_sites(loaded)))
    for direction, contrast in EXTRA_READINGS:
        chosen = pair_sample(pair_examples(examples, max_operand, contrast), task, extra_pairs)
        if chosen:
            tables.append(patched(chosen, singles + groups, direction, contrast))
        else:
            log(f"patching: no pair at contrast {contrast} ({TENS_RULE if contrast == 10 else PAIR_RULE})")
    return pd.concat(tables, ignore_index=True)


def head_sites(loaded) -> list[Site]:
    """Every head of every layer (core.analysis.patching.module_sites' heads)."""
    return [s for s in module_sites(loaded.n_layers, loaded.parts.n_heads) if s.kind == HEAD]


def pair_sample(pairs: list, task: str, limit: int | None) -> list:
    """A seeded sample (`HEAD_SEED`) of at most `limit` of `pairs` (all when there are fewer, or `limit` is None), the
    running example's pair always in where it has one, in the pairs' own order."""
    chosen = subsample([c for c, _ in pairs], limit, HEAD_SEED, [example_id(task, *RUNNING_EXAMPLE)])
    ids = {c.id for c in chosen}
    return [(c, k) for c, k in pairs if c.id in ids]


def patch_note(table, n_questions: int) -> dict:
    """What the manifest says of the `patching` table: its version, the pairs each reading read of how many
    questions, the pairing rules and the trained layers grouped."""
    t = with_defaults(table)
    base = t[(t["direction"] == DENOISE) & (t["contrast"] == 1)]
    heads = base[base["kind"] == HEAD]
    singles = base[~base["kind"].isin((HEAD, "group"))]
    extra = t[(t["direction"] != DENOISE) | (t["contrast"] != 1)]
    readings = {f"{d}_{c}": int(rows["n"].iloc[0]) for (d, c), rows in extra.groupby(["direction", "contrast"])}
    groups = t[t["kind"] == "group"]
    return {"version": PATCH_VERSION, "pairs": int(singles["n"].iloc[0]) if len(singles) else 0,
            "head_pairs": int(heads["n"].iloc[0]) if len(heads) else 0, "questions": int(n_questions),
            "extra_pairs": readings,
            "groups": sorted({f"{m} {int(a)}-{int(b)}" for m, a, b in
                              zip(groups["modules"], groups["from_layer"], groups["layer"])}),
            "rule": PAIR_RULE, "tens_rule": TENS_RULE}


def write_patch_table(writer: RunWriter, loaded, examples, texts, p: int, opts, log,
                      limits: tuple[int | None, int | None] | None = None) -> dict:
    """The `patching` table into the staging folder (an older one there: its rows over the same pairs kept);
    returns the manifest's note on it. `limits`: (head pairs, extra pairs), None each for every pair (default: the
    run's `pair_limits`, `opts.every_question` read where it has one)."""
    if limits is None:
        limits = pair_limits(loaded, examples, bool(getattr(opts, "every_question", False)))
    previous = writer.read("patching") if writer.has("patching") else None
    table = patch_run(loaded, examples, texts, p, opts.max_operand, opts.batch_size, opts.progress, log, previous,
                      extra_pairs=limits[1], head_pairs=limits[0])
    if table is None:
        return {"version": PATCH_VERSION, "pairs": 0, "questions": len(examples), "rule": PAIR_RULE}
    writer.write("patching", table)
    return patch_note(table, len(examples))
