"""Add the helix's Clock test (core.runs.helix_tables.helix_clock_table: the helix of a + b at the answer position,
fitted and patched against PCA of the same rank and the phrasing's mean) to runs cached before it, whose models are
here: `python scripts/helix_clock.py RUN [RUN ...]` (a fresh precompute's helix stage makes it by itself)."""

import argparse
import sys

from core.errors import CoreError
from core.runs.ablate import open_target
from core.runs.helix_tables import add_helix_clock


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="runs of the cache (python -m core list)")
    parser.add_argument("--cache-dir", default="cache")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    for name in args.runs:
        try:
            add_helix_clock(open_target(name, args.cache_dir, threads=args.threads), args.batch_size)
        except CoreError as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
