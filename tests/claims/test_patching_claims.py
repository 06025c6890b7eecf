"""The patching sentences (core.claims.patching) against their rules, re-derived here on a table built to a known
answer and on every shipped run that has the table: the stream's handover layers, the sites named."""

import re

import numpy as np
import pandas as pd
import pytest

from core.claims.base import pct
from core.claims.patching import (
    HANDOVER_HIGH,
    HANDOVER_LOW,
    patching_summary,
    position_summary,
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
    assert "up to layer 1" in text and "from layer 2 on" in text
    assert "attention of layer 2 (30%, 25% to 35%); the MLP of layer 2 (20%" in text
    assert "the MLP of layer 1" not in text  # its interval reaches below zero
    assert "No single module restores half (the highest interval ends at 35%)" in text
    assert "Of the 2 heads (each over a sample of 30 of the pairs), the most: head 3 of layer 2 (15%" in text
    loud = table([0.0, 1.0], modules=[("attn", 1, -1, 0.8)])
    assert "No single module restores half" not in patching_summary(FakeRun(loud))


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_runs_sentence_is_its_tables_rule(name):
    run = RunReader("cache", name)
    t = run.table(Table.PATCHING)
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
        assert f"up to layer {low}, and over" in text and f"from layer {high} on" in text
    best = top_sites(t)
    if len(best):
        assert f"({100 * best.iloc[0].recovered:.0f}%" in text
    n = int(t.loc[t["kind"] != "head", "n"].iloc[0])
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
