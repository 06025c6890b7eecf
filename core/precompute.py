"""From a model to a run folder: every table the dashboard reads, in three resumable stages.

1. measurements: one streaming pass with capture over the split -> examples, layer_accuracy
   (logit lens with and without the final norm), module_spectra (mean Fourier magnitude of the
   attention, MLP and residual logits per layer), module_logits and final_waves for a sample of
   examples that always holds 15 + 93.
2. embeddings: embedding_spectrum (input and output number rows, both bases, with a
   permutation baseline) and embedding_clusters (t-SNE + k-means).
3. ablations: the filter grid (modules x band removed x tau, no filter, keep-one-frequency for
   periods 2 and p-1), one evaluation each, saved one by one so an interrupted grid resumes.
4. phase: phase_locking and wave_peaks (core.phase) from the same capture pass; a run cached
   before they existed gets them from one more capture pass (`_upgrade_run`).
Then error_analysis, the manifest, and an atomic publish (core.cache).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from core import SCHEMA_VERSION
from core.behaviour import error_histogram, error_summary
from core.cache import RunWriter, check_table, read_json_file, run_lock, run_name
from core.errors import CoreError
from core.phase import PHASE_VERSION
from core.phase_run import PHASE_TABLES, PhaseStage, add_batch, phase_current, phase_note, phase_tables_from_model
from core.fourier import BASES, check_basis_name, check_tau, fourier_basis, frequency_magnitudes, top_components
from core.tasks import build_examples, number_space, running_example_id, select_split, subsample, with_shots

DEFAULT_TAUS = (5, 10, 20, 30, 40, 50, 75, 100, 150, 200, 250)
PROMPT_FORMAT = "paper phrasings + ' Answer:'"
WAVES_KEPT = 10  # top-k waves stored per sampled example (the dashboard picks k <= this)
MEASURE_TABLES = ("examples", "layer_accuracy", "module_spectra", "module_spectra_baseline", "module_logits", "final_waves")


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
    extra_notes: list[str] = field(default_factory=list)


def default_taus(p: int) -> tuple[int, ...]:
    K = (p - 1) // 2
    taus = tuple(t for t in DEFAULT_TAUS if 2 <= t <= K)
    return taus or (max(2, K // 2),)


def _model_label(opts: PrecomputeOptions, loaded) -> str:
    if opts.label:
        return opts.label
    if loaded.local:
        from core.models import read_recipe_label

        return read_recipe_label(Path(loaded.source)) or Path(loaded.source).name
    return opts.model


def _options_text(options: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in sorted(options.items()))


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

    from core.cache import ensure_cache_dir
    from core.models import ModuleNames, load_model

    check_basis_name(opts.basis)
    p = number_space(opts.task, opts.max_operand)  # checks the task and max operand before any work
    ensure_cache_dir(opts.cache_dir)
    all_examples = build_examples(opts.task, opts.max_operand, opts.dataset_seed)
    running = running_example_id(opts.task, opts.max_operand)
    examples = subsample(select_split(all_examples, opts.split), opts.limit, opts.dataset_seed, [running] if running else [])
    pool = select_split(all_examples, "train")
    taus = tuple(sorted(set(opts.taus))) if opts.taus else default_taus(p)
    basis = fourier_basis(p, opts.basis)
    for t in taus:
        check_tau(basis, t)

    from core.threads import use_threads

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
    options = {"taus": list(taus), "n_sample": opts.n_sample}
    with run_lock(opts.cache_dir, name, log):
        writer = RunWriter(opts.cache_dir, name, identity, options, recompute=opts.recompute)
        try:
            return _precompute_run(opts, loaded, writer, examples, texts, p, basis, taus, running, label, run_label, options, t0, log)
        finally:
            writer.discard_if_empty()  # a staging folder with no finished table is not worth keeping


def model_prompts(loaded, examples, pool, shots: int, seed: int) -> list[str]:
    """The prompts as the model reads them. k-shot examples show their answers exactly as the model
    is scored on them (its number-token convention), so an un-fine-tuned model sees in the prompt
    the very tokens it would emit."""
    from core.models import prompt_texts

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


def _precompute_run(opts, loaded, writer, examples, texts, p, basis, taus, running, label, run_label, options, t0, log) -> Path:
    """The stages of `precompute`, run under the run's lock."""
    import torch

    from core.models import project_relative

    name = writer.name
    if writer.exists and not opts.recompute:
        existing = (read_json_file(writer.final / "manifest.json") or {}).get("options")
        if existing is not None and existing != json.loads(json.dumps(options)):
            raise CoreError(
                f"run {name} is already cached with other options ({_options_text(existing)}); you asked for "
                f"{_options_text(options)}. Pass --recompute to rebuild it with yours (the old run stays until the new one is complete)."
            )
        if _upgrade_run(writer, loaded, p, opts, examples, texts, log):
            return writer.final
        if _refresh_training_log(writer, loaded, log):
            return writer.final
        log(f"run {name} is already in {opts.cache_dir}: nothing to do (use --recompute to rebuild it)")
        return writer.final
    if writer.resumed:
        log(f"resuming {name} from its unfinished tables")

    answers = np.array([e.answer for e in examples])
    timings = {"load_s": round(time.time() - t0, 2), "threads": torch.get_num_threads()}
    notes = list(opts.extra_notes)

    with torch.no_grad():
        t1 = time.time()
        if not all(writer.has(t) for t in MEASURE_TABLES):
            tables = measure(loaded, examples, texts, p, opts, running, log)
            for t, frame in tables.items():
                writer.write(t, frame)
        timings["measurements_s"] = round(time.time() - t1, 2)
        if not all(writer.has(t) for t in PHASE_TABLES):  # a staging folder from before the phase stage existed
            t_phase = time.time()
            for t, frame in phase_tables_from_model(loaded, examples, texts, p, opts.batch_size, opts.dataset_seed,
                                                    opts.progress).items():
                writer.write(t, frame)
            timings["phase_s"] = round(time.time() - t_phase, 2)

        t2 = time.time()
        if not (writer.has("embedding_spectrum") and writer.has("embedding_clusters")):
            spectrum, clusters, tied = embedding_tables(loaded, p, opts.dataset_seed)
            writer.write("embedding_spectrum", spectrum)
            writer.write("embedding_clusters", clusters)
            writer.write_json("embeddings.json", {"tied": tied})
        tied = (writer.read_json("embeddings.json") or {}).get("tied")
        timings["embeddings_s"] = round(time.time() - t2, 2)

        t_numbers = time.time()
        if not (writer.has("number_spectrum") and writer.has("number_probes")):
            _write_number_tables(writer, loaded, p, opts, log)
        timings["numbers_s"] = round(time.time() - t_numbers, 2)

        t3 = time.time()
        if not (writer.has("ablations") and writer.has("ablation_errors")):
            ablations, ablation_errors = ablation_grid(loaded, texts, answers, p, basis, taus, opts, writer, log)
            writer.write("ablations", ablations)
            writer.write("ablation_errors", ablation_errors)
        timings["ablations_s"] = round(time.time() - t3, 2)

    examples_frame = writer.read("examples")
    ablations = writer.read("ablations")
    writer.write("error_analysis", error_analysis_table(examples_frame, ablations))
    erased = ablations[ablations["erased"]]
    if len(erased):
        notes.append(
            f"{len(erased)} filter(s) erase the whole module output: the model is {loaded.width} wide and the "
            f"removed Fourier rows span all of it ({', '.join(erased['label'].head(4))}"
            + (", ..." if len(erased) > 4 else "")
            + ")"
        )
    training_log = _training_log(loaded)
    if training_log is not None:
        writer.write("training_log", training_log)

    from core.models import describe_model

    acc = float(examples_frame["correct"].mean())
    from core.filters import unembedding_rank

    manifest = {
        "label": label,
        "run_label": run_label,
        "model": {
            **describe_model(loaded),
            "source_as_given": project_relative(Path(loaded.source)) if loaded.local else opts.model,
            "tied_embeddings": tied,
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
        "accuracy": acc,
        "number_representations": writer.read_json(NUMBERS_JSON),
        "phase_locking": phase_note(len(examples), len(examples), opts.split),
        "display_order": opts.display_order,
        "timings": timings,
        "notes": notes,
    }
    path = writer.publish(manifest)
    log(f"wrote run {name} to {path} (accuracy {acc:.2%} on {len(examples)} {opts.split} examples)")
    return path


def measure(loaded, examples, texts, p: int, opts: PrecomputeOptions, running: str | None, log=print) -> dict:
    """The capture pass: per-example results, logit-lens accuracy, module spectra, sampled logits."""
    import torch

    from core.capture import iter_capture
    from core.filters import answer_losses

    L = loaded.n_layers
    unembed = loaded.unembed(p)  # final norm, W_U number rows, bias, scale, soft-cap
    W_U = unembed.weight  # (p, D) float32 on the unembedding's device
    number_ids = torch.as_tensor(loaded.numbers.ids_for(p), device=W_U.device)
    bases = {b: fourier_basis(p, b) for b in BASES}
    K = {b: bases[b].n_freq for b in BASES}
    spectra = {(m, b): np.zeros((L + 1 if m == "resid" else L, K[b])) for m in ("resid", "attn", "mlp") for b in BASES}
    sq_norms = {m: np.zeros(L + 1 if m == "resid" else L) for m in ("resid", "attn", "mlp")}  # sum of ||x||^2
    layer_hits = {fn: np.zeros((L + 1, 3)) for fn in (False, True)}  # exact, within 2, within 10
    answers = np.array([e.answer for e in examples])
    n = len(examples)
    predictions = np.zeros(n, dtype=np.int64)
    losses = np.zeros(n)
    top_is_number = np.zeros(n, dtype=bool)
    sample_ids = _sample_ids(examples, opts.n_sample, running, opts.dataset_seed)
    sample_rows = {i for i, e in enumerate(examples) if e.id in sample_ids}
    logit_rows, wave_rows = [], []
    phase = PhaseStage(p, n, L)

    for cb in iter_capture(loaded, texts, opts.batch_size, progress=opts.progress, desc="measure"):
        idx = cb.indices
        ans = torch.as_tensor(answers[idx], device=W_U.device)
        lens = {False: unembed.logits(cb.resid, final_norm=False)}
        lens[True] = unembed.logits(cb.resid, final_norm=True) if unembed.norm is not None else lens[False]
        for fn, logits in lens.items():
            pred = logits.argmax(-1)  # (B, L+1)
            err = (pred - ans[:, None]).abs()
            layer_hits[fn] += torch.stack([(err == 0).sum(0), (err <= 2).sum(0), (err <= 10).sum(0)], -1).cpu().numpy()
        module_logits = {"resid": unembed.read(cb.resid), "attn": unembed.read(cb.attn), "mlp": unembed.read(cb.mlp)}
        for m in sq_norms:
            sq_norms[m] += (getattr(cb, m).float() ** 2).sum(-1).sum(0).cpu().numpy()
        for m, logits in module_logits.items():
            arr = logits.double().cpu().numpy()
            for b in BASES:
                spectra[(m, b)] += frequency_magnitudes(bases[b], arr).sum(0)
        final = cb.logits.float()
        number_logits = final[:, number_ids]
        add_batch(phase, idx, module_logits, number_logits)
        predictions[idx] = number_logits.argmax(-1).cpu().numpy()
        losses[idx] = answer_losses(final, number_ids[ans]).cpu().numpy()
        top_is_number[idx] = torch.isin(final.argmax(-1), number_ids).cpu().numpy()

        for row_in_batch, i in enumerate(idx):
            if i not in sample_rows:
                continue
            eid = examples[i].id
            for m, logits in module_logits.items():
                vals = logits[row_in_batch].cpu().numpy()  # (layers, p)
                first = 0 if m == "resid" else 1
                for l in range(vals.shape[0]):
                    logit_rows.append((eid, m, l + first, vals[l]))
            fin = number_logits[row_in_batch].cpu().numpy()
            logit_rows.append((eid, "final", L, fin))
            for b in BASES:
                for rank, wave in enumerate(top_components(bases[b], fin, WAVES_KEPT), start=1):
                    wave_rows.append((eid, b, rank, wave.k, wave.period, wave.magnitude, wave.values))

    correct = predictions == answers
    examples_frame = pd.DataFrame(
        {
            "id": [e.id for e in examples],
            "split": [e.split for e in examples],
            "a": [e.a for e in examples],
            "b": [e.b for e in examples],
            "answer": answers,
            "phrasing": [e.phrasing for e in examples],
            "prompt": list(texts),
            "prediction": predictions,
            "correct": correct,
            "loss": losses,
            "top_token_is_number": top_is_number,
            "in_sample": [i in sample_rows for i in range(n)],
        }
    )
    acc_rows = []
    for fn, hits in layer_hits.items():
        for l in range(L + 1):
            acc_rows.append(
                {
                    "layer": l,
                    "final_norm": fn,
                    "exact": hits[l, 0] / n,
                    "within_2": hits[l, 1] / n,
                    "within_10": hits[l, 2] / n,
                    "n": n,
                }
            )
    spec_rows = []
    for (m, b), total in spectra.items():
        ks = bases[b].frequencies
        first = 0 if m == "resid" else 1
        for l in range(total.shape[0]):
            spec_rows.append(
                pd.DataFrame(
                    {"basis": b, "module": m, "layer": l + first, "k": ks, "period": bases[b].period(ks), "magnitude": total[l] / n}
                )
            )
    numbers = np.arange(p)
    logits_frame = pd.concat(
        [
            pd.DataFrame({"example_id": eid, "module": m, "layer": l, "number": numbers, "logit": _half(v)})
            for eid, m, l, v in logit_rows
        ],
        ignore_index=True,
    )
    waves_frame = pd.concat(
        [
            pd.DataFrame(
                {
                    "example_id": eid,
                    "basis": b,
                    "rank": rank,
                    "k": k,
                    "period": period,
                    "magnitude": mag,
                    "number": numbers,
                    "value": _half(values),
                }
            )
            for eid, b, rank, k, period, mag, values in wave_rows
        ],
        ignore_index=True,
    )
    for col in ("module", "example_id"):
        logits_frame[col] = logits_frame[col].astype("category")
    baseline = module_spectra_baseline(
        unembed, bases, {key: total / n for key, total in spectra.items()}, {m: np.sqrt(v / n) for m, v in sq_norms.items()},
        seed=opts.dataset_seed,
    )
    return {
        **phase.tables(answers, [e.id for e in examples], opts.dataset_seed),
        "examples": examples_frame,
        "layer_accuracy": pd.DataFrame(acc_rows),
        "module_spectra": pd.concat(spec_rows, ignore_index=True),
        "module_spectra_baseline": baseline,
        "module_logits": logits_frame,
        "final_waves": waves_frame,
    }


BASELINE_DRAWS = 2000


def module_spectra_baseline(
    unembed, bases: dict, module_means: dict, rms_norms: dict, draws: int = BASELINE_DRAWS, seed: int = 0
) -> pd.DataFrame:
    """The spectrum W_U alone gives: random vectors read through the unembedding, per module and layer.

    x is drawn isotropic (N(0, I/D)); what W_U reads of it is uniform over W_U's row space, so
    F W_U x has the spectral shape that W_U itself imposes on anything read through it. When W_U
    has low rank (tied frozen number rows) that shape is itself sparse: a module spectrum shows a
    preference of the module's own only where it rises above it.

    The baseline is scaled per module and layer to the same total energy as the module's mean
    spectrum (`module_means[(module, basis)]`, (layers, K)): sum_k baseline_k^2 = sum_k
    magnitude_k^2 (match = "energy"). So `magnitude / baseline` says how much more (or less) of its
    W_U-visible energy a module puts at k than W_U's shape would. magnitude_p95: the 95th
    percentile of single random vectors at k, scaled the same way; rms_norm: the module outputs'
    root-mean-square norm (for reference).
    """
    import torch

    from core.fourier import frequency_magnitudes

    D = unembed.width
    gen = torch.Generator(device="cpu").manual_seed(int(seed) + 7919)
    x = torch.randn(draws, D, generator=gen, dtype=torch.float32) / np.sqrt(D)  # E||x||^2 = 1
    unit_logits = unembed.read(x).double().cpu().numpy()  # (draws, p)
    frames = []
    for b, basis in bases.items():
        mags = frequency_magnitudes(basis, unit_logits)  # (draws, K)
        mean, p95 = mags.mean(0), np.percentile(mags, 95, axis=0)
        unit_energy = float((mean**2).sum())
        ks = basis.frequencies
        for m, rms in rms_norms.items():
            first = 0 if m == "resid" else 1
            means = module_means[(m, b)]
            for l, r in enumerate(rms):
                scale = float(np.sqrt((means[l] ** 2).sum() / unit_energy)) if unit_energy > 0 else 0.0
                frames.append(
                    pd.DataFrame(
                        {
                            "basis": b, "module": m, "layer": l + first, "k": ks, "period": basis.period(ks),
                            "magnitude": scale * mean, "magnitude_p95": scale * p95, "rms_norm": float(r), "match": "energy",
                            "draws": draws,
                        }
                    )
                )
    return pd.concat(frames, ignore_index=True)


def _half(values: np.ndarray) -> np.ndarray:
    """float16 precision (nothing a chart shows is lost), stored as float32 so every reader copes."""
    return np.asarray(values, dtype=np.float16).astype(np.float32)


def _sample_ids(examples, n_sample: int, running: str | None, seed: int) -> set[str]:
    picked = subsample(examples, n_sample, seed + 1, [running] if running else [])
    return {e.id for e in picked}


def embedding_tables(loaded, p: int, seed: int):
    """Spectra of the number rows of the input and output embeddings, and their t-SNE picture."""
    from core.embeddings import embedding_clusters, spectrum_table

    W_E = loaded.number_embedding(p).cpu().numpy()
    W_U = loaded.unembedding(p).cpu().numpy()
    in_w = loaded.model.get_input_embeddings().weight
    out_w = loaded.model.get_output_embeddings().weight
    tied = bool(in_w.data_ptr() == out_w.data_ptr())
    frames, clusters = [], []
    for matrix, W in (("input", W_E), ("output", W_U)):
        for b in BASES:
            t = spectrum_table(W, fourier_basis(p, b), seed=seed)
            t.insert(0, "matrix", matrix)
            t.insert(0, "basis", b)
            frames.append(t)
        c = embedding_clusters(W, seed=seed)
        c.insert(0, "matrix", matrix)
        clusters.append(c)
    return pd.concat(frames, ignore_index=True), pd.concat(clusters, ignore_index=True), tied


def ablation_specs(basis, taus, controls: bool = True):
    """The grid: no filter; modules x band removed x tau; keep-one for periods 2 and p-1; and, for
    each band filter, a random-subspace control of the same rank (unless `controls` is False)."""
    from core.filters import Ablation

    specs = [Ablation()]
    for tau in taus:
        for modules in ("both", "attn", "mlp"):
            for removed in ("low", "high"):
                specs.append(Ablation(modules, removed, int(tau)))
    for tau in taus if controls else ():  # controls: a random subspace of the same rank as each band filter (docs/method.md#controls)
        for modules in ("both", "attn", "mlp"):
            for removed in ("random-low", "random-high"):
                specs.append(Ablation(modules, removed, int(tau)))
    for k in sorted({basis.frequency_of_period(2.0), 1}, reverse=True):
        specs.append(Ablation("both", "keep", keep_k=int(k)))
    return specs


def _spec_key(spec) -> str:
    return json.dumps(asdict(spec), sort_keys=True)


def filter_key(spec) -> str:
    """What determines a spec's filter (everything but the modules it acts on)."""
    return json.dumps({k: v for k, v in asdict(spec).items() if k != "modules"}, sort_keys=True)


def build_filters(specs, W_U, basis) -> dict:
    """Each distinct filter of the grid built once (a band's filter serves Attn, MLP and both)."""
    built = {}
    for spec in specs:
        key = filter_key(spec)
        if key not in built:
            built[key] = spec.build(W_U, basis)
    return built


def ablation_grid(loaded, texts, answers, p: int, basis, taus, opts: PrecomputeOptions, writer: RunWriter, log=print):
    """Evaluate every ablation of the grid in one pass over the prompts.

    With filters at the answer position the prefix of each batch runs once and every condition
    runs on the last token only (core.filters.evaluate_conditions). Partial results are
    checkpointed in the staging folder, so an interrupted grid resumes where it stopped.
    """
    from core.filters import Condition, GridProgress, evaluate_conditions

    W_U = loaded.unembedding(p)
    done = writer.read_json("ablations.partial.json") or {}
    specs = ablation_specs(basis, taus)
    pending = [s for s in specs if _spec_key(s) not in done]
    if pending:
        filters = build_filters(pending, W_U, basis)
        conditions = [Condition(filters[filter_key(s)], s.modules if s.modules != "none" else "both") for s in pending]
        keys = [_spec_key(s) for s in pending]
        progress_file = writer.staging / "ablations.progress.npz"
        resume = _read_progress(progress_file, writer.read_json("ablations.progress.json"), keys)
        if resume is not None:
            log(f"resuming the ablation grid: {int(resume.done.sum())} of {len(texts)} prompts already done")

        def checkpoint(state: GridProgress) -> None:
            _write_progress(progress_file, state)
            writer.write_json("ablations.progress.json", {"keys": keys})

        log(f"ablation grid: {len(pending)} conditions, {len(filters)} distinct filters, {len(texts)} prompts")
        evaluations = evaluate_conditions(
            loaded, texts, answers, p, conditions, opts.positions, opts.batch_size,
            progress=opts.progress, desc=f"ablations ({len(pending)} conditions)", resume=resume, on_checkpoint=checkpoint,
        )
        for spec, ev in zip(pending, evaluations):
            done[_spec_key(spec)] = _ablation_entry(spec, basis, ev)
        writer.write_json("ablations.partial.json", done)
        progress_file.unlink(missing_ok=True)
        (writer.staging / "ablations.progress.json").unlink(missing_ok=True)
    rows, err_frames = [], []
    for spec in specs:
        entry = done[_spec_key(spec)]
        rows.append(entry["row"])
        h = pd.DataFrame(entry["errors"], columns=["error", "count"])
        for col in ("modules", "removed", "tau", "keep_k"):
            h.insert(len(h.columns) - 2, col, getattr(spec, col))
        err_frames.append(h)
    table = pd.DataFrame(rows)
    base = table[table["removed"] == "none"].iloc[0]
    table["delta_accuracy"] = table["accuracy"] - base["accuracy"]
    table["delta_loss"] = table["loss"] - base["loss"]
    for col in ("tau", "keep_k"):
        table[col] = table[col].astype("Int64")
    errors = pd.concat(err_frames, ignore_index=True)
    for col in ("tau", "keep_k"):
        errors[col] = errors[col].astype("Int64")
    errors["error"] = errors["error"].astype(np.int64)
    errors["count"] = errors["count"].astype(np.int64)
    return table, errors


def _ablation_entry(spec, basis, ev) -> dict:
    summary = error_summary(ev.answers, ev.predictions)
    hist = error_histogram(ev.answers, ev.predictions)
    return {
        "row": {
            **asdict(spec),
            "keep_period": float(basis.period(spec.keep_k)) if spec.keep_k else None,
            "label": spec.label(),
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
    from core.filters import GridProgress

    if not path.exists() or not meta or meta.get("keys") != keys:
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            state = GridProgress(z["predictions"], z["losses"], z["done"])
    except (OSError, ValueError, KeyError):
        return None
    return state


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


NUMBERS_JSON = "numbers.json"


def _write_number_tables(writer: RunWriter, loaded, n_numbers: int, opts: PrecomputeOptions, log) -> dict:
    """The number-representation tables (`core.numbers`) of every layer, into the staging folder."""
    from core.numbers import representation_tables

    spectrum, probes, info = representation_tables(
        loaded, n_numbers, seed=opts.dataset_seed, batch_size=opts.batch_size, log=log, progress=opts.progress
    )
    writer.write("number_spectrum", spectrum)
    writer.write("number_probes", probes)
    writer.write_json(NUMBERS_JSON, info)
    return info


def _upgrade_run(writer: RunWriter, loaded, p: int, opts: PrecomputeOptions, examples, texts, log) -> bool:
    """A run cached by an older schema (2 or 3) gets the tables it lacks: the number tables (schema 3)
    and the phase tables (schema 4, one more capture pass). A run whose phase tables came from its
    cached sample (`python -m core upgrade`, model not here) gets them over every example once the
    model is here, and tables of another phase version (core.phase.PHASE_VERSION) are made anew.
    Nothing else is recomputed."""
    manifest = read_json_file(writer.final / "manifest.json") or {}
    from_sample = (manifest.get("phase_locking") or {}).get("whole_split") is False
    if manifest.get("schema_version") not in (2, 3) and not (
        manifest.get("schema_version") == SCHEMA_VERSION and (from_sample or not phase_current(manifest))
    ):
        return False
    keep = writer.stage_published()
    timings = dict(keep.get("timings") or {})
    import torch

    with torch.no_grad():
        if not (writer.has("number_spectrum") and writer.has("number_probes")):
            t0 = time.time()
            keep["number_representations"] = _write_number_tables(writer, loaded, p, opts, log)
            timings["numbers_s"] = round(time.time() - t0, 2)
        t0 = time.time()
        for t, frame in phase_tables_from_model(loaded, examples, texts, p, opts.batch_size, opts.dataset_seed,
                                                opts.progress).items():
            writer.write(t, frame)
        timings["phase_s"] = round(time.time() - t0, 2)
    keep["phase_locking"] = phase_note(len(examples), len(examples), opts.split)
    keep["timings"] = timings
    fresh = _training_log(loaded)
    if fresh is not None:
        writer.write("training_log", fresh)
    writer.publish(keep)
    log(f"run {writer.name}: at schema {SCHEMA_VERSION}, phase version {PHASE_VERSION} (number and phase tables made where missing or older); nothing else recomputed")
    return True


def _precompute_digits(opts: PrecomputeOptions, loaded, all_examples, examples, p: int, taus, t0: float, log) -> Path:
    """A model whose numbers 0..p-1 are not single tokens: number representations and k-shot behaviour.

    The logit lens, module spectra, waves, embedding spectra and the filters all read the logits
    of the p number tokens, which such a model does not have; the manifest's `not_applicable`
    says so, table by table, and the pages show it.
    """
    import torch

    from core.kshot import SHOTS, accuracy_by_shots, generation_error_table, generations_table
    from core.models import describe_model, project_relative

    first = loaded.numbers.first_split
    pieces = loaded.numbers.first_split_pieces
    split_text = (
        f"{first} is read as {len(pieces)} tokens ({' + '.join(repr(x) for x in pieces)})" if first is not None and pieces else
        f"only {loaded.numbers.P} numbers are single tokens"
    )
    reason = (
        f"this model's tokenizer writes numbers as several tokens (only 0..{loaded.numbers.P - 1} are single tokens; "
        f"{split_text}), so an answer is not one of {p} number tokens and there are no number logits to read"
    )
    not_applicable = {t: reason for t in MEASURE_TABLES + PHASE_TABLES + ("embedding_spectrum", "embedding_clusters", "ablations",
                                                                          "ablation_errors")}
    shots = tuple(sorted({*SHOTS, opts.shots}))
    pool = select_split(all_examples, "train")
    label = _model_label(opts, loaded)
    identity = {**run_identity(opts, loaded, ()), "shots": list(shots), "analysis": "digits: number representations, k-shot generation"}
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
                    _write_number_tables(writer, loaded, p, opts, log)
                timings["numbers_s"] = round(time.time() - t1, 2)
                t2 = time.time()
                if not writer.has("generations"):
                    writer.write("generations", generations_table(loaded, examples, pool, shots, opts.dataset_seed,
                                                                  min(opts.batch_size, 16), log, opts.progress))
                timings["generation_s"] = round(time.time() - t2, 2)
            generations = writer.read("generations")
            writer.write("error_analysis", generation_error_table(generations))
            by_shots = accuracy_by_shots(generations)
            manifest = {
                "label": label,
                "run_label": run_label,
                "model": {**describe_model(loaded), "source_as_given": project_relative(Path(loaded.source)) if loaded.local else opts.model},
                "task": {
                    "task": opts.task, "max_operand": opts.max_operand, "p": p, "split": opts.split, "shots": max(shots),
                    "shots_compared": list(shots), "n_examples": len(examples), "dataset_seed": opts.dataset_seed,
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
            path = writer.publish(manifest)
            log(f"wrote run {name} to {path} ({', '.join(f'{k}-shot {v:.1%}' for k, v in by_shots.items())} on {len(examples)} {opts.split} examples)")
            return path
        finally:
            writer.discard_if_empty()


def _refresh_training_log(writer: RunWriter, loaded, log) -> bool:
    """A cached run of a project-trained model takes in seeds trained since (nothing else changes)."""
    fresh = _training_log(loaded)
    if fresh is None:
        return False
    old = writer.final / "training_log.parquet"
    if old.exists() and pd.read_parquet(old).equals(fresh):
        return False
    keep = writer.stage_published()
    writer.write("training_log", fresh)
    writer.publish(keep)
    log(f"run {writer.name}: training log refreshed ({fresh['seed'].nunique()} seed(s)); nothing else recomputed")
    return True


def _training_log(loaded):
    """A project-trained model ships its training log (and its extra seeds') beside its weights."""
    if not loaded.local:
        return None
    from core.train import seed_logs

    frame = seed_logs(Path(loaded.source))
    if frame is None:
        return None
    try:
        check_table("training_log", frame)
    except CoreError as exc:
        raise CoreError(f"training log of {loaded.source}: {exc}") from None
    return frame
