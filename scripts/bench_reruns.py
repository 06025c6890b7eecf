"""Benchmark every control's rerun: each page, each control changed, the script's rerun timed (issue 69, item 3).

    .venv/bin/python scripts/bench_reruns.py [--cache-dir cache] [--runs NAME,...] [--repeats 6] [--pages spectra,...]

streamlit.testing's AppTest runs the app script in-process as the server does (the shared caches, the charts
built, every element serialised; the browser's own drawing is not included). For each run (default: the default
run, the one the sidebar opens on, and the first 2-layer demo), each page is opened once (its caches warmed), then
every keyed control the page shows (select boxes, sliders, radios, toggles, checkboxes; buttons excluded: they
compute) is set to another of its values and back, `--repeats` times; each rerun is timed. Printed: one line per
control (median, 95th percentile, slowest, in ms), the slowest controls overall, and the fixed loop's time (the
machine's speed now: compare figures by their ratio to it). Target: every control's median under 300 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from streamlit.testing.v1 import AppTest

from core.files import PROJECT_ROOT
from core.runs.live_targets import warm_targets

PAGES = ["views/tour.py", "views/logit_lens.py", "views/spectra.py", "views/waves.py", "views/ablations.py",
         "views/numbers.py", "views/patching.py", "views/training.py", "views/behaviour.py", "views/terms.py"]
#: AppTest's element lists of controls that take a value (buttons compute and are left out)
KINDS = ["selectbox", "select_slider", "slider", "radio", "toggle", "checkbox", "number_input", "segmented_control"]
#: Controls left alone: the run and the split change every page's data (timed as a page's first open instead).
SKIPPED = {"run", "split"}
TARGET_MS = 300


def fixed_loop_s() -> float:
    """The fixed loop of the briefs (20 M additions in pure Python): the machine's speed as this script runs."""
    t = time.perf_counter()
    s = 0
    for i in range(20_000_000):
        s += i
    return time.perf_counter() - t


def p95(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]


def values_by_label(w) -> dict | None:
    """{label: value} for a select box or radio whose labels are formatted by a dict's `get` (the pages' way of naming
    options), else None. AppTest's `select_index` sets the label itself as the value, which such a format turns into
    None ("None is not in list" on the next rerun, for every control after it): the value behind it is set instead."""
    table = getattr(getattr(w, "format_func", None), "__self__", None)
    return {label: value for value, label in table.items()} if isinstance(table, dict) else None


def number(kind, label):
    """`label` read as a number of type `kind`, or None."""
    try:
        return kind(label)
    except ValueError:
        return None


