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
Then error_analysis, the manifest, and an atomic publish (core.runs.cache).

A deep model (core.runs.sampled_design) reads every question in stages 1, 2 and 4 and for the conditions Table 1's
verdict reads; the rest of stages 3 and 5 read a fixed stratified sample, and the manifest's `design` says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from core.analysis.filters import MATCH_DRAW_VERSION, unembedding_rank
from core.analysis.fourier import check_basis_name, check_tau, fourier_basis
from core.analysis.kshot import SHOTS, accuracy_by_shots, generation_error_table, generations_table
from core.errors import CoreError
from core.models.loading import describe_model, load_model, prompt_texts
from core.models.names import ModuleNames
from core.models.source import project_relative, read_recipe_label
from core.runs.ablation_grid import (
    ModuleEnergy,
    ablation_grid,
    error_analysis_table,
    every_question_labels,
    read_energy,
    write_energy,
)
from core.runs.cache import RunWriter, ensure_cache_dir, run_lock, run_name
from core.runs.cached_run import keep_cached_run, shift_note, training_log, write_phase_tables
from core.runs.measure import measure
from core.runs.number_tables import NUMBERS_JSON, embedding_tables, write_number_tables
from core.runs.phase_run import PHASE_TABLES, phase_note
from core.runs.sampled_design import design_for
from core.runs.shift_run import phase_shift_table, shift_specs
from core.tasks import build_examples, number_space, running_example_id, select_split, subsample, with_shots
from core.threads import use_threads

DEFAULT_TAUS = (5, 10, 20, 30, 40, 50, 75, 100, 150, 200, 250)
PROMPT_FORMAT = "paper phrasings + ' Answer:'"
MEASURE_TABLES = (
    "examples",
    "layer_accuracy",
    "module_spectra",
    "module_spectra_baseline",
    "module_logits",
    "final_waves",
)

#: The stages `--stages` chooses from (the module docstring's 1-5: the phase tables come from the measurements' own
#: pass) and the tables each writes. "measure" always runs: every other table reads the examples it writes.
STAGE_TABLES = {
    "measure": MEASURE_TABLES + PHASE_TABLES,
    "embeddings": ("embedding_spectrum", "embedding_clusters"),
    "numbers": ("number_spectrum", "number_probes"),
    "ablations": ("ablations", "ablation_errors", "error_analysis"),
    "shift": ("phase_shift", "phase_shift_answers"),
}
STAGES = tuple(STAGE_TABLES)


def check_stages(stages) -> tuple[str, ...]:
    """The stages asked for, in the order they run, "measure" always among them (None: every stage)."""
    if stages is None:
        return STAGES
    if isinstance(stages, str):  # "measure,shift", as the command line writes it
        stages = tuple(s.strip() for s in stages.split(",") if s.strip())
    unknown = [s for s in stages if s not in STAGE_TABLES]
    if unknown:
        raise CoreError(f"--stages: no stage named {', '.join(map(repr, unknown))}; choose from {', '.join(STAGES)} "
                        "(measure always runs)")
    return tuple(s for s in STAGES if s == "measure" or s in stages)


def not_computed(stages: tuple[str, ...]) -> dict[str, str]:
    """The tables of the stages left out, each with the reason a reader shows (the manifest's `not_computed`)."""
    left = [s for s in STAGES if s not in stages]
    reason = (f"left out when this run was made (precompute --stages {','.join(stages)}); precompute it again with "
              "--recompute and the stages it needs to add it")
    return {t: reason for s in left for t in STAGE_TABLES[s]}


@dataclass
class PrecomputeOptions:
    model: str
    task: str = "addition"
    max_operand: int = 260
    dataset_seed: int = 0
    split: str = "test"
    shots: int = 0
    limit: int | None = None
    taus: tuple[int, ...] | None = None  # None: DEFAULT_TAUS that fit the number space
    basis: str = "paper"
    positions: str = "last"
    n_sample: int = 16
    display_order: int = 100
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int = 32
    threads: int | None = None  # CPU threads for torch; None: the cores free right now (core.threads)
    device_map: str | None = None
    trust_remote_code: bool = False
    revision: str | None = None
    module_names: str | None = None
    label: str | None = None
    cache_dir: str = "cache"
    recompute: bool = False
    progress: bool | None = None
    every_question: bool = False  # a deep model reads a fixed sample for most conditions unless this is True
    stages: tuple[str, ...] | None = None  # None: every stage of STAGES; "measure" always runs
    extra_notes: list[str] = field(default_factory=list)


