"""What `precompute` does with a run already in the cache: refuse it when asked with other options, read a deep
model's sampled run again over every question when asked with --every-question, upgrade what an older version left
(the number and phase tables, the phase shift's capped edits), draw again the controls an older draw left unmatched,
take in a training log's new seeds; and the table writers the fresh run shares with the upgrades (the phase tables,
the phase shift, the training log)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from core import SCHEMA_VERSION
from core.analysis.filters import MATCH_DRAW_VERSION
from core.analysis.phase import PHASE_VERSION
from core.errors import CoreError
from core.files import read_json_file
from core.models.source import read_provenance
from core.runs.ablation_grid import ablation_grid, redraw_run_controls, write_grid_tables
from core.runs.attribution_run import ATTRIBUTION_VERSION, write_attribution_table
from core.runs.cache import RunWriter
from core.runs.group_shift import GROUP_SHIFT_VERSION, has_group_shift, write_group_tables
from core.runs.head_tables import HEAD_VERSION, has_heads, write_head_tables
from core.runs.helix_tables import HELIX_VERSION, has_helix, write_helix_tables
from core.runs.number_tables import row_origin_table, write_number_tables
from core.runs.patch_run import PATCH_VERSION, reads_enough, write_patch_table
from core.runs.period_ablation import PERIOD_VERSION, has_periods, write_period_table
from core.runs.phase_run import PHASE_TABLES, phase_current, phase_note, phase_tables_from_model
from core.runs.position_patch_run import POSITION_VERSION, reads_every_pair, write_position_table
from core.runs.precompute_arguments import check_stages, options_refusal, reads_sample_again
from core.runs.shift_run import SHIFT_VERSION, phase_shift_table, shift_specs
from core.runs.tables import check_table
from core.training.train import seed_logs


def keep_cached_run(
    writer: RunWriter, loaded, p: int, opts, examples, texts, options: dict, log, basis, taus,
    design=None,
) -> Path:
    """A run already in the cache: refused when asked with other options, read again over every question when it was
    read on a sample and --every-question asks for all, upgraded when its schema, phase or phase-shift version is
    older, its unmatched controls drawn again when an older draw left them so, its training log refreshed, else left
    as it is."""
    existing = (read_json_file(writer.final / "manifest.json") or {}).get("options")
    refusal = options_refusal(writer.name, existing, options)
    if refusal:
        raise CoreError(refusal)
    upgraded = upgrade_design(writer, loaded, p, opts, examples, texts, basis, taus, log)
    upgraded = upgrade_phase(writer, loaded, p, opts, examples, texts, log) or upgraded
    upgraded = upgrade_shift(writer, loaded, p, opts, examples, texts, design, log) or upgraded
    upgraded = upgrade_groups(writer, loaded, p, opts, examples, texts, log) or upgraded
    upgraded = upgrade_periods(writer, loaded, p, opts, examples, texts, log) or upgraded
    upgraded = upgrade_row_origin(writer, loaded, p, log) or upgraded
    upgraded = upgrade_successors(writer, loaded, p, opts, examples, texts, log) or upgraded
    upgraded = refresh_provenance(writer, loaded, log) or upgraded
    upgraded = redraw_run_controls(writer, loaded, p, opts, examples, texts, basis, taus, design, log) or upgraded
    if not refresh_training_log(writer, loaded, log) and not upgraded:
        log(f"run {writer.name} is already in {opts.cache_dir}: nothing to do (use --recompute to rebuild it)")
    return writer.final


def left_out(manifest: dict, tables) -> bool:
    """Whether `precompute --stages` left these tables out of the run (its manifest's `not_computed`): an upgrade
    does not add them, the user asks for them with --recompute."""
    return any(t in (manifest.get("not_computed") or {}) for t in tables)


def write_phase_tables(writer: RunWriter, loaded, examples, texts, p: int, opts) -> float:
    """The phase tables (`core.runs.phase_run`, one capture pass) into the staging folder; the seconds taken."""
    t0 = time.time()
    tables = phase_tables_from_model(loaded, examples, texts, p, opts.batch_size, opts.dataset_seed, opts.progress)
    for t, frame in tables.items():
        writer.write(t, frame)
    return round(time.time() - t0, 2)


def write_shift_tables(writer: RunWriter, loaded, texts, answers, p: int, opts, log, design=None) -> float:
    """The phase-shift tables (core.runs.shift_run, under a sampled `design` if one) into the staging folder; the
    seconds taken."""
    t0 = time.time()
    with torch.no_grad():
        for name, frame in phase_shift_table(loaded, texts, answers, p, opts, log, design).items():
            writer.write(name, frame)
    return round(time.time() - t0, 2)


def upgrade_phase(writer: RunWriter, loaded, p: int, opts, examples, texts, log) -> bool:
    """A run cached by an older schema (2 or 3) gets the tables it lacks: the number tables (schema 3)
    and the phase tables (schema 4, one more capture pass). A run whose phase tables came from its
    cached sample (`python -m core upgrade`, model not here) gets them over every example once the
    model is here, and tables of another phase version (core.analysis.phase.PHASE_VERSION) are made anew.
    Nothing else is recomputed."""
    manifest = read_json_file(writer.final / "manifest.json") or {}
    if left_out(manifest, PHASE_TABLES):
        return False
    from_sample = (manifest.get("phase_locking") or {}).get("whole_split") is False
    if manifest.get("schema_version") not in (2, 3) and not (
        manifest.get("schema_version") == SCHEMA_VERSION and (from_sample or not phase_current(manifest))
    ):
        return False
    keep = writer.stage_published()
    timings = dict(keep.get("timings") or {})
    with torch.no_grad():
        if not (writer.has("number_spectrum") and writer.has("number_probes")) and not left_out(
                manifest, ("number_spectrum", "number_probes")):  # a stage left out stays out
            t0 = time.time()
            keep["number_representations"] = write_number_tables(writer, loaded, p, opts, log)
            timings["numbers_s"] = round(time.time() - t0, 2)
        timings["phase_s"] = write_phase_tables(writer, loaded, examples, texts, p, opts)
    keep["phase_locking"] = phase_note(len(examples), len(examples), opts.split)
    keep["timings"] = timings
    fresh = training_log(loaded)
    if fresh is not None:
        writer.write("training_log", fresh)
    writer.publish(keep)
    log(
        f"run {writer.name}: at schema {SCHEMA_VERSION}, phase version {PHASE_VERSION} (number and phase tables "
        "made where missing or older); nothing else recomputed"
    )
    return True


def shift_current(manifest: dict) -> bool:
    """Whether a run's phase-shift tables are of this code's measurement (SHIFT_VERSION: capped edits, per-question
    outcomes); a run without them (no weights when it was cached, or a task without the shift) counts as current."""
    if "phase_shift" not in (manifest.get("tables") or {}):
        return True
    return (manifest.get("phase_shift") or {}).get("version") == SHIFT_VERSION


def shift_note() -> dict:
    """What the manifest says about the phase-shift tables."""
    return {"version": SHIFT_VERSION}


def upgrade_design(writer: RunWriter, loaded, p: int, opts, examples, texts, basis, taus, log) -> bool:
    """A deep model's run of the sampled design (core.runs.sampled_design) asked for with --every-question: its
    ablation grid (with `ablation_errors` and `error_analysis`) and its phase shift are computed again over every
    question, as a run of every question computes them; the manifest's `design` is dropped and the run takes the
    options asked (`writer`'s); every other table is kept here (a patching table read on samples is then read again
    over every pair by `upgrade_successors`, as a run of every question reads it). The grid resumes from its
    checkpoints if stopped; nothing is published until both are written."""
    manifest = read_json_file(writer.final / "manifest.json") or {}
    if not reads_sample_again(manifest.get("options"), writer.options):
        return False
    tables = manifest.get("tables") or {}
    keep = writer.stage_published()
    keep.pop("design", None)
    timings = dict(keep.get("timings") or {})
    answers = np.array([e.answer for e in examples])
    log(f"run {writer.name}: its grid and phase shift read a sample; reading them again over all {len(texts)} "
        "questions (--every-question)")
    if "ablations" in tables:
        t0 = time.time()
        with torch.no_grad():
            write_grid_tables(writer, *ablation_grid(loaded, texts, answers, p, basis, taus, opts, writer, log))
        timings["ablations_s"] = round(time.time() - t0, 2)
        keep["matched_draw_version"] = MATCH_DRAW_VERSION  # every control drawn by today's code
    if "phase_shift" in tables:
        timings["phase_shift_s"] = write_shift_tables(writer, loaded, texts, answers, p, opts, log)
        keep["phase_shift"] = shift_note()
    keep["timings"] = {**timings, "threads": torch.get_num_threads()}
    writer.publish(keep)
    log(f"run {writer.name}: grid and phase shift read again over all {len(texts)} questions")
    return True


def upgrade_shift(writer: RunWriter, loaded, p: int, opts, examples, texts, design, log) -> bool:
    """A run whose phase-shift tables are of an older version (uncapped edits, pooled outcomes only) gets them anew
    from the model (core.runs.shift_run); nothing else is recomputed."""
    manifest = read_json_file(writer.final / "manifest.json") or {}
    if shift_current(manifest) or not shift_specs(p, loaded.n_layers) or left_out(manifest, ("phase_shift",)):
        return False
    keep = writer.stage_published()
    seconds = write_shift_tables(writer, loaded, texts, np.array([e.answer for e in examples]), p, opts, log, design)
    keep["timings"] = {**(keep.get("timings") or {}), "phase_shift_s": seconds}
    keep["phase_shift"] = shift_note()
    writer.publish(keep)
    log(f"run {writer.name}: phase-shift tables made anew (version {SHIFT_VERSION}: capped edits, per-question "
        "outcomes); nothing else recomputed")
    return True


def upgrade_groups(writer: RunWriter, loaded, p: int, opts, examples, texts, log) -> bool:
    """A run with the phase shift but without the group shift of this version (core.runs.group_shift) gets it from
    the model, over every question; nothing else is recomputed."""
    manifest = read_json_file(writer.final / "manifest.json") or {}
    tables = manifest.get("tables") or {}
    if ("phase_shift" not in tables or left_out(manifest, ("group_shift",)) or not has_group_shift(p)
            or ("group_shift" in tables and (manifest.get("group_shift") or {}).get("version") == GROUP_SHIFT_VERSION)):
        return False
    keep = writer.stage_published()
    t0 = time.time()
    keep["group_shift"] = write_group_tables(writer, loaded, texts, np.array([e.answer for e in examples]), p, opts,
                                             log)
    keep["timings"] = {**(keep.get("timings") or {}), "group_shift_s": round(time.time() - t0, 2)}
    writer.publish(keep)
    log(f"run {writer.name}: group phase-shift tables made (version {GROUP_SHIFT_VERSION}, over all {len(texts)} "
        "questions); nothing else recomputed")
    return True


def upgrade_periods(writer: RunWriter, loaded, p: int, opts, examples, texts, log) -> bool:
    """A run with the ablation grid but without the periods-only ablation of this version (core.runs.period_ablation)
    gets it from the model, over every question; nothing else is recomputed."""
    manifest = read_json_file(writer.final / "manifest.json") or {}
    tables = manifest.get("tables") or {}
    if ("ablations" not in tables or left_out(manifest, ("period_ablation",)) or not has_periods(p)
            or ("period_ablation" in tables
                and (manifest.get("period_ablation") or {}).get("version") == PERIOD_VERSION)):
        return False
    keep = writer.stage_published()
    t0 = time.time()
    keep["period_ablation"] = write_period_table(writer, loaded, texts, np.array([e.answer for e in examples]), p,
                                                 opts, log)
    keep["timings"] = {**(keep.get("timings") or {}), "period_ablation_s": round(time.time() - t0, 2)}
    writer.publish(keep)
    log(f"run {writer.name}: periods-only ablation made (version {PERIOD_VERSION}, over all {len(texts)} questions); "
        "nothing else recomputed")
    return True


def upgrade_row_origin(writer: RunWriter, loaded, p: int, log) -> bool:
    """A run of a number-token fine-tuning with trained rows, cached before its rows were compared with their start,
    gets that table (core.training.row_start; the base model must be here); nothing else is recomputed."""
    manifest = read_json_file(writer.final / "manifest.json") or {}
    tables = manifest.get("tables") or {}
    if "number_rows_origin" in tables or "embedding_spectrum" not in tables:
        return False
    moved = row_origin_table(loaded, p, log)
    if moved is None:
        return False
    return amend_table(writer, "number_rows_origin", moved, "its number rows compared with their start", log)


def upgrade_successors(writer: RunWriter, loaded, p: int, opts, examples, texts, log) -> bool:
    """A run of every stage (no `not_computed`) gets the tables of the stages added since it was made, or of an older
    version: activation patching (core.runs.patch_run), the heads (core.runs.head_tables, where they can be read),
    the helix (core.runs.helix_tables) and attribution patching (core.runs.attribution_run), from the model, over
    every question, and a patching or position patching table that read fewer pairs than the run now reads
    (core.runs.patch_run.reads_enough, core.runs.position_patch_run.reads_every_pair); nothing else is
    recomputed."""
    answers = np.array([e.answer for e in examples])
    # (manifest key, table, version, applies, write, read enough: a table of this version that read fewer pairs than
    # the run now reads is made again; None where the version says all)
    stages = (("patching", "patching", PATCH_VERSION, True,
               lambda: write_patch_table(writer, loaded, examples, texts, p, opts, log),
               lambda note, manifest: reads_enough(note, loaded, examples, opts.max_operand,
                                                   not manifest.get("design"))),
              ("heads", "head_spectra", HEAD_VERSION, has_heads(loaded, p),
               lambda: write_head_tables(writer, loaded, texts, answers, p, opts, log), None),
              ("helix", "helix_fit", HELIX_VERSION, has_helix(p),
               lambda: write_helix_tables(writer, loaded, examples, texts, p, opts, log), None),
              ("attribution", "attribution", ATTRIBUTION_VERSION, True,
               lambda: write_attribution_table(writer, loaded, examples, texts, p, opts, log), None),
              ("position_patching", "position_patching", POSITION_VERSION, True,
               lambda: write_position_table(writer, loaded, examples, texts, p, opts, log),
               lambda note, manifest: reads_every_pair(note, loaded, examples, texts, opts.max_operand)))
    upgraded, asked = False, check_stages(opts.stages)
    for key, table, version, applies, write, enough in stages:
        manifest = read_json_file(writer.final / "manifest.json") or {}
        tables = manifest.get("tables") or {}
        current = table in tables and (manifest.get(key) or {}).get("version") == version
        if current and enough is not None:
            current = enough(manifest[key], manifest)
        if manifest.get("not_computed") or "examples" not in tables or current or not applies or key not in asked:
            continue
        keep = writer.stage_published()
        t0 = time.time()
        keep[key] = write()
        keep["timings"] = {**(keep.get("timings") or {}), f"{key}_s": round(time.time() - t0, 2)}
        writer.publish(keep)
        log(f"run {writer.name}: {key} tables made (version {version}, over its {len(texts)} questions); nothing else "
            "recomputed")
        upgraded = True
    return upgraded


def refresh_provenance(writer: RunWriter, loaded, log) -> bool:
    """A cached run takes in its local model's corrected provenance (for example the epochs a training ran, where its
    label said those the recipe planned); nothing else changes."""
    fresh = read_provenance(Path(loaded.source)) if loaded.local else None
    manifest = read_json_file(writer.final / "manifest.json") or {}
    old = (manifest.get("model") or {}).get("provenance") or {}
    if not fresh or not old or old.get("label") == fresh.get("label"):  # the label only: paths differ by machine
        return False
    keep = writer.stage_published()
    keep["model"] = {**(keep.get("model") or {}), "provenance": {**old, "label": fresh.get("label")}}
    writer.publish(keep)
    log(f"run {writer.name}: its model's provenance taken in ({fresh.get('label', '')}); nothing else recomputed")
    return True


def refresh_training_log(writer: RunWriter, loaded, log) -> bool:
    """A cached run of a project-trained model takes in seeds trained since (nothing else changes)."""
    fresh = training_log(loaded)
    if fresh is None:
        return False
    old = writer.final / "training_log.parquet"
    if old.exists() and pd.read_parquet(old).equals(fresh):
        return False
    said = f"training log refreshed ({fresh['seed'].nunique()} seed(s))"
    return amend_table(writer, "training_log", fresh, said, log)


def amend_table(writer: RunWriter, table: str, frame: pd.DataFrame, what: str, log) -> bool:
    """Write (or replace) one table of a published run and publish it again, every other table and the manifest's own
    keys as they were; the log says `what` was done."""
    keep = writer.stage_published()
    writer.write(table, frame)
    writer.publish(keep)
    log(f"run {writer.name}: {what}; nothing else recomputed")
    return True


def training_log(loaded):
    """A project-trained model ships its training log (and its extra seeds') beside its weights."""
    if not loaded.local:
        return None
    frame = seed_logs(Path(loaded.source))
    if frame is None:
        return None
    try:
        check_table("training_log", frame)
    except CoreError as exc:
        raise CoreError(f"training log of {loaded.source}: {exc}") from None
    return frame
