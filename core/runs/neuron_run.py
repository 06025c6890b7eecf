"""The neuron-level test on a run's model (core.analysis.neurons: each MLP neuron fitted by a helix of a + b and by
operand-digit heuristics), then the best-fitted neurons of each kind mean-ablated against random neurons of the same
layers: `python -m core neurons RUN`, which writes the run's tables `neuron_fits` and `neurons`.

* **Capture**: each neuron's activation (the MLP's hidden unit after the nonlinearity, the input of its down
  projection, TransformerLens' blocks.N.mlp.hook_post) at the answer position, over the run's questions (its split, or
  a seeded sample of `limit`), for the MLPs `layers` (counted from 1; default `default_layers`: the last 30% of the
  depth, MLPs 22-30 of a 30-layer model).
* **Fits**: core.analysis.neurons.neuron_fit_table over those questions (fit on one seeded half, R^2 on the other).
* **Ablation**: over `n_ablate` of the questions (a seeded sample; all where fewer), for each k of `ks`: the top-k
  neurons by the helix's R^2, the top-k by the heuristics' R^2 (ranked over all the layers read together), and for
  each of the two `RANDOM_DRAWS` seeded draws of k random neurons in its layers, as many in each layer as it holds
  there (`matches` names the set; core.analysis.neurons.random_neurons): the best-fitted neurons of a deep model sit
  in a few late layers, and a draw over every layer read would be mostly early neurons. Each set's activations are
  replaced, at the answer position, by their means over the captured questions, all the set's layers in one pass.
  Read: accuracy (the answer's number token the highest of the numbers 0..p-1), and the last-digit shift (the share
  of questions whose answer's last digit differs from the unedited model's answer's).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from core.analysis.ablations import Condition
from core.analysis.evaluation import PrefixCache, evaluate_conditions
from core.analysis.neurons import (
    FIT_SEED,
    control_draws,
    last_digit_shift,
    neuron_fit_table,
    random_neurons,
    top_neurons,
    with_matches,
)
from core.errors import CoreError
from core.models.capture import capture_hooks
from core.models.sublayers import mlp_neurons_module
from core.runs.cache import STAGING_PREFIX, RunWriter, read_manifest, run_lock
from core.tasks import build_examples

#: The neuron tables' version: raised when what they hold or how it is computed changes (2: each top set's random
#: controls drawn in its layers, `matches`).
NEURON_VERSION = 2
KS = (50, 200)
RANDOM_DRAWS = 5
RANDOM_SEED = 2024
#: Questions the ablation reads by default (a seeded sample of the split; the fits read every question captured).
N_ABLATE = 1000
#: neurons: one row per ablated set (selection "none" is the unedited model, k 0; `matches`: the top set whose layers
#: a random set copies, "" on the other rows).
NEURON_COLUMNS = ("selection", "k", "draw", "matches", "n", "accuracy", "last_digit_shift", "helix_r2_mean",
                  "heuristic_r2_mean", "overlap")
SELECTIONS = ("none", "helix", "heuristic", "random")


def default_layers(n_layers: int) -> tuple[int, ...]:
    """The last 30% of the MLPs, counted from 1 (22..30 of 30; the last one of 2)."""
    return tuple(range(min(n_layers, round(0.7 * n_layers) + 1), n_layers + 1))


def check_layers(layers, n_layers: int) -> tuple[int, ...]:
    layers = tuple(sorted({int(x) for x in layers}))
    bad = [x for x in layers if not 1 <= x <= n_layers]
    if not layers or bad:
        raise CoreError(f"MLP layers {list(layers)}: this model's MLPs are 1..{n_layers} (counted from 1)")
    return layers


def capture_neurons(loaded, texts, layers, batch_size: int = 32, progress=None) -> dict[int, np.ndarray]:
    """layer -> (questions, neurons) float32: hook_post of each MLP at the answer position."""
    names = {layer: f"blocks.{layer - 1}.mlp.hook_post" for layer in layers}
    acts = capture_hooks(loaded, texts, list(names.values()), position="answer", batch_size=batch_size,
                         progress=progress)
    return {layer: np.asarray(acts[name], dtype=np.float32) for layer, name in names.items()}


@contextmanager
def mean_ablated(loaded, chosen: dict[int, np.ndarray], means: dict[int, np.ndarray]):
    """While active, the neurons `chosen` (layer -> indices) are set to their `means` (layer -> (neurons,)) in every
    forward pass over ONE token: the answer-position passes of `evaluate_conditions`, which run each prompt's last
    token against its prefix's cached keys and values (the prefix passes, two tokens or more, are left alone: the
    prompts are checked to be three tokens or more)."""
    handles = []

    def hook_of(layer):
        index = torch.as_tensor(np.array(chosen[layer], dtype=np.int64))
        values = torch.as_tensor(means[layer][np.asarray(chosen[layer], dtype=np.int64)], dtype=torch.float32)

        def pre_hook(module, args):
            x = args[0]
            if x.shape[1] != 1:
                return None
            x = x.clone()
            x[:, 0, index.to(x.device)] = values.to(x.device, x.dtype)
            return (x, *args[1:])

        return pre_hook

    try:
        for layer in chosen:
            handles.append(mlp_neurons_module(loaded.parts, layer).register_forward_pre_hook(hook_of(layer)))
        yield
    finally:
        for h in handles:
            h.remove()


def ablated_predictions(loaded, texts, answers, p: int, sets: list[dict[int, np.ndarray]],
                        means: dict[int, np.ndarray], batch_size: int = 32, progress=None) -> np.ndarray:
    """(sets, questions) predictions: for each set (layer -> neuron indices), those neurons mean-ablated (`means`) at
    the answer position; the prompts' prefixes run once and are kept (`PrefixCache`) for every set."""
    shortest = min(len(ids) for ids in loaded.tokenizer(list(texts))["input_ids"])
    if shortest < 3:
        raise CoreError(f"a prompt of {shortest} token(s): the neuron ablation reads prompts of 3 tokens or more")
    cache = PrefixCache(max_bytes=2 * 2**30)
    out = np.zeros((len(sets), len(texts)), dtype=np.int64)
    for i, chosen in enumerate(sets):
        with mean_ablated(loaded, chosen, means):
            run = evaluate_conditions(loaded, texts, answers, p, [Condition(None)], batch_size=batch_size,
                                      prefix_cache=cache, progress=False)[0]
        out[i] = run.predictions
        if progress:
            progress(i + 1, len(sets))
    return out


