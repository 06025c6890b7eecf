"""Phase locking (core.analysis.phase) against its definition, and against an independent computation from the
Fourier-frozen demo model's weights (plain transformers, explicit sines and cosines)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

from core.analysis.fourier import fourier_basis, top_components
from core.analysis.phase import (
    PhaseAccumulator,
    locked,
    module_order,
    period_frequencies,
    wave_coefficients,
    wave_peaks,
)
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs, read_table
from core.runs.phase_run import PhaseStage, phase_tables_from_sample

P = 521
X = np.arange(P)
CACHE = PROJECT_ROOT / "cache"


def wave(period, peak):
    """cos wave over the number line peaking at `peak` (per example: peak has shape (n, 1))."""
    return np.cos(2 * np.pi * (X[None, :] - peak) / period)


def test_periods_are_exact_frequencies_of_the_paper_basis():
    assert period_frequencies(521) == {2.0: 260, 2.5: 208, 5.0: 104, 10.0: 52, 104.0: 5, 520.0: 1}
    assert period_frequencies(101) == {
        2.0: 50,
        2.5: 40,
        5.0: 20,
        10.0: 10,
    }  # 104 and 520 are not periods on 101 numbers


def test_a_wave_that_follows_the_answer_locks_a_constant_one_does_not():
    rng = np.random.default_rng(1)
    n = 600
    y = rng.integers(0, P, n)
    logits = np.stack(
        [
            3 * wave(10, y[:, None] + 2),  # follows the answer mod 10, peak 2 above it
            3 * wave(10, np.full((n, 1), 7)),  # the same wave for every question: a bias
            rng.normal(size=(n, P)),  # noise
            3 * wave(10, y[:, None] + 5),  # follows the answer, trough on it: pushes its residue down
        ],
        axis=1,
    )
    acc = PhaseAccumulator(P, n, [("mlp", 1), ("attn", 1), ("attn", 2), ("mlp", 2)])
    acc.add(np.arange(n), logits)
    t = acc.table(y, seed=0, shuffles=300).set_index(["kind", "layer", "period"])
    follow, bias, noise = t.loc[("mlp", 1, 10.0)], t.loc[("attn", 1, 10.0)], t.loc[("attn", 2, 10.0)]
    assert follow["locking"] == pytest.approx(1.0, abs=1e-4) and follow["offset"] == pytest.approx(2.0, abs=1e-3)
    assert follow["energy_share"] == pytest.approx(
        1.0, abs=5e-3
    )  # the paper basis leaks a little (x = 0 and 520 coincide)
    assert bias["constant_phase"] == pytest.approx(1.0, abs=1e-4) and bias["locking"] < bias["null_95"]
    assert noise["locking"] < noise["null_95"] < 0.2  # chance is about 1/sqrt(n)
    against = t.loc[("mlp", 2, 10.0)]
    assert against["locking"] == pytest.approx(1.0, abs=1e-4) and abs(against["offset"]) == pytest.approx(5.0, abs=1e-3)
    flags = locked(t.reset_index()).to_numpy().reshape(4, -1)
    # the old rule (R, null, constant phase, 5% energy) locked the trough too: the sign check is what refuses it
    assert flags[0, 3] and not flags[1].any() and not flags[2].any() and not flags[3, 3]


def test_a_constant_shift_of_the_logits_changes_nothing():
    """Softmax ignores a constant; so must the phases (the paper basis is not orthogonal to a constant on 521
    points)."""
    rng = np.random.default_rng(2)
    n = 200
    y = rng.integers(0, P, n)
    logits = (wave(2, y[:, None]) + 0.5 * rng.normal(size=(n, P)))[:, None, :]
    tables = []
    for shift in (0.0, 250.0):
        acc = PhaseAccumulator(P, n, [("mlp", 1)])
        acc.add(np.arange(n), logits + shift)
        tables.append(acc.table(y, shuffles=100))
    pd.testing.assert_frame_equal(tables[0], tables[1], atol=1e-6)


def test_one_example_has_no_locking_and_nothing_locks():
    acc = PhaseAccumulator(P, 1, [("mlp", 1)])
    acc.add([0], wave(10, np.array([[7]]))[:, None, :])
    t = acc.table(np.array([7]))
    assert t["locking"].isna().all() and not locked(t).any()


def test_a_weak_or_constant_wave_does_not_lock_even_beyond_chance():
    """With many examples a tiny R passes the shuffle null; a lock also needs R >= 0.3 and a phase that moves."""
    t = pd.DataFrame(
        {
            "locking": [0.07, 0.6, 0.6],
            "null_95": [0.05, 0.05, 0.05],
            "constant_phase": [0.2, 0.2, 0.95],
            "offset": [0.0, 0.0, 0.0],
            "period": [10.0, 10.0, 10.0],
        }
    )
    assert list(locked(t)) == [False, True, False]


def test_a_small_share_of_energy_does_not_stop_a_real_lock():
    """The audit: a 100%-accurate model's final logits carry 0.7-2.2% of their energy at each short period; the
    old 5% energy floor rejected such carriers. Locking no longer reads the energy share."""
    t = pd.DataFrame({"locking": [0.9], "null_95": [0.05], "constant_phase": [0.1], "offset": [0.2], "period": [5.0],
                      "energy_share": [0.01]})
    assert locked(t).all()


def test_parity_uses_the_cosine_sign_only():
    y = np.arange(0, 40)
    coef = wave_coefficients(P, wave(2, y[:, None] + 1), [260])  # peaks at odd offsets from the answer
    assert np.all(coef[:, 0, 0] == 0.0)
    acc = PhaseAccumulator(P, len(y), [("mlp", 1)], periods=(2.0,))
    acc.add(np.arange(len(y)), wave(2, y[:, None] + 1)[:, None, :])
    row = acc.table(y, shuffles=100).iloc[0]
    assert row["locking"] == pytest.approx(1.0, abs=1e-4) and abs(row["offset"]) == pytest.approx(1.0, abs=1e-3)


def test_wave_peaks_is_the_argmax_of_the_top_components_sum():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(12, P)) + 4 * wave(10, rng.integers(0, P, (12, 1)))
    answers = rng.integers(0, P, 12)
    got = wave_peaks(P, logits, answers, [str(i) for i in range(12)], tops=(5,))
    basis = fourier_basis(P, "paper")
    for i in range(12):
        total = sum(w.values for w in top_components(basis, logits[i], 5))
        assert got["peak"].iloc[i] == int(np.argmax(total))
    assert (got["at_answer"] == (got["peak"] == answers)).all()


def test_the_table_from_a_cached_sample_is_the_table_from_the_same_logits():
    rng = np.random.default_rng(4)
    L, n = 2, 5
    modules = module_order(L)
    logits = rng.normal(size=(n, len(modules), P)).astype(np.float32)
    answers = rng.integers(0, P, n)
    ids = [f"e{i}" for i in range(n)]
    stage = PhaseStage(P, n, L)
    stage.add(np.arange(n), logits[:, 2 * L : 3 * L + 1], logits[:, :L], logits[:, L : 2 * L], logits[:, -1])
    direct = stage.tables(answers, ids, seed=0, shuffles=50)
    rows = []
    for i, eid in enumerate(ids):
        for m, (kind, layer) in enumerate(modules):
            rows.append(
                pd.DataFrame({"example_id": eid, "module": kind, "layer": layer, "number": X, "logit": logits[i, m]})
            )
    examples = pd.DataFrame({"id": ids + ["not-sampled"], "answer": list(answers) + [7]})
    from_sample = phase_tables_from_sample(pd.concat(rows, ignore_index=True), examples, P, L, seed=0, shuffles=50)
    for t in ("phase_locking", "wave_peaks"):
        pd.testing.assert_frame_equal(direct[t], from_sample[t])


FOURIER = [
    r
    for r in list_runs(CACHE)
    if r.ok and (r.manifest.get("model") or {}).get("source_as_given") == "models/fourier-frozen"
]


@pytest.mark.slow
@pytest.mark.skipif(
    not FOURIER or not (PROJECT_ROOT / "models/fourier-frozen/config.json").exists(), reason="no Fourier-frozen run"
)
def test_fourier_frozen_locking_equals_an_independent_computation_from_its_weights():
    run = FOURIER[0]
    table = read_table(CACHE, run.name, "phase_locking")
    examples = read_table(CACHE, run.name, "examples")
    folder = PROJECT_ROOT / "models/fourier-frozen"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    number_ids = [tok.token_to_id(str(n)) for n in range(P)]
    W_U = model.lm_head.weight.detach()[number_ids].double()  # (p, D)
    outs = {}
    hooks = [
        blk.attn.register_forward_hook(lambda m, a, o, l=l: outs.__setitem__(("attn", l), o[0][:, -1]))
        for l, blk in enumerate(model.transformer.h, start=1)
    ]
    hooks += [
        blk.mlp.register_forward_hook(lambda m, a, o, l=l: outs.__setitem__(("mlp", l), o[:, -1]))
        for l, blk in enumerate(model.transformer.h, start=1)
    ]
    ids = [tok.encode(t).ids for t in examples["prompt"]]
    by_len: dict[int, list[int]] = {}
    for i, seq in enumerate(ids):
        by_len.setdefault(len(seq), []).append(i)
    L = len(model.transformer.h)
    logits = {
        key: np.zeros((len(ids), P))
        for key in [("attn", l) for l in range(1, L + 1)] + [("mlp", l) for l in range(1, L + 1)]
    }
    logits[("final", L)] = np.zeros((len(ids), P))
    with torch.no_grad():
        for rows in by_len.values():  # prompts of one length need no padding
            out = model(torch.tensor([ids[i] for i in rows]))
            for key, x in outs.items():
                logits[key][rows] = (x.double() @ W_U.T).numpy()
            logits[("final", L)][rows] = out.logits[:, -1, number_ids].double().numpy()
    for h in hooks:
        h.remove()
    y = examples["answer"].to_numpy(float)
    got = table.set_index(["kind", "layer", "period"])
    for (kind, layer), values in logits.items():
        for period in (2.0, 2.5, 5.0, 10.0, 104.0, 520.0):
            k = 520 / period
            s = np.sqrt(2 / 520) * values @ np.sin(2 * np.pi * k * X / 520)
            c = np.sqrt(2 / 520) * values @ np.cos(2 * np.pi * k * X / 520)
            if period == 2.0:
                s = np.zeros_like(s)
            R = abs(np.mean(np.exp(1j * (np.arctan2(s, c) - 2 * np.pi * k * y / 520))))
            assert got.loc[(kind, layer, period), "locking"] == pytest.approx(R, abs=2e-3), (kind, layer, period)
