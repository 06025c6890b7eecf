"""Every Tour sentence against the numbers it states, on every shipped run: words for the size of a share beside the
share they describe, and the zoomed waves caption against the whole line's."""

import re

import pytest

from app.figures import logits
from app.tour.steps import STEPS, TOUR_BASIS, StepInputs, example_of, run_line
from core.claims.base import pct
from core.claims.registry import run_claims
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs
from core.runs.reader import RunReader

CACHE = PROJECT_ROOT / "cache"
SHIPPED = [r for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []

#: Words that say how large a share is, each with the range its number must lie in (percent).
SHARE_WORDS = {
    r"\bmore than half\b": (50.0, 100.0),
    r"\b(?:for|of) most (?:questions|examples|answers|prompts)\b": (50.0, 100.0),
    r"\b(?:at most|fewer than|less than) half\b": (0.0, 50.0),
    r"\b(?:for|of) few (?:questions|examples|answers|prompts)\b": (0.0, 25.0),
}


def share_words_checked(text: str) -> list[str]:
    """Problems of `text`: a word for the size of a share whose clause states no share, or whose share lies outside
    what the word says (a template like "not enough for most questions" under 57.2% fails here)."""
    problems = []
    for clause in re.split(r"[;.]\s", text):
        for pattern, (low, high) in SHARE_WORDS.items():
            for m in re.finditer(pattern, clause, re.I):
                share = re.search(r"(\d+(?:\.\d+)?)%", clause[m.end():])
                if share is None:
                    problems.append(f"{m.group(0)!r} with no share in its clause: {clause!r}")
                elif not (low < float(share.group(1)) <= high if low else float(share.group(1)) <= high):
                    problems.append(f"{m.group(0)!r} with {share.group(0)}: {clause!r}")
    return problems


def test_share_words_are_checked_against_their_numbers():
    assert share_words_checked("five waves are not enough to place the answer for most questions; ten are for 80%")
    assert share_words_checked("the top 5 waves place the answer for few questions (57.2%)")
    assert not share_words_checked("the top 5 waves place the answer for more than half the questions (57.2%)")
    assert not share_words_checked("94.9% are off by at most 2")


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
@pytest.mark.parametrize("run", SHIPPED, ids=[r.name[:24] for r in SHIPPED])
def test_every_tour_sentence_states_the_share_its_words_claim(run):
    """Every step's sentences (the measurement, the reason, the headline, the line beside the badge, the figure's
    caption) on every shipped run: a word for a share ("more than half", "few questions") stands beside the share it
    describes, and the share is what the word says. Step 5's reason states the top-5 share its claim measured."""
    reader = RunReader(CACHE, run.name)
    claims = run_claims(reader)
    for step in STEPS:
        if step.key not in claims:
            continue
        claim = claims[step.key]
        panels = []
        if step.table is None or reader.has(step.table):
            panels = step.panels(reader, StepInputs(TOUR_BASIS, claims, [reader]))
        texts = [claim.measured, claim.reason, claim.headline, run_line(step, claim, reader),
                 *(p.full_caption for p in panels)]
        problems = [p for t in texts if t for p in share_words_checked(t)]
        assert not problems, (step.key, problems)
    waves = claims["waves"]
    if waves.verdict not in ("agrees", "does not apply", "not tested"):
        assert f"({pct(waves.numbers['share_top5'])})" in waves.reason, waves.reason


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
@pytest.mark.parametrize("run", [r for r in SHIPPED if "final_waves" in r.manifest["tables"]],
                         ids=lambda r: r.name[:24])
def test_the_zoomed_waves_caption_names_the_peak_of_the_whole_line(run):
    """Step 5 zooms to the answer ± 25; its caption names where the sum peaks over the whole number line, the same
    number the Waves page's whole-line caption gives (a peak read inside the zoom once said 108 where the page said
    208)."""
    reader = RunReader(CACHE, run.name)
    example = example_of(reader)
    whole = logits.waves(reader, example, TOUR_BASIS, 5)[2]
    zoomed = logits.waves(reader, example, TOUR_BASIS, 5, window=25)[2]
    peak = re.search(r"peaks at (\d+)", whole).group(1)
    said = f"Over the whole line 0..{reader.p - 1} the sum of the top 5 (black) peaks at {peak}"
    assert said in zoomed, (whole, zoomed)