def by_layer(rows: pd.DataFrame) -> dict[int, np.ndarray]:
    return {int(layer): g["neuron"].to_numpy() for layer, g in rows.groupby("layer")}


def neuron_tables(loaded, texts, answers, a, b, p: int, layers=None, ks=KS, n_ablate: int = N_ABLATE,
                  draws: int = RANDOM_DRAWS, batch_size: int = 32, log=print) -> dict[str, pd.DataFrame]:
    """{"neuron_fits": ..., "neurons": ...} of the questions `texts` (their answers and operands a, b): the module
    docstring's capture, fits and ablations."""
    layers = check_layers(default_layers(loaded.n_layers) if layers is None else layers, loaded.n_layers)
    answers = np.asarray(answers)
    t0 = time.time()
    acts = capture_neurons(loaded, texts, layers, batch_size)
    log(f"neurons: captured MLPs {layers[0]}-{layers[-1]} at the answer position over {len(texts)} questions "
        f"({time.time() - t0:.0f}s)")
    fits = neuron_fit_table(acts, a, b)
    log(f"neurons: fitted {len(fits):,} neurons ({time.time() - t0:.0f}s)")
    means = {layer: acts[layer].astype(np.float64).mean(axis=0) for layer in layers}
    chosen = np.sort(np.random.default_rng(FIT_SEED).permutation(len(texts))[:min(n_ablate, len(texts))])
    sets, labels = [{}], [("none", 0, 0, "", fits.iloc[:0])]
    ks = [k for k in ks if k <= len(fits)]
    if not ks:
        raise CoreError(f"k must be at most the {len(fits)} neurons of the layers read")
    for k in ks:
        tops = {"helix": top_neurons(fits, "helix_r2", k), "heuristic": top_neurons(fits, "heuristic_r2", k)}
        drawn = [("random", d, which, random_neurons(fits, rows, [RANDOM_SEED, k, d, m]))
                 for m, (which, rows) in enumerate(tops.items()) for d in range(draws)]
        for selection, draw, matches, rows in [(which, 0, "", rows) for which, rows in tops.items()] + drawn:
            sets.append(by_layer(rows))
            labels.append((selection, k, draw, matches, rows))
    preds = ablated_predictions(loaded, [texts[i] for i in chosen], answers[chosen], p, sets, means, batch_size)
    log(f"neurons: {len(sets)} ablations over {len(chosen)} questions ({time.time() - t0:.0f}s)")
    helix_top = {k: set(map(tuple, top_neurons(fits, "helix_r2", k)[["layer", "neuron"]].to_numpy())) for k in ks}
    heur_top = {k: set(map(tuple, top_neurons(fits, "heuristic_r2", k)[["layer", "neuron"]].to_numpy())) for k in ks}
    out = []
    for (selection, k, draw, matches, rows), pred in zip(labels, preds):
        picked = set(map(tuple, rows[["layer", "neuron"]].to_numpy()))
        other = heur_top if selection == "helix" else helix_top
        out.append({"selection": selection, "k": k, "draw": draw, "matches": matches, "n": len(chosen),
                    "accuracy": float(np.mean(pred == answers[chosen])),
                    "last_digit_shift": last_digit_shift(pred, preds[0]),
                    "helix_r2_mean": float(rows["helix_r2"].mean()) if len(rows) else float("nan"),
                    "heuristic_r2_mean": float(rows["heuristic_r2"].mean()) if len(rows) else float("nan"),
                    "overlap": len(picked & other[k]) if selection in ("helix", "heuristic") else 0})
    table = pd.DataFrame(out, columns=list(NEURON_COLUMNS))
    return {"neuron_fits": fits, "neurons": table}


