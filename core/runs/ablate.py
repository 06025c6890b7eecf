"""One filter or one phase shift, computed now: what `python -m core ablate` and `python -m core shift` print.

RUN_OR_MODEL is either a run of the cache, whose model, task, split, basis and filter positions come from its
manifest (its weights must be on this machine: `core.runs.live_model.live_model_folder` says how to get them
when they are not), or a model (a local folder or hub id) with the task given on the command line. The
questions are the split's, or a seeded subset of `limit` of them (15 + 93 always in, as in `precompute`).

The unedited model and the edit run together in one answer-position pass (`core.analysis.evaluation.
evaluate_conditions`: each batch's prefix once, both conditions on its last token), so the change is measured on
the same questions in the same pass. A filter reports accuracy with its 95% Wilson interval, the change against
the unedited model, and the share of wrong answers that are multiples of 10; a phase shift reports the share of
answers that moved from y to y + d and whose last digit moved by d, with intervals, beside random edits of the
same norm (`core.analysis.phase_shift`). Where the run's cached tables hold the same condition over the same
questions, the report puts the cached figure beside the new one and says whether they agree.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from core.analysis.ablations import Ablation, Condition, FunctionEdit, LayerEdits
from core.analysis.behaviour import error_summary
from core.analysis.evaluation import evaluate_conditions
from core.analysis.fourier import fourier_basis
from core.analysis.period_filters import PAPER_PERIODS
from core.analysis.phase_shift import (
    CONTROL_DRAWS,
    CONTROL_SEED,
    EDIT_CAP,
    PERIOD_SETS,
    moved_periods,
    random_direction,
    residue_modulus,
    shift_outcomes,
    wilson_interval,
)
from core.errors import CoreError
from core.models.loading import LoadedModel, load_model
from core.models.names import ATTN, MLP, RESID, Z, hook_name, site_of_hook, unit_site
from core.runs.cache import read_manifest, read_table
from core.runs.edit_arguments import check_edit
from core.runs.live_model import live_model_folder
from core.runs.period_ablation import period_ablation_table
from core.runs.precompute import model_prompts
from core.runs.run_names import find_run
from core.runs.shift_run import CALIBRATION, capped_edits
from core.tasks import build_examples, number_space, running_example_id, select_split, subsample
from core.threads import use_threads

#: Agreement with a cached cell: the same questions must give the same accuracy to this many points (float32
#: kernels may round a near-tie differently from the pass that filled the cache).
AGREE_POINTS = 0.1


@dataclass
class Target:
    """What an edit runs on: the loaded model and the questions, and where they came from."""

    loaded: object
    texts: list[str]
    answers: np.ndarray
    p: int
    basis_name: str
    positions: str
    split: str
    source: str  # the run's name, or the model as given
    n_split: int  # questions in the whole split (texts may be a subset)
    run_dir: str | None = None  # the cache folder of the run, when the target is a run
    run_name: str | None = None
    ids: tuple[str, ...] = ()  # the questions read (their ids), to compare with a cached row only on the same ones
    run_split: str | None = None  # the split the run's tables were computed on
    task: str = "addition"
    max_operand: int = 260
    dataset_seed: int = 0
    shots: int = 0  # solved examples before each question, as the run's prompts have them

    def __repr__(self) -> str:
        return (f"Target({self.source!r}: {len(self.texts)} of {self.n_split} {self.split} questions, numbers "
                f"0..{self.p - 1}, {self.loaded!r})")


def open_target(
    source: str | LoadedModel,
    cache_dir: str = "cache",
    task: str = "addition",
    max_operand: int = 260,
    dataset_seed: int = 0,
    split: str | None = None,
    limit: int | None = None,
    shots: int = 0,
    threads=None,
    trust_remote_code: bool = False,
    log=print,
    before_load=None,
    model: str | None = None,
    device: str = "cpu",
    dtype: str = "float32",
) -> Target:
    """Load the model of a run (or a model) and build its questions (module docstring). `before_load(p)` checks
    the edit's own arguments against the number line 0..p-1 before the model is loaded (seconds saved on an error).
    `model`: where a run's model is now, when it moved from where the run recorded it (checked by its fingerprint).
    `source` may also be a model already in memory (core.models.loading.wrap_model): its task is the one given.
    A run read on its own split with no `limit` reads the questions its tables read (its own limit, if it had one),
    so that its cached figures can be compared. `device` and `dtype` as `core.models.loading.load_model` takes them
    (a model in memory stays where it is)."""
    in_memory = source if isinstance(source, LoadedModel) else None
    if in_memory is not None:
        source = in_memory.source
    # a run's name, id, label or unique words; a near miss is an error here
    found = None if in_memory is not None else find_run(cache_dir, source)
    if found and found != source:
        log(f"run {found} (named by {source!r})")
    manifest = read_manifest(cache_dir, found) if found else None  # a broken manifest says so, never tries the hub
    basis_name, positions, run_dir, run_name, run_split = "paper", "last", None, None, None
    if manifest is not None:
        folder, why = live_model_folder(manifest, command_line=True, moved_to=model)
        if folder is None:
            raise CoreError(f"run {source} cannot be recomputed here: {why}")
        t = manifest.get("task") or {}
        task, max_operand = t.get("task", task), int(t.get("max_operand", max_operand))
        dataset_seed, shots = int(t.get("dataset_seed", dataset_seed)), int(t.get("shots", shots))
        run_split = t.get("split", "test")
        if limit is None and (split or run_split) == run_split:
            limit = (manifest.get("identity") or {}).get("limit")
        split = split or run_split
        basis_name = manifest.get("basis", "paper")
        positions = (manifest.get("options") or {}).get("positions", "last")
        model_source, run_dir, run_name = str(folder), str(cache_dir), found
    else:
        if model:
            raise CoreError(f"--model says where a run's model moved to; {source!r} is not a run of {cache_dir} "
                            "(give the model itself instead)")
        model_source = source
    split = split or "test"
    p = number_space(task, max_operand)
    if before_load is not None:
        before_load(p)
    everything = build_examples(task, max_operand, dataset_seed)
    questions = select_split(everything, split)
    running = running_example_id(task, max_operand)
    chosen = subsample(questions, limit, dataset_seed, [running] if running else [])
    used = use_threads(threads)
    t0 = time.perf_counter()
    loaded = in_memory or load_model(model_source, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
    loaded.select_numbers(p, f"the {task} task with operands 0..{max_operand}")
    log(f"loaded {model_source} in {time.perf_counter() - t0:.1f} s ({used} thread{'s' * (used != 1)}); "
        f"{len(chosen)} of the {len(questions)} {task} {split} questions")
    texts = model_prompts(loaded, chosen, select_split(everything, "train"), shots, dataset_seed)
    return Target(loaded, texts, np.array([e.answer for e in chosen]), p, basis_name, positions, split, source,
                  len(questions), run_dir, run_name, tuple(e.id for e in chosen), run_split, task, max_operand,
                  dataset_seed, shots)


@dataclass
class Report:
    """What one edit did, and how to say it in a few lines."""

    what: str
    split: str
    n: int
    n_split: int
    accuracy: float
    base_accuracy: float
    lines: list[str] = field(default_factory=list)
    #: the numbers behind the lines, by name (for `--json`): intervals, error shares, controls, the cached figure
    figures: dict = field(default_factory=dict)

    def text(self) -> str:
        sample = f"{self.n} of {self.n_split}" if self.n < self.n_split else f"all {self.n}"
        return "\n".join([f"{self.what}, {sample} {self.split} questions:", *[f"  {line}" for line in self.lines]])

    def as_json(self) -> str:
        """The report for a program: every field, numbers as numbers (NaN as null)."""
        return json.dumps(nan_to_none(asdict(self)), indent=1, allow_nan=False)


def nan_to_none(value):
    """`value` with every NaN (nested in dicts and lists too) as None, which JSON writes as null."""
    if isinstance(value, dict):
        return {k: nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [nan_to_none(v) for v in value]
    if isinstance(value, float | np.floating):
        return None if math.isnan(value) else float(value)
    return value.item() if isinstance(value, np.generic) else value


def pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def interval(share: float, n: int) -> str:
    low, high = wilson_interval(share, n)
    return f"{pct(share)} (95% interval {pct(low)} to {pct(high)})"


def ablate(target: Target, modules: str, removed: str, tau: int | None = None, keep_k: int | None = None,
           progress=None) -> Report:
    """Accuracy with one filter on every layer's `modules`, beside the unedited model (module docstring)."""
    check_edit(target.p, tau=tau if removed != "keep" else None, keep_k=keep_k, basis=target.basis_name)
    ablation = Ablation(modules, removed, tau, keep_k)
    flt = ablation.build(target.loaded.unembedding(target.p), fourier_basis(target.p, target.basis_name))
    t0 = time.perf_counter()
    base, edited = evaluate_conditions(
        target.loaded, target.texts, target.answers, target.p, [Condition(None), Condition(flt, modules)],
        target.positions, progress=progress, desc=ablation.label(),
    )
    seconds = time.perf_counter() - t0
    summary = error_summary(edited.answers, edited.predictions)
    n = len(target.answers)
    lines = [
        f"accuracy {interval(edited.accuracy, n)}",
        f"unfiltered {pct(base.accuracy)}: change {100 * (edited.accuracy - base.accuracy):+.2f} points",
        (f"{pct(summary.share_multiple_of_10)} of the {summary.n_wrong} wrong answers are off by a multiple of 10"
         if summary.n_wrong else "no wrong answers"),
        f"filter rank {flt.rank} of width {flt.width}" + (" (it erases the module outputs)" if flt.erased else ""),
    ]
    low, high = wilson_interval(edited.accuracy, n)
    figures = {"run": target.run_name, "model": target.source, "interval_95": [low, high],
               "n_wrong": summary.n_wrong, "share_multiple_of_10": summary.share_multiple_of_10 if summary.n_wrong
               else None, "filter_rank": flt.rank, "width": flt.width, "seconds": seconds}
    cached = cached_accuracy(target, ablation)
    if cached is not None:
        line, figures["cached"] = compared("cached grid", target, cached, edited.accuracy)
        lines.append(line)
    lines.append(f"{seconds:.1f} s for both passes")
    return Report(ablation.label(), target.split, n, target.n_split, edited.accuracy, base.accuracy, lines, figures)


