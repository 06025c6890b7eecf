"""Write docs/results.md, whole, from the cached runs, so that every number in it is the cache's.

    .venv/bin/python scripts/results.py [--cache-dir cache] [--tau 50] [--write]

Without --write the document is printed; with it, it replaces docs/results.md. The same cache gives the
same bytes (nothing in it depends on the time or the machine); tests/test_docs.py checks that the
file in the repository is what the script writes from the shipped runs.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import sys

import pandas as pd

from core.analysis.embeddings import top_periods
from core.analysis.kshot import generation_error_table
from core.claims import registry
from core.claims.features import claim_training
from core.claims.last_digit import group_shift_table
from core.claims.operations import claim_operations, operation_runs
from core.claims.periods import claim_periods, period_table
from core.claims.seeds import seed_siblings, verdict_spread
from core.claims.shift_rule import CAUSAL_SHARE, CONTROL_MAX, STREAM_FLOOR, causal_test, shift_summary
from core.claims.siblings import sibling_rows, training_siblings
from core.files import PROJECT_ROOT
from core.models.source import project_path
from core.paper import ACCURACY, PARITY_KEEP_PERIOD_2, TABLE1_GPT2_XL, TABLE1_TAU
from core.runs import summaries, training_summaries
from core.runs.cache import list_runs
from core.runs.origin import built_control, run_origin, seed_of_manifest, task_of_manifest, trained_part
from core.runs.period_ablation import PERIOD_DRAWS
from core.runs.reader import RunReader, Table
from core.tasks import task_name

RESULTS = PROJECT_ROOT / "docs" / "results.md"
HEADER = """# Results, printed from the cache