def setters(w):
    """(set another value, set the value back) for control `w`, as functions of the control found again after each
    rerun; None when it has no other value AppTest can set (an option list whose labels are formatted from values
    this script cannot name: not by a dict, and not a select box's, which is set by its index)."""
    value = w.value
    if isinstance(value, (list, tuple)) and not hasattr(w, "min"):  # a multiselect: not set one value at a time here
        return None
    if isinstance(value, bool):
        return (lambda x: x.set_value(not value)), (lambda x: x.set_value(value))
    options = list(getattr(w, "options", []) or [])
    if options and hasattr(w, "select_index"):
        start = w.index
        if start is None or len(options) < 2:
            return None
        other = (start + max(1, len(options) // 2)) % len(options)
        behind = values_by_label(w)
        if behind is not None and options[other] in behind:  # labels from a dict: set the value behind the label
            target = behind[options[other]]
            return (lambda x: x.set_value(target)), (lambda x: x.set_value(value))
        return (lambda x: x.select_index(other)), (lambda x: x.select_index(start))
    behind = values_by_label(w) if options else None
    if behind is not None:  # a radio whose labels come from a dict: the value behind another label
        others = [v for label, v in behind.items() if label in options and v != value]
        if others:
            other = others[len(others) // 2]
            return (lambda x: x.set_value(other)), (lambda x: x.set_value(value))
    if options:
        def shown(o):  # the label the page shows for value o (None: the format cannot take an option's label)
            try:
                return w.format_func(o) if hasattr(w, "format_func") else o
            except (TypeError, ValueError):
                return None
        label = shown(value)
        raw = [o for o in options if o != label and shown(o) == o]
        if not raw and isinstance(value, (int, float)):  # numbers shown by a format ("{:g}"): read back from labels
            raw = [v for v in (number(type(value), o) for o in options) if v is not None and v != value
                   and shown(v) in options]
        if not raw:
            return None
        other = raw[len(raw) // 2]
        return (lambda x: x.set_value(other)), (lambda x: x.set_value(value))
    lo, hi = getattr(w, "min", None), getattr(w, "max", None)
    if lo is not None and hi is not None and not isinstance(value, (tuple, list)):
        other = hi if value != hi else lo
        return (lambda x: x.set_value(other)), (lambda x: x.set_value(value))
    return None


def controls(at: AppTest) -> list[tuple[str, str]]:
    found = []
    for kind in KINDS:
        try:
            widgets = getattr(at, kind)
        except AttributeError:
            continue
        found += [(kind, w.key) for w in widgets if w.key and w.key not in SKIPPED and not w.disabled]
    return found


def bench_run(cache_dir: str, run: str, repeats: int, pages: list[str] = PAGES) -> list[tuple]:
    os.environ["FOURIER_CACHE_DIR"] = cache_dir
    rows = []
    for page in pages:  # a session of its own per page: a control AppTest cannot replay spoils only its own page
        at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=600)
        at.query_params["run"] = run
        at.run()
        t = time.perf_counter()
        at.switch_page(page)
        at.run()
        first = time.perf_counter() - t
        if at.exception:
            print(f"  {page}: {at.exception[0].message}")
            continue
        print(f"  {page:22s} opened in {first * 1000:6.0f} ms")
        for kind, key in controls(at):
            w = next((x for x in getattr(at, kind) if x.key == key), None)
            if w is None:
                continue
            change = setters(w)
            if change is None:
                print(f"    {kind:15s} {key:24s} skipped: its option labels are formatted from values not named here")
                continue
            times = []
            for i in range(repeats):
                w = next((x for x in getattr(at, kind) if x.key == key), None)
                if w is None:
                    break
                t = time.perf_counter()
                try:
                    change[i % 2](w).run()
                except ValueError as exc:  # AppTest cannot replay some other control's state (a select box at None)
                    print(f"    {kind:15s} {key:24s} stopped: AppTest could not rerun the page ({exc})")
                    break
                times.append(time.perf_counter() - t)
                if at.exception:
                    print(f"    {kind} {key}: {at.exception[0].message}")
                    break
            if times:
                rows.append((run, page, kind, key, statistics.median(times), p95(times), max(times)))
                r = rows[-1]
                print(f"    {kind:15s} {key:24s} median {r[4] * 1000:6.0f}  p95 {r[5] * 1000:6.0f}  max "
                      f"{r[6] * 1000:6.0f} ms")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-dir", default=str(PROJECT_ROOT / "cache"))
    ap.add_argument("--runs", default=None, help="run folder names, comma-separated (default: default and a demo)")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--pages", default=None, help="page files, comma-separated (default: every page), e.g. spectra")
    args = ap.parse_args(argv)
    if args.runs:
        runs = args.runs.split(",")
    else:
        targets = warm_targets(args.cache_dir)
        demo = next((t.run for t in targets if not t.default and int(t.manifest.get("n_layers", 0)) == 2), None)
        runs = [targets[0].run] + ([demo] if demo else [])
    print(f"fixed loop: {fixed_loop_s():.2f} s")
    rows = []
    for run in runs:
        print(f"{run}:")
        pages = [f"views/{p.removeprefix('views/').removesuffix('.py')}.py" for p in args.pages.split(",")] \
            if args.pages else PAGES
        rows += bench_run(args.cache_dir, run, args.repeats, pages)
    rows.sort(key=lambda r: -r[4])
    print(f"slowest controls (median), target < {TARGET_MS} ms:")
    for r in rows[:8]:
        print(f"  {r[4] * 1000:6.0f} ms  {r[1]} {r[2]} {r[3]} ({r[0][:40]})")
    meds = [r[4] for r in rows]
    if meds:
        print(f"over {len(rows)} controls: median of medians {statistics.median(meds) * 1000:.0f} ms, "
              f"{sum(m >= TARGET_MS / 1000 for m in meds)} at or over {TARGET_MS} ms")
    print(f"fixed loop: {fixed_loop_s():.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
