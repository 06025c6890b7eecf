"""Benchmark the dashboard: rerun time after a control change on cached data, and cold start.

    .venv/bin/python scripts/bench_app.py [--cache-dir cache] [--repeats 20] [--no-cold]

Reruns: streamlit.testing runs the app script in-process exactly as the server does (cached
tables, chart building, every element serialised); for each page, one control is changed back
and forth `--repeats` times and each rerun is timed. Printed: median and 95th percentile per
page and over all (target: under 250 ms). The browser's own drawing is not included.

Cold start: a fresh `streamlit run` process and headless Chromium; the time from starting the
server until the first chart is on screen (server start, imports, first reads, first render).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from streamlit.testing.v1 import AppTest

from app.launch import browser
from core.files import PROJECT_ROOT

# page, widget kind, key, two values to alternate between (None: taken from the widget's options)
CHANGES = [
    ("views/logit_lens.py", "select_slider", "layer", None),
    ("views/logit_lens.py", "toggle", "norm", (True, False)),
    ("views/spectra.py", "slider", "tau", (30, 50)),
    ("views/spectra.py", "radio", "module", ("attn", "mlp")),
    ("views/waves.py", "slider", "k", (3, 7)),
    ("views/ablations.py", "selectbox", "cell", ("Attn: high removed", "MLP: low removed")),
    ("views/numbers.py", "radio", "colour", ("magnitude", "last digit")),
    ("views/tour.py", "slider", "tau", (40, 50)),
]


def p95(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]


def reruns(cache_dir: str, repeats: int):
    os.environ["FOURIER_CACHE_DIR"] = cache_dir
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=300)
    at.run()
    all_times = []
    for page, kind, key, values in CHANGES:
        at.switch_page(page)
        at.run()
        w = next(x for x in getattr(at, kind) if x.key == key)
        if values is None:
            opts = list(w.options)
            values = (opts[0], opts[-1])
        w.set_value(values[0]).run()  # warm the caches for this page
        times = []
        for i in range(repeats):
            w = next(x for x in getattr(at, kind) if x.key == key)
            t = time.perf_counter()
            w.set_value(values[(i + 1) % 2]).run()
            times.append(time.perf_counter() - t)
            if at.exception:
                raise SystemExit(f"{page}: {at.exception[0].message}")
        all_times += times
        print(
            f"  {page:24s} {kind:13s} {key:7s} median {statistics.median(times) * 1000:6.0f} ms   p95 "
            f"{p95(times) * 1000:6.0f} ms"
        )
    return all_times


def cold_start(cache_dir: str) -> float:
    t0 = time.perf_counter()
    with browser.serve(cache_dir) as base, browser.browser() as b:
        page = b.new_page(viewport={"width": 1400, "height": 1400})
        page.goto(base + "/")
        page.wait_for_selector(".vega-embed canvas, .vega-embed svg", timeout=120000)
        return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-dir", default=str(PROJECT_ROOT / "cache"))
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--no-cold", action="store_true")
    args = ap.parse_args(argv)
    print(f"reruns after a control change ({args.repeats} per control, cache {args.cache_dir}):")
    times = reruns(args.cache_dir, args.repeats)
    print(
        f"all pages: median {statistics.median(times) * 1000:.0f} ms, p95 {p95(times) * 1000:.0f} ms (target < 250 ms)"
    )
    if not args.no_cold:
        print(f"cold start to the first chart in Chromium: {cold_start(args.cache_dir):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
