"""Give cached runs the patching table of core.runs.patch_run's current version, from their weights, and nothing else:
every other table and the manifest's own keys are published again as they were (core.runs.cache.RunWriter's
stage_published and publish); the manifest's `patching` note and `timings.patching_s` are replaced. Rows of the older
table read over the very pairs this version reads are kept (core.runs.patch_run.patch_run's `previous`).

    .venv/bin/python scripts/patching_upgrade.py RUN [RUN ...] [--threads N] [--extra-pairs N | --every-pair]
    .venv/bin/python scripts/patching_upgrade.py RUN [RUN ...] --positions [--threads N]

The pairs each reading takes are the precompute's (core.runs.patch_run.pair_limits: every pair, but a deep model's
samples for the heads and the other readings); `--every-pair` reads every pair for all of them on any run. On the
default run (270 heads, 93 other sites, 3,419 pairs, its contrast-1 rows of the stream and modules kept) that took
51 minutes on two CPU threads (`--threads 2`, 2026-11-30): the two groups 165 s, the heads 21 minutes (1.4 ms a head
and pair), noising and both directions at contrast 10 about 9 minutes each. A 2-layer demo takes about a minute.

`--positions` makes the run's `position_patching` table again instead (core.runs.position_patch_run: every pair of
the running example's token layout), and nothing else: the default run's 692 pairs took 4.5 minutes on two CPU threads
(2026-11-30).

A run whose model is not here is refused with what to do; a run that fails loses nothing (the staging folder is
published only once the table is written).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from core.errors import CoreError
from core.files import read_json_file
from core.runs.ablate import open_target
from core.runs.cache import RunWriter, run_lock
from core.runs.patch_run import PATCH_VERSION, pair_limits, write_patch_table
from core.runs.position_patch_run import POSITION_VERSION, write_position_table
from core.tasks import build_examples


def upgrade(name: str, cache_dir: str, threads: int, extra_pairs: int | None = None, every_pair: bool = False,
            positions: bool = False) -> None:
    manifest = read_json_file(Path(cache_dir) / name / "manifest.json")
    if not manifest:
        raise CoreError(f"no run {name!r} in {cache_dir}: name one `python -m core list` shows")
    with run_lock(cache_dir, name, wait=False):  # never beside a precompute, a repack or another upgrade of the run
        amend(name, manifest, cache_dir, threads, extra_pairs, every_pair, positions)


def amend(name: str, manifest: dict, cache_dir: str, threads: int, extra_pairs: int | None, every_pair: bool,
          positions: bool) -> None:
    t0 = time.time()
    target = open_target(name, cache_dir, threads=threads)
    everything = {e.id: e for e in build_examples(target.task, target.max_operand, target.dataset_seed)}
    examples = [everything[i] for i in target.ids]
    writer = RunWriter(cache_dir, name, manifest["identity"], manifest["options"])
    keep = writer.stage_published()
    opts = SimpleNamespace(max_operand=target.max_operand, batch_size=32, progress=False)
    if positions:
        keep["position_patching"] = write_position_table(writer, target.loaded, examples, target.texts, target.p,
                                                         opts, print)
        keep["timings"] = {**(keep.get("timings") or {}), "position_patching_s": round(time.time() - t0, 2)}
        writer.publish(keep)
        print(f"run {name}: position_patching table of version {POSITION_VERSION} published ({time.time() - t0:.0f}s); "
              "nothing else recomputed")
        return
    heads, extra = (None, None) if every_pair else pair_limits(target.loaded, examples, not manifest.get("design"))
    limits = (heads, extra if extra_pairs is None else extra_pairs)
    keep["patching"] = write_patch_table(writer, target.loaded, examples, target.texts, target.p, opts, print,
                                         limits)
    keep["timings"] = {**(keep.get("timings") or {}), "patching_s": round(time.time() - t0, 2)}
    writer.publish(keep)
    print(f"run {name}: patching table of version {PATCH_VERSION} published ({time.time() - t0:.0f}s); nothing else "
          "recomputed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--cache-dir", default="cache")
    parser.add_argument("--threads", type=int, default=1)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--extra-pairs", type=int, default=None,
                       help="the seeded sample of pairs noising and the contrast 10 read (default: the precompute's)")
    which.add_argument("--every-pair", action="store_true",
                       help="every pair for the heads, noising and the contrast 10 too, on any run")
    which.add_argument("--positions", action="store_true",
                       help="the position x layer table (every pair of the running example's layout) instead")
    args = parser.parse_args()
    for name in args.runs:
        upgrade(name, args.cache_dir, args.threads, args.extra_pairs, args.every_pair, args.positions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
