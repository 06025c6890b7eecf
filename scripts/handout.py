"""Write the Tour as a handout for one run: a self-contained HTML file (figures as SVG; it opens with no server
and no network, and doubles as slides with a predict-then-reveal switch) and a PDF.

    .venv/bin/python scripts/handout.py [--run NAME] [--cache-dir cache] [--out handouts] [--basis paper|dft]
                                        [--best] [--format html,pdf]

--run takes a run's folder name or any part of its name or label that only it has (default: the run the
dashboard opens with). --best shows each step on the shipped run that shows it best, as the Tour's toggle does.
The files are handouts/handout-RUN.html and .pdf. The Tour's Handout button makes the same files.
"""

from __future__ import annotations

import argparse
import sys

import streamlit.logger

# the dashboard's caches (imported with its figures) warn that no Streamlit server runs: none is needed here
streamlit.logger.set_log_level("ERROR")

from app.tour.handout_export import write_handouts  # noqa: E402
from core.errors import CoreError  # noqa: E402
from core.files import PROJECT_ROOT  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", default=None, help="run folder name, or a part of its name or label")
    ap.add_argument("--cache-dir", default=str(PROJECT_ROOT / "cache"))
    ap.add_argument("--out", default=str(PROJECT_ROOT / "handouts"))
    ap.add_argument("--basis", default="paper", help="Fourier basis of the spectra: paper or dft")
    ap.add_argument("--best", action="store_true", help="each step on the shipped run that shows it best")
    ap.add_argument("--format", default="html,pdf", help="html, pdf or html,pdf")
    args = ap.parse_args(argv)
    formats = tuple(f.strip().lower() for f in args.format.split(",") if f.strip())
    try:
        written = write_handouts(args.cache_dir, args.out, args.run, args.basis, args.best, formats)
    except CoreError as exc:
        print(f"handout: {exc}", file=sys.stderr)
        return 2
    if written.skipped:
        print(f"skipped {len(written.skipped)} run(s) that fail their checks: {', '.join(written.skipped)}")
    for path in written.paths:
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB) for {written.run.label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
