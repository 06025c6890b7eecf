"""The Tour's handout and its captions, on the shipped runs.

Every caption's count is checked against the raw table the figure reads (read here with core.runs.cache, not
through app/tour/steps.py), so a caption that claims more questions than its table holds fails; the HTML handout
is opened in headless Chromium with every network request refused; the PDF is read back with pypdf; and the
command line writes both files for the default run and a 2-layer run.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import re
import subprocess
import sys

import pytest
from pypdf import PdfReader

from app.glossary import TERMS
from app.tour.handout import build_handout, handout_html
from app.tour.handout_export import listed_runs, pick_run, write_handouts
from app.tour.handout_pdf import ALL_NUMBERS, VERDICT_RGB, WORDS, handout_pdf, handout_pdf_layout, smallest_font
from app.tour.handout_style import HANDOUT_CSS
from app.tour.steps import OVER_RUNS, STEPS, StepInputs, choose_run, training_logs_of
from core.claims import registry
from core.claims.base import VERDICTS
from core.claims.features import claim_training
from core.claims.siblings import training_siblings
from core.errors import CoreError
from core.files import PROJECT_ROOT
from core.runs.cache import read_table
from core.runs.origin import run_origin, seed_of_manifest
from core.runs.reader import Table

CACHE = PROJECT_ROOT / "cache"
RUNS, _ = listed_runs(CACHE) if CACHE.is_dir() else ([], [])
TWO_LAYER = "fourier-frozen-tied"
#: "From 16 of the 3,419 test questions (...)"; "From 521 numbers"; "From 11 training runs"; "From 3 runs (...)"
EVIDENCE = re.compile(
    r"From ([\d,]+)(?: of the ([\d,]+))? (?:(?!training )(\w+) )?(questions?|numbers|training runs|runs?)\b"
)
#: a count of questions anywhere in a step's words: "16 examples", "all 3419 test examples", "3,419 questions"
#: (not the split's size after "of the": "16 of the 3,419 test questions")
QUESTION_COUNT = re.compile(r"(?<!of the )(?<![\d,])(\d[\d,]*) (?:\w+ ){0,2}(?:questions|examples|prompts)\b")

pytestmark = pytest.mark.skipif(not RUNS, reason="no shipped cache")
BY_NAME = {r.name: r for r in RUNS}


@functools.cache
def claims_named(name: str) -> dict:
    return registry.run_claims(BY_NAME[name])


def claims_of(run) -> dict:
    """A shipped run's claims, computed once for this module's tests (the tables do not change under them)."""
    return claims_named(run.name)


def number(text: str) -> int:
    return int(text.replace(",", ""))


def table_count(run, step_key: str, panel_key: str) -> tuple[int, str]:
    """(how many items the panel's figure rests on, their unit), from the raw table it reads."""
    name, manifest = run.name, run.manifest
    if panel_key in ("tour-final", "tour-waves", "tour-waves-zoom", "tour-heat"):  # one question: the running example
        return 1, "question"
    if step_key == "logit_lens":
        return int(read_table(CACHE, name, "layer_accuracy")["n"].max()), "questions"
    if panel_key == "tour-shift":  # the causal test: every row shifts the waves of n questions
        return int(read_table(CACHE, name, "phase_shift")["n"].max()), "questions"
    if step_key == "module_waves":
        return int(read_table(CACHE, name, "phase_locking")["n"].max()), "questions"
    if step_key == "spectra":  # module_spectra is the mean over every question of the examples table
        return len(read_table(CACHE, name, "examples")), "questions"
    if step_key == "ablations":
        return int(read_table(CACHE, name, "ablations")["n"].max()), "questions"
    if step_key == "numbers":
        return int(manifest["number_representations"]["n_numbers"]), "numbers"
    if step_key == "operations":  # one run of each operation that has single-token numbers (module spectra)
        tasks = {r.manifest["task"].get("task", "addition") for r in RUNS
                 if r.split == run.split and "module_spectra" in r.manifest["tables"]}
        return len(tasks), "runs"
    if step_key == "training":  # the paper's experiment: the small models trained here on addition
        seeds = 0
        for r in RUNS:
            if ("training_log" in r.manifest["tables"] and run_origin(r.manifest)["kind"] != "fine-tuned"
                    and not (run_origin(r.manifest)["recipe"] or {}).get("module_bands")  # a built control
                    and r.manifest["task"].get("task", "addition") == "addition"
                    and seed_of_manifest(r.manifest) is None):  # a seed's log is in its shipped model's run
                log = read_table(CACHE, r.name, "training_log")  # a curve per width, each seed of it a run
                seeds += int(log.groupby("width")["seed"].nunique().sum())
        return seeds, "training runs"
    raise AssertionError(f"no count rule for {step_key} {panel_key}")


@pytest.mark.parametrize("run", RUNS, ids=[r.name[:40] for r in RUNS])
def test_every_caption_counts_what_its_table_holds(run):
    runs = [r for r in RUNS if r.split == run.split]
    claims = {r.name: claims_of(r) for r in runs}
    n_split = len(read_table(CACHE, run.name, "examples")) if "examples" in run.manifest["tables"] else None
    checked = 0
    for step in STEPS:
        choice = choose_run(step, run, runs, lambda r: claims[r.name], claim_training)
        if step.table is not None and not run.has(step.table):
            continue
        for panel in step.panels(run, StepInputs("paper", claims[run.name], runs)):
            found = EVIDENCE.search(panel.full_caption)
            assert found, f"{step.key}: no count in the caption {panel.full_caption!r}"
            # the same model trained another way, one click away on steps 3, 4 and 6: its figure counts its own table
            owner = next((r for r in runs if r.name != run.name and panel.key.endswith(f"-{r.name}")), run)
            if panel.key.endswith("-siblings"):  # both runs' verdicts side by side
                count, unit = 1 + len(training_siblings(run, runs)), "runs"
            else:
                own_key = panel.key.removesuffix(f"-{owner.name}").removeprefix("sibling-")
                count, unit = table_count(owner, step.key, own_key)
            assert number(found.group(1)) == count, (step.key, panel.full_caption, count)
            assert found.group(4).rstrip("s") == unit.rstrip("s"), (step.key, found.group(4), unit)
            if unit.startswith("question"):
                assert found.group(3) == run.split, (step.key, panel.full_caption)
                assert number(found.group(2) or found.group(1)) == len(read_table(CACHE, owner.name, "examples"))
                assert f"run: {owner.label}" in panel.full_caption
            if unit == "training runs":
                assert "on the validation split" in panel.full_caption
            checked += 1
        # the step's question and claim never count more questions than the table the step reads
        words = [step.question(run), choice.claim.measured, choice.claim.short]
        if step.key not in OVER_RUNS and step.table is not None and run.has(step.table) and n_split is not None:
            holds = table_count(run, step.key, "")[0] if step.key in ("module_waves", "logit_lens") else n_split
            if step.key == "module_waves" and run.has(Table.PHASE_SHIFT):
                holds = max(holds, table_count(run, step.key, "tour-shift")[0])
            for text in words:
                for m in QUESTION_COUNT.finditer(text):
                    assert number(m.group(1)) <= holds, (step.key, text)
                if holds < n_split:
                    assert not re.search(r"every question|all (the )?questions|all [\d,]+ ", text), (step.key, text)
    assert checked >= (1 if n_split is None else 7)


def test_step_three_says_how_many_questions_on_the_default_run():
    """The locking alone: its question says over how many questions. With the causal test, each bar may be over its
    own questions: the question names no count and the line under the figure counts each bar's."""
    run = pick_run(RUNS, None)
    total = len(read_table(CACHE, run.name, "examples"))
    question = STEPS[2].question(run)
    if run.has(Table.PHASE_SHIFT):
        assert not QUESTION_COUNT.search(question), question
        panels = STEPS[2].panels(run, StepInputs("paper", claims_of(run), [run]))
        shift = next(p for p in panels if p.key == "tour-shift")
        counts = {int(n) for n in shift.data["n"]}  # the bars drawn
        for n in counts:
            assert f"{n:,}" in shift.full_caption, (n, shift.full_caption)
        return
    n = int(read_table(CACHE, run.name, "phase_locking")["n"].max())
    said = f"{n:,} of the {total:,} {run.split} questions (a sample)" if n < total else f"all {total:,} {run.split}"
    assert f"Over {said}" in question or f"over {said}" in question, question


@pytest.fixture(scope="module")
def handouts():
    """The handouts of the default run and of a 2-layer run (built once for the tests below)."""
    out = {}
    for asked in (None, TWO_LAYER):
        run = pick_run(RUNS, asked)
        runs = [r for r in RUNS if r.split == run.split]
        out[run.n_layers] = build_handout(run, runs, claims_of, claim_training)
    assert 2 in out and max(out) >= 30, sorted(out)
    return out


def test_handout_html_has_every_step_and_needs_nothing_outside(handouts):
    for h in handouts.values():
        page = handout_html(h)
        for step in STEPS:
            assert f'id="step-{STEPS.index(step) + 1}"' in page and step.title in page
        shown = [s for s in h.steps if not s.missing]
        drawn = sum(1 for s in shown for f in s.figures if f.spec is not None)
        # each figure twice: at its printed size, and in presentation mode's type for the slides
        assert page.count('<div class="print-size"><svg') == page.count('<div class="projector-size"><svg') == drawn
        assert drawn >= 7
        assert h.run_label in page and h.accuracy_line in page and h.version_line in page
        # nothing to fetch: no src/href to another file or address, no @import, no external script
        assert not re.search(r"""\ssrc=|<link|@import|url\((?!#)|href="(?!#)""", page), "an external reference"
        assert not re.findall(r"https?://(?!www\.w3\.org/)", page), "an address other than SVG's namespace"
        # ids stay unique across the inline figures (a shared gradient id would colour another figure)
        ids = re.findall(r'\bid="([^"]+)"', page)
        assert len(ids) == len(set(ids))


def test_a_handout_names_its_run_s_operation(handouts):
    """A multiplication run's handout says "multiplies" and "multiplication questions", in the HTML and the PDF."""
    h = dataclasses.replace(handouts[2], task="multiplication")
    page = handout_html(h)
    pdf = re.sub(r"\s+", " ", " ".join(p.extract_text() for p in PdfReader(io.BytesIO(handout_pdf(h))).pages))
    for text in (page, pdf):
        assert "How a language model multiplies" in text and "How a language model adds" not in text
        assert f"{h.n_questions:,} multiplication questions of the {h.split} split" in text


def test_handout_pdf_has_every_step_with_its_figures(handouts):
    for h in handouts.values():
        reader = PdfReader(io.BytesIO(handout_pdf(h)))
        text = " ".join(p.extract_text() for p in reader.pages)
        text = re.sub(r"\s+", " ", text)
        assert "How a language model adds" in text and h.accuracy_line in text
        for s in h.steps:
            assert s.title in text, s.title
        # the figures are stamped in as vector art: their titles and axis titles are text of the PDF
        assert "Logit-lens accuracy by layer" in text and "frequency k" in text
        assert len(reader.pages) >= 1 + len(h.steps)


def test_a_bad_request_is_one_line_that_says_what_to_do(tmp_path):
    with pytest.raises(CoreError, match="no run matches 'zzz'; the runs: "):
        pick_run(RUNS, "zzz")
    with pytest.raises(CoreError, match="matches [0-9]+ runs; name one of them"):
        pick_run(RUNS, "smollm2")
    with pytest.raises(CoreError, match="no cache folder"):
        write_handouts(tmp_path / "nowhere", tmp_path)
    with pytest.raises(CoreError, match="unknown format doc"):
        write_handouts(CACHE, tmp_path, formats=("doc",))
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(CoreError, match="cannot write the handout into"):
        write_handouts(CACHE, blocked / "sub", TWO_LAYER, formats=("html",))


@pytest.mark.slow
def test_the_command_writes_both_files_for_the_default_run(tmp_path):
    """From a clone: scripts/handout.py writes the HTML and the PDF with every step (as `bash run.sh handout`). The
    2-layer run's files come from the same code, built in this process by the `handouts` fixture."""
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "scripts/handout.py", "--out", str(tmp_path)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("wrote ") == 2 and "WARNING" not in done.stderr
    htmls, pdfs = sorted(tmp_path.glob("*.html")), sorted(tmp_path.glob("*.pdf"))
    assert len(htmls) == len(pdfs) == 1
    for page in htmls:
        text = page.read_text(encoding="utf-8")
        assert all(s.title in text for s in STEPS)
    bad = subprocess.run(
        [sys.executable, "scripts/handout.py", "--run", "zzz", "--out", str(tmp_path)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("handout: no run matches") and bad.stderr.count("\n") == 1


@pytest.mark.slow
def test_the_html_opens_offline_as_handout_slides_and_reveal(handouts, tmp_path):
    """Headless Chromium with every request but the file itself refused: the steps draw, the Slides button shows
    one step a screen, and predict-then-reveal hides each measurement until Reveal."""
    browser_mod = pytest.importorskip("app.launch.browser")
    if not browser_mod.chromium_path():
        pytest.skip("chromium is not installed")
    from playwright.sync_api import sync_playwright

    path = tmp_path / "handout.html"
    path.write_text(handout_html(handouts[2]), encoding="utf-8")
    asked = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=browser_mod.chromium_path(), args=browser_mod.CHROMIUM_ARGS)
        page = b.new_page(viewport={"width": 1024, "height": 768})
        page.on("request", lambda r: asked.append(r.url))
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
        page.goto(path.as_uri())
        assert page.locator("section.step").count() == len(STEPS) + 1
        assert page.locator("section.step svg").count() >= 7
        page.click("#slides-button")
        assert page.locator("section.step:visible").count() == 1
        page.keyboard.press("ArrowRight")
        assert page.inner_text("#position").startswith(f"Step 1 of {len(STEPS)}")
        assert page.locator("#step-1 h2").is_visible()
        page.check("#reveal-mode")
        before = page.inner_text("#position")
        page.keyboard.press("ArrowRight")  # the keys work straight after the tick, with no click elsewhere
        assert page.inner_text("#position") != before
        page.keyboard.press("Home")
        page.keyboard.press("ArrowRight")  # step 1 again, its first part
        assert page.inner_text("#position").startswith(f"Step 1 of {len(STEPS)}")
        assert not page.locator("#step-1 .headline").is_visible()
        assert not page.locator("#step-1 figure").first.is_visible()
        assert page.locator("#step-1 .predict").is_visible()
        page.click("#step-1 .reveal-button")
        assert page.locator("#step-1 .headline").is_visible()
        while not page.locator("#step-1 figure").first.is_visible():  # the step's later parts, if it has some
            before = page.inner_text("#position")
            page.keyboard.press("ArrowRight")
            assert page.inner_text("#position") != before and page.locator("#step-1").is_visible()
        b.close()
    assert [u for u in asked if not u.startswith("file:")] == []


def test_training_logs_are_the_small_models_only():
    logs = training_logs_of(RUNS)
    assert logs and all("fine-tuned" not in name for name in logs)


def test_every_verdict_has_its_colour_in_both_files():
    assert set(VERDICT_RGB) == set(VERDICTS)
    assert all(f".verdict-{v.replace(' ', '-')} " in HANDOUT_CSS for v in VERDICTS)


@pytest.mark.slow
@pytest.mark.parametrize("asked, best", [("k-shot", False), (None, True)], ids=["digit-writing-run", "best-run-toggle"])
def test_other_kinds_of_run_make_both_files_with_every_step(asked, best):
    """Beyond the default and the 2-layer run: a model that writes numbers as digits (most steps do not apply),
    and the Tour's toggle that shows each step on the shipped run that shows it best."""
    run = pick_run(RUNS, asked)
    runs = [r for r in RUNS if r.split == run.split]
    h = build_handout(run, runs, claims_of, claim_training, best=best)
    page = handout_html(h)
    text = re.sub(r"\s+", " ", " ".join(p.extract_text() for p in PdfReader(io.BytesIO(handout_pdf(h))).pages))
    for step in STEPS:
        assert step.title in page and step.title in text, step.title
    assert h.accuracy_line in page and f"{h.n_questions:,} {run.split} questions" in h.accuracy_line
    if best:
        assert any(s.note.startswith("This step shows ") for s in h.steps)
    else:
        assert any(s.missing for s in h.steps) and any(s.claim.verdict == "does not apply" for s in h.steps)


#: This test's own list of words a student may not know (not the glossary's keys), each with the entry of the one
#: word list (app/glossary.py TERMS) that must be printed on any step that uses it.
STUDENT_JARGON = {
    r"\bMLPs?\b": "MLP",
    r"\battention\b": "attention",
    r"\blayers?\b": "layer",
    r"\bblocks?\b": "block",
    r"\btokens?\b": "token",
    r"\bprobes?\b": "probe",
    r"\bepochs?\b": "epoch",
    r"\bseeds?\b": "seed",
    r"\bloss\b": "loss",
    r"\btied\b": "tied",
    r"\bdeltas?\b": "delta",
    r"Fourier-frozen": "Fourier-frozen",
    r"[Ff]ine-tun": "fine-tuning",
    r"[Ll]ogit lens": "logit lens",
    r"[Pp]hase.shift|[Ss]hift\w* [^.]{0,40}waves": "phase shift",
    r"\bcontrols?\b": "random control",
    r"\btau\b": "cutoff tau",
    r"\bperiods?\b": "period",
    r"\bfrequenc": "frequency k",
}


def test_every_word_a_step_uses_is_defined_on_that_step(handouts):
    """On the default run's and a 2-layer run's handout: a step whose printed words use one of the words above
    prints that word's definition among its terms."""
    missing = []
    for h in handouts.values():
        for s in h.steps:
            words = " ".join([s.title, s.question, s.claim.paper, s.line, s.why, s.claim.measured, s.note, s.missing,
                              *(f.caption for f in s.figures)])
            shown = {name for name, _ in s.terms}
            missing += [f"{h.run_label[:30]}, step {s.number}: '{name}'" for pattern, name in STUDENT_JARGON.items()
                        if re.search(pattern, words, re.IGNORECASE) and name not in shown]
    assert not missing, missing


def test_the_definitions_say_what_the_default_run_did():
    """The glossary's words about the default model (its frozen blocks) agree with the default run's recipe."""
    run = pick_run(RUNS, None)
    recipe = run_origin(run.manifest)["recipe"] or {}
    first = int((recipe.get("number_tokens") or {}).get("frozen_blocks", 0))
    assert first, "the default run trains its top blocks only"
    last = run.n_layers - 1
    for name in ("block", "frozen"):
        assert f"{first}..{last}" in TERMS[name], (name, TERMS[name])


#: (the current slide's step, whether a verdict badge and a figure are both in view on it)
VERDICT_WITH_FIGURE = """() => {
  const s = document.querySelector("section.step.current");
  const seen = (el) => el.getClientRects().length > 0 && el.getBoundingClientRect().bottom <= window.innerHeight + 1;
  const verdict = [...s.querySelectorAll(".verdict")].some(seen);
  const figure = [...s.querySelectorAll(".figures svg, .figures table")].some(seen);
  return [s.dataset.step, verdict && figure];
}"""


@pytest.mark.slow  # a real browser, as the other Chromium tests
def test_the_slides_and_the_pdf_read_from_the_back_of_the_room(handouts, tmp_path):
    """Chromium at 1024 x 768, the default run's and a 2-layer run's slides: every slide within the screen, its text
    at least 16 px and its chart text at least 14 px as drawn, walked with the arrow key; every step with a figure
    has a slide that shows its verdict and a figure together; the keys still move after a
    click on the Slides button, on Next, on the switch and on Reveal. The PDF: every page a step's first page, a page
    of its figures, a detail block's first page (every number, or the words) or the title or About page (no page opens
    mid-sentence), each figure's smallest text at least 7 pt."""
    browser_mod = pytest.importorskip("app.launch.browser")
    if not browser_mod.chromium_path():
        pytest.skip("chromium is not installed")
    problems = []
    with browser_mod.browser() as b:
        for layers, h in handouts.items():
            path = tmp_path / f"handout-{layers}.html"
            path.write_text(handout_html(h), encoding="utf-8")
            page = b.new_page(viewport={"width": 1024, "height": 768})
            page.goto(path.as_uri())
            page.click("#slides-button")
            together = {}  # step -> whether some slide of it shows its verdict and a figure at once

            def look(at: str) -> None:
                problems.extend(f"{layers} layers, {at}: {p}" for p in browser_mod.slide_problems(page))
                step, both = page.evaluate(VERDICT_WITH_FIGURE)
                together[step] = together.get(step, False) or both

            count = browser_mod.walk_slides(page, look)
            assert count >= len(STEPS) + 1
            with_figures = {str(s.number) for s in h.steps if s.figures}
            apart = sorted(k for k in with_figures if not together.get(k))
            assert not apart, f"{layers} layers: no slide shows the verdict beside a figure for steps {apart}"
            # the keys after a click on each control: the position moves on at once
            for click in ("#next", "#reveal-mode", "#step-1 .reveal-button"):
                page.keyboard.press("Home")
                page.keyboard.press("ArrowRight")
                if click == "#step-1 .reveal-button":
                    page.check("#reveal-mode")
                before = page.inner_text("#position")
                page.click(click)
                if click == "#next":
                    before = page.inner_text("#position")
                page.keyboard.press("ArrowRight")
                assert page.inner_text("#position") != before, click
                page.uncheck("#reveal-mode")
            page.close()
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])

    for layers, h in handouts.items():
        data, placements, table_pages = handout_pdf_layout(h)
        reader = PdfReader(io.BytesIO(data))
        figure_pages = {p.page for p in placements} | set(table_pages)
        for i, pdf_page in enumerate(reader.pages[1:], start=1):
            top = " ".join(pdf_page.extract_text().split()[:40])
            starts = (any(top.startswith(s.title) for s in h.steps) or top.startswith("About this handout")
                      or top.startswith((ALL_NUMBERS, WORDS)))  # a step's detail block, kept whole, under its heading
            assert starts or i in figure_pages, f"{layers} layers, page {i + 1} holds only leftover words: {top!r}"
        smallest = min(placements, key=lambda p: p.smallest_text_pt)
        assert smallest.smallest_text_pt >= 7, (layers, smallest.page + 1, smallest.smallest_text_pt)


def test_the_smallest_font_of_a_spec_reads_through_empty_parts():
    """An empty axis ({} in Altair's output) holds no size; the smallest size anywhere else is found."""
    spec = {"layer": [{"encoding": {"x": {"axis": {}}}}, {"mark": {"type": "text", "fontSize": 13}}],
            "config": {"axis": {"labelFontSize": 16, "titleFontSize": 18}, "legend": {}}}
    assert smallest_font(spec) == 13 and smallest_font({"axis": {}}) == float("inf")
