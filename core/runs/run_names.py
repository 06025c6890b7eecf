"""A run named on the command line: found in the cache by what a person types, before anything is loaded.

`find_run(cache_dir, text)` matches, in this order: the run's folder name; its id (the 10 hex digits that end
the folder name); its label; whole words of its folder name (between hyphens) that exactly one run has
("fourier-frozen-tied", not "fourier-froz"); where such a part matches a recipe's shipped model and its seeds
(model folders under the recipe's seeds/, `core.runs.origin.seed_of_manifest`), the shipped model is meant and a
seed is named by more; a path to a run folder of the cache (`cache/fourier-frozen-tied-...`, relative or absolute:
`run_folder`) names that run. When
nothing matches but something comes close (a typo, "fourier-frozn"), it says which run was probably meant
instead of letting the text go on to be tried as a model folder or a hub id; when several runs match it names
them. None: the text names no run and nothing close, so it is a model (a folder or a hub id).
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from core.errors import CoreError
from core.files import read_json_file
from core.runs.origin import seed_of_manifest

#: how close a typo must be to a run's name (difflib's ratio) to be offered as "did you mean"
NEAR_MISS = 0.8
RUN_ID = re.compile(r"-([0-9a-f]{10})$")


def unseeded(hits: list[str], seed_runs: set[str]) -> list[str]:
    """`hits` less the seed runs (names in `seed_runs`), when exactly one of them is not a seed run (the shipped
    model is meant)."""
    shipped = [h for h in hits if h not in seed_runs]
    return shipped if len(shipped) == 1 else hits


def cached_runs(cache_dir: str | Path) -> dict[str, dict]:
    """{folder name: manifest} of the run folders in the cache (hidden and broken ones included, manifest {})."""
    cache = Path(cache_dir)
    if not cache.is_dir():
        return {}
    found = {}
    for path in sorted(cache.iterdir()):
        if path.name.startswith(".") or not path.is_dir():
            continue
        manifest = read_json_file(path / "manifest.json")
        found[path.name] = manifest if isinstance(manifest, dict) else {}
    return found


def run_folder(text: str) -> Path | None:
    """The run folder the path `text` names (a folder holding a run's manifest.json, and no model's config.json),
    resolved; None when `text` is no path to a run folder (a model folder, a run's name, a hub id)."""
    path = Path(text).expanduser()
    if not text.strip() or not path.is_dir() or (path / "config.json").exists():
        return None
    manifest = read_json_file(path / "manifest.json")
    return path.resolve() if isinstance(manifest, dict) and isinstance(manifest.get("tables"), dict) else None


def locate_run(text: str, cache_dir: str | Path) -> tuple[str, str | Path]:
    """(run, cache folder) for a command given `text` and --cache-dir: a path to a run folder (`run_folder`) becomes
    the run's name in the cache folder that holds it; anything else is returned as it was given."""
    folder = run_folder(text)
    return (folder.name, str(folder.parent)) if folder is not None else (text, cache_dir)


def find_run(cache_dir: str | Path, text: str) -> str | None:
    """The folder name of the run `text` names (module docstring), None when it names none."""
    if not text.strip():
        raise CoreError("an empty run name: give a run of `python -m core list`, a model folder or a hub id")
    folder = run_folder(text)
    if folder is not None:
        if folder.parent != Path(cache_dir).expanduser().resolve():
            raise CoreError(f"{text} is a run folder of {folder.parent}, not of the cache folder {cache_dir}: give "
                            f"--cache-dir {folder.parent}, or the run's name")
        return folder.name
    manifests = cached_runs(cache_dir)
    runs = {name: str(m.get("label", "")) for name, m in manifests.items()}
    seed_runs = {name for name, m in manifests.items() if seed_of_manifest(m) is not None}
    if not runs or "/" in text or Path(text).expanduser().exists():
        return None  # a path is a model folder
    if text in runs:
        return text
    lowered = text.lower()
    for rule in (
        lambda name, label: (m := RUN_ID.search(name)) is not None and m.group(1) == lowered,
        lambda name, label: label.lower() == lowered,
        lambda name, label: f"-{lowered}-" in f"-{name}-",  # whole words of the name ("froz" is not one)
    ):
        hits = unseeded([name for name, label in runs.items() if rule(name, label)], seed_runs)
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            shown = "; ".join(hits[:6]) + (f"; and {len(hits) - 6} more" if len(hits) > 6 else "")
            raise CoreError(f"{text!r} matches {len(hits)} runs in {cache_dir}: {shown}. Give more of the name "
                            f"(`python -m core list --cache-dir {cache_dir}` shows every run)")
    # a near miss: compare with each name's start of the same length, so a short typo meets a long name
    starts: dict[str, list[str]] = {}
    for name in runs:
        starts.setdefault(name[: len(text)], []).append(name)
    close = difflib.get_close_matches(lowered, list(starts), n=1, cutoff=NEAR_MISS)
    if close:
        meant = starts[close[0]]
        said = meant[0] if len(meant) == 1 else "one of " + "; ".join(meant[:6])
        raise CoreError(f"no run named {text!r} in {cache_dir}; did you mean {said}? "
                        f"(`python -m core list --cache-dir {cache_dir}` shows every run)")
    return None


def closest_runs(cache_dir: str | Path, text: str, n: int = 3) -> list[str]:
    """The runs whose name (or a part of it) or label is nearest `text` (difflib), best first, for a "did you mean"
    when `find_run` found nothing close enough to name one run."""
    lowered, scores = text.lower(), {}
    for name, manifest in cached_runs(cache_dir).items():
        words = [name, name[: len(text)], str(manifest.get("label", "")).lower(), *name.split("-")]
        scores[name] = max(difflib.SequenceMatcher(None, lowered, w).ratio() for w in words if w)
    return sorted(scores, key=lambda name: -scores[name])[:n]


def run_of_cache(cache_dir: str | Path, text: str) -> str:
    """The folder name of the run `text` names (`find_run`), for a command that takes runs only (`verify`): a text
    that names none is refused with the runs nearest it."""
    found = find_run(cache_dir, text)
    if found is not None:
        return found
    near = closest_runs(cache_dir, text)
    said = f"; did you mean {' or '.join(near)}?" if near else ""
    raise CoreError(f"no run named {text!r} in {cache_dir}{said} (`python -m core list --cache-dir {cache_dir}` shows "
                    "every run)")
