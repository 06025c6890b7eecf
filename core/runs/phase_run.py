"""The phase stage of a run: the `phase_locking` and `wave_peaks` tables (core.analysis.phase), computed from
the model over every example of the split, or, for a cached run whose model is not here, from the
run's cached sample of examples (and then the manifest says so).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from core.analysis.phase import NULL_SHUFFLES, PHASE_VERSION, PhaseAccumulator, module_order, wave_peaks
from core.errors import CoreError
from core.models.capture import iter_capture
from core.models.names import ATTN, FINAL, MLP, RESID, STREAMS
from core.models.source import project_path
from core.runs.cache import RunWriter, read_manifest, resolve_run, run_lock

PHASE_TABLES = ("phase_locking", "wave_peaks")


class PhaseStage:
    """Collects what the phase tables need, batch by batch, during a capture pass."""

    def __init__(self, p: int, n_examples: int, n_layers: int):
        self.p, self.n_layers = p, n_layers
        self.accumulator = PhaseAccumulator(p, n_examples, module_order(n_layers))
        self.final = np.zeros((n_examples, p), dtype=np.float32)

    def add(self, indices, resid: np.ndarray, attn: np.ndarray, mlp: np.ndarray, final: np.ndarray) -> None:
        """Number logits W_U x of one batch: resid (B, L+1, p), attn and mlp (B, L, p), final (B, p)."""
        stacked = np.concatenate([attn, mlp, resid, np.asarray(final)[:, None, :]], axis=1)
        self.accumulator.add(indices, stacked)
        self.final[np.asarray(indices)] = final

    def tables(self, answers, example_ids, seed: int, shuffles: int = NULL_SHUFFLES) -> dict[str, pd.DataFrame]:
        return {
            "phase_locking": self.accumulator.table(answers, seed=seed, shuffles=shuffles),
            "wave_peaks": wave_peaks(self.p, self.final, np.asarray(answers), example_ids),
        }


def phase_tables_from_model(loaded, examples, texts, p: int, batch_size: int, seed: int, progress=None) -> dict:
    """A capture pass over `texts` that feeds only the phase stage (for a run cached before it existed)."""

    unembed = loaded.unembed(p)
    number_ids = torch.as_tensor(loaded.numbers.ids_for(p), device=unembed.weight.device)
    stage = PhaseStage(p, len(examples), loaded.n_layers)
    with torch.no_grad():
        for cb in iter_capture(loaded, texts, batch_size, progress=progress, desc="phase"):
            stage.add(
                cb.indices,
                *(unembed.read(getattr(cb, m)).double().cpu().numpy() for m in STREAMS),
                cb.logits.float()[:, number_ids].double().cpu().numpy(),
            )
    return stage.tables([e.answer for e in examples], [e.id for e in examples], seed)


def phase_tables_from_sample(
    module_logits: pd.DataFrame, examples: pd.DataFrame, p: int, n_layers: int, seed: int, shuffles: int = NULL_SHUFFLES
) -> dict:
    """The phase tables from a run's cached per-example logits (its sample, `in_sample`), when the
    model itself is not here. Far fewer examples: the null is computed for that n and is high."""
    sample = examples[examples["id"].isin(set(module_logits["example_id"].astype(str)))]
    if len(sample) < 2:
        raise CoreError("the run caches the logits of fewer than 2 examples: no phase locking can be computed from it")
    ids = [str(i) for i in sample["id"]]
    logits = module_logits.assign(
        example_id=module_logits["example_id"].astype(str), module=module_logits["module"].astype(str)
    )
    wide = logits.pivot_table(index=["example_id", "module", "layer"], columns="number", values="logit", observed=True)
    if wide.shape[1] != p:
        raise CoreError(f"the cached logits cover {wide.shape[1]} numbers, not {p}")
    stage = PhaseStage(p, len(ids), n_layers)
    L = n_layers
    for i, eid in enumerate(ids):

        def rows(module, layers):
            return wide.loc[[(eid, module, l) for l in layers]].to_numpy(dtype=np.float64)

        stage.add(
            [i],
            rows(RESID, range(L + 1))[None],
            rows(ATTN, range(1, L + 1))[None],
            rows(MLP, range(1, L + 1))[None],
            rows(FINAL, [L]),
        )
    return stage.tables(sample["answer"].to_numpy(), ids, seed, shuffles)


def phase_note(n: int, n_split: int, split: str) -> dict:
    """What the manifest says about the examples behind the phase tables."""
    whole = n == n_split
    return {
        "n": int(n),
        "examples": f"all {n} {split} examples"
        if whole
        else f"the {n} cached sample examples of the {n_split} {split} examples",
        "whole_split": whole,
        "version": PHASE_VERSION,
    }


def phase_current(manifest: dict) -> bool:
    """Whether a run's phase tables are there and of this code's measurement (PHASE_VERSION)."""
    return (
        all(t in (manifest.get("tables") or {}) for t in PHASE_TABLES)
        and (manifest.get("phase_locking") or {}).get("version") == PHASE_VERSION
    )


def model_folder_with_weights(manifest: dict) -> str | None:
    """The run's model folder (relative to the project) when its safetensors weights are here, else None."""
    model = manifest.get("model") or {}
    source = model.get("source_as_given") or model.get("source")
    if not isinstance(source, str):
        return None
    folder = project_path(source)
    return source if folder.is_dir() and any(folder.glob("model*.safetensors")) else None


