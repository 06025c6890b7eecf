"""The helix's Clock test (core.analysis.helix_patching.answer_pairs, core.runs.helix_tables.helix_clock_table) on a
tiny model: each pair differs in its second operand by one, its site is the answer position and its number the
answer; the clean prompt's own stream put in at the last layer restores everything; the table has every condition."""

import numpy as np
import pytest

from core.analysis.helix_patching import CONDITIONS, RANDOM_DRAWS, answer_pairs, clock_layers
from core.models.random_models import save_random_model
from core.runs.ablate import open_target
from core.runs.helix_tables import helix_clock_table
from core.tasks import build_examples


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = save_random_model(tmp_path_factory.mktemp("llama"), "llama", n_layers=2)
    target = open_target(str(folder), limit=120, threads=1, log=lambda *_: None)
    examples = {e.id: e for e in build_examples("addition", 260, 0)}
    return target, [examples[i] for i in target.ids]


def test_the_pairs_change_the_second_operand_and_read_the_answer_position(tiny):
    target, examples = tiny
    pairs = answer_pairs(target.loaded.tokenizer, examples, target.texts, 260)
    assert len(pairs.clean) == len(examples)
    assert (pairs.back == 1).all() and pairs.prefixes == pairs.clean
    assert np.array_equal(pairs.operands, pairs.clean_answers)  # the number fitted is the answer a + b
    assert (np.abs(pairs.corrupt_answers - pairs.clean_answers) == 1).all()
    assert clock_layers(30) == (15, 20, 25, 30) and clock_layers(2) == (1, 2)


def test_the_clock_table_restores_everything_with_the_clean_stream_at_the_last_layer(tiny):
    target, examples = tiny
    table = helix_clock_table(target.loaded, examples, target.texts, target.p, 260, log=lambda *_: None)
    assert sorted(table.layer.unique()) == [1, 2]
    assert len(table) == 2 * (len(CONDITIONS) - 1 + RANDOM_DRAWS)
    own = table[(table.layer == 2) & (table.condition == "activation")].iloc[0]
    assert own.recovered == pytest.approx(1.0, abs=1e-3)
    assert set(table.condition) == set(CONDITIONS)
    assert table.recovered_low.le(table.recovered).all() and table.recovered.le(table.recovered_high).all()
