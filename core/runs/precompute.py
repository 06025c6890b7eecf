"""From a model to a run folder: every table the dashboard reads, in resumable stages.

1. measurements (core.runs.measure): one streaming pass with capture over the split -> examples, layer_accuracy
   (logit lens with and without the final norm), module_spectra (mean Fourier magnitude of the
   attention, MLP and residual logits per layer), module_logits and final_waves for a sample of
   examples that always holds 15 + 93.
2. embeddings: embedding_spectrum (input and output number rows, both bases, with a
   permutation baseline) and embedding_clusters (t-SNE + k-means).
3. ablations (core.runs.ablation_grid): the filter grid (modules x band removed x tau, no filter, keep-one-frequency for
   periods 2 and p-1), one evaluation each, saved one by one so an interrupted grid resumes. The module outputs'
   energy it needs is added up during stage 1's pass.
4. phase: phase_locking and wave_peaks (core.analysis.phase) from the same capture pass; a run cached
   before they existed gets them from one more capture pass (core.runs.cached_run).
5. phase shift (core.runs.shift_run): each module's short waves moved by d (a capped edit), the answers that
   follow, per question for the verdict's set, with random-direction controls of the same norm.
6. patching (core.runs.patch_run): every question paired with its corrupted partner (the answer's last digit changed),
   each stream and module site patched from the clean prompt at the answer position, over every pair.
7. heads (core.runs.head_tables): each attention head's output read as a module's is, its spectrum and locking.
8. helix (core.runs.helix_tables): the helix fit of the numbers by layer, its 3-D view, and its causal test.
9. attribution (core.runs.attribution_run): attribution patching, the gradient estimate of stage 6 at every site and
   head, over every pair.
10. position_patching (core.runs.position_patch_run): the stream patched at every token of the question and every
    layer, over every pair of the running example's token layout.
Then error_analysis, the manifest, and an atomic publish (core.runs.cache).

Before anything is loaded, core.runs.precompute_arguments checks the options and, for a model folder, the run they
would write (a run cached with other options is refused, naming each option that differs); the command line makes
that check before importing this module (torch). A model whose tokenizer splits numbers into digits gets a k-shot run
(`_precompute_digits`): a stage named by --stages that reads number logits is refused then, one line, before any table.

A deep model (core.runs.sampled_design) reads every question in stages 1, 2 and 4 and for the conditions Table 1's
verdict reads; the rest of stages 3 and 5 read a fixed stratified sample, and the manifest's `design` says so.
`--every-question` reads every question for everything, and on a run cached with the design reads those stages
again over every question (core.runs.cached_run.upgrade_design).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from core.analysis.filters import MATCH_DRAW_VERSION, unembedding_rank
from core.analysis.fourier import fourier_basis
from core.analysis.kshot import SHOTS, accuracy_by_shots, generation_error_table, generations_table
from core.errors import CoreError
from core.models.loading import describe_model, load_model, prompt_texts
from core.models.names import ModuleNames
from core.models.source import project_relative
from core.runs.ablation_grid import (
    ModuleEnergy,
    ablation_grid,
    error_analysis_table,
    every_question_labels,
    read_energy,
    write_energy,
)
from core.runs.attribution_run import attribution_note, write_attribution_table
from core.runs.cache import RunWriter, ensure_cache_dir, run_lock, run_name
from core.runs.cached_run import keep_cached_run, shift_note, training_log, write_phase_tables, write_shift_tables
from core.runs.group_shift import group_note, has_group_shift, run_groups, write_group_tables
from core.runs.head_tables import has_heads, head_note, write_head_tables
from core.runs.helix_tables import HELIX_JSON, has_helix, write_helix_tables
from core.runs.measure import measure
from core.runs.number_tables import NUMBERS_JSON, embedding_tables, row_origin_table, write_number_tables
from core.runs.patch_run import patch_note, write_patch_table
from core.runs.period_ablation import has_periods, period_note, write_period_table
from core.runs.phase_run import PHASE_TABLES, phase_note
from core.runs.position_patch_run import position_note, write_position_table
from core.runs.precompute_arguments import (
    NUMBER_LOGIT_STAGES,
    STAGES,
    PrecomputeOptions,
    check_arguments,
    check_precompute,
    check_stages,
    digits_identity,
    digits_stage_refusal,
    model_label,
    run_identity,
    run_label,
    run_options,
)
from core.runs.run_timings import StageTimings
from core.runs.sampled_design import design_for
from core.runs.shift_run import shift_specs
from core.tasks import build_examples, running_example_id, select_split, subsample, with_shots
from core.threads import use_threads

MEASURE_TABLES = (
    "examples",
    "layer_accuracy",
    "module_spectra",
    "module_spectra_baseline",
    "module_logits",
    "final_waves",
)

#: The tables each stage of `--stages` writes (core.runs.precompute_arguments.STAGES: the module docstring's 1-5; the
#: phase tables come from the measurements' own pass). "measure" always runs: every other table reads its examples.
STAGE_TABLES = {
    "measure": MEASURE_TABLES + PHASE_TABLES,
    "embeddings": ("embedding_spectrum", "embedding_clusters", "number_rows_origin"),
    "numbers": ("number_spectrum", "number_probes"),
    "ablations": ("ablations", "ablation_errors", "error_analysis", "period_ablation"),
    "shift": ("phase_shift", "phase_shift_answers", "group_shift", "group_shift_answers"),
    "patching": ("patching",),
    "heads": ("head_spectra", "head_locking"),
    "helix": ("helix_fit", "helix_points", "helix_patching"),
    "attribution": ("attribution",),
    "position_patching": ("position_patching",),
}


def not_computed(stages: tuple[str, ...]) -> dict[str, str]:
    """The tables of the stages left out, each with the reason a reader shows (the manifest's `not_computed`)."""
    left = [s for s in STAGES if s not in stages]
    reason = (f"left out when this run was made (precompute --stages {','.join(stages)}); precompute it again with "
              "--recompute and the stages it needs to add it")
    return {t: reason for s in left for t in STAGE_TABLES[s]}


def loaded_identity(opts: PrecomputeOptions, loaded) -> dict:
    """What determines the numbers of a run (core.runs.precompute_arguments.run_identity) for a loaded model."""
    return run_identity(opts, loaded.local, loaded.source, loaded.fingerprint, loaded.revision)


def precompute(opts: PrecomputeOptions, log=print) -> Path:
    """Compute and publish a run; returns its folder. Raises CoreError on bad input."""

    check_precompute(opts)  # every refusal that needs no model (core.cli makes it before torch is imported, too)
    p, taus, stages = check_arguments(opts)
    ensure_cache_dir(opts.cache_dir)
    all_examples = build_examples(opts.task, opts.max_operand, opts.dataset_seed)
    running = running_example_id(opts.task, opts.max_operand)
    examples = subsample(
        select_split(all_examples, opts.split), opts.limit, opts.dataset_seed, [running] if running else []
    )
    pool = select_split(all_examples, "train")
    basis = fourier_basis(p, opts.basis)

    use_threads(opts.threads)  # sets torch's thread count for this run
    t0 = time.time()
    names = ModuleNames.parse(opts.module_names) if opts.module_names else None
    loaded = load_model(
        opts.model,
        device=opts.device,
        dtype=opts.dtype,
        device_map=opts.device_map,
        trust_remote_code=opts.trust_remote_code,
        revision=opts.revision,
        module_names=names,
    )
    if not any(c.P >= p for c in (loaded.number_candidates or [loaded.numbers])):
        refusal = digits_stage_refusal(opts.stages, _digits_reason(loaded.numbers, p), loaded.numbers.P)
        if refusal:  # a stage asked for by name that reads number logits this model does not have
            raise CoreError(refusal)
        return _precompute_digits(opts, loaded, all_examples, examples, p, taus, t0, log)
    loaded.select_numbers(p, f"the {opts.task} task with operands 0..{opts.max_operand}")
    texts = model_prompts(loaded, examples, pool, opts.shots, opts.dataset_seed)
    _check_context(loaded, texts, opts.shots)
    label = model_label(opts, loaded.local, loaded.source)
    identity = loaded_identity(opts, loaded)
    readable = run_label(opts, label)
    name = run_name(readable, identity)
    design = design_for([e.answer for e in examples], loaded.n_layers, loaded.width, opts.every_question)
    # the design and the stages only when not the default: a run of every stage reading every question keeps the
    # options it always had
    options = run_options(taus, opts.n_sample, stages, design.option() if design is not None else None)
    with run_lock(opts.cache_dir, name, log):
        writer = RunWriter(opts.cache_dir, name, identity, options, recompute=opts.recompute)
        try:
            return _precompute_run(
                opts, loaded, writer, examples, texts, p, basis, taus, running, label, readable, options, t0, log,
                design,
            )
        finally:
            writer.discard_if_empty()  # a staging folder with no finished table is not worth keeping


def model_prompts(loaded, examples, pool, shots: int, seed: int) -> list[str]:
    """The prompts as the model reads them. k-shot examples show their answers exactly as the model
    is scored on them (its number-token convention), so an un-fine-tuned model sees in the prompt
    the very tokens it would emit."""
    nt = loaded.numbers
    return prompt_texts(loaded, with_shots(examples, pool, shots, seed, lambda n: nt.prompt_suffix + nt.answer_text(n)))


def _check_context(loaded, texts, shots: int) -> None:
    """Fail clearly when the longest prompt does not fit the model's context window."""
    config = loaded.model.config
    limit = None
    for key in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            limit = value
            break
    if limit is None:
        return
    longest = max(len(ids) for ids in loaded.tokenizer(list(texts))["input_ids"])
    if longest > limit:
        raise CoreError(
            f"the longest prompt is {longest} tokens but the model reads at most {limit}"
            + (f": use fewer --shots than {shots}" if shots else ": this task's prompts do not fit this model")
        )


def _precompute_run(
    opts, loaded, writer, examples, texts, p, basis, taus, running, label, run_label, options, t0, log, design=None
) -> Path:
    """The stages of `precompute`, run under the run's lock: a cached run is upgraded or left alone;
    otherwise each stage's tables are written unless a resumed staging folder has them already."""
    if writer.exists and not opts.recompute:
        return keep_cached_run(writer, loaded, p, opts, examples, texts, options, log, basis, taus, design)
    if writer.resumed:
        log(f"resuming {writer.name} from its unfinished tables")
    timings = StageTimings(writer)  # every part of a run interrupted and resumed, summed (core.runs.run_timings)
    timings.update({"load_s": round(time.time() - t0, 2), "threads": torch.get_num_threads()})
    with torch.no_grad():
        _write_stage_tables(writer, loaded, examples, texts, p, basis, taus, running, opts, log, design, timings)

    examples_frame = writer.read("examples")
    ablations = writer.read("ablations") if writer.has("ablations") else None
    if ablations is not None:
        writer.write("error_analysis", error_analysis_table(examples_frame, ablations))
    log_frame = training_log(loaded)
    if log_frame is not None:
        writer.write("training_log", log_frame)
    accuracy = float(examples_frame["correct"].mean())
    manifest = _run_manifest(
        opts, loaded, writer, examples, p, taus, running, label, run_label, timings, ablations, accuracy
    )
    if design is not None:
        manifest["design"] = design.manifest(every_question_labels(basis, taus))
    stages = check_stages(opts.stages)
    if stages != STAGES:
        manifest["not_computed"] = not_computed(stages)
    path = writer.publish(manifest)
    log(
        f"wrote run {writer.name} to {path} (accuracy {manifest['accuracy']:.2%} on {len(examples)} {opts.split} "
        "examples)"
    )
    return path


def _write_stage_tables(
    writer: RunWriter, loaded, examples, texts, p: int, basis, taus, running, opts: PrecomputeOptions, log,
    design=None, timings: dict | None = None,
) -> dict:
    """Stages 1-5 (the module docstring) that `opts.stages` asks for, each skipped when the staging folder has its
    tables; returns the seconds each took, set on `timings` as each stage ends (a StageTimings keeps them)."""
    stages = check_stages(opts.stages)
    timings = {} if timings is None else timings
    t1 = time.time()
    grid_pending = "ablations" in stages and not (writer.has("ablations") and writer.has("ablation_errors"))
    if not all(writer.has(t) for t in MEASURE_TABLES):
        energy = ModuleEnergy() if grid_pending else None
        for t, frame in measure(loaded, examples, texts, p, opts, running, log, energy).items():
            writer.write(t, frame)
        if energy is not None:
            write_energy(writer, energy.second_moments())
    timings["measurements_s"] = round(time.time() - t1, 2)
    if not all(writer.has(t) for t in PHASE_TABLES):  # a staging folder from before the phase stage existed
        timings["phase_s"] = write_phase_tables(writer, loaded, examples, texts, p, opts)

    t2 = time.time()
    if "embeddings" in stages and not (writer.has("embedding_spectrum") and writer.has("embedding_clusters")):
        spectrum, clusters, tied = embedding_tables(loaded, p, opts.dataset_seed)
        writer.write("embedding_spectrum", spectrum)
        writer.write("embedding_clusters", clusters)
        writer.write_json("embeddings.json", {"tied": tied})
    fresh = "embeddings" in stages and not writer.has("number_rows_origin")
    moved = row_origin_table(loaded, p, log) if fresh else None
    if moved is not None:  # a fine-tuning's trained number rows against their start (core.training.row_start)
        writer.write("number_rows_origin", moved)
    timings["embeddings_s"] = round(time.time() - t2, 2)

    t_numbers = time.time()
    if "numbers" in stages and not (writer.has("number_spectrum") and writer.has("number_probes")):
        write_number_tables(writer, loaded, p, opts, log)
    timings["numbers_s"] = round(time.time() - t_numbers, 2)

    t3 = time.time()
    if grid_pending:
        answers = np.array([e.answer for e in examples])
        ablations, ablation_errors = ablation_grid(
            loaded, texts, answers, p, basis, taus, opts, writer, log, design, read_energy(writer)
        )
        writer.write("ablations", ablations)
        writer.write("ablation_errors", ablation_errors)
    if "ablations" in stages and not writer.has("period_ablation") and has_periods(p):
        write_period_table(writer, loaded, texts, np.array([e.answer for e in examples]), p, opts, log)
    timings["ablations_s"] = round(time.time() - t3, 2)

    t4 = time.time()
    if ("shift" in stages and not (writer.has("phase_shift") and writer.has("phase_shift_answers"))
            and shift_specs(p, loaded.n_layers)):
        write_shift_tables(writer, loaded, texts, np.array([e.answer for e in examples]), p, opts, log, design)
    timings["phase_shift_s"] = round(time.time() - t4, 2)
    t5 = time.time()
    groups_pending = not (writer.has("group_shift") and writer.has("group_shift_answers"))
    if "shift" in stages and groups_pending and has_group_shift(p):
        write_group_tables(writer, loaded, texts, np.array([e.answer for e in examples]), p, opts, log)
    timings["group_shift_s"] = round(time.time() - t5, 2)
    t6 = time.time()
    if "patching" in stages and not writer.has("patching"):
        write_patch_table(writer, loaded, examples, texts, p, opts, log)
    timings["patching_s"] = round(time.time() - t6, 2)
    t7 = time.time()
    if "heads" in stages and not writer.has("head_spectra") and has_heads(loaded, p):
        write_head_tables(writer, loaded, texts, np.array([e.answer for e in examples]), p, opts, log)
    timings["heads_s"] = round(time.time() - t7, 2)
    t8 = time.time()
    if "helix" in stages and not writer.has("helix_fit") and has_helix(p):
        writer.write_json(HELIX_JSON, write_helix_tables(writer, loaded, examples, texts, p, opts, log))
    timings["helix_s"] = round(time.time() - t8, 2)
    t9 = time.time()
    if "attribution" in stages and not writer.has("attribution"):
        write_attribution_table(writer, loaded, examples, texts, p, opts, log)
    timings["attribution_s"] = round(time.time() - t9, 2)
    t10 = time.time()
    if "position_patching" in stages and not writer.has("position_patching"):
        write_position_table(writer, loaded, examples, texts, p, opts, log)
    timings["position_patching_s"] = round(time.time() - t10, 2)
    return timings



def _run_manifest(
    opts: PrecomputeOptions,
    loaded,
    writer: RunWriter,
    examples,
    p: int,
    taus,
    running,
    label: str,
    run_label: str,
    timings: dict,
    ablations: pd.DataFrame | None,
    accuracy: float,
) -> dict:
    """The manifest of a number-token run: what was measured on what, and the notes a reader needs."""
    notes = list(opts.extra_notes)
    erased = ablations[ablations["erased"]] if ablations is not None else ablations
    if erased is not None and len(erased):
        notes.append(
            f"{len(erased)} filter(s) erase the whole module output: the model is {loaded.width} wide and the "
            f"removed Fourier rows span all of it ({', '.join(erased['label'].head(4))}"
            + (", ..." if len(erased) > 4 else "")
            + ")"
        )
    return {
        "label": label,
        "run_label": run_label,
        "model": {
            **describe_model(loaded),
            "source_as_given": project_relative(Path(loaded.source)) if loaded.local else opts.model,
            "tied_embeddings": (writer.read_json("embeddings.json") or {}).get("tied"),
        },
        "task": {
            "number_token_convention": loaded.numbers.convention,
            "task": opts.task,
            "max_operand": opts.max_operand,
            "p": p,
            "split": opts.split,
            "shots": opts.shots,
            "n_examples": len(examples),
            "running_example_id": running,
            "dataset_seed": opts.dataset_seed,
        },
        "p": p,
        "n_layers": loaded.n_layers,
        "width": loaded.width,
        "unembedding_rank": unembedding_rank(loaded.unembed(p)),
        "basis": opts.basis,
        "taus": list(taus),
        "accuracy": accuracy,
        "number_representations": writer.read_json(NUMBERS_JSON),
        **({"phase_locking": phase_note(len(examples), len(examples), opts.split)}
           if writer.has("phase_locking") else {}),
        **({"phase_shift": shift_note()} if writer.has("phase_shift") else {}),
        **({"group_shift": group_note(run_groups(loaded))} if writer.has("group_shift") else {}),
        **({"period_ablation": period_note()} if writer.has("period_ablation") else {}),
        **({"patching": patch_note(writer.read("patching"), len(examples))} if writer.has("patching") else {}),
        **({"heads": head_note(loaded, len(examples))} if writer.has("head_spectra") else {}),
        **({"helix": writer.read_json(HELIX_JSON)} if writer.has("helix_fit") else {}),
        **({"attribution": attribution_note(writer.read("attribution"), len(examples))}
           if writer.has("attribution") else {}),
        **({"position_patching": position_note(writer.read("position_patching"), len(examples))}
           if writer.has("position_patching") else {}),
        "display_order": opts.display_order,
        "timings": timings,
        "notes": notes,
        "matched_draw_version": MATCH_DRAW_VERSION,
    }


def _digits_reason(numbers, p: int) -> str:
    """Why a model whose numbers 0..p-1 are not all single tokens has no number logits (`numbers`: its NumberTokens)."""
    first, pieces = numbers.first_split, numbers.first_split_pieces
    split_text = (
        f"{first} is read as {len(pieces)} tokens ({' + '.join(repr(x) for x in pieces)})"
        if first is not None and pieces
        else f"only {numbers.P} numbers are single tokens"
    )
    return (
        f"this model's tokenizer writes numbers as several tokens (only 0..{numbers.P - 1} are single tokens; "
        f"{split_text}), so an answer is not one of {p} number tokens and there are no number logits to read"
    )


def _precompute_digits(opts: PrecomputeOptions, loaded, all_examples, examples, p: int, taus, t0: float, log) -> Path:
    """A model whose numbers 0..p-1 are not single tokens: number representations and k-shot behaviour.

    The logit lens, module spectra, waves, embedding spectra and the filters all read the logits
    of the p number tokens, which such a model does not have; the manifest's `not_applicable`
    says so, table by table, and the pages show it.
    """
    reason = _digits_reason(loaded.numbers, p)
    not_applicable = {
        t: reason
        for t in MEASURE_TABLES
        + PHASE_TABLES
        + ("embedding_spectrum", "embedding_clusters", "ablations", "ablation_errors")
    }
    shots = tuple(sorted({*SHOTS, opts.shots}))
    pool = select_split(all_examples, "train")
    label = model_label(opts, loaded.local, loaded.source)
    identity = digits_identity(loaded_identity(opts, loaded), shots)
    readable = run_label(opts, label, digits=True)
    name = run_name(readable, identity)
    options = {"shots": list(shots), "n_numbers": p}
    timings = {"load_s": round(time.time() - t0, 2), "threads": torch.get_num_threads()}
    log(f"a k-shot run: {reason}; so the stages {', '.join(NUMBER_LOGIT_STAGES)} do not apply (no Table 1), and the "
        f"run holds the number representations and the model's answers at {', '.join(map(str, shots))} shots")
    with run_lock(opts.cache_dir, name, log):
        writer = RunWriter(opts.cache_dir, name, identity, options, recompute=opts.recompute)
        try:
            if writer.exists and not opts.recompute:
                log(f"run {name} is already in {opts.cache_dir}: nothing to do (use --recompute to rebuild it)")
                return writer.final
            with torch.no_grad():
                t1 = time.time()
                if not (writer.has("number_spectrum") and writer.has("number_probes")):
                    write_number_tables(writer, loaded, p, opts, log)
                timings["numbers_s"] = round(time.time() - t1, 2)
                t2 = time.time()
                if not writer.has("generations"):
                    writer.write(
                        "generations",
                        generations_table(
                            loaded,
                            examples,
                            pool,
                            shots,
                            opts.dataset_seed,
                            min(opts.batch_size, 16),
                            log,
                            opts.progress,
                        ),
                    )
                timings["generation_s"] = round(time.time() - t2, 2)
            generations = writer.read("generations")
            writer.write("error_analysis", generation_error_table(generations))
            by_shots = accuracy_by_shots(generations)
            manifest = _digits_manifest(
                opts, loaded, writer, examples, p, shots, by_shots, not_applicable, label, readable, timings
            )
            path = writer.publish(manifest)
            log(
                f"wrote run {name} to {path} ({', '.join(f'{k}-shot {v:.1%}' for k, v in by_shots.items())} "
                f"on {len(examples)} {opts.split} examples)"
            )
            return path
        finally:
            writer.discard_if_empty()


def _digits_manifest(
    opts: PrecomputeOptions,
    loaded,
    writer: RunWriter,
    examples,
    p: int,
    shots,
    by_shots: dict,
    not_applicable: dict,
    label: str,
    run_label: str,
    timings: dict,
) -> dict:
    """The manifest of a digits run: k-shot accuracy by shot count, and which tables do not apply."""
    return {
        "label": label,
        "run_label": run_label,
        "model": {
            **describe_model(loaded),
            "source_as_given": project_relative(Path(loaded.source)) if loaded.local else opts.model,
        },
        "task": {
            "task": opts.task,
            "max_operand": opts.max_operand,
            "p": p,
            "split": opts.split,
            "shots": max(shots),
            "shots_compared": list(shots),
            "n_examples": len(examples),
            "dataset_seed": opts.dataset_seed,
            "running_example_id": running_example_id(opts.task, opts.max_operand),
        },
        "p": p,
        "n_layers": loaded.n_layers,
        "width": loaded.width,
        "basis": opts.basis,
        "taus": [],
        "accuracy": by_shots[max(shots)],
        "accuracy_by_shots": {str(k): v for k, v in by_shots.items()},
        "number_representations": writer.read_json(NUMBERS_JSON),
        "number_tokens": loaded.numbers.describe(),
        "not_applicable": not_applicable,
        "display_order": opts.display_order,
        "timings": timings,
        "notes": list(opts.extra_notes),
    }


