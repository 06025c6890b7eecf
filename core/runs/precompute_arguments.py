"""A precompute's arguments read and checked before any model is loaded: `python -m core precompute` answers a
malformed option, or a run already cached with other options, in about a second, without importing torch.

What is checked here (`check_precompute`), from the arguments, the model folder's files and the cache's manifests:

* the options themselves: the task and its number line, the basis, every tau against it, `--stages`, `--modules`,
  the model (a folder that holds no model, or a hub id the hub cannot give: core.models.source);
* for a local model folder, the run the precompute would write: its name comes from the model's label, the task
  and the identity (`run_identity`: the weights' fingerprint, hashed from the folder's safetensors files, and the
  options that set its numbers). When that run is cached with other taus, `--n-sample` or `--stages`, the refusal
  names each option that differs and says what to do (`options_refusal`); when a digit-splitting run of the same
  weights is cached, a `--stages` list naming a stage that reads number logits is refused
  (`digits_stage_refusal`).

A hub id's run is not looked up here: its identity holds the hub's revision, known once the hub answers (the model's
load). `core.runs.precompute` makes the same checks again once the model is loaded (with the model's own layout and
tokenizer: a deep model's sampled design, a digit-splitting tokenizer first seen), and builds its run's name,
identity and options with the functions here, so the two cannot disagree.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from core.analysis.fourier import check_basis_name, check_tau, fourier_basis
from core.errors import CoreError, choices
from core.files import read_json_file
from core.models.names import ModuleNames
from core.models.source import fingerprint_folder, read_recipe_label, resolve_source, weight_files
from core.runs.cache import MANIFEST, run_name
from core.runs.manifest_checks import readable_run_label
from core.tasks import number_space

DEFAULT_TAUS = (5, 10, 20, 30, 40, 50, 75, 100, 150, 200, 250)
PROMPT_FORMAT = "paper phrasings + ' Answer:'"
#: The stages `--stages` chooses from, in the order they run (core.runs.precompute.STAGE_TABLES: their tables).
#: "measure" always runs: every other table reads the examples it writes.
STAGES = ("measure", "embeddings", "numbers", "ablations", "shift", "patching", "heads", "helix", "attribution",
          "position_patching")
#: The stages that read the p number tokens' logits (or their rows): none applies to a model whose tokenizer
#: splits numbers into digits, whose run holds the number representations and k-shot answers only.
NUMBER_LOGIT_STAGES = ("measure", "embeddings", "ablations", "shift", "patching", "heads", "helix",
                       "attribution", "position_patching")
#: What the identity of a digit-splitting run says it is (core.runs.precompute).
DIGITS_ANALYSIS = "digits: number representations, k-shot generation"
#: The options a run records (its manifest's `options`) and the flag that sets each, for a refusal to name.
OPTION_FLAGS = {"taus": "--taus", "n_sample": "--n-sample", "stages": "--stages", "design": "the design"}


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


def check_stages(stages) -> tuple[str, ...]:
    """The stages asked for, in the order they run, "measure" always among them (None: every stage)."""
    if stages is None:
        return STAGES
    if isinstance(stages, str):  # "measure,shift", as the command line writes it
        stages = tuple(s.strip() for s in stages.split(",") if s.strip())
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise CoreError(f"--stages: no stage named {', '.join(map(repr, unknown))}; choose from {choices(STAGES)} "
                        "(measure always runs)")
    return tuple(s for s in STAGES if s == "measure" or s in stages)


def stages_named(stages) -> tuple[str, ...]:
    """The stages the user named with --stages (none when it was not given: every stage by default)."""
    if stages is None:
        return ()
    if isinstance(stages, str):
        stages = stages.split(",")
    return tuple(s for s in STAGES if s in {x.strip() for x in stages})


def run_taus(opts: PrecomputeOptions, p: int) -> tuple[int, ...]:
    """The grid's cutoffs: those asked for, sorted and once each, else the default ones that fit p numbers."""
    return tuple(sorted(set(opts.taus))) if opts.taus else default_taus(p)


def check_arguments(opts: PrecomputeOptions) -> tuple[int, tuple[int, ...], tuple[str, ...]]:
    """(p, taus, stages) once every option that needs no model is valid; a CoreError (one line) otherwise."""
    check_basis_name(opts.basis)
    stages = check_stages(opts.stages)
    p = number_space(opts.task, opts.max_operand)
    taus = run_taus(opts, p)
    basis = fourier_basis(p, opts.basis)
    for t in taus:
        try:
            check_tau(basis, t)  # the one rule and message `ablate --tau` gives too (core.runs.edit_arguments)
        except CoreError as exc:
            raise CoreError(f"--taus {','.join(map(str, taus))}: {exc}") from None
    if opts.module_names:
        ModuleNames.parse(opts.module_names)
    return p, taus, stages


