"""The neuron-level test end to end on tiny models (core.runs.neuron_run): the answer-position ablation against its
definition (every position recomputed, the chosen neurons set to their means at the last token), the tables' shape
and the sentence computed from them, and `python -m core neurons` writing them into a run that `verify` accepts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.analysis.neurons import NEURON_FIT_COLUMNS
from core.claims.neurons import neuron_summary
from core.cli import main
from core.models.capture import forward_batch, prepare_batches
from core.models.loading import prompt_texts
from core.models.sublayers import mlp_neurons_module
from core.runs.cache import list_runs, verify_run
from core.runs.neuron_run import (
    NEURON_COLUMNS,
    ablated_predictions,
    capture_neurons,
    default_layers,
    neuron_tables,
)
from core.runs.reader import RunReader
from core.tasks import build_examples, select_split

P = 101


def questions(loaded, n=48):
    examples = select_split(build_examples("addition", 50), "test")[:n]
    texts = prompt_texts(loaded, [e.prompt for e in examples])
    return texts, np.array([e.answer for e in examples]), np.array([e.a for e in examples]), np.array([e.b for e in
                                                                                                      examples])


def full_pass_predictions(loaded, texts, chosen, means):
    """The definition: every position recomputed, the chosen neurons set to their means at the last token only."""
    ids = torch.as_tensor(loaded.numbers.ids_for(P))
    handles = []
    for layer, idx in chosen.items():
        idx_t = torch.as_tensor(np.asarray(idx))
        vals = torch.as_tensor(means[layer][np.asarray(idx)], dtype=torch.float32)

        def pre_hook(module, args, idx_t=idx_t, vals=vals):
            x = args[0].clone()
            x[:, -1, idx_t] = vals
            return (x, *args[1:])

        handles.append(mlp_neurons_module(loaded.parts, layer).register_forward_pre_hook(pre_hook))
    preds = np.zeros(len(texts), dtype=np.int64)
    try:
        for batch in prepare_batches(loaded.tokenizer, texts, 8):
            preds[batch.indices] = forward_batch(loaded, batch)[:, ids].argmax(-1).numpy()
    finally:
        for h in handles:
            h.remove()
    return preds


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_answer_position_ablation_matches_the_full_pass(loaded_model, arch):
    loaded = loaded_model(arch)
    texts, answers, _, _ = questions(loaded)
    acts = capture_neurons(loaded, texts, (1, 2))
    means = {layer: a.astype(np.float64).mean(axis=0) for layer, a in acts.items()}
    rng = np.random.default_rng(0)
    width = acts[1].shape[1]
    sets = [{}, {1: rng.choice(width, 40, replace=False), 2: rng.choice(width, 40, replace=False)},
            {2: np.arange(width)}]
    fast = ablated_predictions(loaded, texts, answers, P, sets, means, batch_size=8)
    for got, chosen in zip(fast, sets):
        want = full_pass_predictions(loaded, texts, chosen, means)
        assert (got != want).sum() <= 1  # float32 kernels may round a near-tie differently
    assert not np.array_equal(fast[0], fast[2])  # every neuron of the last MLP at its mean changes answers


def test_neuron_tables_hold_every_neuron_and_every_set(loaded_model):
    loaded = loaded_model("llama")
    texts, answers, a, b = questions(loaded)
    tables = neuron_tables(loaded, texts, answers, a, b, P, layers=None, ks=(3, 10), n_ablate=20, draws=2,
                           batch_size=8, log=lambda *_: None)
    fits, table = tables["neuron_fits"], tables["neurons"]
    width = capture_neurons(loaded, texts[:2], (2,))[2].shape[1]
    assert list(fits.columns) == list(NEURON_FIT_COLUMNS) and len(fits) == width
    assert set(fits["layer"]) == set(default_layers(loaded.n_layers)) == {2}
    assert list(table.columns) == list(NEURON_COLUMNS)
    assert table["selection"].tolist() == ["none"] + ["helix", "heuristic"] + ["random"] * 4 + ["helix", "heuristic"] \
        + ["random"] * 4
    assert table["matches"].tolist() == [""] * 3 + ["helix"] * 2 + ["heuristic"] * 2 + [""] * 2 + ["helix"] * 2 \
        + ["heuristic"] * 2
    for k in (3, 10):  # each random set lies in its top set's layers, as many in each (one layer here: its size)
        rows = table[(table["k"] == k) & (table["selection"] == "random")]
        assert sorted(rows["draw"]) == [0, 0, 1, 1]
    assert (table["n"] == 20).all()
    top = table[(table["selection"] == "helix") & (table["k"] == 3)].iloc[0]
    assert top["helix_r2_mean"] == pytest.approx(fits["helix_r2"].nlargest(3).mean())
    assert table.loc[table["selection"] == "none", "last_digit_shift"].iloc[0] == 0.0


def test_neurons_command_writes_the_run_and_its_sentence(model_dir, tmp_path):
    cache = tmp_path / "cache"
    folder = model_dir("llama")
    assert main(["precompute", "--model", str(folder), "--cache-dir", str(cache), "--max-operand", "50", "--limit",
                 "60", "--stages", "measure", "--no-progress"]) == 0
    name = list_runs(cache)[0].name
    assert main(["neurons", name, "--cache-dir", str(cache), "--ks", "4,12", "--draws", "2", "--ablate", "40",
                 "--batch-size", "16"]) == 0
    assert verify_run(cache / name) == []
    reader = RunReader(str(cache), name)
    words = neuron_summary(reader)
    fits = reader.table("neuron_fits")
    assert len(fits) == fits["neuron"].nunique() and set(fits["layer"]) == {2}
    assert f"Of the {len(fits):,} neurons of MLPs 2-2" in words and "for 4 random neurons in its layers" in words
    assert "over 40 test questions" in words
    assert "agree" not in words.lower()  # the paper claims nothing here: no verdict word
    assert main(["neurons", name, "--cache-dir", str(cache), "--layers", "7-9"]) == 2
    assert main(["neurons", name, "--cache-dir", str(cache), "--ks", "fifty"]) == 2
