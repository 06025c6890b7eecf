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
    """Every page drawn whole, without an error and saved as a screenshot; a shared link and the Tour's older names
    open the Tour. Two pages at a time (`browser.walk`)."""
    shots = tmp_path / "screenshots"
    run = app_env["runs"]["random llama"].name
    reports = {}

    def look(page, view, settled):
        png = shots / f"{view.where}.png" if view.where in browser.PAGES else None
        reports[view.where] = browser.report(page, png)

    aliases = ("tour", "start", "guided-tour")  # links people type or keep from older versions open the Tour
    with browser.serve(app_env["cache"], app_env["models"]) as base, browser.browser() as b:
        views = [browser.View(name, url=f"{base}/{path}") for name, path in browser.PAGES.items()]
        views.append(browser.View("shared link", url=f"{base}/?run={run}&step=3&tau=20"))  # reopens the same view
        views += [browser.View(f"link /{alias}", url=f"{base}/{alias}?run={run}&step=2") for alias in aliases]
        pages = [b.new_page(viewport={"width": 1400, "height": 2600}) for _ in range(2)]
        browser.walk(pages, [views[::2], views[1::2]], look)
    assert len(reports) == len(views)
    for name in browser.PAGES:
        report = reports[name]
        assert report["errors"] == [], (name, report["errors"])
        assert report["title"], name
        assert report["charts"] >= 1 or name == "terms", name  # the Terms page is text
        assert (shots / f"{name}.png").stat().st_size > 20_000, name
    for where in ("shared link", *(f"link /{alias}" for alias in aliases)):
        assert reports[where]["errors"] == [] and reports[where]["charts"] >= 1, where


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
    heights = [round(box["height"]) for e in page.locator(".vega-embed").all()
               if e.evaluate("e => e.checkVisibility()") and (box := e.bounding_box())]
    tall = [f"a chart {h} px tall (the screen is 768)" for h in heights if h > MAX_CHART_HEIGHT]
    return browser.layout_problems(page, large) + tall


#: The Tour's last step.
LAST = len(STEPS)


def projector_views(base: str, default: str, small: str | None) -> list[list[browser.View]]:
    """The projector walk's views, as three pages' queues: the Tour by Next in presentation mode (one page: the
    charts redrawn in place, not opened afresh); every step in presentation mode with the sidebar and every fold
    opened (a page of its own: the sidebar stays open on the page that opened it); and every other view opened by
    its link (each Tour step in normal mode, every page in both modes), shared between the first page and a third.
    Each view is drawn once: a step by Next in presentation mode is not opened again by its link."""
    View = browser.View
    by_next, links = [], []
    query = f"run={default}&large=1"
    by_next.append(View("presentation, step 1", url=f"{base}/?{query}&step=1", large=True))
    by_next += [View(f"presentation, step {step} by Next", button="Next ▶", large=True) for step in range(2, LAST + 1)]
    links += [View(f"normal, step {step} by link", url=f"{base}/?run={default}&step={step}")
              for step in range(1, LAST + 1)]
    for large in (False, True):
        mode = "presentation" if large else "normal"
        # in presentation mode every fold of the page opened: its charts are measured as a class sees them opened
        links += [View(f"{mode}, page {name}", url=f"{base}/{path}?run={default}" + ("&large=1" if large else ""),
                       large=large, folds=large) for name, path in browser.PAGES.items() if path]
    # a lecturer opens the sidebar to change the run, and a fold to show what it holds: the narrowest column
    sidebar = [View(f"sidebar open, presentation, step {step}", url=f"{base}/?run={default}&large=1&step={step}",
                    sidebar=True, large=True, folds=True) for step in range(1, LAST + 1)]
    if small is not None:
        links += [View(f"2 layers, normal, step {step}", url=f"{base}/?run={small}&step={step}")
                  for step in range(1, LAST + 1)]
        query = f"run={small}&large=1"
        links += [View(f"2 layers, step {step}", url=f"{base}/?{query}&step={step}", large=True)
                  for step in range(1, LAST + 1)]
        links += [View(f"2 layers, page {name}", url=f"{base}/{path}?{query}", large=True)
                  for name, path in browser.PAGES.items() if path]
    first, third = by_next, []
    for view in links:  # to the shorter of the two queues that take links
        (first if len(first) <= len(third) else third).append(view)
    return [first, sidebar, third]


