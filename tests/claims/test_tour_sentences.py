"""Every Tour sentence against the numbers it states, on every shipped run: words for the size of a share beside the
share they describe, and the zoomed waves caption against the whole line's."""

import re

import pytest

from app.figures import logits
from app.tour.lines import TOUR_BASIS, run_line
from app.tour.steps import STEPS, StepInputs, example_of
from core.claims.accuracy import selection_note
from core.claims.base import measured_clause, pct
from core.claims.features import claim_training
from core.claims.registry import run_claims
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs
from core.runs.reader import RunReader, Table

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


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
@pytest.mark.parametrize("run", [r for r in SHIPPED if "final_waves" in r.manifest["tables"]],
                         ids=lambda r: r.name[:24])
def test_step_5s_line_says_whether_its_example_is_one_it_counts(run):
    """Step 5's line counts the questions whose top-5 sum peaks at the answer, then names the question its figure
    draws and says whether it is one of them: in the figure's own basis the peak its figure's caption names, and in
    the paper's basis (the one the line counts in) the example's own row of the counted table."""
    reader = RunReader(CACHE, run.name)
    claims = run_claims(reader)
    step = next(s for s in STEPS if s.key == "waves")
    if claims["waves"].verdict == "does not apply":
        return
    example = example_of(reader)
    for basis in ("paper", "dft"):
        line = run_line(step, claims["waves"], reader, basis)
        caption = next(p.full_caption for p in step.panels(reader, StepInputs(basis, claims, [reader]))
                       if p.key == "tour-waves")
        drawn = re.search(r"it peaks at (\d+), not at the answer|it (peaks at the answer)", caption)
        if drawn.group(2):
            assert line.endswith(", one where they do."), (basis, line, caption)
        else:
            assert line.endswith(f"their sum peaks at {drawn.group(1)}, not at the answer {example['answer']}."), (
                basis, line, caption)
    counted = reader.table(Table.WAVE_PEAKS)
    row = counted[(counted["example_id"] == example.name) & (counted["top"] == 5)].iloc[0]
    paper_line = run_line(step, claims["waves"], reader, "paper")
    assert paper_line.endswith(", one where they do.") == bool(row["at_answer"]), (paper_line, row.to_dict())


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
@pytest.mark.parametrize("run", SHIPPED, ids=[r.name[:24] for r in SHIPPED])
def test_step_1_says_when_a_test_score_is_not_clean(run):
    """A test score whose training looked at the test split (core.claims.accuracy.selection_note) is said to be
    not clean beside the number; a clean one, or a validation score, is not."""
    reader = RunReader(CACHE, run.name)
    claims = run_claims(reader)
    step = next(s for s in STEPS if s.key == "accuracy")
    if "accuracy" not in claims["accuracy"].numbers:
        return
    line = run_line(step, claims["accuracy"], reader)
    assert ("not a clean test score" in line) == (reader.split == "test" and bool(selection_note(reader))), line


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
def test_step_8s_reason_states_the_gain_and_the_rule():
    """Step 8's reason is not its line again: it states the frozen run's gain over scratch, re-derived here from the
    two accuracies the line quotes, and the rule's two numbers."""
    claim = claim_training([RunReader(CACHE, r.name) for r in SHIPPED])
    if claim.verdict == "not tested":
        return
    assert claim.reason != measured_clause(claim.measured)
    frozen, scratch = (float(x) for x in re.findall(r"(\d+\.\d)% \(\d+ seeds?\)", claim.measured))
    assert f"from {scratch:.1f}% to {frozen:.1f}%" in claim.reason, claim.reason
    gain = float(re.search(r"\(([+-]\d+\.\d) points\)", claim.reason).group(1))
    assert abs(gain - (frozen - scratch)) <= 0.1, (gain, frozen, scratch)
    assert "95%" in claim.reason and "20 points" in claim.reason
