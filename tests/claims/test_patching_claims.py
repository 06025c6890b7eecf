"""The patching sentences (core.claims.patching) against their rules, re-derived here on a table built to a known
answer and on every shipped run that has the table: the stream's handover layers, the sites named."""

import re

import numpy as np
import pandas as pd
import pytest

from core.analysis.patch_table import with_defaults
from core.claims.base import pct
from core.claims.patching import (
    HANDOVER_HIGH,
    HANDOVER_LOW,
    group_against_sum,
    groups_summary,
    interval_words,
    name_sites,
    patching_summary,
    position_summary,
    reading,
    reading_summary,
    stream_handover,
    top_sites,
)
from core.runs.cache import list_runs
from core.runs.reader import RunReader, Table

SHIPPED = [r.name for r in list_runs("cache") if "patching" in ((r.manifest or {}).get("tables") or {})]


def table(stream, modules=(), heads=()):
    rows = [dict(kind="resid", layer=i, head=-1, n=100, recovered=v, recovered_low=v - 0.02, recovered_high=v + 0.02,
                 moved=0.0, patched_gap=0.0, clean_gap=1.0, corrupt_gap=-1.0) for i, v in enumerate(stream)]
    rows += [dict(kind=k, layer=layer, head=h, n=100 if k != "head" else 30, recovered=v, recovered_low=v - 0.05,
                  recovered_high=v + 0.05, moved=0.0, patched_gap=0.0, clean_gap=1.0, corrupt_gap=-1.0)
             for k, layer, h, v in [*modules, *heads]]
    return pd.DataFrame(rows)


class FakeRun:
    task, split = "addition", "test"

    def __init__(self, t):
        self.t = t

    def table(self, name):
        assert name == Table.PATCHING
        return self.t


def test_the_handover_is_the_last_layer_surely_below_and_the_first_surely_above():
    t = table([0.0, 0.0, 0.05, 0.2, 0.6, 0.9, 1.0])
    assert stream_handover(t) == (2, 4)
    # an interval that straddles the bar does not count on either side
    assert stream_handover(table([0.0, 0.09, 0.49, 1.0])) == (0, 3)
    assert stream_handover(table([0.3, 0.3])) == (None, None)
    # not monotone: a dip below 50% after a layer above it moves the start past the dip; an early jump ends "below"
    assert stream_handover(table([0.0, 0.6, 0.3, 0.7, 1.0])) == (0, 3)
    assert stream_handover(table([0.0, 0.2, 0.0, 0.7])) == (0, 3)


def test_the_sentence_names_the_sites_that_restore_most_and_says_when_none_does_alone():
    t = table([0.0, 0.0, 0.6, 1.0], modules=[("attn", 2, -1, 0.3), ("mlp", 2, -1, 0.2), ("mlp", 1, -1, -0.01)],
              heads=[("head", 2, 3, 0.15), ("head", 1, 0, 0.01)])
    text = patching_summary(FakeRun(t))
    assert "after every layer up to layer 1" in text and "from layer 2 on" in text
    assert "attention of layer 2, 30% (95% interval 25% to 35%); the MLP of layer 2, 20% (95% interval" in text
    assert "the MLP of layer 1" not in text  # its interval reaches below zero
    assert "No single module restores half (the highest interval ends at 35%)" in text
    assert ("Of the 2 heads (each over a sample of 30 of the pairs), the most: head 3 of layer 2, 15% (95% "
            "interval") in text
    # heads read over every pair the other sites read: said so, never "a sample"
    every = t.assign(n=100)
    assert "Of the 2 heads (each over the same 100 pairs), the most: head 3" in patching_summary(FakeRun(every))
    assert "sample" not in patching_summary(FakeRun(every))
    # the stream passes 10% at its first layer: said as "before layer 1", never "up to layer 0"
    early = patching_summary(FakeRun(table([0.0, 0.6, 1.0], modules=[("attn", 1, -1, 0.3)])))
    assert "before layer 1, and over 50% from layer 1 on" in early and "layer 0" not in early
    loud = table([0.0, 1.0], modules=[("attn", 1, -1, 0.8)])
    assert "No single module restores half" not in patching_summary(FakeRun(loud))


def extra(rows, direction, contrast):
    """`rows` (a `table`) as another reading, with the groups' columns."""
    return with_defaults(rows).assign(direction=direction, contrast=contrast)


