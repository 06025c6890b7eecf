"""Right at every precision: the filters of a model run in bfloat16 or float16 are those of the same model in
float32, built from W_U as its files store it (core.models.stored_weights); a W_U too coarse for them is refused."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from core.analysis.filters import low_pass
from core.analysis.fourier import fourier_basis
from core.errors import CoreError
from core.models.loading import wrap_model
from core.models.random_models import random_config
from core.models.vocab import number_tokenizer
from core.runs.ablate import ablate, open_target

MAX_OPERAND = 30
P = 2 * MAX_OPERAND + 1
WIDTH = 128  # wide enough that bfloat16's own tolerance (128 x 2^-7 = 1) would count every singular value as zero
FREQS = (1, 5, 12, 20)  # W_U reads these frequencies only: the low band below tau = 10 has rank 4 and more
TAU = 10


@pytest.fixture(scope="module")
def low_rank_folder(tmp_path_factory):
    """A tiny GPT-2 (tied embeddings) whose number rows are sinusoids of `FREQS`, mixed into the width: W_U's low
    band has rank 4 in an orthogonal basis (a little more in the paper's, whose frequencies leak), and rounding to
    bfloat16 spreads noise over every frequency."""
    tok = number_tokenizer(600)
    config = random_config("gpt2", len(tok), 2, WIDTH, 4, pad_token_id=tok.pad_token_id,
                           bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    ids = torch.as_tensor([tok.convert_tokens_to_ids(str(n)) for n in range(P)])
    n = np.arange(P)[:, None]
    features = np.hstack([f(2 * np.pi * k * n / P) for k in FREQS for f in (np.cos, np.sin)])
    mix = np.linalg.qr(np.random.default_rng(0).standard_normal((WIDTH, features.shape[1])))[0].T
    with torch.no_grad():
        model.get_output_embeddings().weight[ids] = torch.as_tensor(3 * features @ mix, dtype=torch.float32)
    folder = tmp_path_factory.mktemp("low-rank")
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def test_a_model_in_bfloat16_or_float16_gets_float32s_filters_and_accuracy(low_rank_folder):
    """The same ablation in three dtypes: the same rows, the same filter rank, accuracy within a few points; and a
    bfloat16 W_U with no files behind it (a model in memory) is refused, not read as rank 0."""
    reports, rows, targets = {}, {}, {}
    for dtype in ("float32", "bfloat16", "float16"):
        target = open_target(str(low_rank_folder), max_operand=MAX_OPERAND, limit=60, threads=1,
                             log=lambda *_: None, dtype=dtype)
        targets[dtype] = target
        assert next(target.loaded.model.parameters()).dtype == getattr(torch, dtype)
        rows[dtype] = target.loaded.unembedding(P)
        reports[dtype] = ablate(target, "mlp", "low", TAU, progress=False)
    for dtype in ("bfloat16", "float16"):
        assert torch.equal(rows[dtype], rows["float32"])  # the stored rows, not the cast ones
        assert reports[dtype].figures["filter_rank"] == reports["float32"].figures["filter_rank"]
        assert abs(reports[dtype].accuracy - reports["float32"].accuracy) <= 0.05
        assert abs(reports[dtype].base_accuracy - reports["float32"].base_accuracy) <= 0.05
    # rounding alone changes the filter: built from the bfloat16-cast rows with float32's tolerance, the rank is noise
    cast = rows["float32"].to(torch.bfloat16).float().numpy()
    assert low_pass(cast, fourier_basis(P), TAU).rank > reports["float32"].figures["filter_rank"] >= 4


    loaded = targets["bfloat16"].loaded
    assert "as stored in the model's files (float32)" in loaded.extra["filter_unembedding"]
    wrapped = wrap_model(loaded.model, loaded.tokenizer)  # no files: W_U as the model holds it, bfloat16
    wrapped.select_numbers(P)
    with pytest.raises(CoreError, match="too coarse to build a filter.*float32"):
        low_pass(wrapped.unembedding(P), fourier_basis(P), TAU)
