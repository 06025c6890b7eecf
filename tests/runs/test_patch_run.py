"""The patching stage (core.runs.patch_run) on a tiny model: every reading (denoise and noise, contrast 1 and 10) and
the groups in its table, an older table's rows kept only where they were read over the same pairs, and the trained
layers a recipe names (core.runs.patch_groups)."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from core.analysis.pairs import pair_examples
from core.analysis.patch_table import DENOISE, NOISE, with_defaults
from core.models.random_models import save_random_model
from core.runs.ablate import open_target
from core.runs.live_sample import LIVE_SAMPLE
from core.runs.patch_groups import trained_layers
from core.runs.patch_run import (
    EXTRA_PAIRS,
    HEAD_PAIRS,
    pair_limits,
    pair_sample,
    patch_note,
    patch_run,
    reads_enough,
)
from core.runs.position_patch_run import layout_pairs, position_note, position_patch_run, reads_every_pair
from core.tasks import RUNNING_EXAMPLE, build_examples, example_id


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = save_random_model(tmp_path_factory.mktemp("patchrun"), "llama", n_layers=2)
    target = open_target(str(folder), limit=30, threads=1, log=lambda *_: None)
    by_id = {e.id: e for e in build_examples("addition", 260, 0)}
    return target, [by_id[i] for i in target.ids]


def test_the_table_holds_every_reading_and_the_groups_and_keeps_only_rows_read_over_the_same_pairs(tiny):
    target, examples = tiny
    table = patch_run(target.loaded, examples, target.texts, target.p, 260, 32, False, log=lambda *_: None)
    readings = set(zip(table["direction"], table["contrast"]))
    assert readings == {(DENOISE, 1), (NOISE, 1), (DENOISE, 10), (NOISE, 10)}
    groups = table[table["kind"] == "group"]
    assert len(groups) == 2 * len(readings)  # attention and MLP of every layer (no recipe: every layer trained)
    assert set(groups["from_layer"]) == {1} and set(groups["layer"]) == {2}
    assert set(groups["modules"]) == {"attn", "mlp"}
    extra = table[(table["direction"] == NOISE) | (table["contrast"] == 10)]
    assert (extra["n"] <= EXTRA_PAIRS).all()
    note = patch_note(table, len(examples))
    assert note["version"] == 2 and set(note["extra_pairs"]) == {"noise_1", "denoise_10", "noise_10"}
    assert note["groups"] == ["attn 1-2", "mlp 1-2"]
    # an older table (version 1: no direction columns) whose rows read the same pairs: those rows are kept as they are
    base = table[(table["direction"] == DENOISE) & (table["contrast"] == 1) & (table["kind"] != "group")]
    old = base.drop(columns=["direction", "contrast", "from_layer", "modules"]).assign(
        recovered=base["recovered"] + 0.5)
    again = patch_run(target.loaded, examples, target.texts, target.p, 260, 32, False, log=lambda *_: None,
                      previous=old)
    kept = again[(again["direction"] == DENOISE) & (again["contrast"] == 1) & (again["kind"] != "group")]
    np.testing.assert_allclose(np.sort(kept["recovered"]), np.sort(base["recovered"] + 0.5))
    # read over another number of pairs: recomputed
    other = patch_run(target.loaded, examples, target.texts, target.p, 260, 32, False, log=lambda *_: None,
                      previous=old.assign(n=old["n"] + 1))
    fresh = other[(other["direction"] == DENOISE) & (other["contrast"] == 1) & (other["kind"] != "group")]
    np.testing.assert_allclose(np.sort(fresh["recovered"]), np.sort(base["recovered"]), atol=1e-6)
    assert list(with_defaults(old)["direction"].unique()) == [DENOISE]


def test_the_trained_layers_are_read_from_a_number_token_recipe_and_are_every_layer_otherwise(tmp_path):
    assert trained_layers(None, 30) == (1, 30, False)
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "recipe.json").write_text(json.dumps({"n_layers": 30, "number_tokens": {"frozen_blocks": 18}}))
    assert trained_layers(str(folder), 30) == (19, 30, True)
    (folder / "recipe.json").write_text(json.dumps({"n_layers": 2, "freeze": {"kind": "fourier"}}))
    assert trained_layers(str(folder), 2) == (1, 2, False)


def test_a_run_that_reads_every_question_patches_every_pair_and_a_deep_sampled_run_its_samples(tiny):
    target, examples = tiny
    assert pair_limits(target.loaded, examples) == (None, None)  # a tiny model: every pair
    deep = SimpleNamespace(n_layers=30, width=576)  # SmolLM2-135M's shape over a whole split: the sampled design
    split = build_examples("addition", 260, 0)[:3419]
    assert pair_limits(deep, split) == (HEAD_PAIRS, EXTRA_PAIRS)
    assert pair_limits(deep, split, every_question=True) == (None, None)
    assert pair_limits(deep, split[:LIVE_SAMPLE]) == (None, None)  # no larger than the sample: every question
    quiet = dict(log=lambda *_: None)
    every = patch_run(target.loaded, examples, target.texts, target.p, 260, 32, False, **quiet,
                      extra_pairs=None, head_pairs=None)
    sampled = patch_run(target.loaded, examples, target.texts, target.p, 260, 32, False, **quiet,
                        extra_pairs=4, head_pairs=5)
    pairs = int(every.loc[(every["kind"] == "resid") & (every["direction"] == DENOISE) & (every["contrast"] == 1),
                          "n"].iloc[0])
    assert pairs > 5
    for table, heads, extra in ((every, pairs, None), (sampled, 5, 4)):
        head_rows = table[table["kind"] == "head"]
        assert len(head_rows) and (head_rows["n"] == heads).all()
        other = table[(table["direction"] == NOISE) | (table["contrast"] == 10)]
        if extra is not None:
            assert (other["n"] <= extra).all()
        note = patch_note(table, len(examples))
        assert note["head_pairs"] == heads and note["pairs"] == pairs
    assert every.loc[every["direction"] == NOISE, "n"].iloc[0] == pairs  # noising at contrast 1: every pair too
    tens = every.loc[every["contrast"] == 10, "n"]
    assert len(tens) and (tens == len(pair_examples(examples, 260, 10))).all()
    # a table's note is enough where it read what the run's limits ask: the sampled table is not, on this run
    assert reads_enough(patch_note(every, len(examples)), target.loaded, examples, 260, False)
    assert not reads_enough(patch_note(sampled, len(examples)), target.loaded, examples, 260, False)


def test_a_sample_of_pairs_holds_the_running_example_and_none_is_every_pair():
    examples = build_examples("addition", 260, 0)[:2000]
    pairs = pair_examples(examples, 260)
    assert len(pairs) > HEAD_PAIRS
    assert pair_sample(pairs, "addition", None) == pairs
    sample = pair_sample(pairs, "addition", HEAD_PAIRS)
    assert len(sample) == HEAD_PAIRS and all(pair in pairs for pair in sample)
    running = example_id("addition", *RUNNING_EXAMPLE)
    if any(c.id == running for c, _ in pairs):
        assert any(c.id == running for c, _ in sample)
    # a deep model's run of the sampled design: its note with 300 head pairs and 200 of each other reading is enough
    deep = SimpleNamespace(n_layers=30, width=576, parts=SimpleNamespace(has_heads=True))
    split = build_examples("addition", 260, 0)[:3419]
    note = {"head_pairs": HEAD_PAIRS, "extra_pairs": {"noise_1": 200, "denoise_10": 200, "noise_10": 200}}
    assert reads_enough(note, deep, split, 260, every_question=False)
    assert not reads_enough({**note, "head_pairs": 100}, deep, split, 260, every_question=False)
    assert not reads_enough(note, deep, split, 260, every_question=True)  # read every question: every pair asked


def test_a_position_table_that_read_fewer_pairs_than_the_layout_holds_is_made_again(tiny):
    target, examples = tiny
    text_of = {e.id: t for e, t in zip(examples, target.texts)}
    layout = layout_pairs(target.loaded.tokenizer, pair_examples(examples, 260), text_of, "addition")
    assert len(layout) > 1
    table = position_patch_run(target.loaded, examples, target.texts, target.p, 260, 32, False, log=lambda *_: None)
    assert (table["n"] == len(layout)).all()
    note = position_note(table, len(examples))
    assert reads_every_pair(note, target.loaded, examples, target.texts, 260)
    assert not reads_every_pair({**note, "pairs": len(layout) - 1}, target.loaded, examples, target.texts, 260)
