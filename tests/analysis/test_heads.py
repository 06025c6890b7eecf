"""Attention read head by head (core.analysis.heads, core.runs.head_tables, app.figures.heads): a head is read as a
module is, its logits add up to the layer's, its locking is tested against the modules' null, and the figures build
for a model of 2 layers as for one of 30."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from app.figures.heads import head_band_heatmap, head_locking_heatmap, head_spectrum
from core.analysis.fourier import BASES, band_energy_share, fourier_basis, frequency_magnitudes
from core.analysis.head_readings import head_bands, head_locking_grid
from core.analysis.heads import (
    HEAD_LOCKING_COLUMNS,
    HEAD_SPECTRA_COLUMNS,
    HeadSums,
    head_logits,
    read_heads,
)
from core.analysis.phase import locked
from core.errors import CoreError
from core.models.capture import capture
from core.models.loading import prompt_texts
from core.runs.head_tables import HEAD_TABLE_COLUMNS, has_heads, head_tables
from core.tasks import build_examples, number_space

MAX_OPERAND = 20  # p = 41: periods 2, 2.5, 5 and 10 are frequencies of the paper's basis
P = number_space("addition", MAX_OPERAND)
EXAMPLES = build_examples("addition", MAX_OPERAND, 0)[::5][:40]
OPTS = SimpleNamespace(batch_size=16, dataset_seed=0, progress=False)


def prompts(lm):
    return prompt_texts(lm, [e.prompt for e in EXAMPLES]), np.array([e.answer for e in EXAMPLES])


def test_the_heads_logits_add_up_to_the_attention_logits(loaded_model):
    """Reading is linear: sum over heads of W_U Head(l, h), plus W_U of W_O's bias, is W_U Attn(l) (GPT-2: a bias)."""
    lm = loaded_model("gpt2")
    texts, _ = prompts(lm)
    got = capture(lm, texts, streams=("attn",), heads=True)
    unembed = lm.unembed(P)
    weights = torch.stack([lm.parts.head_weights(layer) for layer in (1, 2)])
    bias = torch.stack([lm.parts.head_bias(layer) for layer in (1, 2)])
    heads = head_logits(unembed, torch.as_tensor(got["z"]), weights)  # (n, L, H, p)
    whole = unembed.read(torch.as_tensor(got["attn"]))
    assert heads.shape == (len(texts), 2, 4, P)
    assert torch.allclose(heads.sum(2) + unembed.read(bias), whole, atol=1e-6, rtol=1e-4)


def test_a_lone_heads_spectrum_is_its_layers_module_spectrum(loaded_model):
    """With one head and no bias (Llama), the head is the attention: its spectrum is module_spectra's, in both bases
    (the mean over examples of frequency_magnitudes of Unembed.read, as core.runs.measure computes it)."""
    lm = loaded_model("llama", heads=1)
    texts, answers = prompts(lm)
    spectra = read_heads(lm, texts, answers, P, batch_size=16, shuffles=50)["head_spectra"]
    attn = lm.unembed(P).read(torch.as_tensor(capture(lm, texts, streams=("attn",))["attn"])).double().numpy()
    for basis in BASES:
        module = frequency_magnitudes(fourier_basis(P, basis), attn).mean(0)  # (L, K)
        for layer in (1, 2):
            head = spectra[(spectra["basis"] == basis) & (spectra["layer"] == layer)].sort_values("k")
            assert (head["head"] == 0).all()
            assert np.allclose(head["magnitude"], module[layer - 1], rtol=1e-4, atol=1e-7), (basis, layer)


def synthetic_sums(n=400, seed=0):
    """HeadSums fed head logits of noise, but head 1 of layer 2, which writes cos(2 pi (x - y) / 10): a wave of
    period 10 peaked on the answer y."""
    rng = np.random.default_rng(seed)
    answers = rng.integers(0, P, n)
    x = np.arange(P)
    logits = rng.normal(size=(n, 2, 3, P))
    logits[:, 1, 1] += 2 * np.cos(2 * np.pi * (x[None, :] - answers[:, None]) / 10)
    sums = HeadSums(P, n, 2, 3)
    for start in range(0, n, 64):
        idx = np.arange(start, min(n, start + 64))
        sums.add(idx, logits[idx])
    return sums, answers


def test_a_head_built_to_lock_to_period_10_is_found_above_the_null_and_noise_is_not():
    sums, answers = synthetic_sums()
    table = sums.locking_table(answers, seed=0, shuffles=200)
    assert tuple(table.columns) == HEAD_LOCKING_COLUMNS
    assert set(table["period"]) == {2.0, 2.5, 5.0, 10.0} and (table["n"] == 400).all()
    lock = locked(table)
    built = (table["layer"] == 2) & (table["head"] == 1) & (table["period"] == 10.0)
    row = table[built].iloc[0]
    assert row["locking"] > 0.9 > row["null_95"] and abs(row["offset"]) < 0.5 and bool(lock[built].iloc[0])
    noise = (table["layer"] == 1) | (table["head"] != 1)
    assert (table.loc[noise, "locking"] < table.loc[noise, "null_95"]).all() and not lock[noise].any()
    grid = head_locking_grid(table, 10)
    assert len(grid) == 6 and grid["locks"].sum() == 1 and grid["above_null"].sum() == 1
    with pytest.raises(CoreError, match="no locking at period 3"):
        head_locking_grid(table, 3)


