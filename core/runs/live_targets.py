"""Which runs the dashboard's warm-up prepares, in which order (no torch: the dashboard's processes import it).

When the dashboard starts (app/live/warmup_runner.py, at the lowest CPU priority), it prepares what a live
filter needs so that the first one of a lecture costs what a later one costs (core.runs.live_warmup computes).

`warm_targets` orders the runs: the default run first (the one the sidebar opens: the test split's first run by
display order, then label), then every run whose live filter reads its whole split (the 2-layer demos), in the
sidebar's order; runs whose model cannot be computed here, or can only be rebuilt, are listed with why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.runs.cache import list_runs
from core.runs.live_model import live_model_folder, rebuildable_folder
from core.runs.live_sample import reads_sample
from core.runs.origin import display_label


@dataclass
class WarmTarget:
    """One run to warm: its folder name, its label as the pages show it, its manifest; `default`: the run the
    sidebar opens on."""

    run: str
    label: str
    manifest: dict
    default: bool = False

    def folder(self) -> tuple[Path | None, str]:
        """`core.runs.live_model.live_model_folder`: (the model folder, "") when it can be computed live here."""
        return live_model_folder(self.manifest)

    def rebuildable(self) -> Path | None:
        """The model folder when it ships only its fine-tuning delta (the weights can be rebuilt here)."""
        return rebuildable_folder(self.manifest)


def sidebar_order(manifests: dict[str, dict]) -> list[str]:
    """Run names in the order the dashboard's sidebar lists them: the test split's runs first (the sidebar opens on
    that split), each split's runs by display order, then label."""

    def key(name: str):
        m = manifests[name]
        split = (m.get("task") or {}).get("split", "")
        return (split != "test", split, m.get("display_order", 100), display_label(m, m.get("label", "")))

    return sorted(manifests, key=key)


def warm_targets(cache_dir: str | Path) -> list[WarmTarget]:
    """The default run, then every run whose live filter reads the whole split (`reads_sample` false: the demos),
    in the sidebar's order; runs with an unreadable manifest or problems are skipped."""
    manifests = {r.name: r.manifest for r in list_runs(cache_dir) if r.ok and isinstance(r.manifest, dict)}
    order = sidebar_order(manifests)
    targets = []
    for i, name in enumerate(order):
        m = manifests[name]
        label = display_label(m, m.get("label", ""))
        if i == 0:
            targets.append(WarmTarget(name, label, m, default=True))
            continue
        n = int((m.get("task") or {}).get("n_examples", 0) or 0)
        if reads_sample(n, int(m.get("n_layers", 0)), int(m.get("width", 0))):
            continue  # a deep model read on its sample: not a demo (minutes of prefixes each)
        if live_model_folder(m)[0] is None:
            continue
        targets.append(WarmTarget(name, label, m))
    return targets
