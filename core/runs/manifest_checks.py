"""A run's manifest fields against its own tables and against each other: what `verify` checks beyond checksums.

The pages, the claims and `list` read a run's facts from its manifest (core.runs.reader.RunReader: p, n_layers,
width, taus, split, n_examples, label, accuracy, the design and phase-locking notes) and its measurements from its
tables. A manifest edited by hand after the run was published keeps its tables' checksums, so only these checks
catch it: without them a page would ask for a layer, a cutoff or a number its tables do not hold (the Logit lens
page of a 2-layer run whose manifest says 48 layers stops at "no cached attn logits at layer 48").

Each problem is one line: the field, what the tables (or the manifest's own record of the model, the task and the
run's identity) hold instead, and what to do. `field_problems(manifest)` reads the manifest only, cheaply (`list`
and a shallow verify run it); `table_problems(manifest, table, frame)` checks one table a deep verify has read
anyway. The run's name and id against its identity are core.runs.cache's (it owns the naming rule).
"""

from __future__ import annotations

from functools import lru_cache

import pandas as pd

from core.analysis.fourier import fourier_basis
from core.errors import CoreError
from core.tasks import example_id, number_space

#: What to do about a field that disagrees with the tables or the rest of the manifest.
EDITED = "the manifest was edited; recompute the run"
#: Tables with one row group per layer 0..n_layers (0: the embeddings), and the one that edits layers 1..n_layers.
LAYER_TABLES = (
    "layer_accuracy",
    "module_spectra",
    "module_spectra_baseline",
    "module_logits",
    "number_spectrum",
    "number_probes",
    "phase_locking",
)
#: Tables over the whole number line 0..p-1.
NUMBER_LINE_TABLES = ("module_logits", "final_waves", "embedding_clusters")
#: Spectra over the number line 0..p-1, each basis's every frequency 1..k_max.
SPECTRUM_TABLES = ("module_spectra", "module_spectra_baseline", "embedding_spectrum")


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _show(value) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _span(values) -> str:
    return f"{int(values.min())}..{int(values.max())}"


def readable_run_label(label: str, task: str, split: str, shots: int = 0, digits: bool = False) -> str:
    """The run label precompute gives a run (core.runs.precompute_arguments.run_label) and verify expects: its label,
    task and split, then its shots ("k-shot" for a digit-splitting model's run, which compares several)."""
    text = f"{label} {task} {split}"
    if digits:
        return f"{text} k-shot"
    return text + (f" {shots}-shot" if shots else "")


def expected_run_label(manifest: dict) -> str | None:
    """The run label `readable_run_label` gives the run its manifest describes; None when the manifest lacks a
    part."""
    task = _dict(manifest.get("task"))
    label, name, split = manifest.get("label"), task.get("task"), task.get("split")
    if not all(isinstance(x, str) for x in (label, name, split)):
        return None
    return readable_run_label(label, name, split, _int(task.get("shots")) or 0, digits="shots_compared" in task)


def field_problems(manifest) -> list[str]:
    """The manifest against itself: each field a reader reads against the manifest's own record of the model, the
    task, the options and the identity the run was made with (fields absent or of the wrong type are left to
    core.runs.cache.manifest_problems)."""
    if not isinstance(manifest, dict):
        return []
    task, model = _dict(manifest.get("task")), _dict(manifest.get("model"))
    identity, options = _dict(manifest.get("identity")), _dict(manifest.get("options"))
    problems: list[str] = []

    def same(field: str, value, where: str, other) -> None:
        if value is not None and other is not None and value != other:
            problems.append(f"manifest {field} {_show(value)} but {where} is {_show(other)}: {EDITED}")

    same("n_layers", manifest.get("n_layers"), "its model.n_layers", model.get("n_layers"))
    same("width", manifest.get("width"), "its model.width", model.get("width"))
    p = _int(manifest.get("p"))
    same("p", p, "its task.p", task.get("p"))
    if isinstance(task.get("task"), str) and _int(task.get("max_operand")) is not None:
        try:
            space = number_space(task["task"], task["max_operand"])
        except CoreError:
            problems.append(f"manifest task {task['task']!r} up to {task['max_operand']} is no task here: {EDITED}")
        else:
            same("p", p, f"the number space of {task['task']} up to {task['max_operand']}", space)
    same("number_representations.n_numbers", _dict(manifest.get("number_representations")).get("n_numbers"), "p", p)
    for field, value, key in (
        ("task.task", task.get("task"), "task"),
        ("task.split", task.get("split"), "split"),
        ("task.max_operand", task.get("max_operand"), "max_operand"),
        ("task.dataset_seed", task.get("dataset_seed"), "dataset_seed"),
        ("basis", manifest.get("basis"), "basis"),
        ("model.fingerprint", model.get("fingerprint"), "fingerprint"),
    ):
        same(field, value, f"the run's identity.{key}", identity.get(key))
    if "shots_compared" in task:
        same("task.shots_compared", task.get("shots_compared"), "the run's identity.shots", identity.get("shots"))
    else:
        same("task.shots", task.get("shots"), "the run's identity.shots", identity.get("shots"))
    if "taus" in options:
        same("taus", manifest.get("taus"), "its options.taus (the grid it was made with)", options["taus"])
    expected = expected_run_label(manifest)
    if isinstance(manifest.get("run_label"), str) and expected is not None and manifest["run_label"] != expected:
        problems.append(
            f"manifest label {manifest['label']!r} with its task and split makes the run label {expected!r}, but "
            f"run_label is {manifest['run_label']!r}: {EDITED}"
        )
    n = task.get("n_examples")
    phase = _dict(manifest.get("phase_locking"))
    if phase.get("whole_split") is True:
        same("phase_locking.n", phase.get("n"), "task.n_examples (the note says the whole split)", n)
    same("design.n_split", _dict(manifest.get("design")).get("n_split"), "task.n_examples", n)
    by_shots, accuracy = _dict(manifest.get("accuracy_by_shots")), manifest.get("accuracy")
    shots_accuracy = by_shots.get(str(task.get("shots")))
    if isinstance(accuracy, (int, float)) and isinstance(shots_accuracy, (int, float)):
        if abs(accuracy - shots_accuracy) > 1e-9:
            same("accuracy", accuracy, f"its accuracy_by_shots[{task.get('shots')}]", shots_accuracy)
    return problems