Written whole by `scripts/results.py --write` from the runs in `cache/`: do not edit by hand, regenerate
(`.venv/bin/python scripts/results.py --write`). What the numbers say about the paper's claims, run by
run, is in [findings.md](findings.md); how the models were made is in [fine-tuning.md](fine-tuning.md) and
[findings.md](findings.md); the paper's definitions are in [method.md](method.md).
"""


@functools.lru_cache(maxsize=None)
def run_of(cache_dir: str, name: str) -> RunReader:
    """The run `name`, each of its tables read once for the whole document."""
    return RunReader(cache_dir, name)


claims = functools.lru_cache(maxsize=None)(registry.run_claims)  # each run's claims, computed once


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache-dir", default=str(PROJECT_ROOT / "cache"))
    ap.add_argument("--tau", type=int, default=TABLE1_TAU)
    ap.add_argument("--write", action="store_true", help=f"write the document to {RESULTS.relative_to(PROJECT_ROOT)}")
    args = ap.parse_args(argv)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = document(args.cache_dir, args.tau)
    if code:
        print(buf.getvalue(), end="", file=sys.stderr)
        return code
    text = HEADER + "\n" + buf.getvalue().strip() + "\n"
    if args.write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(text, encoding="utf-8")
        print(f"wrote {RESULTS.relative_to(PROJECT_ROOT)}")
    else:
        print(text, end="")
    return 0


def document(cache_dir: str, tau: int) -> int:
    """Print the document's body (markdown); 1 when there is no run to print."""

    listed = [r for r in list_runs(cache_dir, deep=True) if r.ok]
    listed.sort(key=lambda r: (r.manifest.get("display_order", 100), r.label))
    # the runs of the test split, every table of them; a run of another split (the default's validation run) is set
    # beside its test twin at the end
    every = [r for r in listed if (r.manifest.get("task") or {}).get("split", "test") == "test"]
    if not every:
        print("no runs")
        return 1
    # single-token runs: every analysis applies
    runs = [r for r in every if run_of(cache_dir, r.name).has(Table.EXAMPLES)]
    digit_runs = [r for r in every if run_of(cache_dir, r.name).has(Table.GENERATIONS)]
    print("## Every run\n")
    print(
        "| model | task | test accuracy | wrong answers off by a multiple of 10 | off by 1 or 2 | top embedding "
        "periods (input rows, paper basis) | outliers above the shuffled-numbers threshold (family-wise 5%) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in runs:
        ea = run_of(cache_dir, r.name).table(Table.ERROR_ANALYSIS).iloc[0]
        spec = run_of(cache_dir, r.name).table(Table.EMBEDDING_SPECTRUM)
        spec = summaries.embedding_rows(spec, "paper", "input")
        tops = ", ".join(f"{t:.3g}" for t in top_periods(spec, 6))
        share = "no errors" if ea["n_wrong"] == 0 else f"{ea['share_multiple_of_10']:.0%} of {int(ea['n_wrong'])}"
        near = "–" if ea["n_wrong"] == 0 else f"{ea['share_within_2']:.0%}"
        print(
            f"| {r.label} | {task_name(task_of_manifest(r.manifest))} | {ea['accuracy']:.2%} | {share} | {near} | "
            f"{tops} | {int(spec['outlier'].sum())} of "
            f"{len(spec)} |"
        )
    print()
    header = ["filter (every layer)", "paper GPT-2-XL"] + [r.label for r in runs]
    print(f"## Table 1 analogue at tau = {tau}\n")
    print("Accuracy % (loss), every layer's modules filtered.\n")
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join("---" for _ in header) + " |")
    tables = {}
    for r in runs:
        ab = run_of(cache_dir, r.name).table(Table.ABLATIONS)
        tables[r.name] = summaries.table1(ab, summaries.nearest_tau(ab, tau)).set_index(["modules", "removed"])
    for key, (loss, acc) in TABLE1_GPT2_XL.items():
        name = "none" if key[0] == "none" else f"{summaries.ABLATION_MODULES[key[0]]}: {key[1]} removed"
        cells = [name, f"{acc:.2f} ({loss:.4f})"]
        for r in runs:
            t = tables[r.name]
            if key in t.index:
                row = t.loc[key]
                control = row.get("random control accuracy %")
                cells.append(
                    f"{row['accuracy %']:.2f} ({row['loss']:.4f})"
                    + (f"; control {control:.2f}" if pd.notna(control) else "")
                    + (" erased" if row["erased"] else "")
                )
            else:
                cells.append("–")
        print("| " + " | ".join(cells) + " |")
    print(
        "\n('control': as many random directions that W_U reads, removed instead, tilted to remove as much of the "
        "modules' output energy as the band does, mean of 5 draws; matched on rank only, one draw, for the runs "
        "cached without their weights: the untied control. The paper has no control. The "
        "paper's column is addition's: it reports no Table 1 for multiplication.)\n"
    )
    for task in dict.fromkeys(task_of_manifest(r.manifest) for r in runs):
        of_task = [r for r in runs if task_of_manifest(r.manifest) == task]
        training_section(cache_dir, [r for r in of_task if not built_control(r.manifest)], task)
        training_section(cache_dir, [r for r in of_task if built_control(r.manifest)], task, controls=True)
    finetuned_section(cache_dir, runs, digit_runs, tau)
    numbers_section(cache_dir, every, digit_runs)
    causal_section(cache_dir, every)
    groups_section(cache_dir, every)
    periods_section(cache_dir, every)
    claims_table(cache_dir, every)
    seeds_section(cache_dir, every)
    trained_another_way_section(cache_dir, every)
    other_split_section(cache_dir, [r for r in listed if r not in every], every)
    print()
    for r in runs:
        if run_of(cache_dir, r.name).has(Table.TRAINING_LOG) and seed_of_manifest(r.manifest) is None:
            log = run_of(cache_dir, r.name).table(Table.TRAINING_LOG)
            curves = training_summaries.training_curves({r.label: log}, "val")
            last = curves.sort_values("epoch").groupby("run").tail(1)
            for _, row in last.iterrows():
                secs = log[(log["width"] == row["width"])].groupby("seed")["seconds"].max()
                print(
                    f"- {row['run']}: val accuracy after {int(row['epoch'])} epochs {row['mean']:.2%} "
                    f"(seeds from {row['low']:.2%} to {row['high']:.2%}); training time per seed "
                    + (f"{secs.mean() / 60:.0f} min" if secs.max() - secs.min() < 60 else
                       f"{secs.min() / 60:.0f} to {secs.max() / 60:.0f} min (the seeds were trained on different "
                       "machines: a CPU here, a lent GPU)")
                )
    return 0


