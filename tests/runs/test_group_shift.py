"""Interventions on groups of modules (core.analysis.ablations.LayerEdits, core.runs.group_shift): which layers a
group holds, that a group's edit acts on each of its layers with that layer's own edit in one pass, and the stage's
tables on a tiny model, re-derived from its per-question outcomes and read like one module's."""

import numpy as np
import pytest
import torch

from core.analysis.ablations import Condition, FunctionEdit, LayerEdits
from core.analysis.evaluation import evaluate_conditions
from core.analysis.shift_reading import read_shifts
from core.errors import CoreError
from core.models.random_models import save_random_model
from core.runs.ablate import open_target
from core.runs.group_shift import (
    LayerGroup,
    group_shift_tables,
    group_specs,
    has_group_shift,
    shift_groups,
    trained_from,
)
from core.runs.tables import TABLE_COLUMNS


def test_the_groups_of_the_default_run_and_of_a_two_layer_model():
    assert shift_groups(30, 19) == [LayerGroup("trained", 19, 30), LayerGroup("last third", 21, 30),
                                    LayerGroup("every layer", 1, 30)]
    assert shift_groups(2) == [LayerGroup("last third", 2, 2), LayerGroup("every layer", 1, 2)]
    # a fine-tuning that trained every block is the group of every layer, listed once
    assert shift_groups(3, 1) == [LayerGroup("last third", 3, 3), LayerGroup("every layer", 1, 3)]
    assert shift_groups(12, 9) == [LayerGroup("trained", 9, 12), LayerGroup("every layer", 1, 12)]


def test_the_trained_layers_come_from_the_recipe_beside_the_weights(tmp_path):
    (tmp_path / "recipe.json").write_text('{"number_tokens": {"frozen_blocks": 18}}')
    assert trained_from(tmp_path) == 19
    (tmp_path / "recipe.json").write_text('{"number_tokens": {"frozen_blocks": 0}}')
    assert trained_from(tmp_path) is None
    assert trained_from(tmp_path / "nowhere") is None


def test_a_group_names_each_layer_once():
    with pytest.raises(CoreError, match="twice"):
        LayerEdits(((1, None), (1, None)))
    with pytest.raises(CoreError, match="no layer beside it"):
        Condition(LayerEdits(((1, FunctionEdit(lambda r: r, 64)),)), "attn", 1)
    with pytest.raises(CoreError, match="one kind of module"):  # one kind's edits are not the other kind's
        Condition(LayerEdits(((1, FunctionEdit(lambda r: r, 64)),)), "both")


def test_a_number_line_without_the_four_periods_has_no_group_shift():
    groups = shift_groups(2)
    assert group_specs(521, groups) and not group_specs(199, groups)  # 198 = 2 x 99: period 2 only
    assert not has_group_shift(199) and has_group_shift(521)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = save_random_model(tmp_path_factory.mktemp("gpt2-3"), "gpt2", n_layers=3)
    return open_target(str(folder), limit=48, threads=1, log=lambda *_: None)


def _losses(target, conditions):
    """Each condition's per-question answer loss (finer than the answers: a tiny random model's answers may all
    agree)."""
    return [ev.losses for ev in evaluate_conditions(target.loaded, target.texts, target.answers, target.p,
                                                         conditions, "last", progress=False)]


def test_a_group_edit_applies_each_layers_own_edit_in_one_pass(tiny):
    width = tiny.loaded.width
    identity = FunctionEdit(lambda rows: rows, width)
    noise = torch.Generator().manual_seed(3)
    push = torch.randn(width, generator=noise)
    pushed = FunctionEdit(lambda rows: rows + push / push.norm() * rows.norm(dim=-1, keepdim=True), width)
    single_1, single_3, group_1, group_3, both = _losses(tiny, [
        Condition(pushed, "mlp", 1),
        Condition(pushed, "mlp", 3),
        Condition(LayerEdits(((1, pushed), (2, identity), (3, identity))), "mlp"),
        Condition(LayerEdits(((1, identity), (2, identity), (3, pushed))), "mlp"),
        Condition(LayerEdits(((1, pushed), (3, pushed))), "mlp"),
    ])
    assert np.allclose(group_1, single_1, atol=1e-5) and np.allclose(group_3, single_3, atol=1e-5)
    assert not np.allclose(single_1, single_3, atol=1e-3)  # the two layers' edits differ in effect: the test can fail
    assert not np.allclose(both, single_1, atol=1e-3) and not np.allclose(both, single_3, atol=1e-3)


def test_the_group_tables_of_a_tiny_model_are_read_from_their_own_outcomes(tiny):
    groups = shift_groups(tiny.loaded.n_layers)
    tables = group_shift_tables(tiny.loaded, tiny.texts, tiny.answers, tiny.p, groups, 16, False, lambda *_: None)
    table, answers = tables["group_shift"], tables["group_shift_answers"]
    assert set(TABLE_COLUMNS["group_shift"]) <= set(table.columns)
    assert len(table) == len(group_specs(tiny.p, groups))
    assert set(table["group"]) == {"last third", "every layer", "stream"}
    every = table[(table["group"] == "every layer") & ~table["control"]]
    assert set(every["first_layer"]) == {1} and set(every["layer"]) == {3}
    # each row's pooled shares are its questions' outcomes, over every question that can move by d
    for i, row in table.iterrows():
        mine = answers[answers["condition"] == i]
        assert len(mine) == row["n"] > 0
        assert mine["residue_moved"].mean() == pytest.approx(row["residue_moved"])
        assert mine["stayed"].mean() == pytest.approx(row["stayed"])
    read = read_shifts(table, answers, "all", sorted(table["d"].unique()), draws=50,
                       keys=("group", "kind", "first_layer", "layer"))
    assert {(r.group, r.kind) for r in read.itertuples()} >= {("every layer", "attn"), ("every layer", "mlp"),
                                                              ("stream", "resid")}
    stream = read[read["kind"] == "resid"].iloc[0]
    assert stream["relative"] == pytest.approx(1.0) or np.isnan(stream["relative"])
    assert (read["draws"] == 3).all()


def test_the_default_run_holds_its_groups_over_every_test_question_and_step_3_says_them():
    from core.claims.base import pct
    from core.claims.last_digit import claim_module_waves, group_name, headline_groups
    from core.claims.shift_rule import group_summary
    from core.runs.reader import RunReader, Table

    run = RunReader("cache", "smollm2-135m-fine-tuned-number-tokens-real-llm-rows-blocks-1-882bc8ee3b")
    table, answers = run.table(Table.GROUP_SHIFT), run.table(Table.GROUP_SHIFT_ANSWERS)
    assert {(g, f, last) for g, f, last in zip(table["group"], table["first_layer"], table["layer"])} == {
        ("trained", 19, 30), ("last third", 21, 30), ("every layer", 1, 30), ("stream", 30, 30)}
    n_split = run.manifest["task"]["n_examples"]
    counted = answers.groupby("condition")["example"].nunique()
    assert (counted.to_numpy() == table["n"].to_numpy()).all() and table["n"].max() == n_split
    summary = group_summary(run)
    claim = claim_module_waves(run)
    quoted = headline_groups(summary)  # the trained layers, as the figure draws them
    assert set(quoted["kind"]) == {"attn", "mlp"} and set(quoted["first_layer"]) == {19}
    for row in quoted.to_dict("records"):  # the headline quotes each from the table
        assert f"{group_name(row)}, {pct(row['read'])}" in claim.headline