@lru_cache(maxsize=32)
def _k_max(n: int, basis: str) -> int | None:
    """The highest frequency of the basis over n numbers (core.analysis.fourier's rule), None for no such basis."""
    try:
        return fourier_basis(n, basis).n_freq
    except CoreError:
        return None


def table_problems(manifest: dict, table: str, frame: pd.DataFrame) -> list[str]:
    """One table of a run (as read by a deep verify) against the manifest fields the readers take for its content."""
    if not isinstance(manifest, dict) or not len(frame):
        return []
    n_layers, p, width = _int(manifest.get("n_layers")), _int(manifest.get("p")), _int(manifest.get("width"))
    problems: list[str] = []
    if n_layers is not None and "layer" in frame.columns:
        layers = frame["layer"]
        if table in LAYER_TABLES and (int(layers.min()), int(layers.max())) != (0, n_layers):
            problems.append(f"manifest n_layers {n_layers} but table {table} has layers {_span(layers)}: {EDITED}")
        if table in ("phase_shift", "group_shift") and not (1 <= int(layers.min()) and int(layers.max()) <= n_layers):
            problems.append(f"manifest n_layers {n_layers} but table {table} edits layers {_span(layers)}: {EDITED}")
    if p is not None and table in NUMBER_LINE_TABLES and "number" in frame.columns:
        numbers = frame["number"]
        if (int(numbers.min()), int(numbers.max())) != (0, p - 1):
            problems.append(
                f"manifest p {p} (numbers 0..{p - 1}) but table {table} has numbers {_span(numbers)}: {EDITED}"
            )
    n_line = p if table in SPECTRUM_TABLES else None
    if table == "number_spectrum":
        n_line = _int(_dict(manifest.get("number_representations")).get("n_numbers")) or p
    if n_line is not None and {"basis", "k"} <= set(frame.columns):
        for basis, k in frame.groupby("basis", observed=True)["k"].max().items():
            want = _k_max(n_line, str(basis))
            if want is not None and int(k) != want:
                problems.append(
                    f"manifest p {n_line} gives frequencies 1..{want} in the {basis} basis but table {table} has "
                    f"1..{int(k)}: {EDITED}"
                )
    if table == "examples":
        problems += examples_problems(manifest, frame)
    if table == "ablations":
        problems += ablations_problems(manifest, frame, width)
    if table == "phase_locking" and "n" in frame.columns:
        note_n = _dict(manifest.get("phase_locking")).get("n")
        read = sorted({int(x) for x in frame["n"]})
        if note_n is not None and read != [note_n]:
            problems.append(f"manifest phase_locking.n {note_n} but table phase_locking read {read} examples: {EDITED}")
    if table == "generations":
        problems += generations_problems(manifest, frame)
    return problems