def test_groups_are_said_beside_the_sum_of_their_layers_and_each_reading_in_its_own_words():
    base = table([0.0, 0.2, 1.0], modules=[("attn", 1, -1, 0.1), ("attn", 2, -1, 0.2), ("mlp", 1, -1, 0.3),
                                           ("mlp", 2, -1, 0.25)])
    group = dict(kind="group", layer=2, head=-1, n=100, recovered=0.8, recovered_low=0.7, recovered_high=0.9,
                 moved=0.5, patched_gap=0.0, clean_gap=1.0, corrupt_gap=-1.0, from_layer=1, modules="mlp")
    full = pd.concat([with_defaults(base), with_defaults(pd.DataFrame([group])),
                      extra(base, "noise", 10).assign(n=40)], ignore_index=True)
    g = group_against_sum(name_sites(reading(full)))
    assert len(g) == 1 and g["single_sum"].iloc[0] == pytest.approx(0.3 + 0.25)  # MLPs 1 and 2 one at a time
    run = FakeRun(full)
    words = groups_summary(run)
    assert ("Patched together (denoising, second operand 1 more, 100 pairs), the share of the difference restored: "
            "the MLPs of layers 1 to 2 together, 80% (95% interval 70% to 90%) against 55% for its layers one at a "
            "time, added up.") == words
    noise = reading_summary(name_sites(full), "noise", 10, "addition questions (test split")
    assert noise.startswith("Over 40 pairs of addition questions (test split; each question against the same question "
                            "with its second operand ten more, so the answer's tens digit differs)")
    assert "takes away" in noise and "margin" in noise and "reaches the answer position" not in noise
    text = patching_summary(run)
    assert "Noising with the second operand 10 more (40 pairs): the single module that takes away most is the MLP of " \
           "layer 1, 30% (95% interval 25% to 35%)" in text
    # the attention of every layer carries all of it by construction, and is said so; the MLPs' group is not
    whole = pd.concat([with_defaults(base), with_defaults(pd.DataFrame([{**group, "modules": "attn",
                                                                        "recovered": 1.0}]))], ignore_index=True)
    assert "by construction" in groups_summary(FakeRun(whole)) and "by construction" not in words
    # no group where a layer's single share is missing: no sum said
    lone = pd.concat([with_defaults(table([0.0, 1.0])), with_defaults(pd.DataFrame([group]))], ignore_index=True)
    assert "added up" not in groups_summary(FakeRun(lone))


def test_an_interval_is_said_as_a_95_percent_interval_and_one_pair_as_its_point():
    assert interval_words(0.08, 0.06, 0.10) == "8% (95% interval 6% to 10%)"
    assert interval_words(0.08, float("nan"), float("nan")) == "8%"
    one = table([0.0, 0.05, 0.7, 1.0], modules=[("mlp", 2, -1, 0.4)]).assign(n=1, recovered_low=np.nan,
                                                                            recovered_high=np.nan)
    text = reading_summary(name_sites(one), "denoise", 1, "addition questions (computed now")
    assert text.startswith("For one pair of addition questions") and "the MLP of layer 2, 40%." in text
    assert "after every layer up to layer 1, and over 50% from layer 2 on" in text


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_runs_sentence_is_its_tables_rule(name):
    run = RunReader("cache", name)
    t = name_sites(reading(run.table(Table.PATCHING)))
    stream = t[t["kind"] == "resid"].sort_values("layer")
    assert stream["recovered"].iloc[-1] == pytest.approx(1.0, abs=1e-3)  # the last stream is what the logits read
    assert abs(stream["recovered"].iloc[0]) < 1e-3  # the answer position's own token is the same in both prompts
    rows = list(stream.itertuples())
    reach = next((i for i, r in enumerate(rows) if not r.recovered_high < HANDOVER_LOW), len(rows))
    low = int(rows[reach - 1].layer) if reach > 0 else None
    stays = [i for i in range(len(rows)) if all(r.recovered_low >= HANDOVER_HIGH for r in rows[i:])]
    high = int(rows[stays[0]].layer) if stays else None
    text = patching_summary(run)
    if low is not None and high is not None:
        below = "before layer 1" if low == 0 else f"up to layer {low}"
        assert f"{below}, and over" in text and f"from layer {high} on" in text
    assert "up to layer 0" not in text
    best = top_sites(t)
    if len(best):
        assert f"{best.iloc[0].site}, {100 * best.iloc[0].recovered:.0f}% (95% interval" in text
    n = int(t.loc[~t["kind"].isin(("head", "group")), "n"].iloc[0])
    assert re.search(rf"Over {n:,} pairs", text)
    assert np.isfinite(t["recovered"]).all()


def position_run(operand_by_layer, answer_by_layer):
    """A run whose position x layer table holds one operand token and the answer position, layer by layer."""
    rows = [dict(position=p, token=tok, role=role, layer=layer, n=50, recovered=v, recovered_low=v - 0.01,
                 recovered_high=v + 0.01, moved=0.0, patched_gap=0.0, clean_gap=1.0, corrupt_gap=-1.0)
            for p, tok, role, values in ((2, " 93", "b", operand_by_layer), (5, ":", "answer", answer_by_layer))
            for layer, v in enumerate(values)]
    frame = pd.DataFrame(rows)
    return type("PositionRun", (), {"split": "test", "table": lambda self, name: frame})()


@pytest.mark.parametrize("operand, answer, expected", [
    ([1.0, 0.9, 0.5, 0.1, 0.0], [0.0, 0.1, 0.4, 0.9, 1.0], (2, 3)),  # monotone: behind at 2, ahead from 3
    ([1.0, 0.2, 0.6, 0.1, 0.0], [0.0, 0.5, 0.4, 0.9, 1.0], (2, 3)),  # ahead at 1, behind again at 2: the last counts
    ([0.0, 0.0, 0.0], [0.5, 0.8, 1.0], None),  # ahead everywhere
    ([1.0, 1.0, 1.0], [0.0, 0.1, 0.2], None),  # never ahead
])
def test_the_position_handover_is_after_the_last_layer_an_operand_leads(operand, answer, expected):
    text = position_summary(position_run(operand, answer))
    last = max((i for i, (o, a) in enumerate(zip(operand, answer)) if o >= a), default=None)  # the rule, afresh
    if expected is None:
        assert "between layer" not in text
        assert ("at every layer" in text) == (last is None) and ("even after the last" in text) == (last is not None)
    else:
        assert (last, last + 1) == expected
        assert f"between layer {last} and layer {last + 1}" in text
        assert f"after layer {last + 1} the answer position restores {pct(answer[last + 1])}" in text
