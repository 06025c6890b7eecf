"""Drive the dashboard in a real browser (Debian's Chromium, headless): serve it, open a page, check it, screenshot it.

`serve` starts `streamlit run app/main.py` on a free local port; `visit` opens one page, waits until Streamlit
has finished running, and `report`s the page's title, its number of charts and any error; `walk` goes through many
`View`s (links opened, Tour buttons pressed, the sidebar opened) on a few pages at once, so both cores work;
`upload` feeds a file to a page's uploader; `layout_problems` and `slide_problems` say what a class could not read.
Used by the browser tests (tests/app/test_browser.py, tests/app/test_handout.py), the screenshot scripts
(scripts/browser.py, scripts/handout_screenshots.py) and the cold-start benchmark (scripts/bench_app.py). Needs
playwright and Chromium.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import sync_playwright

from app.launch.server import free_port, streamlit_command, wait_healthy
from core.files import PROJECT_ROOT

#: The control that opens a collapsed sidebar (presentation mode starts with it collapsed).
OPEN_SIDEBAR = '[data-testid="stExpandSidebarButton"]'
#: page name -> URL path (the Tour is the default page, served at the root)
PAGES = {
    "tour": "",
    "logit-lens": "logit-lens",
    "spectra": "spectra",
    "waves": "waves",
    "ablations": "ablations",
    "embeddings": "embeddings",
    "patching": "patching",
    "training": "training",
    "behaviour": "behaviour",
    "terms": "terms",
}
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


#: The page's first heading (the Tour in presentation mode has no h1)
HEADING = '[data-testid="stMain"] h1, [data-testid="stMain"] h2, [data-testid="stMain"] h3'


def chromium_path() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def serve(cache_dir: str | Path, models_dir: str | Path | None = None, timeout: float = 60.0):
    """Run the dashboard on localhost; yields its base URL."""
    port = free_port()
    env = dict(os.environ, FOURIER_CACHE_DIR=str(cache_dir))
    if models_dir:
        env["FOURIER_MODELS_DIR"] = str(models_dir)
    proc = subprocess.Popen(
        streamlit_command(port), cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(base, proc, timeout)
        except RuntimeError:
            proc.kill()
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            raise RuntimeError(f"the dashboard did not start: {out[-2000:]}") from None
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def browser():
    path = chromium_path()
    if not path:
        raise RuntimeError("no Chromium found: apt-get install chromium (bash run.sh setup does it)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


#: True once Streamlit has finished running the page's script (its app root says so) and shows no placeholder.
SCRIPT_DONE_JS = (
    "() => document.querySelector('[data-testid=\"stApp\"]')?.dataset.testScriptState === 'notRunning'"
    " && !document.querySelector('[data-testid=\"stStatusWidget\"]')"
    " && document.querySelectorAll('[data-testid=\"stSkeleton\"]').length === 0"
)
#: The Tour step on screen, from its position line ("Step 3 of 9 · addition run"); undefined off the Tour.
TOUR_STEP_JS = (
    "() => document.querySelector('[data-testid=\"stMain\"] [data-testid=\"stProgress\"]')"
    "?.textContent.match(/Step (\\d+) of \\d+/)?.[1]"
)
#: How often (ms) a wait asks the page again: often enough to lose little time, rarely enough to leave the CPU to the
#: server (Playwright's default asks on every animation frame).
POLL_MS = 50


def wait_until_idle(page, timeout_ms: int = 60000) -> None:
    """Until Streamlit has drawn the page and stopped running the script."""
    page.wait_for_selector(HEADING, timeout=timeout_ms)
    page.wait_for_function(SCRIPT_DONE_JS, timeout=timeout_ms, polling=POLL_MS)
    # every visible chart has drawn (vega-embed puts its svg or canvas in once its view has run), then two frames
    page.wait_for_function(
        "() => [...document.querySelectorAll('.vega-embed')].filter(e => e.checkVisibility()).every(e => {"
        " const d = e.querySelector('svg, canvas'); return d && d.getBoundingClientRect().height > 0; })",
        timeout=timeout_ms,
        polling=POLL_MS,
    )
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


#: The Tour's buttons a walk may press, and the step each leads to from step n.
TOUR_BUTTONS = {"Next ▶": 1, "◀ Back": -1}


@dataclass(frozen=True)
class View:
    """One view a walk looks at: `url` opened afresh, or one of the Tour's `TOUR_BUTTONS` pressed on the page's current
    step (exactly one of the two); then, with `sidebar`, the sidebar opened; with `folds`, every closed fold (expander)
    opened. `where` names the view in a report and must be unique in a walk; `large`: presentation mode."""

    where: str
    url: str | None = None
    button: str | None = None
    sidebar: bool = False
    large: bool = False
    folds: bool = False

    def __post_init__(self):
        if (self.url is None) == (self.button is None):
            raise ValueError(f"{self.where}: a view opens a url or presses a button, not {self.url!r} and "
                             f"{self.button!r}")
        if self.button is not None and self.button not in TOUR_BUTTONS:
            raise ValueError(f"{self.where}: no Tour button {self.button!r} (one of {sorted(TOUR_BUTTONS)})")


def walk(pages: list, queues: list[list[View]], look, timeout_ms: int = 60000) -> None:
    """Every view of each page's queue (`queues[i]` on `pages[i]`, in order: a walk by Next is one page's queue), with
    the pages' work overlapped: while one page opens its next link (its renderer and the server at work), another's
    view is waited for and looked at, so both cores of a small machine work. A button press is waited for and looked
    at at once, so the charts it redraws are watched from their redrawing. For each view, once it is drawn,
    `look(page, view, settled)`; `settled` is False when a chart still changed size 2 s after the view was drawn (by a
    link or a button press) or the sidebar opened (see `CHARTS_STILL_JS`). A button press waits for the exact step it
    leads to (no fixed wait).

    Each page should have a browser context of its own (`Browser.new_page` gives one): Playwright's Chromium keeps
    drawing pages that are not in front, and the sidebar a page opened stays its own. A view that fails raises with
    its `where` noted."""
    names = [v.where for q in queues for v in q]
    if len(set(names)) != len(names):
        raise ValueError(f"views named twice: {sorted({n for n in names if names.count(n) > 1})}")
    queues = [list(q) for q in queues]
    in_flight: list[tuple[View, str | None] | None] = [None] * len(pages)

    def settle(i: int) -> None:
        (view, step), in_flight[i] = in_flight[i], None
        try:
            look(pages[i], view, _finish(pages[i], view, step, timeout_ms))
        except Exception as exc:
            exc.add_note(f"while looking at {view.where!r}")
            raise

    def begin(i: int) -> None:
        while queues[i]:
            view = queues[i].pop(0)
            in_flight[i] = (view, _begin(pages[i], view))
            if view.button is None:
                return  # a link loads while the other pages are looked at
            settle(i)

    for i in range(len(pages)):
        begin(i)
    while any(in_flight):
        for i in range(len(pages)):
            if in_flight[i] is not None:
                settle(i)
                begin(i)


def _begin(page, view: View) -> str | None:
    """Start opening `view` without waiting for it; the Tour step a button press leads to, if one was pressed."""
    if view.url is not None:
        page.goto(view.url, wait_until="commit")
        return None
    before = page.evaluate(TOUR_STEP_JS)
    if before is None:
        raise AssertionError(f"{view.where}: no Tour position line ('Step N of 9') to press {view.button!r} from")
    page.get_by_role("button", name=view.button).click()
    return str(int(before) + TOUR_BUTTONS[view.button])


def _finish(page, view: View, step: str | None, timeout_ms: int) -> bool:
    """Wait until `view` is on screen and drawn; whether its charts settled."""
    if step is not None:  # the position line shows the step the button leads to
        page.wait_for_function(f"(step) => ({TOUR_STEP_JS})() === step", arg=step, timeout=timeout_ms,
                               polling=POLL_MS)
    wait_until_idle(page, timeout_ms)
    # a link's charts too: Vega may lay a chart out again (its title wrapped anew to the drawn width) after Streamlit
    # is idle
    settled = page.evaluate(CHARTS_STILL_JS)
    if view.sidebar:
        settled = open_sidebar(page) and settled
    if view.folds:
        settled = open_folds(page) and settled
    return settled


#: A fold (Streamlit expander) still closed.
CLOSED_FOLD = '[data-testid="stExpander"] details:not([open]) > summary'


def open_folds(page, timeout_ms: int = 10000) -> bool:
    """Open every closed fold on the page and wait until its charts are drawn at the column's width. Whether the
    charts settled (`CHARTS_STILL_JS`)."""
    closed = page.locator(CLOSED_FOLD)
    for _ in range(closed.count()):  # each click leaves one fewer closed; a fold inside a fold opens in its turn
        closed.first.click()
    wait_until_idle(page, timeout_ms)
    return page.evaluate(CHARTS_STILL_JS)


def open_sidebar(page, timeout_ms: int = 10000) -> bool:
    """Open a collapsed sidebar (presentation mode starts with it collapsed) and wait until it has slid fully in
    and the charts have redrawn to their narrower column; nothing when it is open already. Whether the charts
    settled (False: one still changed size after two seconds)."""
    if page.locator(OPEN_SIDEBAR).is_visible():
        page.click(OPEN_SIDEBAR)
    page.wait_for_function(
        "() => { const b = document.querySelector('[data-testid=\"stSidebar\"]')?.getBoundingClientRect();"
        " return b && b.width > 0 && Math.abs(b.left) < 1; }",
        timeout=timeout_ms,
        polling=POLL_MS,
    )
    wait_until_idle(page, timeout_ms)
    return page.evaluate(CHARTS_STILL_JS)


#: Resolves true once every chart's drawing has kept its size and its title's place for five animation frames in a
#: row (a chart redrawn to a new column width, its title wrapped anew, has settled), false when one still changes after
#: two seconds.
CHARTS_STILL_JS = """
() => new Promise(resolve => {
  const sizes = () => [...document.querySelectorAll('.vega-embed svg, .vega-embed canvas')]
    .map(e => { const b = e.getBoundingClientRect(), t = e.querySelector('.role-title-text text');
                return `${b.width}x${b.height}@${t ? t.getBoundingClientRect().top - b.top : ''}`; }).join();
  let last = sizes(), still = 0;
  const until = performance.now() + 2000;
  const tick = () => {
    const now = sizes();
    still = now === last ? still + 1 : 0;
    last = now;
    if (still >= 5) resolve(true); else if (performance.now() > until) resolve(false); else requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
})
"""


def visit(b, url: str, out_png: Path | None = None, width: int = 1400, height: int = 2600) -> dict:
    """Open `url` in a new browser page (a context of its own) and `report` on it once drawn and its charts laid out,
    with "settled": False when a chart still changed size or moved its title two seconds after (`CHARTS_STILL_JS`)."""
    page = b.new_page(viewport={"width": width, "height": height})
    try:
        page.goto(url)
        wait_until_idle(page)
        settled = page.evaluate(CHARTS_STILL_JS)
        return {**report(page, out_png), "settled": settled}
    finally:
        page.close()


def report(page, out_png: Path | None = None) -> dict:
    """The page as drawn now: its URL, title, number of charts, chart heights and titles, errors and layout problems
    (presentation mode's when its URL says large=1); optionally a screenshot saved to `out_png`."""
    found = {
        "url": page.url,
        "title": page.locator(HEADING).first.inner_text(),
        "charts": page.locator(".vega-embed").count(),
        "chart_heights": [round(box["height"]) for e in page.locator(".vega-embed").all() if (box := e.bounding_box())],
        "chart_titles": [
            e.get_attribute("aria-label") or "" for e in page.locator(".vega-embed svg, .vega-embed canvas").all()
        ],
        "errors": [
            e.inner_text()
            for e in page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]').all()
        ]
        + (["page not found"] if page.get_by_text("Page not found").count() else []),
        "layout": layout_problems(page, "large=1" in page.url),
    }
    if out_png is not None:
        out_png.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out_png))
    return found