def examples_problems(manifest: dict, examples: pd.DataFrame) -> list[str]:
    """The manifest's task (split, task, max operand, p) and summary (number of examples, accuracy: `list` and the
    dashboard show them) against its examples table."""
    task = _dict(manifest.get("task"))
    problems = summary_problems(manifest, examples)
    split = task.get("split")
    if isinstance(split, str) and "split" in examples.columns:
        held = sorted({str(s) for s in examples["split"]})
        if held != [split]:
            problems.append(
                f"manifest task.split {split!r} but table examples holds the {', '.join(held)} split: {EDITED}"
            )
    name, top = task.get("task"), _int(task.get("max_operand"))
    if isinstance(name, str) and {"id", "a", "b"} <= set(examples.columns):
        ids = [example_id(name, int(a), int(b)) for a, b in zip(examples["a"], examples["b"])]
        if ids != [str(i) for i in examples["id"]]:
            problems.append(f"manifest task.task {name!r} but table examples holds questions like "
                            f"{str(examples['id'].iloc[0])!r}: {EDITED}")
    if top is not None and {"a", "b"} <= set(examples.columns):
        largest = int(max(examples["a"].max(), examples["b"].max()))
        if largest > top:
            problems.append(
                f"manifest task.max_operand {top} but table examples has operands up to {largest}: {EDITED}"
            )
    p = _int(manifest.get("p"))
    if p is not None and "answer" in examples.columns and int(examples["answer"].max()) >= p:
        largest = int(examples["answer"].max())
        problems.append(f"manifest p {p} (numbers 0..{p - 1}) but table examples has answers up to {largest}: {EDITED}")
    return problems


def summary_problems(manifest: dict, examples: pd.DataFrame) -> list[str]:
    """The manifest's summary (accuracy, number of examples) against its examples table: `list` and the dashboard
    show the summary, so an edited one must not pass."""
    problems = []
    task = manifest.get("task")
    n = task.get("n_examples") if isinstance(task, dict) else None  # a wrongly shaped task is reported elsewhere
    if isinstance(n, int) and n != len(examples):
        problems.append(f"the manifest says {n} examples, its examples table holds {len(examples)}: {EDITED}")
    accuracy = manifest.get("accuracy")
    if isinstance(accuracy, float) and "correct" in examples.columns and len(examples):
        actual = float(examples["correct"].mean())
        if abs(actual - accuracy) > 1e-9:
            problems.append(
                f"the manifest's accuracy {accuracy:.4%} is not its examples table's {actual:.4%}: {EDITED}"
            )
    return problems


def ablations_problems(manifest: dict, ablations: pd.DataFrame, width: int | None) -> list[str]:
    """The grid's cutoffs, the model's width and the questions each condition read against the manifest's taus,
    width, design and number of examples."""
    problems = []
    taus = manifest.get("taus")
    if isinstance(taus, list) and {"removed", "tau"} <= set(ablations.columns):
        bands = ablations.loc[ablations["removed"].isin(["low", "high"]), "tau"].dropna()
        grid = sorted({int(t) for t in bands})
        if grid != sorted({t for t in taus if isinstance(t, int)}):
            problems.append(f"manifest taus {taus} but table ablations has cutoffs {grid}: {EDITED}")
    if width is not None and "width" in ablations.columns:
        widths = sorted({int(w) for w in ablations["width"]})
        if widths != [width]:
            problems.append(f"manifest width {width} but table ablations was run on width {widths}: {EDITED}")
    design = _dict(manifest.get("design"))
    n = _int(_dict(manifest.get("task")).get("n_examples"))
    if "n" in ablations.columns:
        if design and isinstance(design.get("every_question"), list) and "label" in ablations.columns:
            full = ablations["label"].isin(design["every_question"])
            read = sorted({int(x) for x in ablations.loc[full, "n"]})
            if design.get("n_split") is not None and read and read != [design["n_split"]]:
                problems.append(f"manifest design.n_split {design['n_split']} but the grid's every-question "
                                f"conditions read {read} questions: {EDITED}")
        elif not design and n is not None:
            read = sorted({int(x) for x in ablations["n"]})
            if read != [n]:
                problems.append(f"manifest task.n_examples {n} but table ablations read {read} questions: {EDITED}")
    return problems


def generations_problems(manifest: dict, generations: pd.DataFrame) -> list[str]:
    """A digit-splitting model's k-shot answers against the manifest's shots, number of examples and accuracies."""
    task = _dict(manifest.get("task"))
    if not {"shots", "correct"} <= set(generations.columns):
        return []
    problems = []
    by_shots = generations.groupby("shots")
    held = sorted(int(k) for k in by_shots.groups)
    compared = task.get("shots_compared")
    if isinstance(compared, list) and held != sorted(compared):
        problems.append(f"manifest task.shots_compared {compared} but table generations holds shots {held}: {EDITED}")
    n = _int(task.get("n_examples"))
    sizes = sorted({int(s) for s in by_shots.size()})
    if n is not None and sizes != [n]:
        problems.append(f"manifest task.n_examples {n} but table generations holds {sizes} questions a shot: {EDITED}")
    said = _dict(manifest.get("accuracy_by_shots"))
    for k, actual in by_shots["correct"].mean().items():
        value = said.get(str(int(k)))
        if isinstance(value, (int, float)) and abs(float(actual) - value) > 1e-9:
            problems.append(f"manifest accuracy_by_shots[{int(k)}] {value:.4%} but table generations gives "
                            f"{float(actual):.4%}: {EDITED}")
    return problems
