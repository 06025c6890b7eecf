"""Benchmark a warm live click in the browser, from the button to the answer drawn, split into its parts.

    .venv/bin/python scripts/bench_click.py [--runs demo,default] [--clicks 5]

For each run, the dashboard is served as `bash run.sh app` serves it (its live computations in a process of their
own, `app.live.runner`), the Ablations page is opened in headless Chromium at 1024 x 768, and one click warms the
live path (the model loaded, the prompts' prefixes computed). Then `--clicks` clicks, each with other settings (the
live filter's modules and band, set through the page's address as a link sets them, so every answer is computed,
none found stored), are timed from the click to the answer drawn (its line and its chart on screen, the script
done), and split by the times the live queue stores with each answer (app/live/queue.py):

    page to queue   the click until the request is queued (the button's callback, `press_live`)
    queue           queued until its computation starts (the live process looking at the queue)
    compute         the computation (model loaded, prefixes in memory), and storing its answer
    to the screen   the answer stored until the page shows it with its chart (the page's polling and redraw)

`--threads N` gives the live computation N threads (as `serve`'s FOURIER_LIVE_MAX_THREADS does); by default it takes
the page's "auto" (the cores the 1-minute load average leaves free: one, while the browser and the server draw).
`demo` is the Fourier-frozen demo (every test question); `default` is the default run (its 512-question sample;
its weights rebuilt here first: `python -m core rebuild models/smollm2-addition-rows-blocks-18-29`). Printed: each
click's parts, then per run the median of each part and of the whole.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app.launch import browser
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs
from core.runs.live_targets import sidebar_order

#: The live filter's settings a click is made with, in the page's own address keys.
SETTINGS = [dict(live_modules=m, live_removed=r) for m, r in itertools.product(["both", "attn", "mlp"],
                                                                               ["low", "high"])]
PARTS = ("page to queue", "queue", "compute", "to the screen")


def chosen_runs(cache_dir: Path) -> dict[str, str]:
    """{'demo': the Fourier-frozen demo's test run, 'default': the dashboard's default run} by folder name."""
    manifests = {r.name: r.manifest for r in list_runs(cache_dir) if r.ok}
    order = sidebar_order(manifests)  # the dashboard opens on the first
    demo = next(n for n in order if n.startswith("fourier-frozen-tied-demo-trained-here-addition-test"))
    return {"demo": demo, "default": order[0]}


def answers(live_dir: Path) -> dict[str, dict]:
    """The live answers stored so far, by file name."""
    out = {}
    for path in (live_dir / "results").glob("*.json"):
        try:
            out[path.name] = json.loads(path.read_text())
        except (OSError, ValueError):
            pass  # being written
    return out


def click(page, base: str, run: str, settings: dict, live_dir: Path, timeout_s: float = 600) -> dict:
    """Open the Ablations page with `settings`, press the live button, wait for the answer drawn. The click's parts."""
    query = "&".join(f"{k}={v}" for k, v in settings.items())
    page.goto(f"{base}/{browser.PAGES['ablations']}?run={run}&{query}", wait_until="commit")
    browser.wait_until_idle(page)
    before = set(answers(live_dir))
    button = page.get_by_role("button", name="with this filter")
    button.scroll_into_view_if_needed()
    t_click = time.time()
    button.click()
    deadline = t_click + timeout_s
    while not (new := {k: v for k, v in answers(live_dir).items() if k not in before}):
        if time.time() > deadline:
            raise TimeoutError(f"no live answer within {timeout_s} s for {settings}")
        time.sleep(0.01)
    result = next(iter(new.values()))
    if "error" in result:
        raise RuntimeError(f"the live computation failed: {result['error']}")
    page.get_by_text(f"{result['label']}", exact=True).first.wait_for(timeout=timeout_s * 1000)
    browser.wait_until_idle(page)
    t_drawn = time.time()
    return {
        "page to queue": result["submitted_at"] - t_click,
        "queue": result["started_at"] - result["submitted_at"],
        "compute": result["at"] - result["started_at"],
        "to the screen": t_drawn - result["at"],
        "whole": t_drawn - t_click,
        "questions": result.get("n"),
        "threads": result.get("threads"),
    }


def bench(which: list[str], clicks: int, cache_dir: Path, threads: int | None) -> None:
    names = chosen_runs(cache_dir)
    live_dir = Path(tempfile.mkdtemp(prefix="bench-click-live-"))
    os.environ.update(FOURIER_LIVE_DIR=str(live_dir), FOURIER_LIVE_RUNNER="external")
    if threads:  # as `serve` caps them: the page's "auto" then takes this many
        os.environ["FOURIER_LIVE_MAX_THREADS"] = str(threads)
    runner = subprocess.Popen([sys.executable, "-m", "app.live.runner", "--parent", str(os.getpid())],
                              cwd=PROJECT_ROOT, env=dict(os.environ, FOURIER_CACHE_DIR=str(cache_dir)))
    try:
        with browser.serve(cache_dir) as base, browser.browser() as b:
            page = b.new_page(viewport={"width": 1024, "height": 768})
            for name in which:
                run = names[name]
                first = click(page, base, run, SETTINGS[0], live_dir)
                print(f"{name} ({run}): warming click {first['whole']:.2f} s (compute {first['compute']:.2f} s)")
                rows = []
                for settings in SETTINGS[1:clicks + 1]:
                    row = click(page, base, run, settings, live_dir)
                    rows.append(row)
                    parts = ", ".join(f"{p} {row[p]:.2f} s" for p in PARTS)
                    print(f"  {settings['live_modules']}/{settings['live_removed']}: whole {row['whole']:.2f} s = "
                          f"{parts} ({row['questions']} questions, {row['threads']} thread(s))")
                med = {p: statistics.median(r[p] for r in rows) for p in (*PARTS, "whole")}
                print(f"{name}: median of {len(rows)} warm clicks: whole {med['whole']:.2f} s; "
                      + ", ".join(f"{p} {med[p]:.2f} s" for p in PARTS)
                      + f"; compute is {med['compute'] / med['whole']:.0%} of the whole")
    finally:
        runner.terminate()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="demo,default", help="comma-separated: demo, default")
    ap.add_argument("--clicks", type=int, default=5, help="timed warm clicks per run (after one warming click)")
    ap.add_argument("--cache-dir", default=str(PROJECT_ROOT / "cache"))
    ap.add_argument("--threads", type=int, default=None,
                    help="the live computation's threads (default: the page's 'auto', the cores the load leaves free)")
    args = ap.parse_args()
    which = [w.strip() for w in args.runs.split(",") if w.strip()]
    if unknown := [w for w in which if w not in ("demo", "default")]:
        ap.error(f"unknown runs {unknown}: choose from demo, default")
    if not 1 <= args.clicks < len(SETTINGS):  # each timed click needs settings not answered before
        ap.error(f"--clicks must be 1 to {len(SETTINGS) - 1} (the settings not used by the warming click)")
    bench(which, args.clicks, Path(args.cache_dir), args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