def upgrade_without_model(cache_dir, name: str, log=print) -> bool:
    """Give a cached run the phase tables without its model (weights not here): from its cached
    sample; a run without number logits records them as not applicable. Nothing else is recomputed.
    Returns True when the run changed."""
    path = resolve_run(cache_dir, name)
    manifest = read_manifest(cache_dir, path.name)
    folder = model_folder_with_weights(manifest)
    if folder is not None and not phase_current(manifest):
        raise CoreError(
            f"run {path.name}: its model is here ({folder}); read every example with the same precompute "
            f"instead: python -m core precompute --model {folder} (it keeps every other table)"
        )
    skipped = {**(manifest.get("not_applicable") or {}), **(manifest.get("not_computed") or {})}
    if phase_current(manifest) or all(t in skipped for t in PHASE_TABLES):
        return False
    with run_lock(cache_dir, path.name, log, wait=False):  # never beside a precompute, repack or another upgrade
        writer = RunWriter(cache_dir, path.name, manifest.get("identity") or {}, manifest.get("options") or {})
        try:
            keep = writer.stage_published()
            t0 = time.time()
            not_applicable = {
                t: why for t, why in (keep.get("not_applicable") or {}).items() if t in ("module_logits", "examples")
            }
            if not_applicable:  # no number logits (a digit-splitting model): no phases either
                reason = next(iter(not_applicable.values()))
                keep["not_applicable"] = {**keep["not_applicable"], **{t: reason for t in PHASE_TABLES}}
            else:
                ex = writer.read("examples")
                frames = phase_tables_from_sample(
                    writer.read("module_logits"),
                    ex,
                    int(manifest["p"]),
                    int(manifest["n_layers"]),
                    int((manifest.get("task") or {}).get("dataset_seed", 0)),
                )
                for t, frame in frames.items():
                    writer.write(t, frame)
                n = int(frames["phase_locking"]["n"].iloc[0])
                keep["phase_locking"] = {
                    **phase_note(n, len(ex), (manifest.get("task") or {}).get("split", "test")),
                    "why": "the model's weights are not here, so only the run's cached sample could be read",
                }
                keep["timings"] = {**(keep.get("timings") or {}), "phase_s": round(time.time() - t0, 2)}
            writer.publish(keep)
        finally:
            writer.discard_if_empty()
    log(
        f"run {path.name}: phase tables added without the model "
        f"({'not applicable' if not_applicable else 'from the cached sample'})"
    )
    return True
