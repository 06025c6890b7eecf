"""Make the handout files before class, without the dashboard: the runs of a cache folder read as the sidebar
lists them, a run picked by name, and the HTML and PDF written (scripts/handout.py is the command line).

Lives in app/ because the handout's figures are the dashboard's (app/figures/logits.py and the Tour's steps); core
never imports app, so this is not a `python -m core` subcommand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.tour.handout import build_handout, handout_html
from app.tour.handout_pdf import handout_pdf
from core.claims import registry
from core.claims.features import claim_training
from core.errors import CoreError
from core.runs.cache import list_runs
from core.runs.origin import display_label, seed_of_manifest
from core.runs.reader import RunReader
from core.runs.run_names import unseeded

FORMATS = ("html", "pdf")


@dataclass(frozen=True)
class Written:
    run: RunReader
    paths: tuple[Path, ...]
    skipped: tuple[str, ...]


def listed_runs(cache_dir: str | Path) -> tuple[list[RunReader], list[str]]:
    """(good runs in the sidebar's order, names of runs that fail their checks), as the dashboard lists them."""
    if not Path(cache_dir).is_dir():
        raise CoreError(
            f"no cache folder at {cache_dir}: pass --cache-dir, or make a run with python -m core precompute"
        )
    good, broken = [], []
    for info in list_runs(cache_dir, deep=True):
        if info.ok and isinstance(info.manifest, dict):
            label = display_label(info.manifest, info.label)
            good.append(RunReader(cache_dir, info.name, info.manifest, label=label))
        else:
            broken.append(info.name)
    good.sort(key=lambda r: (r.manifest.get("display_order", 100), r.label))
    return good, broken


def default_run(runs: list[RunReader]) -> RunReader:
    """The run the sidebar opens with: the first of the test split (else of the first split) in display order."""
    splits = sorted({r.split for r in runs})
    split = "test" if "test" in splits else splits[0]
    return next(r for r in runs if r.split == split)


def pick_run(runs: list[RunReader], asked: str | None) -> RunReader:
    """The run named `asked` (its folder name, or a part of its name or label that only it has, or that only it
    and its seed runs have: core.runs.run_names.unseeded); None: the default run. A name that matches no run,
    or several, is an error that lists the runs."""
    if not runs:
        raise CoreError("the cache holds no usable run: make one with python -m core precompute")
    if not asked:
        return default_run(runs)
    exact = [r for r in runs if r.name == asked]
    if exact:
        return exact[0]
    word = asked.lower()
    found = [r for r in runs if word in r.name.lower() or word in r.label.lower()]
    shipped = unseeded([r.name for r in found], {r.name for r in found if seed_of_manifest(r.manifest) is not None})
    found = [r for r in found if r.name in shipped]
    if len(found) == 1:
        return found[0]
    names = ", ".join(r.name for r in (found or runs))
    if found:
        raise CoreError(f"'{asked}' matches {len(found)} runs; name one of them: {names}")
    raise CoreError(f"no run matches '{asked}'; the runs: {names}")


def write_handouts(
    cache_dir: str | Path,
    out: str | Path,
    asked: str | None = None,
    basis: str = "paper",
    best: bool = False,
    formats: tuple[str, ...] = FORMATS,
) -> Written:
    """Write handout-RUN.html and/or .pdf for one run of the cache into `out` (made if missing)."""
    if basis not in ("paper", "dft"):
        raise CoreError(f"unknown basis '{basis}': use paper or dft")
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise CoreError(f"unknown format {', '.join(bad)}: use html and/or pdf")
    folder = Path(out)
    try:  # before the handout is built: a folder that cannot be written fails at once
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CoreError(f"cannot write the handout into {folder}: {exc.strerror or exc}; pass another --out") from exc
    runs, broken = listed_runs(cache_dir)
    run = pick_run(runs, asked)
    split_runs = [r for r in runs if r.split == run.split]
    handout = build_handout(run, split_runs, registry.run_claims, claim_training, basis=basis, best=best)
    paths = []
    try:
        if "html" in formats:
            paths.append(folder / f"handout-{run.name}.html")
            paths[-1].write_text(handout_html(handout), encoding="utf-8")
        if "pdf" in formats:
            paths.append(folder / f"handout-{run.name}.pdf")
            paths[-1].write_bytes(handout_pdf(handout))
    except OSError as exc:
        raise CoreError(f"cannot write the handout into {folder}: {exc.strerror or exc}; pass another --out") from exc
    return Written(run, tuple(paths), tuple(broken))