def upload(b, url: str, file: Path) -> str:
    """Open a page, upload `file` into its file uploader, return the page's text once it has rerun."""
    page = b.new_page(viewport={"width": 1400, "height": 2600})
    try:
        page.goto(url)
        wait_until_idle(page)
        page.set_input_files('[data-testid="stFileUploaderDropzoneInput"]', str(file))
        page.wait_for_selector(f"text=answers in {file.name}", timeout=60000)
        wait_until_idle(page)
        return page.inner_text("body")
    finally:
        page.close()


#: What `layout_problems` measures in the page (JavaScript): each drawn chart's titles against its width and top, its
#: axis and legend text sizes, and its tick labels that overlap their neighbours on the same axis.
_LAYOUT_JS = r"""
(minPx) => {
  const out = [];
  const box = (e) => e.getBoundingClientRect();
  // a label's four corners on screen, rotation included, shrunk by half a pixel (touching is not overlapping)
  const corners = (t) => {
    const b = t.getBBox(), m = t.getScreenCTM();
    return [[b.x + .5, b.y + .5], [b.x + b.width - .5, b.y + .5], [b.x + b.width - .5, b.y + b.height - .5],
            [b.x + .5, b.y + b.height - .5]].map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]);
  };
  // two convex quadrilaterals overlap unless some edge's normal separates them
  const intersect = (p, q) => {
    for (const poly of [p, q])
      for (let i = 0; i < 4; i++) {
        const [x1, y1] = poly[i], [x2, y2] = poly[(i + 1) % 4], nx = y1 - y2, ny = x2 - x1;
        const proj = (r) => r.map(([x, y]) => x * nx + y * ny);
        const a = proj(p), c = proj(q);
        if (Math.max(...a) <= Math.min(...c) || Math.max(...c) <= Math.min(...a)) return false;
      }
    return true;
  };
  const visible = (t) => {
    const g = t.closest('g');
    const op = parseFloat(t.getAttribute('opacity') ?? (g && g.getAttribute('opacity')) ?? '1');
    return op > 0 && t.textContent.trim() !== '' && getComputedStyle(t).visibility !== 'hidden';
  };
  // a chart in a closed fold is not what a class sees (and keeps the size it was first drawn at until opened)
  [...document.querySelectorAll('.vega-embed')].filter((e) => e.checkVisibility())
    .map((e) => e.querySelector('svg.marks')).filter(Boolean).forEach((svg, i) => {
    const frame = box(svg);
    const titles = Array.from(svg.querySelectorAll('.role-title-text text')).map((t) => t.textContent);
    const name = titles.length ? titles.sort((a, b) => b.length - a.length)[0] : `chart ${i + 1}`;
    svg.querySelectorAll('.role-title-text text, .role-title-subtitle text').forEach((t) => {
      const b = box(t);
      if (t.textContent.endsWith('…') || b.right > frame.right + 1 || b.left < frame.left - 1)
        out.push(`title cut or wider than its chart (${Math.round(b.width)} px in ${Math.round(frame.width)}): ` +
                 `"${t.textContent}"`);
      // drawn above the chart's top edge, the line is clipped there (a glyph's box may reach a few px past it)
      if (b.top < frame.top - 4)
        out.push(`title clipped at the chart's top (${Math.round(frame.top - b.top)} px above it): "${t.textContent}"`);
    });
    if (minPx) {
      svg.querySelectorAll('.role-axis-label text, .role-axis-title text, .role-legend-label text, ' +
                           '.role-legend-title text').forEach((t) => {
        const px = parseFloat(t.getAttribute('font-size') || getComputedStyle(t).fontSize);
        if (visible(t) && px < minPx) out.push(`"${name}": text "${t.textContent}" is ${px} px (< ${minPx})`);
      });
    }
    svg.querySelectorAll('.role-legend-label text').forEach((t) => {
      if (/\d\.\d{4,}|\d{7,}/.test(t.textContent)) out.push(`"${name}": legend value not rounded: ${t.textContent}`);
    });
    svg.querySelectorAll('.role-axis').forEach((axis) => {
      const labels = Array.from(axis.querySelectorAll('.role-axis-label text')).filter(visible).map(corners);
      for (let a = 0; a < labels.length; a++)
        for (let b = a + 1; b < labels.length; b++)
          if (intersect(labels[a], labels[b])) {
            out.push(`"${name}": tick labels overlap`);
            return;
          }
    });
  });
  document.querySelectorAll('[data-testid="stException"], [data-testid="stAlertContentError"]')
    .forEach((e) => out.push('error box: ' + e.innerText.slice(0, 200)));
  // a button on screen whose top edge the page's header takes the clicks of (its toolbar, in presentation mode)
  document.querySelectorAll('[data-testid="stMain"] button').forEach((btn) => {
    const b = box(btn);
    if (!btn.checkVisibility() || b.width < 4 || b.height < 8 || b.bottom <= 0 || b.top >= window.innerHeight) return;
    const hit = document.elementFromPoint(b.left + b.width / 2, Math.max(b.top, 0) + 3);
    if (hit && !btn.contains(hit) && hit.closest('[data-testid="stHeader"]'))
      out.push(`button "${btn.innerText.trim().slice(0, 40)}" covered at its top edge by ` +
               `${hit.getAttribute('data-testid') || hit.tagName}`);
  });
  return out;
}
"""