def model_label(opts: PrecomputeOptions, local: bool, source: str) -> str:
    """The run's readable model name: --label, else a local folder's recipe or provenance label, else its name (or the
    hub id). `source`: the resolved folder of a local model."""
    if opts.label:
        return opts.label
    if local:
        return read_recipe_label(Path(source)) or Path(source).name
    return opts.model


def run_label(opts: PrecomputeOptions, label: str, digits: bool = False) -> str:
    """The run's readable label: the model's, the task, the split, and the shots (k-shot for a digits run)."""
    return readable_run_label(label, opts.task, opts.split, opts.shots, digits)


def run_identity(opts: PrecomputeOptions, local: bool, source: str, fingerprint: str, revision) -> dict:
    """What determines the numbers of a run (paths excluded, so a run moves between machines). `source`: the resolved
    folder of a local model, else the hub id."""
    return {
        "model": Path(source).name if local else source,
        "fingerprint": fingerprint,
        "revision": revision,
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


def digits_identity(identity: dict, shots) -> dict:
    """The identity of a digit-splitting model's run (number representations and k-shot answers at `shots`)."""
    return {**identity, "shots": list(shots), "analysis": DIGITS_ANALYSIS}


def run_options(taus, n_sample: int, stages: tuple[str, ...], design: str | None = None) -> dict:
    """A number-token run's options (its manifest's `options`): the design and the stages only when they are not the
    default, so a run of every stage that reads every question keeps the options it always had."""
    options = {"taus": list(taus), "n_sample": n_sample}
    if design is not None:
        options["design"] = design
    if stages != STAGES:
        options["stages"] = list(stages)
    return options


def option_value(key: str, options: dict) -> str:
    """One option of a run as the command line writes it (a key missing means its default)."""
    value = options.get(key)
    if key == "stages":
        return ",".join(value) if value else "every stage"
    if key == "design":
        return value or "every question"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return "none" if value is None else str(value)


def option_differences(existing: dict, asked: dict, keys=None) -> list[str]:
    """Each option that differs between a cached run's options and those asked, as "--taus 10,20 cached, 50 asked"
    (`keys`: only these)."""
    keys = [k for k in (keys or sorted({*existing, *asked})) if existing.get(k) != asked.get(k)]
    order = list(OPTION_FLAGS)
    keys.sort(key=lambda k: order.index(k) if k in order else len(order))
    return [f"{OPTION_FLAGS.get(k, k)} {option_value(k, existing)} cached, {option_value(k, asked)} asked"
            for k in keys]


def options_refusal(name: str, existing: dict | None, options: dict, keys=None) -> str | None:
    """Why a run cached with `existing` options is not reused for these `options` (None: they are the same; `keys`:
    compare only these). A deep model's run cached before the sampled design existed is kept as it is with
    --every-question, and a run of the sampled design asked for with --every-question is read again over every
    question (`reads_sample_again`; core.runs.cached_run.upgrade_design)."""
    asked = json.loads(json.dumps(options))
    if existing is None or reads_sample_again(existing, asked):
        return None
    differences = option_differences(existing, asked, keys)
    if not differences:
        return None
    hint = ""
    if "design" not in existing and {k: v for k, v in asked.items() if k != "design"} == existing:
        hint = " It read every question for every condition: pass --every-question to keep it as it is."
    return (
        f"run {name} is already cached with other options: {'; '.join(differences)}. Pass --recompute to rebuild it "
        "with yours (the old run stays until the new one is complete), or keep it and write yours beside it with "
        f"another --cache-dir or --label.{hint}"
    )


def reads_sample_again(existing: dict | None, asked: dict) -> bool:
    """Whether a run cached with a sampled design (`existing` options) is asked for with every question and otherwise
    the same options: `precompute --every-question` of a deep model's sampled run, which reads its sampled tables
    again over every question and keeps the rest."""
    if not existing or "design" not in existing or "design" in asked:
        return False
    return {k: v for k, v in existing.items() if k != "design"} == json.loads(json.dumps(asked))


def digits_stage_refusal(stages, reason: str, single_tokens: int | None = None) -> str | None:
    """Why the stages named with --stages cannot run on a model whose tokenizer splits numbers into digits (`reason`
    says how; `single_tokens`: how many numbers 0..N-1 are single tokens), or None when they all can (numbers) or
    --stages was not given (the run is a k-shot run, and precompute says so)."""
    cannot = [s for s in stages_named(stages) if s in NUMBER_LOGIT_STAGES]
    if not cannot:
        return None
    shrink = ""
    if single_tokens is not None and (single_tokens - 1) // 2 >= 1:
        top = (single_tokens - 1) // 2
        shrink = f", or shrink the task to single-token answers with --max-operand {top} (answers 0..{2 * top})"
    return (
        f"--stages {','.join(cannot)}: {'this stage does' if len(cannot) == 1 else 'these stages do'} not apply to "
        f"this model: {reason.rstrip('.')}. Its run holds only the number representations and the k-shot answers: "
        f"run it with --stages numbers or without --stages{shrink}"
    )


def single_tokens_of(manifest: dict) -> int | None:
    """How many numbers 0..N-1 a digits run's model reads as single tokens, from its manifest's `number_tokens`."""
    found = re.search(r"numbers 0\.\.(\d+) ", str(manifest.get("number_tokens") or ""))
    return int(found.group(1)) + 1 if found else None


@dataclass(frozen=True)
class ExpectedRun:
    """The run a precompute of a local model would write, known from the folder's files: its name, identity and
    label, and where its cache is."""

    name: str
    identity: dict
    label: str
    cache_dir: Path

    def manifest(self) -> dict | None:
        found = read_json_file(self.cache_dir / self.name / MANIFEST)
        return found if isinstance(found, dict) else None

    def digits_manifest(self) -> dict | None:
        """The manifest of a cached digit-splitting run of the same weights, task and number line, if any (its name
        holds the k-shot run's shots, which do not matter here: the tokenizer is what splits)."""
        same = ("model", "fingerprint", "revision", "task", "max_operand")
        if not self.cache_dir.is_dir():
            return None
        for path in sorted(self.cache_dir.iterdir()):
            if path.name.startswith(".") or not path.is_dir():
                continue
            manifest = read_json_file(path / MANIFEST)
            identity = manifest.get("identity") if isinstance(manifest, dict) else None
            if (isinstance(identity, dict) and identity.get("analysis") == DIGITS_ANALYSIS
                    and all(identity.get(k) == self.identity[k] for k in same)):
                return manifest
        return None


#: Fingerprints already hashed in this process, by folder and its weight files' sizes and times: the check and the
#: precompute that follows it hash a folder once.
FINGERPRINTS: dict[tuple, str] = {}


def folder_fingerprint(folder: Path) -> str:
    """core.models.source.fingerprint_folder, once per process for a folder whose weight files have not changed."""
    key = (str(folder.resolve()), tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in weight_files(folder)))
    if key not in FINGERPRINTS:
        FINGERPRINTS[key] = fingerprint_folder(folder)
    return FINGERPRINTS[key]