def ablate_periods(target: Target, modules: str, periods=PAPER_PERIODS, progress=None) -> Report:
    """Accuracy with only `periods` removed from every layer's `modules` (core.analysis.period_filters), read through
    W_U and through W_U with the final norm's gain, each beside its energy-matched random controls (mean and sd over
    draws), every question of the target."""
    table = period_ablation_table(target.loaded, target.texts, target.answers, target.p, target.basis_name,
                                  target.positions, progress=progress, log=lambda *_: None, periods=periods,
                                  modules=(modules,), slices=("periods",))
    n = len(target.answers)
    base = float(table["accuracy"].iloc[0])
    said = ", ".join(f"{t:g}" for t in periods)
    lines, figures = [], {"run": target.run_name, "model": target.source, "periods": list(periods), "readings": {}}
    for reading, rows in table[table["slice"] == "periods"].groupby("reading", sort=False):
        edit, controls = rows[~rows["control"]].iloc[0], rows[rows["control"]]
        mean, sd = float(controls["accuracy"].mean()), float(controls["accuracy"].std(ddof=1))
        lines.append(f"{reading}: accuracy {interval(float(edit['accuracy']), n)}, change "
                     f"{100 * (edit['accuracy'] - base):+.2f} points; energy-matched random controls "
                     f"{pct(mean)} (sd {100 * sd:.2f} points over {len(controls)} draws); rank {int(edit['rank'])}, "
                     f"{pct(float(edit['energy_share']))} of the outputs' energy removed")
        figures["readings"][reading] = {"accuracy": float(edit["accuracy"]), "rank": int(edit["rank"]),
                                        "frequencies": edit["frequencies"], "energy_share": float(edit["energy_share"]),
                                        "control_accuracy": controls["accuracy"].tolist(), "control_mean": mean,
                                        "control_sd": sd, "interval_95": list(wilson_interval(float(edit["accuracy"]),
                                                                                              n))}
    what = f"{modules}: the waves of period {said} removed (frequencies {table['frequencies'].iloc[1]})"
    first = table[(table["slice"] == "periods") & ~table["control"]].iloc[0]
    return Report(what, target.split, n, target.n_split, float(first["accuracy"]), base, lines, figures)


