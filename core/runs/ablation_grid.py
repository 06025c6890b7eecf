"""The ablation grid of a run: every filter condition (modules x band removed x tau, keep-one
frequency, random-subspace controls matched to each band's rank, and at Table 1's tau controls matched to its
rank and removed energy), evaluated at the answer position with the prefix shared across conditions
(core.analysis.evaluation.evaluate_conditions), saved condition by condition so an interrupted grid resumes; and
the error-analysis table built from it. Each filter's row says what share of the modules' output energy it
removes (`core.analysis.filters.removed_energy_share`, from the outputs' second moments: `ModuleEnergy`, fed by
the measurement pass or by a capture pass of its own). Under a sampled design (core.runs.sampled_design) the
conditions Table 1's verdict reads run on every question and the others on the fixed sample, each row's `n`
saying which, and a sampled row's change in accuracy is against the unfiltered model on the same sample.
Part of `core.runs.precompute`'s stages.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from core.analysis.ablations import MATCHED_CONTROLS, Ablation, Condition
from core.analysis.behaviour import error_histogram, error_summary
from core.analysis.evaluation import ROWS_PER_CALL, GridProgress, evaluate_conditions
from core.analysis.filters import MATCH_DRAW_VERSION, MATCH_TOLERANCE, removed_energy_share
from core.files import read_json_file
from core.models.capture import iter_capture
from core.models.names import ATTN, BOTH, MLP, MODULE_OUTPUTS
from core.paper import TABLE1_TAU
from core.runs.cache import RunWriter
from core.runs.sampled_design import reads_every_question

#: Draws of each random-subspace control at the cutoff Table 1 reads (the tau nearest TABLE1_TAU); other cutoffs
#: get one draw. The verdict reads their mean and spread (core.claims.mechanism.claim_ablations).
CONTROL_DRAWS = 5
#: The key, in a grid's partial results, of the unfiltered model on a sampled design's sample.
SAMPLE_BASE = "sample-base"
#: Answer-position rows of one grid call (conditions x prompts): twice an evaluation's (ROWS_PER_CALL), so that more of
#: a call's conditions share what they compute alike (the first layers' attention and MLPs,
#: core.analysis.evaluation.mlp_sharing): 0.85 of the time per condition on the Fourier-frozen demo (docs/speed.md).
GRID_ROWS_PER_CALL = 2 * ROWS_PER_CALL


def table1_cutoff(taus) -> int | None:
    """The grid's tau that Table 1 reads: the one nearest the paper's (TABLE1_TAU), the lower on a tie."""
    return min((int(t) for t in taus), key=lambda t: (abs(t - TABLE1_TAU), t)) if len(taus) else None


def ablation_specs(basis, taus, controls: bool = True):
    """The grid: no filter; modules x band removed x tau; keep-one for periods 2 and p-1; and, for
    each band filter, a random-subspace control of the same rank (unless `controls` is False), with
    CONTROL_DRAWS draws at the tau nearest the paper's (one elsewhere); at that tau also CONTROL_DRAWS
    draws of the control matched to the band's rank and removed energy. New kinds of condition go at the
    end, so the conditions a grid had before keep their places and their results."""

    specs = [Ablation()]
    for tau in taus:
        for modules in (BOTH, *MODULE_OUTPUTS):
            for removed in ("low", "high"):
                specs.append(Ablation(modules, removed, int(tau)))
    for tau in (
        taus if controls else ()
    ):  # controls: a random subspace of the same rank as each band filter (docs/method.md#controls)
        for modules in (BOTH, *MODULE_OUTPUTS):
            for removed in ("random-low", "random-high"):
                specs.append(Ablation(modules, removed, int(tau)))
    for k in sorted({basis.frequency_of_period(2.0), 1}, reverse=True):
        specs.append(Ablation("both", "keep", keep_k=int(k)))
    if controls and taus:
        table1_tau = table1_cutoff(taus)
        for draw in range(1, CONTROL_DRAWS):
            for modules in (BOTH, *MODULE_OUTPUTS):
                for removed in ("random-low", "random-high"):
                    specs.append(Ablation(modules, removed, int(table1_tau), draw=draw))
        for draw in range(CONTROL_DRAWS):
            for modules in (BOTH, *MODULE_OUTPUTS):
                for removed in ("matched-low", "matched-high"):
                    specs.append(Ablation(modules, removed, int(table1_tau), draw=draw))
    return specs


class ModuleEnergy:
    """C = sum of x x^T (float64, D x D) over the answer-position outputs of every layer's attention and of every
    layer's MLP, added up batch by batch from captured batches (core.models.capture.iter_capture)."""

    def __init__(self):
        self.sums = {ATTN: 0.0, MLP: 0.0}

    def add(self, cb) -> None:
        for kind in MODULE_OUTPUTS:
            x = getattr(cb, kind).double().cpu().numpy()
            x = x.reshape(-1, x.shape[-1])
            self.sums[kind] = self.sums[kind] + x.T @ x

    def second_moments(self) -> dict:
        """Per modules a filter acts on ("attn", "mlp", "both"): the D x D second moment of their outputs."""
        return {ATTN: self.sums[ATTN], MLP: self.sums[MLP], BOTH: self.sums[ATTN] + self.sums[MLP]}


