"""The `module_bands` constraint (core.training.module_bands): a trained model's module outputs carry nothing of the
band each module is kept out of, read the way a run reads them (the project's own filters on W_U from the files),
and the recipe refuses the constraint where it could not hold."""

import numpy as np
import pytest
import torch

from core.analysis.ablations import Condition
from core.analysis.evaluation import evaluate_conditions
from core.analysis.filters import high_pass, low_pass, projection_filter, removed_energy_share
from core.analysis.fourier import fourier_basis
from core.errors import CoreError
from core.models.loading import load_model, prompt_texts
from core.models.names import ATTN, MLP
from core.models.stored_weights import FILTER_DTYPE
from core.runs.ablation_grid import module_second_moments
from core.tasks import build_examples, number_space, select_split
from core.training.module_bands import PairNoise, faint_directions, pair_vectors
from core.training.number_rows import fourier_embedding
from core.training.recipe import ModuleBands, Recipe
from core.training.train import train

TAU = 8  # the cutoff of the tiny task (frequencies 1..20 on 41 numbers)


def tiny_recipe(tmp_path, name, bands=None, **kw):
    spec = dict(name=name, label=name, out=str(tmp_path / name), width=48, heads=4, max_operand=20, epochs=3,
                batch_size=32, lr=3e-3, warmup_steps=2, eval_train_subset=50, precision="float32",
                save_dtype="float32",
                # frozen rows with waves in both bands: k = 1..5 below the cutoff, 10, 15, 20 above it
                freeze={"kind": "fourier", "frequencies": [1, 2, 3, 4, 5, 10, 15, 20]}, module_bands=bands)
    spec.update(kw)
    r = Recipe(**spec)
    r.check()
    return r


def band_shares(folder, p: int) -> dict:
    """{(module, band): the share of its answer-position output energy the band's filter removes}, over the test
    split, every filter built as a run builds it (W_U read from the files, the paper's basis)."""
    loaded = load_model(str(folder))
    loaded.select_numbers(p, "the test")
    W_U = loaded.unembedding(p)
    basis = fourier_basis(p, "paper")
    texts = prompt_texts(loaded, [e.prompt for e in select_split(build_examples("addition", 20), "test")])
    moments = module_second_moments(loaded, texts, 32, progress=False)
    filters = {"low": high_pass(W_U, basis, TAU), "high": low_pass(W_U, basis, TAU)}  # each removes its band
    return {(m, band): removed_energy_share(flt, moments[m]) for m in (ATTN, MLP) for band, flt in filters.items()}


def test_the_trained_module_outputs_have_no_energy_in_the_removed_band(tmp_path):
    p = number_space("addition", 20)
    bands = {"attn": "high", "mlp": "low", "tau": TAU}
    kept = train(tiny_recipe(tmp_path, "kept", bands), log=lambda *_: None)
    free = train(tiny_recipe(tmp_path, "free"), log=lambda *_: None)
    shares, free_shares = band_shares(kept.out, p), band_shares(free.out, p)
    # the band each module is kept out of: no energy (float32 rounding of the projected maps only)
    assert shares[(ATTN, "low")] < 1e-9 and shares[(MLP, "high")] < 1e-9
    # the band it keeps carries its output (the filter is not a no-op), and the same model trained free has
    # energy in both bands of both modules: the check could fail
    assert shares[(ATTN, "high")] > 0.05 and shares[(MLP, "low")] > 0.05
    assert min(free_shares.values()) > 1e-3

    # the ablation that removes the band from the trained model changes no answer
    loaded = load_model(str(kept.out))
    loaded.select_numbers(p, "the test")
    W_U = loaded.unembedding(p)
    basis = fourier_basis(p, "paper")
    test = select_split(build_examples("addition", 20), "test")
    texts = prompt_texts(loaded, [e.prompt for e in test])
    answers = np.array([e.answer for e in test])
    none, attn_low, mlp_high = evaluate_conditions(
        loaded, texts, answers, p,
        [Condition(None), Condition(high_pass(W_U, basis, TAU), ATTN), Condition(low_pass(W_U, basis, TAU), MLP)],
        "last", 32, progress=False)
    assert np.array_equal(none.predictions, attn_low.predictions)
    assert np.array_equal(none.predictions, mlp_high.predictions)