def neuron_note(tables: dict[str, pd.DataFrame], n_questions: int, split: str) -> dict:
    """What the manifest says of the neuron tables."""
    fits, table = tables["neuron_fits"], tables["neurons"]
    return {"version": NEURON_VERSION, "layers": sorted(int(x) for x in fits["layer"].unique()),
            "questions_fitted": n_questions, "questions_ablated": int(table["n"].iloc[0]), "split": split,
            "random_draws": int(table["draw"][table["selection"] == "random"].nunique()),
            "control": "each top set's draws in its layers, as many in each"}


def refuse_while_amended(target) -> None:
    """A CoreError while another command amends the run (its staging folder is there; not every command takes the
    run's lock): the neuron tables are never mixed into another command's staging."""
    staging = Path(target.run_dir) / f"{STAGING_PREFIX}{target.run_name}"
    if staging.exists():
        raise CoreError(f"run {target.run_name} is being amended by another command ({staging} exists): run this "
                        "again when it has finished")


def run_neurons(target, layers=None, ks=KS, n_ablate: int = N_ABLATE, draws: int = RANDOM_DRAWS,
                batch_size: int = 32, log=print) -> dict[str, pd.DataFrame]:
    """`neuron_tables` of a `core.runs.ablate.Target` (a run's model and questions), and, where the target is a run,
    its tables `neuron_fits` and `neurons` written into it (nothing else of the run changes)."""
    if target.run_name is not None:
        refuse_while_amended(target)
    everything = {e.id: e for e in build_examples(target.task, target.max_operand, target.dataset_seed)}
    examples = [everything[i] for i in target.ids]
    a, b = np.array([e.a for e in examples]), np.array([e.b for e in examples])
    with torch.no_grad():
        tables = neuron_tables(target.loaded, target.texts, target.answers, a, b, target.p, layers, ks, n_ablate,
                               draws, batch_size, log)
    if target.run_name is not None:
        note = neuron_note(tables, len(target.texts), target.split)
        with run_lock(target.run_dir, target.run_name, log):
            refuse_while_amended(target)
            manifest = read_manifest(target.run_dir, target.run_name)
            writer = RunWriter(target.run_dir, target.run_name, manifest.get("identity") or {},
                               manifest.get("options") or {})
            keep = writer.stage_published()
            for name, frame in tables.items():
                writer.write(name, frame)
            keep["neurons"] = note
            writer.publish(keep)
        log(f"run {target.run_name}: tables neuron_fits and neurons written; nothing else recomputed")
    return tables


def neuron_lines(tables: dict[str, pd.DataFrame]) -> list[str]:
    """What `python -m core neurons` prints: one line per top set, then its random draws (in its layers) as their
    mean and spread."""
    t = with_matches(tables["neurons"])
    base = t[t["selection"] == "none"].iloc[0]
    lines = [f"unedited: accuracy {base['accuracy']:.2%} over {int(base['n'])} questions"]
    for k in sorted(t.loc[t["k"] > 0, "k"].unique()):
        rows = t[t["k"] == k]
        for selection in ("helix", "heuristic"):
            r = rows[rows["selection"] == selection].iloc[0]
            lines.append(f"top {k} by {selection} R^2 (mean R^2 helix {r['helix_r2_mean']:.2f}, heuristics "
                         f"{r['heuristic_r2_mean']:.2f}): accuracy {r['accuracy']:.2%}, last digit changed "
                         f"{r['last_digit_shift']:.2%}")
            rand, in_layers = control_draws(t, k, selection)
            where = " in its layers" if in_layers else ""
            lines.append(f"  {len(rand)} draws of {k} random neurons{where}: accuracy {rand['accuracy'].mean():.2%} "
                         f"(sd {rand['accuracy'].std(ddof=1):.2%}), last digit changed "
                         f"{rand['last_digit_shift'].mean():.2%}")
    return lines