def module_second_moments(loaded, texts, batch_size: int, progress=None) -> dict:
    """`ModuleEnergy.second_moments` of the outputs over `texts`, from a capture pass of its own: what a filter
    acting on those outputs removes energy from."""
    energy = ModuleEnergy()
    for cb in iter_capture(loaded, texts, batch_size, MODULE_OUTPUTS, progress, desc="module output energy"):
        energy.add(cb)
    return energy.second_moments()


def every_question_labels(basis, taus) -> list[str]:
    """The labels of the grid's conditions that read every question under a sampled design."""
    t1 = table1_cutoff(taus)
    return [s.label() for s in ablation_specs(basis, taus) if reads_every_question(s, t1)]


#: The module outputs' second moments, kept in the staging folder from the measurement pass until the grid has
#: used them (a working file: never published).
ENERGY_FILE = "module_energy.npz"


def write_energy(writer: RunWriter, second_moments: dict) -> None:
    tmp = writer.staging / f".{ENERGY_FILE}.tmp"
    with open(tmp, "wb") as fh:
        np.savez(fh, **second_moments)
    tmp.replace(writer.staging / ENERGY_FILE)


def read_energy(writer: RunWriter) -> dict | None:
    """The second moments the measurement pass saved, or None (the grid then measures them itself)."""
    path = writer.staging / ENERGY_FILE
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError):
        return None


def _spec_key(spec) -> str:
    key = asdict(spec)
    if not key["draw"]:
        del key["draw"]  # the first draw keeps the key it had before draws existed (a resumed grid finds it)
    return json.dumps(key, sort_keys=True)


def filter_key(spec) -> str:
    """What determines a spec's filter: everything but the modules it acts on, except for an energy-matched
    control, which is matched to those modules' outputs."""
    return json.dumps({k: v for k, v in asdict(spec).items() if k != "modules" or spec.removed in MATCHED_CONTROLS},
                      sort_keys=True)


def build_filters(specs, W_U, basis, second_moments: dict) -> dict:
    """Each distinct filter of the grid built once (a band's filter serves Attn, MLP and both)."""
    built = {}
    for spec in specs:
        key = filter_key(spec)
        if key not in built:
            built[key] = spec.build(W_U, basis, second_moments.get(spec.modules))
    return built


def ablation_grid(loaded, texts, answers, p: int, basis, taus, opts, writer: RunWriter, log=print, design=None,
                  second_moments: dict | None = None):
    """Evaluate every ablation of the grid in one pass over the prompts (two under a sampled `design`: the
    conditions that read every question, then the others on the sample).

    With filters at the answer position the prefix of each batch runs once and every condition
    runs on the last token only (core.analysis.evaluation.evaluate_conditions). Partial results are
    checkpointed in the staging folder, so an interrupted grid resumes where it stopped. `opts`: the
    run's core.runs.precompute.PrecomputeOptions (positions, batch_size, progress are read).
    `second_moments`: the module outputs' (ModuleEnergy.second_moments); None: measured here.
    """

    W_U = loaded.unembedding(p)
    done = writer.read_json("ablations.partial.json") or {}
    specs = ablation_specs(basis, taus)
    if second_moments is None:
        second_moments = module_second_moments(loaded, texts, opts.batch_size, opts.progress)
    answers = np.asarray(answers)
    if design is None:
        groups = [("ablations", specs, np.arange(len(texts)), [])]
    else:
        t1 = table1_cutoff(taus)
        groups = [
            ("ablations", [s for s in specs if reads_every_question(s, t1)], np.arange(len(texts)), []),
            ("ablations.sample", [s for s in specs if not reads_every_question(s, t1)], design.sample, [SAMPLE_BASE]),
        ]
    for stem, group, rows, extra in groups:
        pending = [s for s in group if _spec_key(s) not in done]
        extra = [k for k in extra if k not in done]
        if pending or extra:
            _evaluate_group(loaded, [texts[i] for i in rows], answers[rows], p, basis, W_U, pending, extra,
                            second_moments, opts, writer, done, stem, log)
    return _grid_tables(specs, done, design, table1_cutoff(taus))


