"""Stage 2 of a run (core.runs.precompute): what is read off the number tokens rather than the questions: the
spectra and t-SNE picture of the number rows of the input and output embeddings, and the numbers' representations
layer by layer (core.analysis.numbers: their spectra and linear probes).
"""

from __future__ import annotations

import pandas as pd
import torch

from core.analysis.clusters import embedding_clusters
from core.analysis.embeddings import spectrum_table
from core.analysis.fourier import BASES, fourier_basis
from core.analysis.numbers import CONTROL_MODULI, N_SPLITS, TARGET_MODULI, representation_tables
from core.errors import CoreError
from core.runs.cache import RunWriter
from core.runs.origin import recipe_of, rows_trained, stage_recipes
from core.training.row_start import rows_moved, start_rows


def embedding_tables(loaded, p: int, seed: int):
    """Spectra of the number rows of the input and output embeddings, and their t-SNE picture."""
    W_E = loaded.number_embedding(p).cpu().numpy()
    W_U = loaded.unembedding(p).cpu().numpy()
    in_w = loaded.model.get_input_embeddings().weight
    out_w = loaded.model.get_output_embeddings().weight
    tied = bool(in_w.data_ptr() == out_w.data_ptr())
    frames, clusters = [], []
    for matrix, W in (("input", W_E), ("output", W_U)):
        for b in BASES:
            t = spectrum_table(W, fourier_basis(p, b), seed=seed)
            t.insert(0, "matrix", matrix)
            t.insert(0, "basis", b)
            frames.append(t)
        c = embedding_clusters(W, seed=seed)
        c.insert(0, "matrix", matrix)
        clusters.append(c)
    return pd.concat(frames, ignore_index=True), pd.concat(clusters, ignore_index=True), tied


NUMBERS_JSON = "numbers.json"


def limit_note(n_numbers: int, n_layers: int, limit: int | None) -> str | None:
    """The line precompute logs when --limit is given: this stage reads the numbers 0..N-1, not the questions, so the
    limit does not shorten it (None without a limit).

    Why it is not bounded by --limit: the spectrum is over the number line itself (its frequencies are those of N
    numbers: fewer numbers would be another basis, not a sample of this one), and each probe is trained on 80% of the
    numbers and scored on the other 20%, every residue class of n mod 100 needing numbers on both sides; a subset of
    numbers would measure something else, not the same thing less precisely. Its cost is set by the model's depth:
    (L + 1) layers x the moduli x N_SPLITS probe fits."""
    if limit is None:
        return None
    moduli = [T for T in (*TARGET_MODULI, *CONTROL_MODULI) if 2 <= T <= n_numbers // 2]
    return (
        f"numbers: --limit {limit} does not shorten this stage: it reads the numbers 0..{n_numbers - 1} themselves, "
        f"not the questions (the spectrum needs the whole number line, each probe holds out a fifth of it), "
        f"{(n_layers + 1) * len(moduli) * N_SPLITS} probe fits; --stages without numbers leaves it out"
    )


def write_number_tables(writer: RunWriter, loaded, n_numbers: int, opts, log) -> dict:
    """The number-representation tables (`core.analysis.numbers`) of every layer, into the staging folder. `opts`:
    the run's core.runs.precompute.PrecomputeOptions (dataset_seed, batch_size, progress are read). The stage reads
    the numbers 0..n_numbers-1, whatever `opts.limit` is (`limit_note` says why, in the log)."""
    note = limit_note(n_numbers, loaded.n_layers, getattr(opts, "limit", None))
    if note:
        log(note)
    spectrum, probes, info = representation_tables(
        loaded, n_numbers, seed=opts.dataset_seed, batch_size=opts.batch_size, log=log, progress=opts.progress,
        workers=torch.get_num_threads(),  # the probes are fitted one per thread the run may use
    )
    writer.write("number_spectrum", spectrum)
    writer.write("number_probes", probes)
    writer.write_json(NUMBERS_JSON, info)
    return info


def rows_started_from_base(loaded) -> dict | None:
    """The first stage's recipe of a local model fine-tuned here with number tokens whose rows were trained from the
    base model's representation (`core.training.row_start`); None for any other model (rows frozen at their start,
    planted, learned from scratch, or not trained here)."""
    recipe = recipe_of({"source": loaded.source}) if loaded.local else None
    if not recipe or not recipe.get("number_tokens") or not rows_trained(recipe):
        return None
    first = stage_recipes(recipe)[-1]
    return None if (first.get("lora") or {}).get("init_delta") else first  # an earlier stage's recipe is missing


def row_origin_table(loaded, p: int, log) -> pd.DataFrame | None:
    """The `number_rows_origin` table (each number's row against its start, `core.training.row_start.rows_moved`)
    for a model `rows_started_from_base` names; None, with a line in the log where the base model is not here, for
    any other."""
    first = rows_started_from_base(loaded)
    if first is None:
        return None
    try:
        moved = rows_moved(loaded.number_embedding(p).cpu().numpy(), start_rows(first, log=log))
    except (CoreError, OSError) as exc:  # the run is made without it: the reason is in the log
        log(f"number rows against their start: left out ({exc})")
        return None
    log(f"number rows against their start ({first.get('init_from')}): median moved {moved['moved'].median():.1%} of "
        "the start's norm")
    return moved