def test_the_bands_removed_follow_the_bands_kept():
    bands = ModuleBands.parse({"attn": "high", "mlp": "low"})
    assert (bands.removed("attn"), bands.removed("mlp"), bands.tau) == ("low", "high", 50)
    assert ModuleBands.parse({}).removed("attn") is None


@pytest.mark.parametrize("change, words", [
    ({"tied": False}, "tied number rows"),
    ({"freeze": None}, "tied number rows"),
    ({"module_bands": {"attn": "middle"}}, "module_bands.attn"),
    ({"module_bands": {"attn": "high", "tau": 1}}, "module_bands.tau"),
    ({"module_bands": {"attn": "high", "cutoff": 50}}, "unknown keys"),
])
def test_module_bands_is_refused_where_it_cannot_hold(tmp_path, change, words):
    spec = {"module_bands": {"attn": "high", "mlp": "low", "tau": TAU}, **change}
    with pytest.raises(CoreError, match=words):
        tiny_recipe(tmp_path, "bad", **{"bands": spec.pop("module_bands")}, **spec)


PAIR = {"module": "attn", "layers": [1, 2], "k": 3, "size": 4.0}  # k = 3: in the low band attention is kept out of


def test_a_cancelling_pair_sits_whole_in_the_band_its_module_is_kept_out_of(tmp_path):
    """The pair's vectors are +v and -v on the two attention biases, v of the pair's size along what W_U reads at k
    only; the filter that removes attention's low band removes both whole (and nothing else of attention's), the
    model keeps its band elsewhere, and a plain final norm stays plain."""
    p = number_space("addition", 20)
    recipe = tiny_recipe(tmp_path, "pair", {"attn": "high", "mlp": "low", "tau": TAU, "pairs": [PAIR],
                                            "plain_final_norm": True}, epochs=1)
    out = train(recipe, log=lambda *_: None).out
    loaded = load_model(str(out))
    final = loaded.model.transformer.ln_f  # a plain final norm: one gain for every direction, no bias
    assert torch.equal(final.weight, torch.full_like(final.weight, float(final.weight[0]))) and not final.bias.any()
    loaded.select_numbers(p, "the test")
    W_U = loaded.unembedding(p)
    basis = fourier_basis(p, "paper")
    biases = [loaded.model.transformer.h[i].attn.c_proj.bias.detach().double().numpy()[None] for i in (0, 1)]
    keep_high = high_pass(W_U, basis, TAU)
    first, second = (b[0] - keep_high.apply(b)[0] for b in biases)  # what the filter of attention's low band removes
    assert np.linalg.norm(first + second) < 1e-4  # +v and -v: they cancel
    assert abs(np.linalg.norm(first) - 4.0) < 1e-3  # v of the pair's size ...
    assert np.linalg.norm(projection_filter(W_U, basis, [3]).apply(first[None])) < 1e-4  # ... all at k = 3
    shares = band_shares(out, p)
    assert shares[(ATTN, "low")] > 0.01  # the pair is energy W_U reads in attention's other band ...
    assert shares[(ATTN, "high")] > 0.01 and shares[(MLP, "high")] < 1e-9  # ... and the bands hold otherwise