def layout_problems(page, large: bool) -> list[str]:
    """What a projector audience could not read on the page as drawn now: a chart title cut, wider than its chart or
    drawn above its top (clipped there), overlapping tick labels, a legend value with more digits than a reader
    needs, an error box, a button whose top edge the page's header takes the clicks of, and (presentation
    mode) axis or legend text under 14 px. Charts in a closed fold are left out: hidden, they keep the width they were
    first drawn at and are drawn afresh when opened."""
    return page.evaluate(_LAYOUT_JS, 14 if large else 0)


#: Text cut short on the page as drawn: an element whose own text runs past its box (an ellipsis, or text clipped
#: by an ancestor that hides its overflow), and a chart label Vega shortened with "…". Elements off screen (a collapsed
#: sidebar) and a screen reader's one-pixel skip link are not what a class sees.
_CUT_JS = r"""
() => {
  const out = [];
  const seen = el => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('svg') || !seen(el)) continue;
    const own = [...el.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join('').trim();
    if (!own) continue;
    const r = el.getBoundingClientRect();
    if (r.width <= 2 || r.right <= 0 || r.left >= window.innerWidth) continue;
    const st = getComputedStyle(el);
    let cut = (st.textOverflow === 'ellipsis' || st.overflowX !== 'visible') && el.scrollWidth > el.clientWidth + 1;
    for (let a = el.parentElement, i = 0; a && i < 5 && !cut; a = a.parentElement, i++) {
      if (getComputedStyle(a).overflowX !== 'visible' && a.scrollWidth > a.clientWidth + 1
          && r.right > a.getBoundingClientRect().right + 1) cut = true;
    }
    if (cut || /…$/.test(own)) out.push(`text cut short: "${own.slice(0, 70)}"`);
  }
  for (const t of document.querySelectorAll('svg text')) {
    if (seen(t) && /…$/.test(t.textContent)) out.push(`chart label cut short: "${t.textContent}"`);
  }
  // a control's shown value (a select box's choice is an input's value, not a text node) wider than its box; not
  // the sidebar's, whose run picker is cut by design with its full label the caption under it (app/sidebar.py)
  for (const i of document.querySelectorAll('[data-testid="stMain"] input')) {
    if (seen(i) && i.value && i.type !== 'range' && i.scrollWidth > i.clientWidth + 1)
      out.push(`a control's value cut short: "${i.value.slice(0, 70)}"`);
  }
  return [...new Set(out)];
}
"""