def test_the_band_split_of_each_head():
    sums, _ = synthetic_sums(n=64)
    spectra = sums.spectra_table()
    bands = head_bands(spectra, "paper", 10)
    assert list(bands.columns) == ["layer", "head", "low", "high"] and len(bands) == 6
    assert np.allclose(bands["low"] + bands["high"], 1)
    one = spectra[(spectra["basis"] == "paper") & (spectra["layer"] == 2) & (spectra["head"] == 1)].sort_values("k")
    assert bands.iloc[4]["low"] == pytest.approx(band_energy_share(one["magnitude"].to_numpy(), 10)[0])
    # on 41 numbers period 10 is k = 4, below tau = 10: the head built on it is mostly low; noise spreads over k = 1..20
    assert bands.iloc[4]["low"] > 0.7 > 0.6 > bands.iloc[0]["low"]
    with pytest.raises(CoreError, match="tau = 99 is out of range"):
        head_bands(spectra, "paper", 99)


def test_the_tables_of_a_run(loaded_model):
    lm = loaded_model("llama")
    texts, answers = prompts(lm)
    assert has_heads(lm, P) and not has_heads(loaded_model("gemma2"), P)
    tables = head_tables(lm, texts, answers, P, OPTS, log=lambda *_: None)
    assert HEAD_TABLE_COLUMNS == {"head_spectra": HEAD_SPECTRA_COLUMNS, "head_locking": HEAD_LOCKING_COLUMNS}
    assert set(tables) == set(HEAD_TABLE_COLUMNS)
    for name, frame in tables.items():
        assert tuple(frame.columns) == HEAD_TABLE_COLUMNS[name]
    spectra, locking = tables["head_spectra"], tables["head_locking"]
    K = (P - 1) // 2
    assert len(spectra) == len(BASES) * 2 * 4 * K and len(locking) == 2 * 4 * 4
    assert sorted(spectra["layer"].unique()) == [1, 2] and sorted(locking["head"].unique()) == [0, 1, 2, 3]
    assert (locking["n"] == len(texts)).all() and locking["null_95"].nunique() == 4  # one threshold a period


def test_a_model_without_heads_or_mismatched_answers_is_refused(loaded_model):
    gemma = loaded_model("gemma2")
    texts, answers = prompts(gemma)
    with pytest.raises(CoreError, match="reading attention head by head is not possible.*post-norm"):
        read_heads(gemma, texts, answers, P)
    lm = loaded_model("llama")
    with pytest.raises(CoreError, match="40 prompts but 39 answers"):
        read_heads(lm, prompts(lm)[0], answers[:-1], P)


def fake_tables(n_layers: int, n_heads: int, p: int = 521) -> tuple[pd.DataFrame, pd.DataFrame]:
    """head_spectra (paper basis) and head_locking frames of the tables' shape, values drawn at random."""
    rng = np.random.default_rng(n_layers)
    basis = fourier_basis(p, "paper")
    ks = basis.frequencies
    L, H, K = n_layers, n_heads, len(ks)
    spectra = pd.DataFrame({"basis": "paper", "layer": np.repeat(np.arange(1, L + 1), H * K),
                            "head": np.tile(np.repeat(np.arange(H), K), L), "k": np.tile(ks, L * H),
                            "period": np.tile(basis.period(ks), L * H), "magnitude": rng.random(L * H * K)})
    rows = [{"layer": layer, "head": h, "period": t, "k": int(round((p - 1) / t)), "locking": rng.random(),
             "offset": rng.normal(), "constant_phase": 0.1, "energy_share": 0.01, "null_95": 0.3, "n": 3419,
             "shuffles": 2000} for layer in range(1, L + 1) for h in range(H) for t in (2.0, 5.0, 10.0)]
    return spectra, pd.DataFrame(rows)[list(HEAD_LOCKING_COLUMNS)]


@pytest.mark.parametrize("n_layers", [2, 30])
def test_the_figures_build_for_2_and_30_layers(n_layers):
    spectra, locking = fake_tables(n_layers, 9)
    module = spectra[spectra["head"] == 0].drop(columns="head").assign(module="attn")
    figures = [head_band_heatmap(head_bands(spectra, "paper", 50), 50, "a run"),
               head_locking_heatmap(head_locking_grid(locking, 10), 10, "a run"),
               head_spectrum(spectra, "paper", n_layers, 8, 50, run_label="a run", module_spectra=module)]
    for chart, data, caption in figures:
        spec = chart.to_dict()
        assert spec["title"]["text"] and caption and "\n" not in caption and len(data)
    heat = figures[0][0].to_dict()
    assert heat["encoding"]["y"]["title"] == "layer" and heat["encoding"]["x"]["title"].startswith("head")
    assert len(heat["encoding"]["y"]["axis"]["values"]) == (2 if n_layers == 2 else 7)
    with pytest.raises(CoreError, match="no paper spectrum of head 9"):
        head_spectrum(spectra, "paper", 1, 9, 50)