def edit_site(target: Target, site: str, fn, progress=None, head: int | None = None, position="answer") -> Report:
    """Accuracy with a researcher's own edit at one site, beside the unedited model: `site` a TransformerLens hook
    name (blocks.0.hook_mlp_out is MLP 1's output, core.models.names.site_of_hook), `fn` a function of that site's
    rows at `position` (the answer position by default; core.models.positions) (a float32 tensor, prompts x width)
    returning the edited rows. One head: blocks.N.attn.hook_z with `head` (counted from 0), or written
    blocks.N.attn.hook_z[H]; `fn` then receives z_h, prompts x head_dim. One MLP neuron: blocks.N.mlp.hook_post[I],
    prompts x 1 (core.models.names.unit_site)."""
    site = f"{site}[{int(head)}]" if head is not None else site
    if "[" in site:
        stream, layer, unit = unit_site(site, target.loaded.n_layers)
        width = target.loaded.parts.head_dim if stream == Z else 1
    else:
        (stream, layer), unit, width = site_of_hook(site, target.loaded.n_layers), None, target.loaded.width
    edit = FunctionEdit(fn, width)
    t0 = time.perf_counter()
    base, edited = evaluate_conditions(
        target.loaded, target.texts, target.answers, target.p,
        [Condition(None), Condition(edit, stream, layer, position, unit)],
        "last", progress=progress, desc=f"your edit at {site}",
    )
    seconds = time.perf_counter() - t0
    n = len(target.answers)
    changed = float(np.mean(np.asarray(edited.predictions) != np.asarray(base.predictions)))
    summary = error_summary(edited.answers, edited.predictions)
    lines = [
        f"accuracy {interval(edited.accuracy, n)}",
        f"unedited {pct(base.accuracy)}: change {100 * (edited.accuracy - base.accuracy):+.2f} points",
        f"answers changed by the edit: {pct(changed)}",
        (f"{pct(summary.share_multiple_of_10)} of the {summary.n_wrong} wrong answers are off by a multiple of 10"
         if summary.n_wrong else "no wrong answers"),
        f"{seconds:.1f} s for both passes",
    ]
    low, high = wilson_interval(edited.accuracy, n)
    figures = {"run": target.run_name, "model": target.source, "site": site, "stream": stream, "layer": layer,
               "interval_95": [low, high], "changed": changed, "n_wrong": summary.n_wrong, "seconds": seconds,
               "predictions": [int(x) for x in edited.predictions]}
    what = f"your edit at {site if unit is not None else hook_name(stream, layer, target.loaded.n_layers)}"
    return Report(what, target.split, n, target.n_split, edited.accuracy, base.accuracy, lines, figures)


