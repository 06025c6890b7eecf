"""Write docs/findings.md, whole, from the cached runs: what the shipped models reproduce of the paper, claim by claim.

    .venv/bin/python scripts/findings.py [--cache-dir cache] [--write]

Without --write the document is printed; with it, it replaces docs/findings.md. Every figure, module, lock and verdict
in it is read from the runs' tables (verdicts from `core.claims`, as the Tour shows them), recipes and manifests (runs
are found by what their manifest says the model is, never by folder name); the paper's figures come from `core.paper`.
The same cache gives the same bytes; tests/test_docs.py checks that the file in the repository is what the script
writes from the shipped runs. What no table records is told in docs/fine-tuning.md, which findings.md links to.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
import sys
import textwrap

import numpy as np

from core import paper
from core.analysis.kshot import generation_error_table
from core.analysis.phase import MAX_CONSTANT_PHASE, MIN_LOCKING, SHORT_PERIODS, favours_answer
from core.claims import registry
from core.claims.accuracy import chosen_on_validation, commonest_answer_of, shipped_epoch
from core.claims.features import MIN_ERRORS, claim_training
from core.claims.last_digit import groups_answer, groups_measured, module_locks
from core.claims.periods import claim_periods
from core.claims.seeds import seed_siblings, verdict_spread
from core.claims.shift_rule import CAUSAL_SHARE, causal_test, shift_summary
from core.claims.siblings import sibling_rows, training_siblings
from core.claims.successors import INTRO, successor_paragraphs
from core.files import PROJECT_ROOT
from core.runs import summaries, training_summaries
from core.runs.cache import list_runs
from core.runs.origin import frozen_waves, run_origin, seed_of_manifest, summary_of, trained_short
from core.runs.reader import RunReader, Table
from core.tasks import build_examples, select_split

FINDINGS = PROJECT_ROOT / "docs" / "findings.md"
HEADER = """# What reproduces and what does not

