"""Screenshots for the lecturer's guide (docs/lecturers-guide.md): predict-then-reveal on the Tour, the Handout
button, and the handout as slides, at 1024x768 in presentation mode, in headless Chromium.

    .venv/bin/python scripts/handout_screenshots.py [--cache-dir cache] [--out docs/screenshots/handout]
                                                    [--run NAME] [--step 6]

Starts the dashboard on a free local port, opens the Tour at one step with `large=1&reveal=1`, screenshots it
before and after Reveal, opens the Handout button; then writes the run's handout (scripts/handout.py's code) and
screenshots it as a slide (hidden, then revealed) with every network request refused, and its PDF's step page
(when pdftoppm, from poppler-utils, is installed).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pypdf import PdfReader

from app.launch.browser import browser, serve, wait_until_idle
from app.tour.handout_export import listed_runs, pick_run, write_handouts
from app.tour.steps import STEPS
from core.files import PROJECT_ROOT

SIZE = {"width": 1024, "height": 768}


def dashboard_shots(b, base: str, run: str, step: int, out: Path) -> None:
    page = b.new_page(viewport=SIZE)
    try:
        page.goto(f"{base}/?run={run}&large=1&reveal=1&step={step}")
        wait_until_idle(page)
        page.screenshot(path=str(out / f"tour-step-{step}-predict-1024x768.png"))
        page.get_by_text("more than removing a random band", exact=False).first.click()
        reveal = page.get_by_role("button", name="Reveal this run's measurement")
        reveal.click()
        reveal.wait_for(state="detached")  # the rerun has begun: the revealed step replaces the button
        wait_until_idle(page)
        page.screenshot(path=str(out / f"tour-step-{step}-revealed-1024x768.png"))
        options = page.get_by_role("button", name="Options")  # presentation mode keeps the button in this popover
        if options.count():
            options.first.click()
            page.wait_for_timeout(400)
        page.get_by_role("button", name="Handout").click()
        page.wait_for_timeout(600)
        page.screenshot(path=str(out / "tour-handout-button-1024x768.png"))
    finally:
        page.close()


def handout_shots(b, html: Path, step: int, out: Path) -> None:
    page = b.new_page(viewport=SIZE)
    try:
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
        page.goto(html.as_uri())
        page.screenshot(path=str(out / "handout-title-1024x768.png"))
        page.goto(f"{html.as_uri()}#slide-{step}")
        page.reload()
        page.check("#reveal-mode")
        page.screenshot(path=str(out / f"slides-step-{step}-predict-1024x768.png"))
        page.click(f"#step-{step} .reveal-button")
        page.screenshot(path=str(out / f"slides-step-{step}-revealed-1024x768.png"))
    finally:
        page.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-dir", default=str(PROJECT_ROOT / "cache"))
    ap.add_argument("--out", default=str(PROJECT_ROOT / "docs" / "screenshots" / "handout"))
    ap.add_argument("--run", default=None, help="run folder name or a unique part of it (default: the default run)")
    ap.add_argument("--step", type=int, default=6, help="the Tour step to show (6: the ablations' choices)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs, _ = listed_runs(args.cache_dir)
    run = pick_run(runs, args.run)
    with tempfile.TemporaryDirectory() as tmp:
        written = write_handouts(args.cache_dir, tmp, run.name)
        html = next(p for p in written.paths if p.suffix == ".html")
        pdf = next(p for p in written.paths if p.suffix == ".pdf")
        with serve(args.cache_dir) as base, browser() as b:
            dashboard_shots(b, base, run.name, args.step, out)
            handout_shots(b, html, args.step, out)
        if shutil.which("pdftoppm"):  # the PDF's page that starts the step
            title = STEPS[args.step - 1].title
            page = next(i for i, p in enumerate(PdfReader(pdf).pages, start=1) if title in p.extract_text())
            target = out / f"pdf-step-{args.step}"
            subprocess.run(
                [
                    "pdftoppm",
                    "-r",
                    "70",
                    "-png",
                    "-singlefile",
                    "-f",
                    str(page),
                    "-l",
                    str(page),
                    str(pdf),
                    str(target),
                ],
                check=True,
            )
        else:
            print("pdftoppm not installed (apt-get install poppler-utils): no picture of the PDF page")
    for p in sorted(out.glob("*.png")):
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