def default_taus(p: int) -> tuple[int, ...]:
    K = (p - 1) // 2
    taus = tuple(t for t in DEFAULT_TAUS if 2 <= t <= K)
    return taus or (max(2, K // 2),)


def _model_label(opts: PrecomputeOptions, loaded) -> str:
    if opts.label:
        return opts.label
    if loaded.local:
        return read_recipe_label(Path(loaded.source)) or Path(loaded.source).name
    return opts.model


def run_identity(opts: PrecomputeOptions, loaded, taus) -> dict:
    """What determines the numbers of a run (paths excluded, so a run moves between machines)."""
    return {
        "model": Path(loaded.source).name if loaded.local else loaded.source,
        "fingerprint": loaded.fingerprint,
        "revision": loaded.revision,
        "task": opts.task,
        "max_operand": opts.max_operand,
        "dataset_seed": opts.dataset_seed,
        "split": opts.split,
        "shots": opts.shots,
        "limit": opts.limit,
        "prompt_format": PROMPT_FORMAT,
        "basis": opts.basis,
        "positions": opts.positions,
        "dtype": opts.dtype,
    }


def precompute(opts: PrecomputeOptions, log=print) -> Path:
    """Compute and publish a run; returns its folder. Raises CoreError on bad input."""

    check_basis_name(opts.basis)
    stages = check_stages(opts.stages)
    p = number_space(opts.task, opts.max_operand)  # checks the task and max operand before any work
    ensure_cache_dir(opts.cache_dir)
    all_examples = build_examples(opts.task, opts.max_operand, opts.dataset_seed)
    running = running_example_id(opts.task, opts.max_operand)
    examples = subsample(
        select_split(all_examples, opts.split), opts.limit, opts.dataset_seed, [running] if running else []
    )
    pool = select_split(all_examples, "train")
    taus = tuple(sorted(set(opts.taus))) if opts.taus else default_taus(p)
    basis = fourier_basis(p, opts.basis)
    for t in taus:
        check_tau(basis, t)

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
        return _precompute_digits(opts, loaded, all_examples, examples, p, taus, t0, log)
    loaded.select_numbers(p, f"the {opts.task} task with operands 0..{opts.max_operand}")
    texts = model_prompts(loaded, examples, pool, opts.shots, opts.dataset_seed)
    _check_context(loaded, texts, opts.shots)
    label = _model_label(opts, loaded)
    identity = run_identity(opts, loaded, taus)
    run_label = f"{label} {opts.task} {opts.split}" + (f" {opts.shots}-shot" if opts.shots else "")
    name = run_name(run_label, identity)
    design = design_for([e.answer for e in examples], loaded.n_layers, loaded.width, opts.every_question)
    options = {"taus": list(taus), "n_sample": opts.n_sample}
    if design is not None:
        options["design"] = design.option()  # only then: every-question runs keep the options they always had
    if stages != STAGES:
        options["stages"] = list(stages)  # only then: a run of every stage keeps the options it always had
    with run_lock(opts.cache_dir, name, log):
        writer = RunWriter(opts.cache_dir, name, identity, options, recompute=opts.recompute)
        try:
            return _precompute_run(
                opts, loaded, writer, examples, texts, p, basis, taus, running, label, run_label, options, t0, log,
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
    timings = {"load_s": round(time.time() - t0, 2), "threads": torch.get_num_threads()}
    with torch.no_grad():
        timings.update(
            _write_stage_tables(writer, loaded, examples, texts, p, basis, taus, running, opts, log, design)
        )

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
    design=None,
) -> dict:
    """Stages 1-5 (the module docstring) that `opts.stages` asks for, each skipped when the staging folder has its
    tables; returns the seconds each took."""
    stages = check_stages(opts.stages)
    timings = {}
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
    timings["ablations_s"] = round(time.time() - t3, 2)

    t4 = time.time()
    if ("shift" in stages and not (writer.has("phase_shift") and writer.has("phase_shift_answers"))
            and shift_specs(p, loaded.n_layers)):
        answers = np.array([e.answer for e in examples])
        for name, frame in phase_shift_table(loaded, texts, answers, p, opts, log, design).items():
            writer.write(name, frame)
    timings["phase_shift_s"] = round(time.time() - t4, 2)
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
        "display_order": opts.display_order,
        "timings": timings,
        "notes": notes,
        "matched_draw_version": MATCH_DRAW_VERSION,
    }


def _precompute_digits(opts: PrecomputeOptions, loaded, all_examples, examples, p: int, taus, t0: float, log) -> Path:
    """A model whose numbers 0..p-1 are not single tokens: number representations and k-shot behaviour.

    The logit lens, module spectra, waves, embedding spectra and the filters all read the logits
    of the p number tokens, which such a model does not have; the manifest's `not_applicable`
    says so, table by table, and the pages show it.
    """
    first = loaded.numbers.first_split
    pieces = loaded.numbers.first_split_pieces
    split_text = (
        f"{first} is read as {len(pieces)} tokens ({' + '.join(repr(x) for x in pieces)})"
        if first is not None and pieces
        else f"only {loaded.numbers.P} numbers are single tokens"
    )
    reason = (
        f"this model's tokenizer writes numbers as several tokens (only 0..{loaded.numbers.P - 1} are single tokens; "
        f"{split_text}), so an answer is not one of {p} number tokens and there are no number logits to read"
    )
    not_applicable = {
        t: reason
        for t in MEASURE_TABLES
        + PHASE_TABLES
        + ("embedding_spectrum", "embedding_clusters", "ablations", "ablation_errors")
    }
    shots = tuple(sorted({*SHOTS, opts.shots}))
    pool = select_split(all_examples, "train")
    label = _model_label(opts, loaded)
    identity = {
        **run_identity(opts, loaded, ()),
        "shots": list(shots),
        "analysis": "digits: number representations, k-shot generation",
    }
    run_label = f"{label} {opts.task} {opts.split} k-shot"
    name = run_name(run_label, identity)
    options = {"shots": list(shots), "n_numbers": p}
    timings = {"load_s": round(time.time() - t0, 2), "threads": torch.get_num_threads()}
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
                opts, loaded, writer, examples, p, shots, by_shots, not_applicable, label, run_label, timings
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