#: A training table shows at most about this many epochs (every n-th, the last and each run's shipped epoch).
MAX_EPOCH_COLUMNS = 12


def training_section(cache_dir: str, runs, task: str = "addition", controls: bool = False) -> None:
    """Validation accuracy by epoch of every run of one task with a training log: mean over seeds, and the
    lowest and highest seed, per width; a long log at every n-th epoch, its last and its shipped one. `controls`:
    the runs are controls built with their modules held to bands (`built_control`), in a table of their own so that
    their longer logs do not thin the models' columns."""

    runs = [r for r in runs if seed_of_manifest(r.manifest) is None]  # a seed's log is in its shipped model's run
    logs = {
        r.label: run_of(cache_dir, r.name).table(Table.TRAINING_LOG)
        for r in runs
        if run_of(cache_dir, r.name).has(Table.TRAINING_LOG)
    }
    if not logs:
        return
    curves = training_summaries.training_curves(logs, "val")
    epochs = sorted(int(e) for e in curves["epoch"].unique())
    chosen = {  # a recipe with `select: "val"`: the epoch chosen on validation (its log's test row)
        r.label: int(log.loc[log["split"] == "test", "epoch"].iloc[-1])
        for r in runs
        if (run_origin(r.manifest)["recipe"] or {}).get("select") == "val"
        and ((log := run_of(cache_dir, r.name).table(Table.TRAINING_LOG))["split"] == "test").any()
    }
    if len(epochs) > MAX_EPOCH_COLUMNS:
        step = -(-len(epochs) // MAX_EPOCH_COLUMNS)
        epochs = sorted({*epochs[step - 1::step], epochs[-1], *chosen.values()})
    if controls:
        print("### Training: the controls built with their modules held to bands\n")
    else:
        print("## Training\n" if task == "addition" else f"## Training: {task_name(task)}\n")
    nth = f"{step}{ {2: 'nd', 3: 'rd'}.get(step, 'th')}" if len(epochs) < curves["epoch"].nunique() else ""
    print("Validation accuracy by epoch (`training_log`): mean over seeds, lowest to highest seed in brackets"
          + (f"; every {nth} epoch, the last and the one chosen on validation" if nth else "")
          + (" (*: the epoch chosen on validation, whose weights ship)" if chosen else "") + ".\n")
    print("| run | " + " | ".join(f"epoch {e}" for e in epochs) + " |")
    print("| --- | " + " | ".join("---" for _ in epochs) + " |")
    for run, g in curves.groupby("run", sort=False):
        by = g.set_index("epoch")
        cells = []
        for e in epochs:
            if e not in by.index:
                cells.append("–")
                continue
            row = by.loc[e]
            spread = f" ({row['low']:.1%}–{row['high']:.1%})" if row["seeds"] > 1 else ""
            mark = "*" if any(run.startswith(label) and e == c for label, c in chosen.items()) else ""
            cells.append(f"{row['mean']:.1%}{spread}{mark}")
        print(f"| {run} | " + " | ".join(cells) + " |")
    print()


def finetuned_section(cache_dir: str, runs, digit_runs, tau: int) -> None:
    """A pre-trained model fine-tuned here with number tokens: the paper's measurements one by one."""

    for r in runs:
        if run_origin(r.manifest)["kind"] != "fine-tuned":
            continue
        m = r.manifest
        folder = project_path(m["model"]["source"])
        summary = (
            json.loads((folder / "train_summary.json").read_text()) if (folder / "train_summary.json").exists() else {}
        )
        print(
            f"**{r.label}** ({m['n_layers']} layers, {m['width']} wide), on {m['task']['n_examples']} test questions:\n"
        )
        where = summary.get("device", "the CPU")
        shipped = "shipped" if summary.get("delta_shipped", True) else "not shipped"
        print(
            f"- test accuracy {m['accuracy']:.2%} (paper, GPT-2-XL fine-tuned: {ACCURACY['GPT-2-XL fine-tuned']}%)"
            + (
                f"; training steps {summary['train_step_seconds'] / 60:.0f} min on {where}, delta "
                f"{summary['delta_bytes'] / 1e6:.1f} MB ({shipped})"
                if summary
                else ""
            )
        )
        before_cut = summary.get("final_accuracy_before_the_rank_cut")
        if before_cut:
            cuts = summary.get("rank_cut_val_accuracy_1000_questions_float32", {})
            print(
                f"- before its change was cut to rank {summary.get('rebuilt_rank')}: test {before_cut['test']:.2%}, "
                f"val {before_cut['val']:.2%} "
                f"(bfloat16, at the end of training); validation accuracy (1,000 questions) after the cut by rank: "
                + ", ".join(f"rank {k} {v:.1%}" for k, v in cuts.items())
            )
        ex = run_of(cache_dir, r.name).table(Table.EXAMPLES)
        ex = ex[ex["split"] == m["task"]["split"]]
        wrong = ex[~ex["correct"]]
        bins = [(0, 100), (101, 200), (201, 400), (401, 520)]
        by = [f"{lo} to {hi} {ex[ex['answer'].between(lo, hi)]['correct'].mean():.1%}" for lo, hi in bins]
        print(
            f"- wrong answers off by one: {int(((wrong['prediction'] - wrong['answer']).abs() == 1).sum())} of "
            f"{len(wrong)}; "
            f"accuracy by answer: {', '.join(by)}"
        )
        acc = run_of(cache_dir, r.name).table(Table.LAYER_ACCURACY)
        acc = acc[acc["final_norm"]].sort_values("layer")
        first = lambda col, x: next((str(int(l)) for l, v in zip(acc["layer"], acc[col]) if v >= x), "never")  # noqa: E731
        print(
            f"- logit lens (final norm applied): half the answers within ±10 first at layer {first('within_10', 0.5)}, "
            f"half exact first at layer {first('exact', 0.5)}; 90% exact first at layer {first('exact', 0.9)} of "
            f"{m['n_layers']}"
        )
        energy = summaries.energy_by_band(run_of(cache_dir, r.name).table(Table.MODULE_SPECTRA), "paper", tau)
        names = {"attn": "attention", "mlp": "MLP", "resid": "residual stream"}
        for module, g in energy.groupby("module"):
            print(
                f"- {names.get(module, module)} output logits: {g['low'].mean():.0%} of their Fourier energy below "
                f"tau = {tau} "
                f"(mean over layers; top layer {g.sort_values('layer')['low'].iloc[-1]:.0%})"
            )
        keep = summaries.keep_one_results(run_of(cache_dir, r.name).table(Table.ABLATIONS))
        two = keep[keep["keep_period"] == 2]
        if len(two):
            k = two.iloc[0]
            print(
                f"- keep only period 2 (every module, every layer): accuracy {k['accuracy']:.1%}, parity right "
                f"{k['parity_match']:.1%} "
                f"(paper, fine-tuned GPT-2-XL: parity right {PARITY_KEEP_PERIOD_2}%)"
            )
        spec = run_of(cache_dir, r.name).table(Table.NUMBER_SPECTRUM)
        after = summaries.number_spectrum_at(spec, 0, "paper")
        after = after[after["outlier"]].sort_values("magnitude", ascending=False)
        recipe = json.loads((folder / "recipe.json").read_text())
        layer = (recipe.get("number_tokens") or {}).get("layer")
        base = project_path(recipe.get("init_from", ""))
        before_run = next(
            (
                d
                for d in digit_runs
                if project_path(d.manifest["model"].get("source", "")) == base and d.manifest.get("p") == m["p"]
            ),
            None,
        )
        if before_run is not None and layer is not None:
            b = summaries.number_spectrum_at(
                run_of(cache_dir, before_run.name).table(Table.NUMBER_SPECTRUM), int(layer), "paper"
            )
            b = b[b["outlier"]].sort_values("magnitude", ascending=False)
            print(
                "- the new number rows' spectrum: before fine-tuning (the base model's representation after block "
                f"{layer}) "
                f"{len(b)} outliers, strongest periods {_periods(b['period'][:6])}; after, {len(after)} outliers, "
                f"strongest {_periods(after['period'][:6])}"
            )
        print()


def _periods(values) -> str:
    return ", ".join(f"{float(t):.3g}" for t in values) or "none"


def numbers_section(cache_dir: str, runs, digit_runs) -> None:
    """Number representations (every run) and k-shot behaviour (digit-splitting runs)."""

    print("## Number representations and a real pre-trained model\n")
    print(
        "Number representations (`number_spectrum`, `number_probes`): at the layer where linear probes read "
        "n mod 2, 5, 10, 100 best, the spectrum's outliers among periods 2, 2.5, 5, 10 (paper basis, family-wise "
        "null) and the probes' Cohen's kappa on held-out numbers (mean of 5 splits; mod 3 and 7 are controls).\n"
    )
    print(
        "| model | layers | best layer | outliers there | of 2, 2.5, 5, 10 | kappa mod 2 / 5 / 10 / 100 | controls "
        "mod 3 / 7 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in runs:
        ns, pr = (
            run_of(cache_dir, r.name).table(Table.NUMBER_SPECTRUM),
            run_of(cache_dir, r.name).table(Table.NUMBER_PROBES),
        )
        layer = summaries.best_probe_layer(pr)
        s = summaries.number_summary(ns, pr, layer, "paper")
        k = s["kappa"]
        f = lambda t: f"{k[t]:.2f}" if t in k else "–"  # noqa: E731
        print(
            f"| {r.label} | {r.manifest['n_layers']} | {layer} | {s['n_outliers']} of {s['n_frequencies']} | "
            f"{', '.join(f'{t:g}' for t in s['short_periods']) or 'none'} | {f(2)} / {f(5)} / {f(10)} / {f(100)} | "
            f"{f(3)} / {f(7)} |"
        )
    for r in digit_runs:
        ns, pr = (
            run_of(cache_dir, r.name).table(Table.NUMBER_SPECTRUM),
            run_of(cache_dir, r.name).table(Table.NUMBER_PROBES),
        )
        print(f"\n{r.label}, layer by layer (every 5th layer; all on the *Numbers* page):\n")
        print("| layer | outliers | strongest outlier periods | kappa mod 2 / 5 / 10 / 100 | controls mod 3 / 7 |")
        print("| --- | --- | --- | --- | --- |")
        for layer in sorted({*range(0, r.manifest["n_layers"] + 1, 5), summaries.best_probe_layer(pr)}):
            s = summaries.number_summary(ns, pr, layer, "paper")
            k = s["kappa"]
            print(
                f"| {layer} | {s['n_outliers']} | {', '.join(f'{t:.3g}' for t in s['outlier_periods'][:7])} | "
                f"{k[2]:.2f} / {k[5]:.2f} / {k[10]:.2f} / {k[100]:.2f} | {k[3]:.2f} / {k[7]:.2f} |"
            )
        errs = generation_error_table(run_of(cache_dir, r.name).table(Table.GENERATIONS))
        print(
            f"\n{r.label}, answering the paper's addition prompts by writing digits (greedy), "
            f"{int(errs['n'].iloc[0])} test questions (a seeded sample):\n"
        )
        print(
            "| prompts | accuracy | answers that are not a number | wrong numbers off by a multiple of 10 | off by 1 "
            "or 2 |"
        )
        print("| --- | --- | --- | --- | --- |")
        for _, e in errs.iterrows():
            share = (
                "–" if not e["n_wrong_numbers"] else f"{e['share_multiple_of_10']:.0%} of {int(e['n_wrong_numbers'])}"
            )
            near = "–" if not e["n_wrong_numbers"] else f"{e['share_within_2']:.0%}"
            print(f"| {e['source']} | {e['accuracy']:.1%} | {int(e['n_not_a_number'])} | {share} | {near} |")
    print()


def claims_table(cache_dir: str, runs) -> None:
    """The paper's claims, one row each, with each run's verdict and measurement (core.claims.registry)."""

    table_runs = [run_of(cache_dir, r.name) for r in runs]
    per_run = {r.name: claims(r) for r in table_runs}
    steps = list(registry.RUN_CLAIMS)
    print("## The paper's claims, one by one\n")
    print(
        "Each claim of the paper against each shipped run: the verdict and the reason are computed from the run's "
        "tables by\n"
        "`core.claims.registry` (the rules are written next to each claim there, and a test re-derives every verdict "
        "the Tour shows from\n"
        "the raw tables), the same sentences the Tour shows.\n"
    )
    for step in steps:
        # each run is judged by its task's paper numbers: one paragraph per finding the paper states
        for paper in dict.fromkeys(per_run[r.name][step].paper for r in table_runs):
            print(f"**{step.replace('_', ' ')}.** Paper: {paper}\n")
            for r in table_runs:
                c = per_run[r.name][step]
                if c.paper != paper:
                    continue
                why = f" *Why: {c.reason.rstrip('.')}.*" if c.reason else ""
                print(f"- {r.label}: **{c.verdict}**. {c.measured}{why}")
            print()
    t = claim_training(table_runs)
    why = f" *Why: {t.reason.rstrip('.')}.*" if t.reason else ""
    print(f"**training.** Paper: {t.paper}\n\n- **{t.verdict}**. {t.measured}{why}")
    test_runs = [r for r in table_runs if r.split == "test"]
    if test_runs:
        first = next((r for r in test_runs if r.has(Table.MODULE_SPECTRA)), test_runs[0])
        o = claim_operations(operation_runs(test_runs, first), claims)
        why = f" *Why: {o.reason.rstrip('.')}.*" if o.reason else ""
        print(f"\n**operations** (one run of each task, named in the step's first words). Paper: {o.paper}\n\n"
              f"- **{o.verdict}**. {o.measured}{why}")


def causal_section(cache_dir: str, runs) -> None:
    """Step 3's causal test per run with weights: each module read against the whole stream's shift, per d."""
    readers = [run_of(cache_dir, r.name) for r in runs]
    readers = [r for r in readers if causal_test(r)]
    if not readers:
        return
    print("## Which module computes the last digit: the phase shift against the stream\n")
    print(
        "Each module's waves of periods 2, 2.5, 5 and 10 shifted by d numbers (the capped least-norm edit), the share "
        "of questions whose last digit moved by d, beside the whole residual stream's (the positive control) at the "
        f"same d. A d is read when the stream moves at least {STREAM_FLOOR:.0%} there; *of stream* is the module's "
        "share over the stream's, averaged over the read d, with its 95% interval resampling questions; a module "
        f"computes the last digit at >= {CAUSAL_SHARE:.0%} (lower end) with random edits of the same size at <= "
        f"{CONTROL_MAX:.0%} of the stream's that leave at least as many answers in place (`core.claims.last_digit`). "
        "*Edit size*: the median edit over the norm of the output it edits; *kept*: W_U's directions the capped "
        "edit keeps. Runs cached before the capped edit (their weights not here) are read by the earlier rule and "
        "say so. A deep run lists the stream and the modules its screen kept.\n"
    )
    for r in readers:
        s = shift_summary(r)
        if not (s["rule"] == "relative").all():
            print(f"**{r.label}**: read by the earlier rule (the share pooled over d, uncapped edit); its weights are "
                  "not here to read it again.\n")
            continue
        s = s[s["draws"] > 0] if (s["draws"] > 0).any() else s
        ds = sorted(int(c[len("share_d"):]) for c in s.columns if c.startswith("share_d"))
        stream = s[s["kind"] == "resid"].iloc[0]
        print(f"**{r.label}** ({int(stream['n'])} {r.split} questions; stream after layer {int(stream['layer'])}: "
              + ", ".join(f"d = {d} {stream[f'stream_d{d}']:.1%}" for d in ds) + "; d read: "
              + (stream["read_d"] or "none, so the test is not made: the edit has no hold on this model") + ")\n")
        print("| module | " + " | ".join(f"moved, d = {d}" for d in ds)
              + " | of stream (95%) | random edits, of stream | answers in place: shift / random | edit size | kept | "
              "misfit | computes the digit |")
        print("| --- " * (len(ds) + 8) + "|")
        for row in s.sort_values(["kind", "layer"]).itertuples():
            name = {"attn": "attention", "mlp": "MLP", "resid": "stream"}[row.kind] + f" {row.layer}"
            verdict = "yes" if row.causal else "no" if row.not_causal else "undecided"
            cells = [f"{getattr(row, f'share_d{d}'):.1%}" for d in ds]
            cells += [f"{row.read:.1%} ({row.read_low:.1%} to {row.read_high:.1%})",
                      f"{row.read_control:.1%} ± {row.control_relative_sd:.1%}" if row.draws > 1 else "–",
                      f"{row.stayed:.1%} / {row.control_stayed:.1%}" if row.draws else "–",
                      f"{row.edit_size:.2f}", f"{int(row.kept)} of {int(row.full_rank)}", f"{row.misfit:.1%}",
                      "positive control" if row.kind == "resid" else verdict]
            print(f"| {name} | " + " | ".join(cells) + " |")
        print()


def markdown_table(frame) -> None:
    """Print a table of text cells as markdown."""
    print("| " + " | ".join(map(str, frame.columns)) + " |")
    print("| --- " * len(frame.columns) + "|")
    for row in frame.itertuples(index=False):
        print("| " + " | ".join(str(v) for v in row) + " |")
    print()


def runs_with(cache_dir: str, runs, table: Table) -> list:
    """The readers of those `runs` that hold `table`."""
    return [r for r in (run_of(cache_dir, r.name) for r in runs) if r.has(table)]


def section_runs(cache_dir: str, runs, table: Table, heading: str | None, intro: str) -> list:
    """The readers of `runs` holding `table`, after printing the section's heading and intro when there are any and
    `heading` is given (None: a section set inside another, which has its own)."""
    readers = runs_with(cache_dir, runs, table)
    if readers and heading:
        print(f"## {heading}\n\n{intro}\n")
    return readers


def groups_section(cache_dir: str, runs, heading: bool = True) -> None:
    """Step 3's groups: every attention (or MLP) output of a group of layers shifted together, every question."""
    title = "Groups of modules shifted together" if heading else None
    readers = section_runs(cache_dir, runs, Table.GROUP_SHIFT, title,
                           "The paper's claim is about attention as a whole. Every attention output, and separately "
                           "every MLP output, of a group of layers shifted in one pass, each by its own capped edit, "
                           "over every question; read against the stream after the group's last layer by the same "
                           "rule as one module (`core.runs.group_shift`, `core.claims.last_digit.group_shift_table`).")
    for r in readers:
        print(f"**{r.label}** ({r.split} split)\n")
        markdown_table(group_shift_table(r))


def periods_section(cache_dir: str, runs, heading: bool = True) -> None:
    """Step 6's narrow test: only the paper's periods removed, against energy-matched random controls."""
    title = "Only the paper's periods removed" if heading else None
    readers = section_runs(cache_dir, runs, Table.PERIOD_ABLATION, title,
                           "Table 1 with power at any width: only the directions W_U reads at periods 2, 2.5, 5 and "
                           "10 (or a low or high slice of as many frequencies) removed from every layer's attention "
                           f"or MLP output, over every question, against {PERIOD_DRAWS} energy-matched random draws of "
                           "the same rank (`core.runs.period_ablation`, rule in `core.claims.periods`).")
    for r in readers:
        c = claim_periods(r)
        if c is None:  # a multiplication run: the paper's Table 1 is addition's, so no verdict
            print(f"**{r.label}** ({r.split} split): no verdict (the paper measured Table 1 on addition only)\n")
        else:
            why = f" *Why: {c.reason.rstrip('.')}.*" if c.reason else ""
            print(f"**{r.label}** ({r.split} split): **{c.verdict}**. {c.headline}{why}\n")
        markdown_table(period_table(r))


def trained_another_way_section(cache_dir: str, runs) -> None:
    """One pre-trained model fine-tuned two ways (core.claims.siblings): steps 3, 4 and 6 side by side, each cell that
    run's own verdict and headline."""
    readers, shown = [run_of(cache_dir, r.name) for r in runs], set()
    for run in readers:
        siblings = [r for r in training_siblings(run, readers) if r.name not in shown]
        if not siblings or run.name in shown:
            continue
        print("## Trained another way\n" if not shown else "", end="")
        shown.update(r.name for r in [run, *siblings])
        print("| step | " + " | ".join(f"{trained_part(r.manifest)} trained ({r.manifest['accuracy']:.2%} on {r.split})"
                                       for r in [run, *siblings]) + " |\n" + "| --- " * (len(siblings) + 2) + "|")
        for label, cells in sibling_rows(run, siblings, claims):
            print(f"| {label} | " + " | ".join(f"**{c.verdict}**: {c.short}" for c in cells) + " |")
        print()


def other_split_section(cache_dir: str, others, test_runs) -> None:
    """A run of another split beside its test twin (the same model): every verdict both hold, then its groups and
    its narrow test."""
    if not others:
        return
    print("## The same model on another split\n")
    print("A run of the validation split, of a model that also has a test run: the verdicts side by side, then the "
          "validation run's groups and narrow test (its tables are every question of that split).\n")
    for other in (run_of(cache_dir, r.name) for r in others):
        twin = next((run_of(cache_dir, r.name) for r in test_runs
                     if r.manifest.get("identity", {}).get("fingerprint")
                     == other.manifest.get("identity", {}).get("fingerprint")), None)
        if twin is None:
            continue
        mine, theirs = claims(other), claims(twin)
        print(f"**{other.label}**: {other.split} against test\n")
        print(f"| step | {other.split} | test |\n| --- | --- | --- |")
        for step in mine:
            print(f"| {step.replace('_', ' ')} | {mine[step].verdict} | {theirs[step].verdict} |")
        print()
        groups_section(cache_dir, [other], heading=False)
        periods_section(cache_dir, [other], heading=False)


def seeds_section(cache_dir: str, runs) -> None:
    """Each claim's verdict over the seeds of one recipe (core.claims.seeds): one table per recipe with seeds."""
    readers = [run_of(cache_dir, r.name) for r in runs]
    shipped = [r for r in readers if seed_of_manifest(r.manifest) is None and seed_siblings(r, readers)]
    if not shipped:
        return
    print("\n## Verdicts over seeds\n")
    print(
        "The same recipe trained again with other seeds (`python -m core train --recipe NAME --seed N`), each seed "
        "precomputed as its own run and judged by the same rules, which were committed before these seeds' tables "
        "were made. A verdict **holds** when every seed gives it, else it **flips** (`core.claims.seeds`).\n"
    )
    for r in shipped:
        siblings = seed_siblings(r, readers)
        spreads = {step: verdict_spread(step, siblings, claims) for step in registry.RUN_CLAIMS}
        names = list(next(iter(spreads.values())).verdicts)
        print(f"**{r.label}** ({len(siblings)} seeds)\n")
        print("| claim | " + " | ".join(names) + " | over seeds |")
        print("| --- | " + " | ".join("---" for _ in names) + " | --- |")
        for step, spread in spreads.items():
            cells = [spread.verdicts[n] for n in names]
            print(f"| {step.replace('_', ' ')} | " + " | ".join(cells) + f" | {'holds' if spread.holds else 'flips'} |")
        print()


if __name__ == "__main__":
    sys.exit(main())