def cut_text(page) -> list[str]:
    """Text cut short on the page as drawn (`_CUT_JS`)."""
    return page.evaluate(_CUT_JS)


def scrolls(page) -> int:
    """How many pixels the page's main area runs past the window (0: it fits one screen)."""
    return int(page.evaluate("""() => { const m = document.querySelector('[data-testid="stMain"]');
      return m ? Math.max(0, m.scrollHeight - m.clientHeight) : 0; }"""))


#: What a class could not read on the handout's current slide: a slide taller than the screen, text under 16 px, chart
#: text under 14 px as drawn (an SVG text's font size times the scale its figure is drawn at).
_SLIDE_JS = """
() => {
  const problems = [], H = window.innerHeight;
  const tall = document.documentElement.scrollHeight;
  if (tall > H + 1) problems.push(`the slide runs to ${tall} px (the screen is ${H})`);
  const seen = el => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
  let text = Infinity, chart = Infinity;
  for (const el of document.querySelectorAll('section.step.current *')) {
    if (el.closest('svg') || !seen(el)) continue;
    if ([...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()))
      text = Math.min(text, parseFloat(getComputedStyle(el).fontSize));
  }
  for (const t of document.querySelectorAll('section.step.current svg text')) {
    if (!seen(t) || !t.textContent.trim()) continue;
    const m = t.getScreenCTM();
    chart = Math.min(chart, parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b));
  }
  if (text < 16) problems.push(`text at ${text} px (at least 16 on a slide)`);
  if (chart < 13.95) problems.push(`chart text at ${chart.toFixed(1)} px (at least 14 on a slide)`);
  return problems;
}
"""


def slide_problems(page) -> list[str]:
    """What a projector audience could not read on the HTML handout's current slide (`_SLIDE_JS`)."""
    return page.evaluate(_SLIDE_JS)


#: More slides than a handout can have: a walk that goes on past it is going round in circles.
MAX_SLIDES = 200


def walk_slides(page, look) -> int:
    """Every slide of the HTML handout open in `page` (slides mode on), first to last by the arrow key: `look(label)`
    on each, where `label` is the slide's position ("Step 3 of 9 (2/2)"). Returns how many slides there were."""
    page.keyboard.press("Home")
    seen = []
    for _ in range(MAX_SLIDES):
        label = page.inner_text("#position")
        if seen and label == seen[-1]:
            return len(seen)
        seen.append(label)
        look(label)
        page.keyboard.press("ArrowRight")
    raise AssertionError(f"the slides did not end after {MAX_SLIDES} presses of the arrow key: {seen[-4:]}")