Written whole by `scripts/findings.py --write` from the runs in `cache/`: do not edit by hand, regenerate
(`.venv/bin/python scripts/findings.py --write`). Every figure, module and verdict here is read from the runs'
tables (a verdict is its rule's word as `core.claims` computes it and the Tour shows it: [verdicts.md](verdicts.md)),
the paper's figures from `core.paper`. The tables behind them are in [results.md](results.md); how the models were
made, and the facts no table records, are in [fine-tuning.md](fine-tuning.md).
"""
#: Prose is wrapped at this width, as in the hand-written docs; tables are not.
WIDTH = 115
WORDS = dict(enumerate("zero one two three four five six seven eight nine ten eleven twelve".split()))
MODULE = {"attn": "attention", "mlp": "MLP", "resid": "stream"}
MOD = {2.0: "parity", 2.5: "mod 2.5", 5.0: "mod 5", 10.0: "mod 10"}
SHORT_MAX = max(paper.OUTLIER_PERIODS)
#: The runs the page tells of, found by their manifests: (what the model is, task, tied embeddings or None to ignore).
WANTED = {"fourier": ("planted", "addition", True), "untied": ("planted", "addition", False),
          "smollm2": ("transplanted", "addition", None), "scratch": ("scratch", "addition", None),
          "mini": ("self-pretrained", "addition", None), "fine": ("fine-tuned", "addition", None),
          "llm": ("external", "addition", None), "mult": ("planted", "multiplication", None),
          "mult_scratch": ("scratch", "multiplication", None), "rp": ("planted", "reverse-polish", None),
          "rp_scratch": ("scratch", "reverse-polish", None)}


@functools.lru_cache(maxsize=None)
def run_of(cache_dir: str, name: str) -> RunReader:  # each run's tables read once for the whole document
    return RunReader(cache_dir, name)


claims = functools.lru_cache(maxsize=None)(registry.run_claims)  # each run's claims, computed once


verdict = lambda run, step: claims(run)[step].verdict  # noqa: E731 (the step's verdict word)

def say(text: str, gap: bool = False) -> None:
    """Print a paragraph or bullet wrapped at WIDTH, no line starting with "+ ", "- " or "* " (a list to markdown)."""
    text = re.sub(r" ([-+*=]) ", "\0\\1 ", text)
    print(textwrap.fill(text, WIDTH, subsequent_indent="  " if text.startswith("* ") else "",
                        break_long_words=False, break_on_hyphens=False).replace("\0", " "))
    print(end="\n" if gap else "")


pc = lambda x, digits=1: f"{100 * x:.{digits}f}%"  # noqa: E731 (a share as a percentage)

word = lambda n: WORDS.get(int(n), f"{int(n):,}")  # noqa: E731 (a count in words up to twelve)


def listed(items, last: str = "and") -> str:  # "a, b and c" ("a, b, c" with last=",")
    items = [str(i) for i in items]
    if last == "," or len(items) < 2:
        return ", ".join(items) or "none"
    return f"{', '.join(items[:-1])} {last} {items[-1]}"


def periods(values, last: str = "and") -> str:
    return listed([f"{float(t):.3g}" for t in values], last)


def name(kind: str, layer) -> str:
    return f"{MODULE[kind]} {int(layer)}"


def short(run: RunReader) -> str:  # the label without its bracket: "scratch", "Fourier-frozen, tied"
    return run.label.split(" (")[0]


recipe = lambda run: run_origin(run.manifest)["recipe"] or {}  # noqa: E731 (the run's recipe, or none)


def outliers(run: RunReader):
    spec = summaries.embedding_rows(run.table(Table.EMBEDDING_SPECTRUM), "paper", "input")
    return spec[spec["outlier"]].sort_values("magnitude", ascending=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache-dir", default=str(PROJECT_ROOT / "cache"))
    ap.add_argument("--write", action="store_true", help=f"write the document to {FINDINGS.relative_to(PROJECT_ROOT)}")
    args = ap.parse_args(argv)
    runs, readers = find_runs(args.cache_dir)
    if set(WANTED) - set(runs):
        print("no run for: " + ", ".join(f"{k} {WANTED[k]}" for k in sorted(set(WANTED) - set(runs))), file=sys.stderr)
        return 1
    with contextlib.redirect_stdout(buf := io.StringIO()):
        demo_section(runs, readers)
        two_layer_section(runs, readers)
        operations_section(runs, readers)
        fine_tuned_section(runs, readers)
        print("## Against the paper's successors\n")
        for paragraph in [INTRO, *successor_paragraphs(readers)]:
            say(paragraph, gap=True)
    text = HEADER + "\n" + buf.getvalue().strip() + "\n"
    if args.write:
        FINDINGS.write_text(text, encoding="utf-8")
        print(f"wrote {FINDINGS.relative_to(PROJECT_ROOT)}")
    else:
        print(text, end="")
    return 0


def find_runs(cache_dir: str) -> tuple[dict, list]:
    """The test split's runs of WANTED (the first shipped model of each kind), and every test run by display order."""
    readers = [run_of(cache_dir, r.name) for r in sorted((r for r in list_runs(cache_dir, deep=True)  # test split
                                                          if r.ok and r.manifest["task"].get("split") == "test"),
               key=lambda r: (r.manifest.get("display_order", 100), r.label))]
    return {key: match[0] for key, (kind, task, tied) in WANTED.items()
            if (match := [r for r in readers if seed_of_manifest(r.manifest) is None and r.task == task
                          and run_origin(r.manifest)["kind"] == kind and (key != "llm" or r.has(Table.GENERATIONS))
                          and tied in (None, (r.manifest.get("model") or {}).get("tied_embeddings"))])}, readers


def val_curves(run: RunReader) -> dict:
    curves = training_summaries.training_curves({run.label: run.table(Table.TRAINING_LOG)}, "val")
    return {int(w): g.sort_values("epoch").set_index("epoch") for w, g in curves.groupby("width")}


def what_differs(run: RunReader, runs: dict) -> str:
    kind, rec, p = run_origin(run.manifest)["kind"], recipe(run), run.p
    freeze, pre = rec.get("freeze") or {}, rec.get("pretrain") or {}
    if kind == "planted" and (run.manifest.get("model") or {}).get("tied_embeddings"):
        return (f"number rows 0..{p - 1} frozen to sinusoids of {frozen_waves(freeze)}; "
                "tied embeddings, so the output rows are the same frozen rows (the paper's GPT-2 set-up)")
    if kind == "planted":
        return "the same frozen input rows, but a separate output matrix learned from random init"
    if kind == "transplanted":
        return (f"number rows 0..{p - 1} frozen to a real pre-trained LLM's representations of the numbers: "
                f"{short(runs['llm'])}'s hidden state at the last digit of "
                f"\"{freeze.get('context', '?').replace('{n}', 'n')}\" after block {freeze.get('layer')}"
                + (" (where probes read n mod 2, 5, 10, 100 best)" if freeze.get("layer") == summaries.best_probe_layer(
                    runs["llm"].table(Table.NUMBER_PROBES)) else "")
                + f", centred, unit rows, mapped into {run.width} dimensions by a fixed seeded isometry; tied (needs "
                "the imported SmolLM2, see [fine-tuning.md](fine-tuning.md))")
    if kind == "self-pretrained":
        return (f"pre-trained first with the next-token loss on {pre.get('n_sequences', 0):,} texts about numbers "
                "with no addition in them (counting, spelling numbers into digits, comparisons), "
                f"{word(pre.get('epochs', 1))} passes, then fine-tuned on addition with every embedding trainable")
    return "random init, every embedding learned"


def demo_section(runs: dict, readers: list) -> None:
    demos = [r for r in readers if seed_of_manifest(r.manifest) is None and r.task == "addition"
             and run_origin(r.manifest)["kind"] in ("planted", "transplanted", "scratch", "self-pretrained")]
    rec, ships = recipe(runs["fourier"]), "[what ships](fine-tuning.md#what-ships-of-the-demo-models)"
    print("## The demo models\n")
    say(f"{word(len(demos)).capitalize()} GPT-2-style models, each {rec['n_layers']} layers, {rec['width']} wide "
        f"({rec['heads']} heads, MLP {rec['mlp_ratio']:g}x), trained here on the paper's addition data (operands "
        f"0..{rec['max_operand']}, answers 0..{runs['fourier'].p - 1} as single tokens of a word-level tokenizer), "
        f"loss on the answer token only, {rec['epochs']} epochs, AdamW lr {rec['lr']:g}, batch {rec['batch_size']}, "
        f"{rec['precision']} autocast on the CPU. Recipes are in `recipes/`.", gap=True)
    print("| recipe | what differs | shipped |\n| --- | --- | --- |")
    studies, seeded, gpu_seconds = {}, {}, []
    for r in demos:
        siblings, log = seed_siblings(r, readers), r.table(Table.TRAINING_LOG)
        whole = causal_test(r) and (r.manifest.get("phase_locking") or {}).get("whole_split", True)
        seeds = listed(seed_of_manifest(s.manifest) for s in siblings[1:])
        print(f"| `{recipe(r).get('name')}` | {what_differs(r, runs)} | " + ("weights, run, log" if whole else
              f"run and log (weights not shipped, the recipe rebuilds them: {ships})")
              + (f"; seeds {seeds} as runs and logs" if siblings else "") + " |")
        for w, g in log[log["width"] != r.width].groupby("width"):
            studies.setdefault(int(w), []).append((recipe(r).get("name"), g["seed"].nunique()))
        seeded.update({recipe(r).get("name"): len(siblings)} if siblings else {})
        gpu_seconds += [float(log[(log["width"] == r.width) & (log["seed"] == seed_of_manifest(s.manifest))]
                              ["seconds"].max()) for s in siblings if recipe(s).get("device") == "cuda"]
    print()
    gpu = (f"; the others trained on a GPU, `--device cuda`, in {min(gpu_seconds):.0f} to {max(gpu_seconds):.0f} s "
           "each by their training logs" if gpu_seconds else "")
    say("Seeds: " + " ".join(f"a seed study at width {w} ({listed(sorted({n for _, n in rows}))} seeds each of "
                             f"{listed(f'`{n}`' for n, _ in rows)}, same recipe otherwise; `python -m core train "
                             f"--recipe NAME --width {w} --seed N`) gives the spread of the paper's figure 7b."
                             for w, rows in sorted(studies.items()))
        + f" At width {runs['fourier'].width}, {listed(f'`{n}`' for n in seeded)} have "
        f"{listed(sorted(set(seeded.values())))} seeds each (the shipped weights are seed {rec.get('seed', 0)}'s"
        f"{gpu}), each seed a run of its own in `cache/` ({ships}) judged by the same rules, and every verdict on "
        "them says whether it holds over the seeds ([verdicts.md](verdicts.md#verdicts-over-seeds)). The other models "
        "of that width are one seed each. All of it is on the *Training* page.", gap=True)


def seed_name(run: RunReader) -> str:
    return "the shipped model" if seed_of_manifest(run.manifest) is None else f"seed {seed_of_manifest(run.manifest)}"


def spread_line(run: RunReader, readers: list, step: str) -> str:
    siblings = seed_siblings(run, readers)
    if not siblings or verdict_spread(step, siblings, claims).holds:
        return verdict(run, step) + (f" in all {word(len(siblings))} seeds" if siblings else "")
    by = {v: [seed_name(s) for s in siblings if verdict(s, step) == v] for v in (verdict(s, step) for s in siblings)}
    return "flips over its seeds: " + ", ".join(f"{v} in {listed(names)}" for v, names in by.items())


def lock_text(run: RunReader) -> str:  # modules that lock (core.analysis.phase.locked); waves troughing on the answer
    locks = module_locks(run)
    said = [f"{name(kind, layer)} tracks the answer {listed(MOD[float(t)] for t in g['period'])} "
            f"(R = {', '.join(f'{x:.2f}' for x in g['locking'])})"
            for (kind, layer), g in locks.groupby(["kind", "layer"], sort=False)
            for g in [g.sort_values("period", ascending=False)]]
    if not said:
        return "no module tracks a short period beyond chance"
    t = run.table(Table.PHASE_LOCKING)
    t = t[t["kind"].isin(["attn", "mlp"]) & t["period"].isin(SHORT_PERIODS)]
    trough = t[(t["locking"] > t["null_95"]) & (t["locking"] >= MIN_LOCKING)
               & (t["constant_phase"] < MAX_CONSTANT_PHASE) & ~favours_answer(t)]
    said += [f"{name(r.kind, r.layer)}'s {MOD[float(r.period)]} wave is strong (R = {r.locking:.2f}) but its trough "
             f"sits on the answer (offset {r.offset:.1f} of {r.period:g}), so it pushes the answer's residue down and "
             "the lock rule does not count it" for r in trough.itertuples()]
    return "; ".join(said)


def shift_modules(run: RunReader):  # step 3 (`shift_summary`): the stream's row, the modules' rows strongest first
    s = shift_summary(run)
    return s[s["kind"] == "resid"].iloc[0], s[s["kind"].isin(["attn", "mlp"])].sort_values("read", ascending=False)


def stream_text(run: RunReader, most: bool = False):
    stream = shift_modules(run)[0]
    ds = sorted(int(c[len("stream_d"):]) for c in stream.index if c.startswith("stream_d"))
    if most:
        return max(float(stream[f"stream_d{d}"]) for d in ds)
    return " / ".join(f"{100 * stream[f'stream_d{d}']:.1f}" for d in ds) + f"% at d = {' / '.join(map(str, ds))}"


def causal_text(run: RunReader, readers: list) -> tuple[str, list]:  # step 3 over seeds; (module, attention) each
    siblings = seed_siblings(run, readers) or [run]
    mods = [shift_modules(s)[1] for s in siblings]
    tops, attn = [m.iloc[0] for m in mods], [m[m["kind"] == "attn"].iloc[0] for m in mods]
    flips, same = len({verdict(s, "module_waves") for s in siblings}) > 1, len({(t.kind, t.layer) for t in tops}) == 1
    said = [("" if same else name(t["kind"], t["layer"]) + " ") + f"{pc(t['read'])} ({pc(t['read_low'])} to "
            f"{pc(t['read_high'])}) in {seed_name(s)}" + (f", **{verdict(s, 'module_waves')}**" if flips else "")
            for s, t in zip(siblings, tops)]
    text = (f"in {short(run)} (the stream's own shift moves the last digit for {stream_text(run)} in the shipped "
            "model) " + (f"{name(tops[0]['kind'], tops[0]['layer'])}" if same else "the strongest module") + " reaches "
            + f"{'; '.join(said) if flips else listed(said)} of the stream's, random edits of the same size at most "
            f"{pc(max(m['read_control'].max() for m in mods))}, and the strongest attention layer"
            + (f", {name(attn[0]['kind'], attn[0]['layer'])}, " if len({(a.kind, a.layer) for a in attn}) == 1 else " ")
            + listed(pc(a["read"]) for a in attn) + ("" if flips else f" (**{verdict(run, 'module_waves')}**)"))
    return text, [(name(t["kind"], t["layer"]), a["read"]) for t, a in zip(tops, attn)]


def two_layer_section(runs: dict, readers: list) -> None:
    ff, sm, sc, mini, un = (runs[k] for k in ("fourier", "smollm2", "scratch", "mini", "untied"))
    print("## The 2-layer models\n")
    say("In short, what these 2-layer models reproduce of the paper and what they do not:", gap=True)
    width, planted, training = ff.width, claim_training([ff, sc]), claim_training(readers)
    ffc, scc, smc = val_curves(ff), val_curves(sc), val_curves(sm)
    lo, hi = min(c["low"].iloc[-1] for c in ffc.values()), max(c["high"].iloc[-1] for c in ffc.values())
    say(f"* **Fourier features make addition easy to learn (with planted features: {planted.verdict}).** Same network, "
        f"same budget: {pc(lo) if lo == hi else pc(lo) + ' to ' + pc(hi)} in every seed with the number embeddings "
        "frozen to sinusoids ("
        + ", ".join(f"{int(c['seeds'].iloc[-1])} seeds at width {w}" for w, c in sorted(ffc.items()))
        + f") against {pc(scc[width]['mean'].iloc[-1])} from scratch at width {width}"
        + "".join(f" and {pc(c['mean'].iloc[-1])} ({pc(c['low'].iloc[-1])} to {pc(c['high'].iloc[-1])}) at width {w}"
                  for w, c in sorted(scc.items()) if w != width)
        + f". The paper's GPT-2-small: {paper.ACCURACY['GPT-2-small, frozen pre-trained embeddings']:g}% vs "
        f"{paper.ACCURACY['GPT-2-small from scratch']}%, but with GPT-2's *pre-trained* embeddings: ours were "
        f"planted, so the training rule says **{planted.verdict}** for them ({planted.reason}).")
    curve, emb = smc[sm.width], claims(sm)["embeddings"].numbers
    steady = next(e for e in curve.index if (curve.loc[e:, "low"] >= 0.9).all())
    say(f"* **Pre-trained features make addition easy to learn (the training claim, with a real LLM's features: "
        f"{training.verdict}).** The same network with its number rows frozen to {short(runs['llm'])}'s own "
        f"representations of the numbers (after block {(recipe(sm).get('freeze') or {}).get('layer')}, mapped by a "
        f"fixed isometry; `{recipe(sm).get('name')}`) reaches {pc(curve['mean'].iloc[-1])} validation accuracy after "
        f"{curve.index[-1]} epochs ({int(curve['seeds'].iloc[-1])} seeds, {pc(curve['low'].iloc[-1], 2)} to "
        f"{pc(curve['high'].iloc[-1], 2)}) against scratch's {pc(scc[width]['mean'].iloc[-1])}; it is above 90% from "
        f"epoch {steady} on in every seed ({pc(curve.loc[steady, 'low'])} to {pc(curve.loc[steady, 'high'])}). It "
        f"learns more slowly than with the planted sinusoids ({pc(curve['mean'].iloc[0])} mean after epoch 1 against "
        f"{pc(ffc[width]['mean'].iloc[0])}): SmolLM2's rows carry periods {periods(sorted(emb['spikes'])[::-1])} "
        f"but also many other frequencies ({emb['outliers']} outliers of {sm.basis().k_max}), so the rows are less "
        f"clean than {word(len((recipe(ff).get('freeze') or {}).get('periods', [])))} chosen sinusoids. This is the "
        "paper's GPT-2-small experiment with features that a model learned from text rather than features we "
        "chose; the step 8 verdict of the Tour uses it.")
    plain = [sc, mini, un]
    ea = {r.name: r.table(Table.ERROR_ANALYSIS).iloc[0] for r in plain}
    say("* **Errors of the models without Fourier features are off by one or two** (behaviour: "
        + " / ".join(sorted({f"**{verdict(r, 'behaviour')}**" for r in plain})) + "), as the paper reports for "
        "GPT-2-XL trained from scratch: "
        + ", ".join(f"{pc(ea[r.name]['share_within_2'], 0)} ({short(r)})" for r in plain) + " of the wrong answers; "
        f"at most {pc(max(ea[r.name]['share_multiple_of_10'] for r in plain))} of them are off by a multiple of 10.")
    out = outliers(sc)
    planted_runs = [r for r in readers if run_origin(r.manifest)["kind"] == "planted" and r.task == "addition"]
    counts = {claims(r)["embeddings"].numbers["outliers"] for r in planted_runs}
    planted_p = (recipe(ff).get("freeze") or {}).get("periods", [])
    say(f"* **Embedding spectra against a null model (scratch: {verdict(sc, 'embeddings')}).** With the family-wise "
        f"threshold, the scratch model's number embeddings have {len(out)} outlying frequencies, "
        + ("all long periods" if out["period"].min() > SHORT_MAX else f"the shortest at {out['period'].min():.3g}")
        + f" ({periods(out['period'][:6], ',')}): the smooth order of the numbers, and "
        f"{'some' if claims(sc)['embeddings'].numbers['spikes'] else 'none'} at 2, 2.5, 5 or 10, as the paper "
        f"reports for its from-scratch model. The {word(len(planted_runs))} Fourier-frozen runs show "
        + (f"{counts.pop()} outliers each, as many as the {word(len(planted_p))} planted periods: those and nothing "
           "else." if counts == {len(planted_p)} else f"{listed(sorted(counts))} outliers, {len(planted_p)} planted."))
    (ff_text, ff_rows), (sm_text, sm_rows) = causal_text(ff, readers), causal_text(sm, readers)
    quiet = {lock_text(sc), lock_text(mini)}
    say(f"* **Which module computes the last digit, by the phase shift against the whole stream (Fourier-frozen: "
        f"{spread_line(ff, readers, 'module_waves')}; SmolLM2-frozen: {spread_line(sm, readers, 'module_waves')}).** "
        "Shifting one module's waves of periods 2, 2.5, 5 and 10 by d numbers, read as a share of what shifting the "
        "whole residual stream after the last layer does at the same d (a module computes the last digit at "
        f"{pc(CAUSAL_SHARE, 0)} of the stream's or more, lower end of its interval; "
        f"[verdicts.md](verdicts.md#the-causal-rule-read-against-the-stream-step-3)): {ff_text}. And {sm_text}. "
        + (f"In every seed of both recipes the module that does most is an MLP, and no attention layer reaches more "
           f"than {pc(max(a for _, a in ff_rows + sm_rows))} of the stream's: the reverse of the paper's split. "
           if all(t.startswith("MLP") for t, _ in ff_rows + sm_rows) else "")
        + f"Phase locking, the correlational reading over all {int(ff.table(Table.PHASE_LOCKING)['n'].iloc[0]):,} "
        f"test questions ([the lock rule](verdicts.md)): in the Fourier-frozen model {lock_text(ff)}. In "
        f"SmolLM2-frozen {lock_text(sm)}. In the scratch and pre-trained-mini models "
        + (quiet.pop() if len(quiet) == 1 else f"{lock_text(sc)} and {lock_text(mini)} respectively")
        + ", and shifting the whole stream moves the last digit for at most "
        f"{pc(max(stream_text(r, True) for r in (sc, mini)))} at any d, so the causal test is not made "
        f"(**{verdict(sc, 'module_waves')}**).")
    ablation_bullets(runs, readers)
    features_bullets(runs)


def control(n: dict, key: str) -> str:
    sd = n["control_sd"].get(key)
    return pc(n["control"][key]) + (f" ± {100 * sd:.1f}" if sd is not None and sd == sd else "")


def ablation_bullets(runs: dict, readers: list) -> None:
    ff, sm, un = runs["fourier"], runs["smollm2"], runs["untied"]
    n, m = claims(ff)["ablations"].numbers, claims(sm)["ablations"].numbers
    keys = ["mlp-low", "attn-high", "attn-low", "mlp-high"]
    within = sum(abs(n["accuracy"][k] - n["control"][k]) < max(0.1, 2 * n["control_sd"][k]) for k in keys)
    ab = sm.table(Table.ABLATIONS)
    rank = int(ab[(ab["modules"] == "mlp") & (ab["removed"] == "high") & (ab["tau"] == m["tau"])]["rank"].iloc[0])
    say(f"* **Division of labour, Table 1 at tau = {n['tau']} (Fourier-frozen: {spread_line(ff, readers, 'ablations')}"
        f"; SmolLM2-frozen: {spread_line(sm, readers, 'ablations')}).** In GPT-2-XL, MLPs carry the low frequencies "
        "and attention the high ones. In the 2-layer Fourier-frozen model "
        + ("every band matters to both modules" if max(n["accuracy"].values()) < 0.9 * n["base"] else "not every band "
           "matters") + ", and the "
        "random-subspace controls (as many random W_U-visible directions, tilted to take away as much of the modules' "
        f"output energy as the band does) show how little of it is specific to the frequencies. "
        f"{claims(ff)['ablations'].measured} "
        + ("All four" if within == 4 else word(within).capitalize() + " of the four") + " cells are within max(10 "
        "points, 2 sd) of their control: with two layers, each module has to do both jobs. In SmolLM2-frozen the low "
        "band matters far more than random directions of the same rank and energy (MLP low "
        f"removed {pc(m['accuracy']['mlp-low'])}, control {control(m, 'mlp-low')}; attention low removed "
        f"{pc(m['accuracy']['attn-low'])}, control {control(m, 'attn-low')}, "
        f"{100 * (m['control']['attn-low'] - m['accuracy']['attn-low']):.1f} points below): attention needs the low "
        "band the paper finds harmless, evidence against (the MLPs' test has no power there: as many random "
        f"directions as their high band's {rank} already break the model, {control(m, 'mlp-high')}).")
    say(f"* **Sparse module spectra are mostly the unembedding's (spectra: {verdict(ff, 'spectra')}).** W_U's number "
        f"rows have rank {ff.unembedding_rank} in the tied Fourier-frozen model, so every vector read through it has a "
        f"sparse spectrum. {claims(ff)['spectra'].measured}")
    errors = ff.table(Table.ABLATION_ERRORS)
    errors = errors[(errors["modules"] == "mlp") & (errors["removed"] == "low") & (errors["tau"] == n["tau"])]
    common = errors.assign(size=errors["error"].abs()).groupby("size")["count"].sum().sort_values(ascending=False)
    say(f"* **Errors under the MLP low-pass ablation are multiples of 10** ({pc(n['error_shape']['mlp_low_mult10'], 0)}"
        f", the commonest off by {listed(f'±{int(e)}' for e in common.index[:2])}), as in the paper's Table 1 "
        "discussion: the last digit survives, the magnitude does not.")
    parity = {r.name: float(k[k["keep_period"] == 2]["parity_match"].iloc[0])
              for r in (ff, un) for k in [summaries.keep_one_results(r.table(Table.ABLATIONS))]}
    say(f"* **Keep-one-frequency**: keeping only period 2 in every module output gives the right parity "
        f"{pc(parity[ff.name])} of the time in the Fourier-frozen model and {pc(parity[un.name])} in the untied "
        f"control (paper: {paper.PARITY_KEEP_PERIOD_2}%)"
        + (": in these models the period-2 component alone does not carry the parity." if max(parity.values()) < 0.9
           else "."))


def features_bullets(runs: dict) -> None:
    llm, mini, sc = runs["llm"], runs["mini"], runs["scratch"]
    ns, pr = llm.table(Table.NUMBER_SPECTRUM), llm.table(Table.NUMBER_PROBES)
    layers = sorted(int(x) for x in ns["layer"].unique())
    per = {L: summaries.number_summary(ns, pr, L, "paper") for L in layers}
    every = [L for L in layers if len(per[L]["short_periods"]) == len(paper.OUTLIER_PERIODS)]
    longs = {L: [t for t in per[L]["outlier_periods"] if t > SHORT_MAX] for L in layers}
    kap = lambda mod: [per[L]["kappa"][mod] for L in layers]  # noqa: E731
    best, ctrl = summaries.best_probe_layer(pr), max(max(kap(3)), max(kap(7)))
    shots = {int(s.split("-")[0]): row for s, row in
             generation_error_table(llm.table(Table.GENERATIONS)).set_index("source").iterrows()}
    say(f"* **Where do the features come from? A real pre-trained model (numbers: {verdict(llm, 'numbers')}).** "
        f"{short(llm)}, which learned from text, represents the numbers with outliers at periods "
        f"{periods(sorted(paper.OUTLIER_PERIODS, reverse=True))} " + ("at every layer" if every == layers else
                                                                     f"at {len(every)} of its {len(layers)} layers")
        + f" (plus long periods from layer {next(L for L in layers if longs[L])} on, the strongest at the top "
        f"{periods(longs[layers[-1]][:3])}), and linear probes read n mod 2, 5 and 10 from every layer with kappa "
        f"{min(min(kap(m)) for m in (2, 5, 10)):.2f} to {max(max(kap(m)) for m in (2, 5, 10)):.2f} on numbers they "
        f"never saw; n mod 100 reads {kap(100)[0]:.2f} at the embedding, best after block {best} "
        f"({per[best]['kappa'][100]:.2f}), and fades towards the top ({kap(100)[-1]:.2f}). The controls n mod 3 and 7 "
        + ("stay below 0" if ctrl < 0 else f"reach {ctrl:.2f}") + f". Caveat, the rule's reason for "
        f"\"{verdict(llm, 'numbers')}\": {claims(llm)['numbers'].reason}; the later layers are the model's own work. "
        "Asked the paper's questions it writes "
        + " and ".join(f"{pc(row['accuracy'])} ({k}-shot)" for k, row in sorted(shots.items()))
        + f" of {int(shots[max(shots)]['n']):,} answers right; {pc(shots[max(shots)]['share_multiple_of_10'], 0)} of "
        f"its wrong {max(shots)}-shot answers are off by a multiple of 10 (behaviour: **{verdict(llm, 'behaviour')}**; "
        f"paper: GPT-J {paper.MULTIPLE_OF_10['GPT-J 4-shot']}%, Phi-2 {paper.MULTIPLE_OF_10['Phi-2 4-shot']}%).")
    pre, out = recipe(mini).get("pretrain") or {}, outliers(mini)
    say(f"* **Where do the features come from? The pre-trained mini (embeddings: {verdict(mini, 'embeddings')}).** "
        f"Pre-training on {pre.get('n_sequences', 0):,} texts of counting, spelling numbers into digits and "
        f"comparisons ({word(pre.get('epochs', 1))} passes), then fine-tuning, gives {pc(mini.manifest['accuracy'])} "
        f"on test against scratch's {pc(sc.manifest['accuracy'])}, and its number embeddings have {len(out)} outlying "
        "frequencies, " + ("all long periods " if out["period"].min() > SHORT_MAX else "")
        + f"({periods(out['period'][:6], ',')}), "
        + ("some" if claims(mini)["embeddings"].numbers["spikes"] else "none") + " at 2, 2.5, 5 or 10. At this "
        "scale and with this corpus, pre-training did not produce the features that the paper finds in GPT-2, Phi-2 "
        "and RoBERTa: an honest negative result.", gap=True)


def log_epoch(run: RunReader) -> tuple[int, int, dict]:
    log = run.table(Table.TRAINING_LOG)
    log = log[(log["seed"] == recipe(run).get("seed", 0)) & (log["width"] == run.width)]
    epoch = shipped_epoch(log, recipe(run))
    return epoch, int(log["epoch"].max()), log[log["epoch"] == epoch].set_index("split")["accuracy"].to_dict()


def operations_section(runs: dict, readers: list) -> None:
    mult, ms, rp, rs, ff = (runs[k] for k in ("mult", "mult_scratch", "rp", "rp_scratch", "fourier"))
    rec, new = recipe(mult), paper.paper_findings("multiplication").new_periods
    examples = build_examples("multiplication", rec["max_operand"], rec.get("dataset_seed", 0))
    sizes = {s: len(select_split(examples, s)) for s in ("train", "val", "test")}
    n_mult = sum(r.task == mult.task and seed_of_manifest(r.manifest) is None for r in readers)
    print("## The other operations: multiplication (and the reverse-Polish format)\n")
    say(f"The paper's appendix repeats its analysis on multiplication (fine-tuned GPT-2-XL: "
        f"{paper.MULTIPLICATION_ACCURACY_VAL}% on validation; module logits with outliers at periods "
        f"{periods(paper.MULTIPLICATION_OUTLIER_PERIODS)}, where {periods(new)} is new) and on addition written "
        f"\"15,93+\". {word(n_mult).capitalize()} multiplication models are shipped, the same {mult.n_layers}-layer, "
        f"{mult.width}-wide network as the addition demos, from `recipes/multiplication-*.json`: operands a <= b in "
        f"0..{rec['max_operand']} with a * b <= {mult.p - 1}, so every product is one of the run's single number "
        f"tokens ({len(examples):,} questions: {sizes['train']:,} train, {sizes['val']:,} validation, "
        f"{sizes['test']:,} test; the paper does not say how it chose its operands). {rec['epochs']} epochs, and the "
        "epoch with the best validation accuracy ships (`select: \"val\"`); the test split is scored once, on it. A "
        "multiplication run is judged by the paper's multiplication numbers only: the steps the paper never measured "
        "on it say so (\"Can't tell here\", [verdicts.md](verdicts.md)). The reverse-Polish runs (the addition "
        f"demos' network and {recipe(rp)['epochs']}-epoch budget on the pairs written \"15,93+\", chosen on validation "
        "too) sit beside them; the Tour's step 9 sets one run of each operation side by side.", gap=True)
    acc, ep = {r.name: claims(r)["accuracy"].numbers for r in (mult, ms)}, {r.name: log_epoch(r) for r in (mult, ms)}
    (zero, val_share), test_share = commonest_answer_of(ms, "val"), commonest_answer_of(ms, "test")[1]
    train_ms = ep[ms.name][2].get("train")
    say(f"* **Accuracy: Fourier-frozen {verdict(mult, 'accuracy')}, scratch {verdict(ms, 'accuracy')}** (the verdict "
        "reads the test split, since validation chose the epoch). With the number rows frozen to the addition demos' "
        f"sinusoids (periods {periods((rec.get('freeze') or {}).get('periods', []), ',')}; {periods(new)} is not "
        f"planted), the model answers {pc(acc[mult.name]['validation_accuracy'])} of the validation questions (epoch "
        f"{ep[mult.name][0]} of {ep[mult.name][1]}) and {pc(acc[mult.name]['accuracy'])} of the {sizes['test']} test "
        f"questions; the paper's GPT-2-XL: {paper.MULTIPLICATION_ACCURACY_VAL}% on validation. From scratch: "
        f"{pc(acc[ms.name]['validation_accuracy'])} on validation (epoch {ep[ms.name][0]}), "
        f"{pc(acc[ms.name]['accuracy'])} on test. Always answering {zero} (the answer of every question with an "
        f"operand {zero}, {sum(zero in (e.a, e.b) for e in examples)} of the {len(examples):,}) scores "
        f"{pc(val_share)} of the validation and {pc(test_share)} of the test questions: the scratch model is "
        + ("no better than that on test" if acc[ms.name]["accuracy"] <= test_share else "above that on test")
        + (f", and it memorises the training split ({pc(train_ms)} of it right at that epoch)." if train_ms else "."))
    sp = {r.name: claims(r)["spectra"].numbers for r in (mult, ms)}
    tops, above = sp[ms.name]["top_periods"]["mlp"][:4], sp[mult.name]["above_baseline"]
    say(f"* **Period {periods(new)}: cannot appear in the Fourier-frozen run ({verdict(mult, 'spectra')}), not "
        f"carried by the scratch run ({verdict(ms, 'spectra')}).** The Fourier-frozen model's output rows are the "
        f"planted sinusoids (tied), so every logit is a sum of those {word(len(rec['freeze']['periods']))} periods and "
        f"{periods(new)} can be neither found nor missed; of the paper's periods its modules carry "
        f"{periods(sp[mult.name]['found']) if sp[mult.name]['found'] else 'none'} above the bar of what W_U gives "
        f"random vectors (its MLP: {periods(above['mlp']) or 'nothing'}). The scratch model's module logits carry "
        f"{periods(sp[ms.name]['found']) if sp[ms.name]['found'] else 'none'} of the paper's "
        f"{word(len(paper.MULTIPLICATION_OUTLIER_PERIODS))} above that bar; their strongest periods are "
        f"{periods(tops)}" + (f", not {periods(new)}." if not any(abs(t - new[0]) < 1e-3 for t in tops) else "."))
    mods, add = shift_modules(mult)[1], shift_modules(ff)[1].iloc[0]
    strong = mods[mods["read"] >= 0.1]
    say(f"* **The same waves carry the last digit, less sharply ({verdict(mult, 'module_waves')}: the paper has no "
        "such test for multiplication).** Shifting the short waves (periods 2, 2.5, 5, 10) of one module of the "
        "Fourier-frozen multiplication model by d numbers moves the product's last digit by d, as a share of what "
        "shifting the whole stream does, for " + listed(f"{pc(r.read)} in {name(r.kind, r.layer)}"
                                                        for r in strong.itertuples())
        + f" (random edits of the same size: at most {pc(mods['read_control'].max())}); in the addition model "
        f"{name(add['kind'], add['layer'])} alone reaches {pc(add['read'])}. "
        + (f"{word(len(strong)).capitalize()} modules share the job in multiplication. " if len(strong) > 1 else "")
        + "In the scratch model the stream's own shift moves the last digit for at most "
        f"{pc(stream_text(ms, True))} at any d, so the test is not made (**{verdict(ms, 'module_waves')}**).")
    say(f"* **Errors are multiples of 10 ({verdict(mult, 'behaviour')}).** Fourier-frozen multiplication: "
        f"{claims(mult)['behaviour'].measured} The last digit is right and the size is off, the paper's pattern for "
        "prompted LLMs on addition; the paper reports no such count for multiplication, so it carries no verdict.")
    (rp_e, rp_last, rp_acc), (rs_e, _, rs_acc), rmods = log_epoch(rp), log_epoch(rs), shift_modules(rp)[1]
    ea = rs.table(Table.ERROR_ANALYSIS).iloc[0]
    tens = "none" if ea["share_multiple_of_10"] == 0 else pc(ea["share_multiple_of_10"])
    say(f"* **Reverse-Polish: the same mechanism as addition in words ({verdict(rp, 'module_waves')}).** Written "
        f"\"15,93+\", the Fourier-frozen model answers {pc(rp.manifest['accuracy'])} of the {rp.n_examples:,} test "
        f"questions (accuracy **{verdict(rp, 'accuracy')}**; validation {pc(rp_acc['val'])} at epoch {rp_e} of "
        f"{rp_last}; test scored once), and shifting {name(rmods.iloc[0]['kind'], rmods.iloc[0]['layer'])}'s short "
        f"waves moves the last digit {pc(rmods.iloc[0]['read'])} as often as shifting the whole stream does (any other "
        f"module {pc(rmods.iloc[1]['read'])} at most, random edits {pc(rmods['read_control'].max())}): the addition "
        f"model's split ({name(add['kind'], add['layer'])}: {pc(add['read'])}), with the prompt's words gone. From "
        f"scratch it reaches {pc(rs_acc['val'])} on validation (epoch {rs_e}) and {pc(rs.manifest['accuracy'])} on "
        f"test (**{verdict(rs, 'accuracy')}**); {tens} of its {int(ea['n_wrong']):,} wrong answers "
        f"{'is' if tens == 'none' else 'are'} off by a multiple of 10 and {pc(ea['share_within_2'])} are within 2, "
        f"the paper's from-scratch pattern, and the stream's own shift moves its last digit for at most "
        f"{pc(stream_text(rs, True))} at any d, so which module computes it is not read "
        f"(**{verdict(rs, 'module_waves')}**).")
    pairs = sorted(((abs(logged - r.manifest["accuracy"]), r, logged)
                    for r in (ff, runs["scratch"], runs["untied"], runs["mini"], mult, ms, rp, rs)
                    if (logged := log_epoch(r)[2].get("test")) is not None), key=lambda x: -x[0])
    say(f"* **Two figures per accuracy.** A training log scores the float32 master weights under "
        f"{recipe(ff)['precision']} autocast; a run scores the shipped {recipe(ff)['save_dtype']} weights in float32. "
        f"On a model with many near-ties they differ by up to {100 * pairs[0][0]:.1f} points (" + "; ".join(
            f"{short(r)}: {pc(x, 2)} in its log, {pc(r.manifest['accuracy'], 2)} in its run" for _, r, x in pairs[:3])
        + "); the Training page shows the log's, every other page the run's.", gap=True)


def fine_tuned_section(runs: dict, readers: list) -> None:
    ft, llm = runs["fine"], runs["llm"]
    rec, summary, c = recipe(ft), summary_of(ft.manifest.get("model") or {}), claims(ft)
    assert not ft.manifest.get("design"), f"{ft.name} reads a sample: precompute it with --every-question first"
    spec = rec.get("number_tokens") or {}
    frozen, L = int(spec.get("frozen_blocks") or 0), ft.n_layers
    print("## The fine-tuned real LLM\n")
    say(f"In short, what the real {L}-layer model fine-tuned here ({short(llm)} with number tokens, "
        f"`{rec.get('name')}`: its lower {frozen} blocks kept as pre-training left them, its number rows and its top "
        f"{L - frozen} blocks trained for {summary.get('epochs_run')} epochs in one run, on "
        f"{str(summary.get('device', 'the CPU')).split(' (')[0]}) reproduces of the paper, claim by claim. Its weights "
        f"are rebuilt from the shipped delta, so every condition of its grid, phase shift and patching reads all "
        f"{ft.n_examples:,} test questions. The models it replaced, and how validation chose it, are in "
        "[fine-tuning.md](fine-tuning.md).", gap=True)
    ex = ft.table(Table.EXAMPLES).query("split == @ft.split")
    wrong = ex[~ex["correct"]]
    by = ", ".join(f"{lo} to {hi}: {pc(ex[ex['answer'].between(lo, hi)]['correct'].mean())}"
                   for lo, hi in [(0, 100), (101, 200), (201, 400), (401, ft.p - 1)])
    say(f"* **Accuracy: {verdict(ft, 'accuracy')} ({pc(c['accuracy'].numbers['accuracy'], 2)} on the test split, "
        f"which did not choose it; the paper's fine-tuned GPT-2-XL: {paper.ACCURACY['GPT-2-XL fine-tuned']}%).** "
        f"{chosen_on_validation(rec).capitalize()} ({pc(summary['rebuilt_val_accuracy_float32'], 2)} rebuilt); the "
        f"test split was read once, after training: {int(ex['correct'].sum()):,} of {len(ex):,}, by answer {by}.")
    say(f"* **Errors: {verdict(ft, 'behaviour')}.** {c['behaviour'].measured.rstrip('.')} (the rule needs "
        f"{MIN_ERRORS}); {pc(ft.table(Table.ERROR_ANALYSIS).iloc[0]['share_multiple_of_10'], 0)} of them are off by "
        f"a multiple of 10 and {int(((wrong['prediction'] - wrong['answer']).abs() == 1).sum()) or 'none'} by one.")
    say(f"* **Approximate first, exact last: {verdict(ft, 'logit_lens')}.** {c['logit_lens'].measured} Only the "
        f"trained top blocks hold the answer: {c['logit_lens'].reason}.")
    out, base_layer = outliers(ft), int(spec.get("layer"))
    n_before = int(summaries.number_spectrum_at(llm.table(Table.NUMBER_SPECTRUM), base_layer, "paper")["outlier"].sum())
    say(f"* **Number rows with periods 2, 2.5, 5, 10: {verdict(ft, 'numbers')}.** {c['numbers'].measured} Strongest "
        f"periods: {periods(out['period'][:6], ',')}. Where the rows started, the base model's representation after "
        f"block {base_layer} has {n_before} outlying frequencies, " + ("as many as now" if n_before == len(out) else
        f"against {len(out)} now") + f". Why \"{verdict(ft, 'numbers')}\": {c['numbers'].reason}.")
    stream, mods = shift_modules(ft)
    top, rest = (kept := mods[mods["draws"] > 0]).iloc[0], kept.iloc[1:]
    tens = module_locks(ft)
    tens = tens[np.isclose(tens["period"], 10.0)].groupby("kind", sort=False).head(2)
    so = f" So on this model {answer}." if (answer := groups_answer(ft)) else ""
    say(f"* **Which module computes the last digit: {verdict(ft, 'module_waves')} (causal test).** "
        f"{groups_measured(ft) or c['module_waves'].headline} One module at a time, over all {ft.n_examples:,} "
        f"questions: the whole stream after layer {int(stream['layer'])} moves it for {stream_text(ft)}; "
        f"{name(top['kind'], top['layer'])}'s share of that is {pc(top['read_low'])} to {pc(top['read_high'])}, and "
        f"the other {word(len(rest))} attention and MLP layers reach at most {pc(rest['read'].max())}. Phase locking "
        f"over all {int(ft.table(Table.PHASE_LOCKING)['n'].iloc[0]):,} finds waves that follow the answer mod 10 in "
        + listed(f"{name(r.kind, r.layer)} (R = {r.locking:.2f})" for r in tens.itertuples()) + f".{so}")
    say(f"* **MLP low / attention high division of labour: {verdict(ft, 'ablations')}.** Spectra "
        f"(**{verdict(ft, 'spectra')}**). {c['spectra'].headline} Table 1, over every question. "
        f"{c['ablations'].measured} *Why: {c['ablations'].reason}.* Removing only the paper's periods (**"
        f"{(narrow := claim_periods(ft)).verdict}**, step 6's narrow test): {narrow.headline} *Why: {narrow.reason}.*")
    keep = summaries.keep_one_results(ft.table(Table.ABLATIONS))
    parity = float(keep[keep["keep_period"] == 2]["parity_match"].iloc[0])
    say(f"* **Keep-one-frequency parity.** Keeping only period 2 gives the right parity {pc(parity)} of the time "
        f"(paper {paper.PARITY_KEEP_PERIOD_2}%)" + (": chance." if abs(parity - 0.5) < 0.02 else "."))
    say(f"* **A few Fourier components add up to the answer: {verdict(ft, 'waves')}.** {c['waves'].measured}", gap=True)
    say(f"What the frozen lower stack means for the story, in one sentence: blocks 0..{frozen - 1} (layers 1 to "
        f"{frozen}) compute with pre-training's weights on number rows that started as pre-training's and "
        + (f"kept {n_before} outlying frequencies" if n_before == len(out) else "changed their spectrum")
        + f", and the top {L - frozen} blocks learned to add with what reaches them; the Tour's mechanism steps find "
        "Fourier features in the rows and an answer built in the top blocks; against the paper, the verdicts read: "
        f"features in the rows (step 7) {verdict(ft, 'numbers')}, which module kind decides the last digit (step 3) "
        f"{verdict(ft, 'module_waves')}, Table 1's division of labour (step 6) {verdict(ft, 'ablations')}.", gap=True)
    for w in training_siblings(ft, readers)[:1]:  # the same model fine-tuned the paper's way: each run's own claims
        say(f"**The same model, {trained_short(w.manifest)} trained** ({pc(w.manifest['accuracy'], 2)} on test): "
            + "; ".join(f"{label}: {c[1].verdict} (here {c[0].verdict})" for label, c in sibling_rows(ft, [w], claims))
            + f". {groups_measured(w)} {claims(w)['spectra'].short} [Both runs](results.md#trained-another-way).")


if __name__ == "__main__":
    sys.exit(main())