@functools.cache
def projector_walk() -> tuple[str, ...]:
    """Chromium at 1024 x 768 on the default shipped run (30 layers), in normal and presentation mode: every Tour
    step reached with Next and opened by its link, and every page; every step in presentation mode with the sidebar
    and its folds opened; the 2-layer demo run's steps and pages by link in presentation mode and its Tour steps in
    normal mode too (`projector_views`). Every problem a class would see (`projector_problems`), with where it was
    seen."""
    runs = [r for r in list_runs(PROJECT_ROOT / "cache") if r.ok]
    if not runs:
        pytest.skip("no shipped runs")
    tests = [r for r in runs if r.manifest["task"].get("split") == "test"] or runs  # the split the dashboard opens on
    default = min(tests, key=lambda r: (r.manifest.get("display_order", 100), r.manifest.get("label", "")))
    small = next((r for r in runs if r.manifest.get("n_layers") == 2 and "phase_locking" in r.manifest["tables"]), None)
    problems, seen = [], []

    def look(page, view: browser.View, settled: bool) -> None:
        seen.append(view.where)
        if view.sidebar:
            assert page.locator('[data-testid="stSidebarContent"]').is_visible(), view.where
        if not settled:
            problems.append(f"{view.where}: a chart still changed size 2 s after drawing")
        problems.extend(f"{view.where}: {p}" for p in projector_problems(page, view.large))
        problems.extend(f"{view.where}: {p}" for p in browser.cut_text(page))
        # a Tour step on a projector is one screen: the claim, the verdict with its reason and the figure together
        if view.large and not view.sidebar and " step " in f" {view.where} " and (over := browser.scrolls(page)):
            problems.append(f"{view.where}: the step runs {over} px past the 768 px screen")
        # the measure's own control: the Terms page is many screens long, so it must read as one that scrolls
        if view.where == "presentation, page terms" and not browser.scrolls(page):
            problems.append(f"{view.where}: the scroll measure reads 0 on a page many screens long")

    with browser.serve(PROJECT_ROOT / "cache") as base, browser.browser() as b:
        queues = projector_views(base, default.name, small.name if small else None)
        pages = [b.new_page(viewport=PROJECTOR) for _ in queues]
        browser.walk(pages, queues, look)
    assert len(seen) == sum(map(len, queues)) and len(set(seen)) == len(seen)
    return tuple(problems)


def test_every_tour_step_and_page_reads_on_a_projector():
    """Fails on a chart title cut or wider than its chart, overlapping tick labels, an unrounded legend value, an
    error box, a chart taller than the screen, text or a chart label cut short, (presentation mode) axis or legend
    text under 14 px, and a Tour step in presentation mode that does not fit one 1024x768 screen, on every Tour step
    and page of the default run and of a 2-layer run."""
    problems = [p for p in projector_walk() if not p.startswith("2 layers, normal")]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:60])


def test_the_2_layer_tour_reads_in_normal_mode():
    problems = [p for p in projector_walk() if p.startswith("2 layers, normal")]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:60])


def test_the_cut_text_measure_sees_a_control_s_value_cut_short():
    """A select box shows its choice as an input's value, which no text-node measure sees: a value wider than its box
    in the main area is reported, one that fits is not, nor one in the sidebar (its run picker is cut by design, the
    full label the caption under it)."""
    html = """<div data-testid="stSidebar"><input style="width:60px" value="a run picker's long label, cut"></div>
      <div data-testid="stMain"><input style="width:80px" value="restore: clean into corrupted, second operand +1">
      <input style="width:300px" value="restore, b ± 1"></div>"""
    with browser.browser() as b:
        page = b.new_page(viewport=PROJECTOR)
        page.set_content(html)
        cut = 'a control\'s value cut short: "restore: clean into corrupted, second operand +1"'
        assert browser.cut_text(page) == [cut]


def test_the_layout_measure_sees_a_title_clipped_at_the_chart_s_top():
    """A chart's title drawn above its SVG's top edge is clipped there on screen: one about 20 px above is reported,
    one inside is not, nor a glyph's box reaching a pixel or two above (the check allows 4)."""
    def chart(title: str, top: int) -> str:
        return (f'<div class="vega-embed" style="margin-top:60px"><svg class="marks" width="400" height="200" '
                f'style="overflow:visible"><g class="role-title-text"><text y="{top}" font-size="20">{title}</text>'
                f'</g></svg></div>')
    # the baseline at y: the glyphs' box reaches about one font size (20 px) above it, a little more in some fonts
    html = chart("Above the top", -4) + chart("Inside", 30) + chart("A glyph's box", 17)
    with browser.browser() as b:
        page = b.new_page(viewport=PROJECTOR)
        page.set_content(html)
        problems = browser.layout_problems(page, False)
    clipped = [p for p in problems if p.startswith("title clipped at the chart's top")]
    assert len(clipped) == 1 and clipped[0].endswith('"Above the top"'), problems
