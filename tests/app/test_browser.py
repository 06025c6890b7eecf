"""A real browser (Debian's Chromium, headless) opens every dashboard page and saves a screenshot."""

import functools
import importlib.util

import pytest

from app.launch import browser
from app.tour.steps import STEPS
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        browser.chromium_path() is None or importlib.util.find_spec("playwright") is None,
        reason="needs Chromium and playwright: `bash run.sh setup` installs both",
    ),
]


def test_every_page_in_a_real_browser(app_env, tmp_path):
    shots = tmp_path / "screenshots"
    with browser.serve(app_env["cache"], app_env["models"]) as base, browser.browser() as b:
        for name, path in browser.PAGES.items():
            report = browser.visit(b, f"{base}/{path}", shots / f"{name}.png")
            assert report["errors"] == [], (name, report["errors"])
            assert report["title"], name
            assert report["charts"] >= 1 or name == "terms", name  # the Terms page is text
            assert (shots / f"{name}.png").stat().st_size > 20_000, name
        # a shared link reopens the same view
        run = app_env["runs"]["random llama"].name
        report = browser.visit(b, f"{base}/?run={run}&step=3&tau=20")
        assert report["errors"] == [] and report["charts"] >= 1
        for alias in ("tour", "start"):  # links people type or keep from older versions open the Tour
            report = browser.visit(b, f"{base}/{alias}?run={run}&step=2")
            assert report["errors"] == [] and report["charts"] >= 1, alias


def test_csv_upload_in_a_real_browser(app_env, tmp_path):
    csv = tmp_path / "api-model.csv"
    csv.write_text("a,b,answer_given\n15,93,108\n20,30,60\n1,2,3\n40,2,32\n")
    with browser.serve(app_env["cache"], app_env["models"]) as base, browser.browser() as b:
        text = browser.upload(b, f"{base}/behaviour", csv)
    assert "answers in api-model.csv" in text
    assert "50.00%" in text  # 2 of 4 right; both errors (+10, -10) are multiples of 10
    assert "100%" in text


#: A projector: the window the Tour is designed for, and the tallest a chart may be drawn in it.
PROJECTOR, MAX_CHART_HEIGHT = {"width": 1024, "height": 768}, 700


def projector_problems(page, large: bool) -> list[str]:
    """What a class could not read on the page as drawn: app.launch.browser.layout_problems, and a chart taller than the
    screen."""
    heights = [round(box["height"]) for e in page.locator(".vega-embed").all() if (box := e.bounding_box())]
    tall = [f"a chart {h} px tall (the screen is 768)" for h in heights if h > MAX_CHART_HEIGHT]
    return browser.layout_problems(page, large) + tall


#: The Tour's last step.
LAST = len(STEPS)


@functools.cache
def projector_walk() -> tuple[str, ...]:
    """Chromium at 1024 x 768 on the default shipped run (30 layers), in normal and presentation mode: every Tour
    step reached with Next and opened by its link, and every page; every step in presentation mode with the sidebar
    opened; the 2-layer demo run's steps and pages by link in presentation mode and its Tour steps in normal mode
    too. Every problem a class would see (`projector_problems`), with where it was seen."""
    runs = [r for r in list_runs(PROJECT_ROOT / "cache") if r.ok]
    if not runs:
        pytest.skip("no shipped runs")
    default = min(runs, key=lambda r: (r.manifest.get("display_order", 100), r.manifest.get("label", "")))
    small = next((r for r in runs if r.manifest.get("n_layers") == 2 and "phase_locking" in r.manifest["tables"]), None)
    problems = []
    with browser.serve(PROJECT_ROOT / "cache") as base, browser.browser() as b:
        page = b.new_page(viewport=PROJECTOR)

        def look(url: str, where: str, large: bool) -> None:
            if url:
                page.goto(url)
            browser.wait_until_idle(page)
            problems.extend(f"{where}: {p}" for p in projector_problems(page, large))

        for large in (False, True):
            mode = "presentation" if large else "normal"
            query = f"run={default.name}" + ("&large=1" if large else "")
            look(f"{base}/?{query}&step=1", f"{mode}, step 1", large)
            for step in range(2, LAST + 1):  # by Next: the charts are redrawn in place, not opened afresh
                shown, settled = browser.press_tour_button(page, "Next ▶")
                assert shown == step, (mode, shown, step)
                if not settled:
                    problems.append(f"{mode}, step {step} by Next: a chart still changed size 2 s after drawing")
                look("", f"{mode}, step {step} by Next", large)
            for step in range(2, LAST + 1):
                look(f"{base}/?{query}&step={step}", f"{mode}, step {step} by link", large)
            for name, path in browser.PAGES.items():
                if path:
                    look(f"{base}/{path}?{query}", f"{mode}, page {name}", large)
        # a lecturer opens the sidebar to change the run: every step in presentation mode with it open (a page of
        # its own: the browser keeps the sidebar open for the page that opened it)
        main_page, page = page, b.new_page(viewport=PROJECTOR)
        for step in range(1, LAST + 1):
            page.goto(f"{base}/?run={default.name}&large=1&step={step}")
            browser.wait_until_idle(page)
            if not browser.open_sidebar(page):  # or open already, from the step before
                problems.append(f"sidebar open, presentation, step {step}: a chart still changed size 2 s after")
            assert page.locator('[data-testid="stSidebarContent"]').is_visible(), step
            look("", f"sidebar open, presentation, step {step}", True)
        page.close()
        page = main_page
        if small is not None:
            for step in range(1, LAST + 1):
                look(f"{base}/?run={small.name}&step={step}", f"2 layers, normal, step {step}", False)
            query = f"run={small.name}&large=1"
            for step in range(1, LAST + 1):
                look(f"{base}/?{query}&step={step}", f"2 layers, step {step}", True)
            for name, path in browser.PAGES.items():
                if path:
                    look(f"{base}/{path}?{query}", f"2 layers, page {name}", True)
    return tuple(problems)


def test_every_tour_step_and_page_reads_on_a_projector():
    """Fails on a chart title cut or wider than its chart, overlapping tick labels, an unrounded legend value, an
    error box, a chart taller than the screen and (presentation mode) axis or legend text under 14 px, on every
    Tour step and page."""
    problems = [p for p in projector_walk() if not p.startswith("2 layers, normal")]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:60])


def test_the_2_layer_tour_reads_in_normal_mode():
    problems = [p for p in projector_walk() if p.startswith("2 layers, normal")]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:60])