def cached_questions(target: Target, n: int, d: int | None = None) -> set[str] | None:
    """The ids of the questions a cached row of the target's run read, told by its `n`: every question of its
    examples table, or its fixed sample (`in_sample`), whichever it counts n of. A phase shift by `d` counts only
    the questions whose unedited answer y has y + d on the number line, so for it those are counted. None when
    neither set gives n."""
    examples = read_table(target.run_dir, target.run_name, "examples")
    sets = [examples]
    if "in_sample" in examples.columns:
        sets.insert(0, examples[examples["in_sample"].astype(bool)])
    for rows in sets:
        counted = len(rows) if d is None else int((rows["prediction"] + d <= target.p - 1).sum())
        if counted == n:
            return set(rows["id"])
    return None


def compared(what: str, target: Target, cached: tuple[float, int], now: float, d: int | None = None
             ) -> tuple[str, dict]:
    """(line, figures): a cached figure beside the one just computed; agrees or differs only when both read the
    very same questions, otherwise the line says that the sets differ and how many each read."""
    value, n = cached
    read = cached_questions(target, n, d)
    counted = len(read) if read else n
    head = f"{what} of run {target.run_name}: {pct(value)} over its {counted:,} {target.run_split} questions"
    figures = {"value": value, "questions": counted, "split": target.run_split,
               "same_questions": target.split == target.run_split and read == set(target.ids), "agrees": None}
    if target.split != target.run_split:
        return (f"{head} (not compared: this edit read the {target.split} split, the cache the {target.run_split} "
                "split)"), figures
    if not figures["same_questions"]:
        return (f"{head} (not compared: this edit read {len(target.ids):,} {target.split} questions, not the same "
                "set)"), figures
    figures["agrees"] = abs(value - now) * 100 <= AGREE_POINTS
    return head + (" (agrees)" if figures["agrees"] else f" (DIFFERS by {100 * (now - value):+.2f} points)"), figures