def _evaluate_group(loaded, texts, answers, p, basis, W_U, pending, extra, second_moments, opts, writer, done, stem,
                    log) -> None:
    """Evaluate `pending` specs (and the unfiltered model under each key of `extra`) on these prompts, resuming
    from and checkpointing to `stem`.progress.*, and add their entries to `done` (saved to ablations.partial.json)."""
    filters = build_filters(pending, W_U, basis, second_moments)
    conditions = [Condition(filters[filter_key(s)], s.modules if s.modules != "none" else "both") for s in pending]
    conditions += [Condition(None)] * len(extra)
    keys = [_spec_key(s) for s in pending] + extra
    progress_file = writer.staging / f"{stem}.progress.npz"
    progress_meta = f"{stem}.progress.json"
    resume = _read_progress(progress_file, writer.read_json(progress_meta), keys)
    if resume is not None:
        log(f"resuming the ablation grid: {int(resume.done.sum())} of {len(texts)} prompts already done")

    def checkpoint(state: GridProgress) -> None:
        _write_progress(progress_file, state)
        writer.write_json(progress_meta, {"keys": keys})

    log(f"ablation grid: {len(conditions)} conditions, {len(filters)} distinct filters, {len(texts)} prompts")
    evaluations = evaluate_conditions(
        loaded,
        texts,
        answers,
        p,
        conditions,
        opts.positions,
        opts.batch_size,
        rows_per_call=GRID_ROWS_PER_CALL,
        progress=opts.progress,
        desc=f"ablations ({len(conditions)} conditions)",
        resume=resume,
        on_checkpoint=checkpoint,
    )
    for key, spec, ev, cond in zip(keys, pending + [Ablation()] * len(extra), evaluations, conditions):
        energy = removed_energy_share(cond.flt, second_moments[cond.modules]) if cond.flt is not None else 0.0
        done[key] = _ablation_entry(spec, basis, ev, energy)
    writer.write_json("ablations.partial.json", done)
    progress_file.unlink(missing_ok=True)
    (writer.staging / progress_meta).unlink(missing_ok=True)


def unmatched_controls(table: pd.DataFrame) -> pd.Series:
    """Which rows of an `ablations` table are energy-matched controls that remove more than MATCH_TOLERANCE more
    or less of their modules' output energy than their band does (a boolean mask; False where energy was not
    measured)."""
    if "energy_removed" not in table:
        return pd.Series(False, index=table.index)
    bands = table[table["removed"].isin(["low", "high"])].drop_duplicates(["modules", "removed", "tau"])
    target = bands.set_index(["modules", "removed", "tau"])["energy_removed"]
    matched = table["removed"].isin(list(MATCHED_CONTROLS))
    keys = list(zip(table["modules"], table["removed"].map(MATCHED_CONTROLS), table["tau"]))
    band = pd.Series([target.get(k, np.nan) if m else np.nan for k, m in zip(keys, matched)], index=table.index)
    return matched & ((table["energy_removed"] - band).abs() > MATCH_TOLERANCE)