def snapshot_revision(source: str) -> str | None:
    """The commit a folder inside the hub's cache is a snapshot of (transformers reads it from the path: a model's
    config then carries it as its `_commit_hash`); None for any other folder."""
    found = re.search(r"snapshots/([^/]+)/", os.path.join(source, "config.json"))
    return found.group(1) if found and re.fullmatch(r"[0-9a-f]{40}", found.group(1)) else None


def expected_run(opts: PrecomputeOptions) -> ExpectedRun | None:
    """The number-token run a precompute of `opts` writes, for a local model folder (None for a hub id: its revision
    is known once the hub answers). Refuses a folder that holds no model, or a hub id the hub cannot give."""
    local, folder = resolve_source(opts.model)
    if not local:
        return None
    source = str(folder.resolve())
    identity = run_identity(opts, True, source, folder_fingerprint(folder),
                            snapshot_revision(opts.model) or opts.revision)
    label = model_label(opts, True, source)
    return ExpectedRun(run_name(run_label(opts, label), identity), identity, label, Path(opts.cache_dir))


def check_precompute(opts: PrecomputeOptions) -> None:
    """Every refusal of `precompute` that needs no model loaded (module docstring), without importing torch."""
    p, taus, stages = check_arguments(opts)
    expected = expected_run(opts)
    if expected is None:
        return
    cached = None if opts.recompute else expected.manifest()
    if cached is not None:
        # the design (a deep model's sample) is known once the model's layout is: compared after the load
        refusal = options_refusal(expected.name, cached.get("options"), run_options(taus, opts.n_sample, stages),
                                  keys=("taus", "n_sample", "stages"))
        if refusal:
            raise CoreError(refusal)
    if any(s in NUMBER_LOGIT_STAGES for s in stages_named(opts.stages)):
        digits = expected.digits_manifest()
        if digits is not None:
            reasons = list((digits.get("not_applicable") or {}).values())
            reason = reasons[0] if reasons else "this model's tokenizer writes numbers as several tokens"
            raise CoreError(digits_stage_refusal(opts.stages, reason, single_tokens_of(digits)))
