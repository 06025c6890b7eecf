"""A badge says what its sentence says, on every shipped run and claim.

The badge's word (core.claims.base.VERDICT_LABELS) and the sentences beside it (the claim's measured text and its
reason) are one rule's output; these tests check that the words of the sentence never contradict the badge: a
claim that cannot be decided says why, a claim that does not apply quotes no measurement, a partial or full
agreement is not explained as a reversal, and a difference that comes from how the model is built is not called
a disagreement. (tests/claims/test_tour.py re-derives each verdict from the raw tables; tests/app/test_words.py
checks the badges on screen are the vocabulary's.)
"""

from __future__ import annotations

import re

import pytest

from core.claims.base import VERDICT_LABELS, VERDICT_MEANINGS, VERDICTS
from core.claims.features import claim_training
from core.claims.registry import run_claims
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs
from core.runs.reader import RunReader

CACHE = PROJECT_ROOT / "cache"
SHIPPED = [r for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []
#: Words that say the run shows the opposite of the paper: they cannot explain "agrees" or "partly".
CONTRADICTS_AGREEMENT = ("reversed", "opposite", "contrary")
#: A measurement quoted in a sentence: a share or a locking R.
MEASUREMENT = re.compile(r"\d+(\.\d+)?%|R = \d")

pytestmark = pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")


def every_claim():
    runs = [RunReader(CACHE, r.name) for r in SHIPPED]
    out = [(run, key, c) for run in runs for key, c in run_claims(run).items()]
    return out + [(None, "training", claim_training(runs))]


CLAIMS = every_claim() if SHIPPED else []


def where(run, key) -> str:
    return f"{run.name if run is not None else 'all runs'} / {key}"


def test_the_vocabulary_is_one_list_with_a_word_and_a_meaning_for_each_verdict():
    assert set(VERDICTS) == set(VERDICT_LABELS) == set(VERDICT_MEANINGS)
    assert len(set(VERDICT_LABELS.values())) == len(VERDICTS)


def test_every_verdict_is_the_vocabularys_and_an_undecided_one_says_why():
    for run, key, c in CLAIMS:
        assert c.verdict in VERDICTS, where(run, key)
        if c.verdict == "not tested":  # measured, but the run cannot decide: the reason says why
            assert c.reason.strip(), (where(run, key), c.measured)
        if c.verdict == "does not apply":  # nothing measured: the sentence says why, and quotes no measurement
            assert not MEASUREMENT.search(c.measured), (where(run, key), c.measured)
            assert "does not apply" in c.measured.lower(), (where(run, key), c.measured)


def test_a_run_that_cannot_show_a_claim_is_not_said_to_disagree():
    """A model that writes numbers as digit tokens has no number logits: its mechanism claims do not apply."""
    for run, key, c in CLAIMS:
        if run is not None and run.not_applicable("examples") and key not in ("numbers", "behaviour"):
            assert c.verdict == "does not apply", where(run, key)


def test_no_reason_contradicts_its_badge():
    bad = [
        (where(run, key), c.verdict, c.reason)
        for run, key, c in CLAIMS
        if c.verdict in ("agrees", "partly") and any(w in c.reason.lower() for w in CONTRADICTS_AGREEMENT)
    ]
    assert bad == []


def test_a_structural_reason_is_not_a_disagreement():
    """Step 2 on a 2-layer model: 'there is no middle' says the model cannot show the claim, which is not a
    disagreement."""
    bad = [
        (where(run, key), c.reason)
        for run, key, c in CLAIMS
        if key == "logit_lens" and c.verdict == "does not" and int(run.manifest["n_layers"]) <= 2
    ]
    assert bad == []