def redraw_unmatched_controls(loaded, texts, answers, p: int, basis, taus, opts, writer: RunWriter,
                              table: pd.DataFrame, errors: pd.DataFrame, log=print, design=None):
    """(ablations, ablation_errors) of a cached run with its unmatched energy-matched controls (`unmatched_controls`)
    drawn again by the current `energy_matched_filter` and evaluated on the questions they read; every other row
    stays as it was. A control that still cannot reach its band's share keeps the nearest draw, as a new run would.
    The module outputs' second moments are measured again over `texts` (as the grid measures them)."""
    redo = unmatched_controls(table)
    if not redo.any():
        return table, errors
    specs = [s for s in ablation_specs(basis, taus) if s.removed in MATCHED_CONTROLS]
    chosen = {(r.modules, r.removed, int(r.tau), int(r.draw)) for r in table[redo].itertuples()}
    pending = [s for s in specs if (s.modules, s.removed, s.tau, s.draw) in chosen]
    second_moments = module_second_moments(loaded, texts, opts.batch_size, opts.progress)
    W_U = loaded.unembedding(p)
    t1 = table1_cutoff(taus)
    answers, done = np.asarray(answers), {}
    every = [s for s in pending if design is None or reads_every_question(s, t1)]
    sampled = [s for s in pending if s not in every]
    for group, rows in ((every, np.arange(len(texts))), (sampled, design.sample if design is not None else [])):
        if group:
            _evaluate_group(loaded, [texts[i] for i in rows], answers[rows], p, basis, W_U, group, [], second_moments,
                            opts, writer, done, "ablations.redraw", log)
    table, kept = table.copy(), []
    base = table[table["removed"] == "none"].iloc[0]
    for spec in pending:
        at = (table["modules"] == spec.modules) & (table["removed"] == spec.removed) & (table["tau"] == spec.tau) & (
            table["draw"] == spec.draw)
        row = dict(done[_spec_key(spec)]["row"])
        old = table[at].iloc[0]
        # against the unfiltered model on the same questions: the whole split's, or the sample's (the old row's)
        reference_acc, reference_loss = (
            (base["accuracy"], base["loss"]) if spec in every
            else (old["accuracy"] - old["delta_accuracy"], old["loss"] - old["delta_loss"]))
        row["delta_accuracy"], row["delta_loss"] = row["accuracy"] - reference_acc, row["loss"] - reference_loss
        for col, value in row.items():
            if col in table.columns:
                table.loc[at, col] = value
        h = pd.DataFrame(done[_spec_key(spec)]["errors"], columns=["error", "count"])
        for col in ("modules", "removed", "tau", "keep_k", "draw"):
            h.insert(len(h.columns) - 2, col, getattr(spec, col))
        kept.append(h)
        errors = errors[~((errors["modules"] == spec.modules) & (errors["removed"] == spec.removed)
                          & (errors["tau"] == spec.tau) & (errors["draw"] == spec.draw))]
    errors = pd.concat([errors, *kept], ignore_index=True).astype(errors.dtypes.to_dict())
    log(f"{len(pending)} energy-matched control(s) drawn again; {int(unmatched_controls(table).sum())} still short of "
        "their band's energy (no draw of their rank reaches it)")
    return table, errors


def redraw_run_controls(writer: RunWriter, loaded, p: int, opts, examples, texts, basis, taus, design, log) -> bool:
    """`core.runs.precompute`'s upgrade of a cached run whose energy-matched controls were drawn by an older
    `energy_matched_filter` (its manifest's `matched_draw_version`): those that missed their band's energy are
    drawn again (`redraw_unmatched_controls`) and the version recorded; nothing else is recomputed. Controls
    that matched stay: they already meet the definition. False when there was nothing to do."""
    manifest = read_json_file(writer.final / "manifest.json") or {}
    if int(manifest.get("matched_draw_version", 1)) >= MATCH_DRAW_VERSION or "ablations" not in (
            manifest.get("tables") or {}):
        return False
    keep = writer.stage_published()
    t0 = time.time()
    table, errors = writer.read("ablations"), writer.read("ablation_errors")
    if unmatched_controls(table).any():
        answers = np.array([e.answer for e in examples])
        with torch.no_grad():
            table, errors = redraw_unmatched_controls(loaded, texts, answers, p, basis, taus, opts, writer, table,
                                                      errors, log, design)
        write_grid_tables(writer, table, errors)
    keep["matched_draw_version"] = MATCH_DRAW_VERSION
    keep["timings"] = {**(keep.get("timings") or {}), "controls_redrawn_s": round(time.time() - t0, 2)}
    writer.publish(keep)
    log(f"run {writer.name}: energy-matched controls at draw version {MATCH_DRAW_VERSION}; nothing else recomputed")
    return True