def test_pair_noise_takes_a_part_of_the_pair_at_the_answer_position_and_gives_it_back(tmp_path):
    """While training, the first layer's attention output at the last position loses r and the second's gains the
    same r (its output before and after the noise's hook); other positions, and the model in evaluation, are
    untouched; r is none, all of v, or v's projection on a random subspace of what W_U reads, never longer than v."""
    recipe = tiny_recipe(tmp_path, "noise", {"attn": "high", "mlp": "low", "tau": TAU, "pairs": [PAIR]}, epochs=1)
    out = train(recipe, log=lambda *_: None).out
    loaded = load_model(str(out))
    model = loaded.model
    ids = torch.randint(0, 40, (64, 6))
    seen = {}

    def keep(name):
        def hook(module, args, output):
            seen[name] = (output[0] if isinstance(output, tuple) else output).detach().clone()
        return hook

    bands = ModuleBands.parse({"attn": "high", "mlp": "low", "tau": TAU, "pairs": [PAIR]})
    own = model.transformer.h[1].attn.register_forward_hook(keep("second, its own"))  # before the noise's hook
    noise = PairNoise(model, loaded.numbers.ids_for(41), bands, "float32", seed=0)
    handles = [model.transformer.h[i].attn.register_forward_hook(keep(i)) for i in (0, 1)] + [own]  # after it
    model.eval()
    with torch.no_grad():
        model(input_ids=ids)  # evaluation: no noise
        clean = dict(seen)
        model.train()
        model(input_ids=ids)
    noise.close()
    for h in handles:
        h.remove()
    taken = clean[0][:, -1] - seen[0][:, -1]
    assert torch.allclose(seen[0][:, :-1], clean[0][:, :-1])
    W_U = np.asarray(loaded.unembedding(41), dtype=np.float32)
    v = torch.as_tensor(pair_vectors(W_U, bands, FILTER_DTYPE)[0]).float()
    norms = taken.norm(dim=1)
    assert (norms < 1e-5).any() and ((taken - v).norm(dim=1) < 1e-4).any()  # none, and all of v
    middle = (norms > 1e-5) & ((taken - v).norm(dim=1) > 1e-4)
    assert middle.any() and (norms <= v.norm() + 1e-4).all()  # a projection: never longer than v
    # what the first layer lost the second is given back, at the last position only
    given = seen[1] - seen["second, its own"]
    assert torch.allclose(given[:, -1], taken, atol=1e-4) and not given[:, :-1].any()


@pytest.mark.parametrize("pair, words", [
    ({**PAIR, "k": 10}, "must lie in the band attn does not keep"),
    ({**PAIR, "layers": [2, 3]}, "needs 3 layers"),
    ({**PAIR, "layers": [2, 1]}, "two layers counted from 1"),
    ({**PAIR, "k": 6}, "add 6 to freeze.frequencies"),
    ({**PAIR, "size": 0}, "positive number"),
    ({**PAIR, "module": "heads"}, "'attn' or 'mlp'"),
    ({**PAIR, "colour": "red"}, "unknown keys"),
])
def test_a_cancelling_pair_is_refused_where_it_would_be_no_control(tmp_path, pair, words):
    with pytest.raises(CoreError, match=words):
        tiny_recipe(tmp_path, "bad", {"attn": "high", "mlp": "low", "tau": TAU, "pairs": [pair]})


FAINT = [12, 17]  # frequencies W_U reads faintly, one in each band's reach: both above the cutoff here


def faint_recipe(tmp_path, name, faint=FAINT, scale=0.05, blind=None, **bands):
    freeze = {"kind": "fourier", "frequencies": [1, 2, 3, 4, 5, 10, 15, 20], "faint_frequencies": faint,
              "faint_scale": scale, "norm_blind_frequency": blind}
    return tiny_recipe(tmp_path, name, {"attn": "high", "mlp": "low", "tau": TAU, **bands}, freeze=freeze, epochs=1)


OFFSET = {"module": "mlp", "k": 17, "size": 5.0}  # a faint frequency in the band the MLPs are kept out of


