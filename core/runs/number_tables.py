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
from core.analysis.numbers import representation_tables
from core.runs.cache import RunWriter


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


def write_number_tables(writer: RunWriter, loaded, n_numbers: int, opts, log) -> dict:
    """The number-representation tables (`core.analysis.numbers`) of every layer, into the staging folder. `opts`:
    the run's core.runs.precompute.PrecomputeOptions (dataset_seed, batch_size, progress are read)."""
    spectrum, probes, info = representation_tables(
        loaded, n_numbers, seed=opts.dataset_seed, batch_size=opts.batch_size, log=log, progress=opts.progress,
        workers=torch.get_num_threads(),  # the probes are fitted one per thread the run may use
    )
    writer.write("number_spectrum", spectrum)
    writer.write("number_probes", probes)
    writer.write_json(NUMBERS_JSON, info)
    return info