def _grid_tables(specs, done: dict, design, table1_tau):
    """The `ablations` and `ablation_errors` tables from the entries of every spec. A row read on the sample
    gets its change in accuracy and loss against the unfiltered model on the same sample."""
    rows, err_frames = [], []
    for spec in specs:
        entry = done[_spec_key(spec)]
        rows.append(entry["row"])
        h = pd.DataFrame(entry["errors"], columns=["error", "count"])
        for col in ("modules", "removed", "tau", "keep_k", "draw"):
            h.insert(len(h.columns) - 2, col, getattr(spec, col))
        err_frames.append(h)
    table = pd.DataFrame(rows)
    base = table[table["removed"] == "none"].iloc[0]
    table["delta_accuracy"] = table["accuracy"] - base["accuracy"]
    table["delta_loss"] = table["loss"] - base["loss"]
    if design is not None:
        on_sample = np.array([not reads_every_question(s, table1_tau) for s in specs])
        sample_base = done[SAMPLE_BASE]["row"]
        table.loc[on_sample, "delta_accuracy"] = table.loc[on_sample, "accuracy"] - sample_base["accuracy"]
        table.loc[on_sample, "delta_loss"] = table.loc[on_sample, "loss"] - sample_base["loss"]
    for col in ("tau", "keep_k"):
        table[col] = table[col].astype("Int64")
    errors = pd.concat(err_frames, ignore_index=True)
    for col in ("tau", "keep_k"):
        errors[col] = errors[col].astype("Int64")
    errors["error"] = errors["error"].astype(np.int64)
    errors["count"] = errors["count"].astype(np.int64)
    return table, errors


def _ablation_entry(spec, basis, ev, energy: float) -> dict:
    """A condition's row (`energy_removed`: the share of its modules' answer-position output energy the filter
    removes) and its error histogram."""
    summary = error_summary(ev.answers, ev.predictions)
    hist = error_histogram(ev.answers, ev.predictions)
    return {
        "row": {
            **asdict(spec),
            "keep_period": float(basis.period(spec.keep_k)) if spec.keep_k else None,
            "label": spec.label(),
            "energy_removed": energy,
            "accuracy": ev.accuracy,
            "within_2": ev.within(2),
            "within_10": ev.within(10),
            "parity_match": ev.parity_match,
            "loss": ev.loss,
            "n": ev.n,
            "erased": ev.erased,
            "rank": ev.rank,
            "width": ev.width,
            "share_multiple_of_10": summary.share_multiple_of_10,
            "share_within_2": summary.share_within_2,
            "mean_abs_error": summary.mean_abs_error,
        },
        "errors": hist.to_dict(orient="list"),
    }


def _write_progress(path: Path, state) -> None:
    """Partial grid results as plain arrays (no pickles), replaced atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        np.savez(fh, predictions=state.predictions, losses=state.losses, done=state.done)
    tmp.replace(path)


def _read_progress(path: Path, meta, keys: list[str]):
    """The saved partial results, if they belong to exactly these pending conditions."""

    if not path.exists() or not meta or meta.get("keys") != keys:
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            state = GridProgress(z["predictions"], z["losses"], z["done"])
    except (OSError, ValueError, KeyError):
        return None
    return state


def write_grid_tables(writer: RunWriter, ablations: pd.DataFrame, ablation_errors: pd.DataFrame) -> None:
    """The grid's tables into the staging folder: `ablations`, `ablation_errors`, and `error_analysis` from them and
    the run's examples (an upgrade that changes the grid writes all three)."""
    writer.write("ablations", ablations)
    writer.write("ablation_errors", ablation_errors)
    writer.write("error_analysis", error_analysis_table(writer.read("examples"), ablations))


def error_analysis_table(examples: pd.DataFrame, ablations: pd.DataFrame) -> pd.DataFrame:
    """Share of errors that are multiples of 10: the model itself, and under each filter."""
    s = error_summary(examples["answer"], examples["prediction"])
    rows = [{"source": "model", **s.as_row()}]
    for _, r in ablations[ablations["removed"] != "none"].iterrows():
        n_wrong = int(round((1 - r["accuracy"]) * r["n"]))
        rows.append(
            {
                "source": r["label"],
                "n": int(r["n"]),
                "n_wrong": n_wrong,
                "accuracy": r["accuracy"],
                "share_multiple_of_10": r["share_multiple_of_10"],
                "share_within_2": r["share_within_2"],
                "mean_abs_error": r["mean_abs_error"],
            }
        )
    return pd.DataFrame(rows)