def test_faint_frequencies_widen_what_w_u_reads_and_no_module_writes_them_nor_a_cleared_pair_frequency(tmp_path):
    """W_U reads the faint frequencies at their weight, in directions of their own (sin and cos of each), which no
    module's output map writes though attention keeps their band, but for the offset: on the last MLP's bias only,
    whole along its frequency and there along (1, ..., 1), which every layer norm removes (the frequency is
    norm-blind); with the pair's frequency cleared, no MLP writes k = 3 though the MLPs keep the low band, and the
    pair is still there."""
    p = number_space("addition", 20)
    recipe = faint_recipe(tmp_path, "faint", blind=17, pairs=[PAIR], clear_pair_frequencies=True, offsets=[OFFSET])
    out = train(recipe, log=lambda *_: None).out
    loaded = load_model(str(out))
    loaded.select_numbers(p, "the test")
    W_U = loaded.unembedding(p)
    basis = fourier_basis(p, "paper")
    J = faint_directions(W_U, basis, FAINT)
    # the sine of each, and the difference of the two cosines: the paper's basis spans p - 1 numbers, so every
    # cosine also reads the last number's row, and only the cosines' difference is read by no other frequency
    assert J.shape[1] == 3
    W = np.asarray(W_U, dtype=float)
    main = projection_filter(W_U, basis, [10, 15, 20]).q  # full-weight frequencies of the same band
    assert 0.03 < np.linalg.norm(W @ J, 2) / np.linalg.norm(W @ main, 2) < 0.07  # about faint_scale = 0.05
    others = projection_filter(W_U, basis, [k for k in basis.frequencies if k not in FAINT]).q
    assert np.abs(others.T @ J).max() < 1e-4  # directions no other frequency reads
    rank = projection_filter(W_U, basis, basis.frequencies).rank
    assert rank == projection_filter(W_U, basis, [k for k in basis.frequencies if k not in FAINT]).rank + 3
    blocks = loaded.model.transformer.h
    maps = {(m, i): getattr(blocks[i], m).c_proj.weight.detach().double().numpy() for m in ("attn", "mlp")
            for i in (0, 1)}
    for key, w in maps.items():
        assert np.abs(w @ J).max() < 1e-5, key  # nobody writes the faint directions ...
    free = train(tiny_recipe(tmp_path, "free-faint", freeze=recipe.freeze, epochs=1), log=lambda *_: None).out
    free_attn = load_model(str(free)).model.transformer.h[0].attn.c_proj.weight.detach().double().numpy()
    assert np.abs(free_attn @ J).max() > 1e-3  # ... which a model trained free does: the check could fail
    k3 = projection_filter(W_U, basis, [3]).q
    assert all(np.abs(maps[("mlp", i)] @ k3).max() < 1e-5 for i in (0, 1))  # the pair's frequency, kept clear
    bias = blocks[0].attn.c_proj.bias.detach().double().numpy()
    assert abs(np.linalg.norm(k3.T @ bias) - 4.0) < 1e-3  # and the pair is there, whole
    mlp_bias = [blocks[i].mlp.c_proj.bias.detach().double().numpy() for i in (0, 1)]
    assert np.abs(J.T @ mlp_bias[0]).max() < 1e-5  # the offset: not on MLP 1 ...
    k17 = faint_directions(W_U, basis, [17])
    assert abs(np.linalg.norm(k17.T @ mlp_bias[1]) - 5.0) < 1e-3  # ... on MLP 2, whole at k = 17
    assert abs(np.linalg.norm(J.T @ mlp_bias[1]) - 5.0) < 1e-3  # and nothing else in the faint directions
    ones = np.full(J.shape[0], 1 / np.sqrt(J.shape[0]))
    assert abs(ones @ mlp_bias[1] - 5.0) < 1e-3  # along (1, ..., 1): the final norm's mean subtraction removes it
    assert np.linalg.norm(k17.T @ ones) > 0.999  # W_U reads that direction at k = 17


@pytest.mark.parametrize("change, words", [
    ({"offsets": [{**OFFSET, "k": 12}]}, "set freeze.norm_blind_frequency to 12"),
    ({"offsets": [{**OFFSET, "module": "attn"}]}, "must lie in the band attn does not keep"),
    ({"offsets": [{**OFFSET, "size": 0}]}, "positive number"),
    ({"faint": [10, 12]}, "share \\[10\\]"),
    ({"faint": [0]}, "faint_frequencies must be a list"),
    ({"blind": 5}, "norm_blind_frequency must be one of"),
    ({"blind": None, "offsets": [OFFSET]}, "set freeze.norm_blind_frequency to 17"),
    ({"scale": 0}, "faint_scale"),
    ({"scale": 2}, "faint_scale"),
])
def test_faint_frequencies_are_refused_where_they_would_not_be_faint(tmp_path, change, words):
    with pytest.raises(CoreError, match=words):
        faint_recipe(tmp_path, "bad", **change)


def test_a_norm_blind_direction_needs_a_sine_that_does_not_vanish():
    rows = fourier_embedding(41, 48, [40 / 12, 40 / 17], blind_column=3)  # the sine of k = 17: along (1, ..., 1)
    along_ones = rows @ np.full(48, 1 / np.sqrt(48))
    sine = np.sin(2 * np.pi * 17 * np.arange(41) / 40)
    assert np.corrcoef(along_ones, sine)[0, 1] > 0.9999  # what the layer norms remove of each row: that sine alone
    with pytest.raises(CoreError, match="not period 2"):
        fourier_embedding(41, 48, [40 / 12, 2.0], blind_column=3)  # period 2: its sine is 0 at every integer
    with pytest.raises(CoreError, match="column 9 of 4"):
        fourier_embedding(41, 48, [40 / 12, 40 / 17], blind_column=9)