def cached_accuracy(target: Target, ablation: Ablation) -> tuple[float, int] | None:
    """(accuracy, questions read) of the run's cached row for this very filter, when the cache holds it."""
    if target.run_name is None:
        return None
    grid = read_table(target.run_dir, target.run_name, "ablations")
    hit = grid[(grid["modules"] == ablation.modules) & (grid["removed"] == ablation.removed)]
    hit = hit[hit["tau"] == ablation.tau] if ablation.tau is not None else hit[hit["tau"].isna()]
    hit = hit[hit["keep_k"] == ablation.keep_k] if ablation.keep_k is not None else hit
    return (float(hit["accuracy"].iloc[0]), int(hit["n"].iloc[0])) if len(hit) == 1 else None


def shift(target: Target, kind: str, layer, period_set: str, d: int, progress=None) -> Report:
    """The share of answers that move by d when one module's waves (`period_set` of `PERIOD_SETS`) shift by d,
    beside `CONTROL_DRAWS` random edits of the same norm (module docstring). `layer` may be a range (first, last): a
    group, every `kind` module of those layers shifted together, each by its own capped edit (core.runs.group_shift),
    read beside the stream after the last layer shifted by the same d (the positive control) and random edits of the
    same size per module (one direction a draw)."""
    if kind not in (ATTN, MLP, RESID):
        raise CoreError(f"--module {kind!r}: choose attn, mlp or resid (the residual stream after the layer)")
    check_edit(target.p, periods=period_set, d=d)
    L = target.loaded.n_layers
    first, last = (int(layer), int(layer)) if isinstance(layer, int | np.integer) else map(int, layer)
    for end in (first, last):
        if not 1 <= end <= L:
            raise CoreError(f"--layer {end}: this model has layers 1..{L}")
    if first > last:
        raise CoreError(f"--layer {first}-{last}: give the lower layer first ({last}-{first})")
    group = last > first
    if group and kind == RESID:
        raise CoreError("--module resid edits the stream after one layer: give one --layer, not a range")
    W_U = target.loaded.unembedding(target.p).double().cpu().numpy()
    periods = PERIOD_SETS[period_set]
    keys = [(kind, layer, period_set, int(d)) for layer in range(first, last + 1)]
    if group:
        keys.append((RESID, last, period_set, int(d)))
    edits = capped_edits(target.loaded, W_U, target.texts[:CALIBRATION], target.p, keys, progress=progress)
    directions = [random_direction(W_U, CONTROL_SEED + draw) for draw in range(CONTROL_DRAWS)]
    layers = range(first, last + 1)

    def condition(u=None):  # the shift (u None) or its control along u, on every layer of the site
        moved = [(lyr, edits[(kind, lyr, period_set, int(d))]) for lyr in layers]
        moved = [(lyr, e if u is None else e.control(u)) for lyr, e in moved]
        return Condition(LayerEdits(tuple(moved)), kind) if group else Condition(moved[0][1], kind, first)

    conditions = [Condition(None), condition(), *[condition(u) for u in directions]]
    if group:
        conditions.append(Condition(edits[(RESID, last, period_set, int(d))], RESID, last))
    site = f"{kind} {first}" if not group else f"every {kind} of layers {first}-{last} together"
    what = f"{site}: waves of period {', '.join(f'{t:g}' for t in periods)} shifted by d = {d}"
    t0 = time.perf_counter()
    evaluations = evaluate_conditions(target.loaded, target.texts, target.answers, target.p, conditions, "last",
                                      progress=progress, desc=what)
    seconds = time.perf_counter() - t0
    before, n = evaluations[0].predictions, len(target.answers)
    modulus, moved = residue_modulus(periods), moved_periods(periods, int(d))
    out = shift_outcomes(before, evaluations[1].predictions, int(d), target.p, modulus)
    if not out["n"]:
        raise CoreError(f"d = {d}: none of the model's {n} answers y has y + {d} on the number line 0..{target.p - 1},"
                        " so nothing could move by d; choose a smaller d")
    ctrl = [shift_outcomes(before, ev.predictions, int(d), target.p, modulus)
            for ev in evaluations[2:2 + CONTROL_DRAWS]]
    ctrl_moved = np.array([c["residue_moved"] for c in ctrl])
    used = [edits[(kind, lyr, period_set, int(d))] for lyr in layers]
    size, kept = max(e.edit_size for e in used), min(e.kept for e in used)
    lines = [
        f"answers moved from y to y + {d}: {interval(out['moved'], out['n'])} (of the {out['n']} whose y + {d} "
        f"is on the number line)",
        f"last digit (mod {modulus}) moved by {d}: {interval(out['residue_moved'], out['n'])}",
        f"stayed {pct(out['stayed'])}, went elsewhere {pct(out['elsewhere'])}",
        *([] if len(moved) == len(periods) else [
            f"a shift by {d} moves the waves of period {', '.join(f'{t:g}' for t in moved)} only (d is a whole "
            f"multiple of the others)"]),
        f"random edits of the same norm ({CONTROL_DRAWS} draws): last digit moved for {pct(ctrl_moved.mean())} "
        f"(sd {100 * ctrl_moved.std(ddof=1):.2f} points)",
        f"edit size {size:.2f} x the module's output (median{', the largest of the group' if group else ''}; capped "
        f"at {EDIT_CAP:g}), {kept} of {used[0].full_rank} directions kept, misfit {max(e.misfit for e in used):.2g} "
        "(0: every constraint met)",
    ]
    figures = {"run": target.run_name, "model": target.source, "kind": kind, "first_layer": first, "layer": last,
               **out, "modulus": modulus, "control_residue_moved": ctrl_moved.tolist(),
               "control_mean": float(ctrl_moved.mean()), "control_sd": float(ctrl_moved.std(ddof=1)),
               "misfit": float(max(e.misfit for e in used)), "edit_size": float(size), "kept": kept,
               "full_rank": used[0].full_rank, "seconds": seconds, "periods_moved": list(moved)}
    if group:
        stream = shift_outcomes(before, evaluations[-1].predictions, int(d), target.p, modulus)
        share = out["residue_moved"] / stream["residue_moved"] if stream["residue_moved"] else float("nan")
        control_share = ctrl_moved / stream["residue_moved"] if stream["residue_moved"] else ctrl_moved * np.nan
        lines.append(positive_control_line(last, int(d), stream["residue_moved"], share,
                                           float(np.mean(control_share))))
        figures.update({"stream_residue_moved": stream["residue_moved"], "relative": share,
                        "control_relative_mean": float(np.mean(control_share))})
    cached = cached_shift(target, kind, first, period_set, int(d)) if not group else None
    if cached is not None:
        line, figures["cached"] = compared("cached phase_shift (last digit moved)", target, cached,
                                           out["residue_moved"], int(d))
        lines.append(line)
    lines.append(f"{seconds:.1f} s for the {len(conditions)} passes")
    return Report(what, target.split, n, target.n_split, evaluations[1].accuracy, evaluations[0].accuracy, lines,
                  figures)


