"""Open the dashboard in a real browser (Debian's Chromium, headless) and screenshot every page.

    .venv/bin/python scripts/browser.py [--cache-dir cache] [--out docs/screenshots] [--large] [--size 1024x768]
                                        [--tour]

--size sets the browser window (default 1400x2600, the whole page); at 1024x768 the screenshot is
what a projector shows without scrolling. --tour screenshots each Tour step instead of each page.

Starts `streamlit run app/main.py` on a free local port, visits each page, waits until Streamlit
has finished running, checks that the page shows its title, at least one chart, no error and nothing a
projector audience could not read (app.launch.browser.layout_problems: cut titles, overlapping tick labels,
small axis text in presentation mode), and saves a PNG per page. From a git worktree, run it with
PYTHONPATH=. so that it imports the worktree's code. The browser test (tests/app/test_browser.py) uses
the same functions (app/launch/browser.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.launch.browser import PAGES, browser, serve, visit
from app.tour.steps import STEPS
from core.files import PROJECT_ROOT


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-dir", default=str(PROJECT_ROOT / "cache"))
    ap.add_argument("--out", default=str(PROJECT_ROOT / "docs" / "screenshots"))
    ap.add_argument("--large", action="store_true", help="presentation mode (large type)")
    ap.add_argument("--query", default="", help="extra query string, e.g. 'run=NAME&tau=50'")
    ap.add_argument("--size", default="1400x2600", help="browser window WIDTHxHEIGHT")
    ap.add_argument("--tour", action="store_true", help="screenshot every Tour step instead of every page")
    args = ap.parse_args(argv)
    width, height = (int(x) for x in args.size.lower().split("x"))
    query = "&".join(q for q in (args.query, "large=1" if args.large else "") if q)
    suffix = ("-large" if args.large else "") + ("" if args.size == "1400x2600" else f"-{width}x{height}")
    targets = (
        {f"tour-step-{i}": ("", f"step={i}") for i in range(1, len(STEPS) + 1)}
        if args.tour
        else {n: (p, "") for n, p in PAGES.items()}
    )
    bad = 0
    with serve(args.cache_dir) as base, browser() as b:
        for name, (path, extra) in targets.items():
            q = "&".join(x for x in (query, extra) if x)
            url = f"{base}/{path}" + (f"?{q}" if q else "")
            r = visit(b, url, Path(args.out) / f"{name}{suffix}.png", width=width, height=height)
            drawn = r["charts"] or name == "terms"  # the Terms page is text
            status = "ok" if not r["errors"] and drawn and not r["layout"] and r["settled"] else "PROBLEM"
            bad += status != "ok"
            print(f"{status:7s} {name:12s} charts={r['charts']:2d} title={r['title']!r} errors={r['errors'][:1]}")
            unsettled = [] if r["settled"] else ["a chart still changed size or moved its title 2 s after drawing"]
            for problem in r["layout"] + unsettled:
                print(f"        {problem}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
