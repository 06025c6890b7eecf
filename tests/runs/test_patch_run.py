"""The patching stage (core.runs.patch_run) on a tiny model: every reading (denoise and noise, contrast 1 and 10) and
the groups in its table, an older table's rows kept only where they were read over the same pairs, and the trained
layers a recipe names (core.runs.patch_groups)."""

import json

import numpy as np
import pytest

from core.analysis.patch_table import DENOISE, NOISE, with_defaults
from core.models.random_models import save_random_model
from core.runs.ablate import open_target
from core.runs.patch_groups import trained_layers
from core.runs.patch_run import EXTRA_PAIRS, patch_note, patch_run
from core.tasks import build_examples


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
