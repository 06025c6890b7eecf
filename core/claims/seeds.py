"""A verdict read over the seeds of one recipe: does it hold when the same model is trained again?

A recipe trained with another seed (`python -m core train --recipe NAME --seed N`) lands in the recipe's folder
under seeds/sN (seeds/wWIDTH-sN at another width), and its run records that folder as its model's source. Runs are
seeds of one recipe when they share the source with the seeds/... part taken off, the task, the split, the
question count, the shots and the width: the shipped model and its seeds.

The rule, the same for every step: a verdict **holds over seeds** when every seed's run gives the same verdict;
otherwise it **flips between seeds**, and the line says how many seeds gave each verdict. Each run's verdict is
its own step rule's (core.claims.registry), applied to its own tables: no threshold is read across seeds.
`claims_of` is the function that gives a run's claims (core.claims.registry.run_claims, or the dashboard's
cached copy of it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from core.claims.base import VERDICT_LABELS, VERDICTS
from core.runs.origin import recipe_folder_of_manifest, seed_of_manifest

__all__ = ["SeedSpread", "seed_siblings", "verdict_spread"]

def _recipe_key(run) -> tuple | None:
    """What seeds of one recipe share (see the module's docstring); None for a run with no model folder."""
    folder = recipe_folder_of_manifest(run.manifest)
    if not folder:
        return None
    task = (run.manifest or {}).get("task") or {}
    return (folder, task.get("task", "addition"), task.get("split"), task.get("n_examples"), task.get("shots", 0),
            (run.manifest or {}).get("width"))


def seed_siblings(run, runs) -> list:
    """The runs among `runs` that are seeds of `run`'s recipe, `run` included: the shipped model first, then by
    seed. Empty when there is no other seed (one seed is not a spread)."""
    key = _recipe_key(run)
    if key is None:
        return []
    same = [r for r in runs if _recipe_key(r) == key]
    if not any(r.name == run.name for r in same):
        same.append(run)
    if len(same) < 2:
        return []
    seed = {r.name: seed_of_manifest(r.manifest) for r in same}
    return sorted(same, key=lambda r: (seed[r.name] is not None, seed[r.name] or 0, r.name))


@dataclass
class SeedSpread:
    """One step's verdicts over the seeds of a recipe."""

    step: str
    verdicts: dict  # seed name ("shipped", "seed 1", ...) -> verdict, in the siblings' order

    @property
    def holds(self) -> bool:
        return len(set(self.verdicts.values())) == 1

    @property
    def counts(self) -> dict:
        n = Counter(self.verdicts.values())
        return {v: n[v] for v in VERDICTS if n[v]}

    @property
    def line(self) -> str:
        """One sentence for the screen: "Over 3 seeds of this recipe: Agrees in all 3." or "Flips between the 3
        seeds of this recipe: Agrees in 2, Partly agrees in 1 (seed 2)."."""
        n = len(self.verdicts)
        if self.holds:
            only = next(iter(self.verdicts.values()))
            return f"Over {n} seeds of this recipe: “{VERDICT_LABELS[only]}” in all {n} (the verdict holds)."
        parts = []
        for verdict, count in self.counts.items():
            which = [s for s, v in self.verdicts.items() if v == verdict]
            parts.append(f"“{VERDICT_LABELS[verdict]}” in {count} ({', '.join(which)})")
        return f"The verdict flips between the {n} seeds of this recipe: {'; '.join(parts)}."


def verdict_spread(step: str, siblings: list, claims_of) -> SeedSpread | None:
    """`step`'s verdict in each of `siblings` (from `seed_siblings`), or None when there are fewer than two."""
    if len(siblings) < 2:
        return None
    verdicts = {}
    for r in siblings:
        seed = seed_of_manifest(r.manifest)
        name = "shipped model" if seed is None else f"seed {seed}"
        verdicts[name if name not in verdicts else f"{name} ({r.name})"] = claims_of(r)[step].verdict
    return SeedSpread(step, verdicts)