def positive_control_line(last: int, d: int, stream_moved: float, share: float, control_share: float) -> str:
    """The group's positive control in words: the stream after layer `last` shifted by d, and the share of its
    moved last digits the group moves; where the control moved none, why that share cannot be read (not "nan%")."""
    said = (f"the group moves {pct(share)} of that (random edits {pct(control_share)})" if stream_moved > 0 else
            "so the group's share of it cannot be read: the control moved no last digit, and there is nothing to "
            "take a share of (the stream there does not carry the last digit as waves a shift moves; try an earlier "
            "layer or another --d)")
    return (f"positive control, the whole stream after layer {last} shifted by {d}: last digit moved for "
            f"{pct(stream_moved)}; {said}")


def cached_shift(target: Target, kind: str, layer: int, period_set: str, d: int) -> tuple[float, int] | None:
    """(share of last digits moved, questions read) of the run's cached row for this shift, when the cache holds it."""
    if target.run_name is None:
        return None
    manifest = read_manifest(target.run_dir, target.run_name)
    if "phase_shift" not in manifest.get("tables", {}):
        return None
    t = read_table(target.run_dir, target.run_name, "phase_shift")
    hit = t[(t["kind"] == kind) & (t["layer"] == layer) & (t["period_set"] == period_set) & (t["d"] == d)
            & ~t["control"].astype(bool)]
    return (float(hit["residue_moved"].iloc[0]), int(hit["n"].iloc[0])) if len(hit) == 1 else None

