"""How large must a control's MLP pair be for step 6's energy-matched MLP controls to spare the answer?

    .venv/bin/python scripts/pair_size.py models/control-short-waves-pairs --sizes 22,40,60,90,130 [--draws 3]

The model is a trained control with cancelling pairs (`python -m core train --recipe control-short-waves-pairs`,
docs/fine-tuning.md, "Controls"). Over its test split: the MLP outputs' second moment C at the answer position, as
the precompute measures it (the trained pair, of norm s0, in it); for each size s >= s0, C plus the energy
2 n (s^2 - s0^2) along the pair's direction (what W_U reads at k = 150), as if the pair had norm s; the low band's
energy-matched random controls drawn from it as the precompute draws them (`Ablation(...).build`, its seeds); the
model evaluated with each draw removed from every MLP, beside the band itself. Prints the pair's share of the MLPs'
energy and each draw's accuracy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from core.analysis.ablations import Ablation, Condition
from core.analysis.evaluation import evaluate_conditions
from core.analysis.filters import projection_filter, removed_energy_share
from core.analysis.fourier import fourier_basis
from core.files import read_json_file
from core.models.loading import load_model, prompt_texts
from core.models.names import MLP
from core.paper import TABLE1_TAU
from core.runs.ablation_grid import module_second_moments
from core.tasks import build_examples, select_split

P, PAIR_K = 521, 150


def trained_pair_size(folder: str) -> float:
    """The norm of the MLPs' cancelling pair the model was trained with (its recipe.json)."""
    recipe = read_json_file(Path(folder) / "recipe.json")
    pairs = [q for q in (recipe.get("module_bands") or {}).get("pairs", []) if q["module"] == MLP]
    if len(pairs) != 1:
        raise SystemExit(f"{folder}: its recipe has {len(pairs)} MLP pairs; this script reads a model with one")
    return float(pairs[0]["size"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a trained control's folder")
    ap.add_argument("--sizes", default="22,40,60,90,130", help="the pair norms to try (at least the trained one)")
    ap.add_argument("--draws", type=int, default=3, help="energy-matched draws per size")
    args = ap.parse_args(argv)
    trained = trained_pair_size(args.model)
    sizes = [float(s) for s in args.sizes.split(",")]
    if min(sizes) < trained:
        raise SystemExit(f"--sizes: the model was trained with a pair of norm {trained:g}; try that or larger")
    lm = load_model(args.model)
    test = select_split(build_examples("addition", 260), "test")
    texts, answers = prompt_texts(lm, [e.prompt for e in test]), np.array([e.answer for e in test])
    W_U, basis = lm.unembedding(P), fourier_basis(P, "paper")
    C = module_second_moments(lm, texts, 128, progress=False)[MLP]
    band = Ablation(MLP, "low", TABLE1_TAU).build(W_U, basis)
    h = projection_filter(W_U, basis, [PAIR_K]).q[:, 0]
    conditions, labels = [Condition(band, MLP)], ["the low band itself"]
    for size in sizes:
        pair = 2 * len(texts) * size**2  # +v in one layer, -v in the other, at every answer position
        moment = C + 2 * len(texts) * (size**2 - trained**2) * np.outer(h, h)
        for draw in range(args.draws):
            matched = Ablation(MLP, "matched-low", TABLE1_TAU, draw=draw).build(W_U, basis, moment)
            conditions.append(Condition(matched, MLP))
            labels.append(f"pair of norm {size:g} ({pair / np.trace(moment):.0%} of the MLPs' energy; the band "
                          f"{removed_energy_share(band, moment):.0%}), draw {draw}")
    results = evaluate_conditions(lm, texts, answers, P, conditions, "last", 128, progress=False)
    for label, ev in zip(labels, results):
        print(f"{label}: {ev.accuracy:.1%} of {ev.n:,} test questions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
