"""Warming the live path before the first click: one run's model loaded and its prompts' prefixes computed.

When the dashboard starts (app/live/warmup_runner.py, at the lowest CPU priority), it prepares what a live
filter needs so that the first one of a lecture costs what a later one costs: the model loaded, and the prompts'
prefix key/value caches (every token but the last, the same under every filter at the answer position) computed
once and written to the prefix store (core.runs.prefix_store), exactly as a live filter computes and keys them
(`live_ablation` with no filter, the same batches, the fixed sample or the whole split). Which runs, in which order:
core.runs.live_targets.
"""

from __future__ import annotations

from pathlib import Path

from core.analysis.ablations import Ablation
from core.runs.live_ablation import live_ablation, live_model
from core.runs.live_targets import WarmTarget
from core.runs.reader import Table, read_run_table


def warm_prefixes(cache_dir: str | Path, target: WarmTarget, folder: Path, on_batch=None, threads=1) -> dict:
    """Load `target`'s model (kept in this process, `live_model`) and compute its live prefixes into the prefix store
    of `cache_dir`, as its first live filter would: `live_ablation` with no filter, on the same questions (the
    fixed sample or the whole split) in the same batches, on `threads` CPU threads. Returns the questions, the
    batches, where each batch's prefix came from (memory, disk, computed), how many batches the store holds now, and
    the seconds it took."""
    loaded = live_model(folder)
    examples = read_run_table(cache_dir, target.run, Table.EXAMPLES.value)
    ev = live_ablation(loaded, examples, int(target.manifest["p"]), "paper", Ablation(), on_batch=on_batch,
                       threads=threads, cache_dir=cache_dir)
    sources = ev.extra["prefix_sources"]
    return {
        "n": int(ev.n),
        "batches": int(sum(sources.values())),
        "sources": sources,
        "on_disk": int(ev.extra.get("prefix_on_disk", 0)),
        "seconds": float(ev.extra["compute_s"]),
        "sample": bool(ev.extra["sample"]),
    }
