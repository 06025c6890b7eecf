"""What `python -m core patch` prints: activation patching (core.analysis.patching) computed now on a run's model
(or a model), for one pair of prompts ("15 + 93" against "15 + 94") or for every pair of a split's questions (the
pairing rule of the run's patching stage, core.runs.patch_run), as text or as JSON.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from core.analysis.patching import module_sites, patch_pairs, patching_table
from core.errors import CoreError
from core.models.names import HEAD, Z, hook_name
from core.runs.ablate import Target, nan_to_none
from core.runs.patch_run import PAIR_RULE, patch_run
from core.runs.precompute import model_prompts
from core.tasks import RUNNING_EXAMPLE_PHRASING, build_examples, parse_question, select_split

#: The sites printed without --json: those that recover most.
TOP_SITES = 12


@dataclass
class PatchReport:
    """What `python -m core patch` prints: each site's recovered share, over one pair or the pairs of a split."""

    what: str
    pairs: int
    clean_gap: float
    corrupt_gap: float
    sites: list[dict] = field(default_factory=list)

    def text(self, top: int = TOP_SITES) -> str:
        """The pair(s), the two gaps and the sites that recover most, one line each."""
        over = " over pairs, 95% bootstrap interval" if self.pairs > 1 else ""
        lines = [f"{self.what}: logit(clean answer) - logit(corrupted answer) is {self.clean_gap:+.2f} on the clean "
                 f"prompt, {self.corrupt_gap:+.2f} on the corrupted one; patching one site from clean into corrupted "
                 f"recovers (0: nothing, 1: all of it){over}:"]
        ranked = sorted(self.sites, key=lambda r: -np.nan_to_num(r["recovered"], nan=-np.inf))[:top]
        for r in ranked:
            span = (f" ({r['recovered_low']:.2f} to {r['recovered_high']:.2f})"
                    if r["recovered_low"] is not None else "")
            lines.append(f"  {r['hook']:<28} {r['recovered']:.3f}{span}, answers moved to the clean one: "
                         f"{r['moved']:.0%}")
        lines.append(f"  ({len(self.sites)} sites in all; --json prints every one)")
        return "\n".join(lines)

    def as_json(self) -> str:
        return json.dumps(nan_to_none(asdict(self)), indent=1, allow_nan=False)


def patch_command(target: Target, clean: str | None = None, corrupt: str | None = None, phrasing: int | None = None,
                  progress=None) -> PatchReport:
    """`python -m core patch`: with `clean` and `corrupt` ("15 + 93", "15 + 94": the same phrasing, `phrasing`, by
    default the running example's for addition, else the first), that one pair; without them, every pair of the
    target's questions (core.runs.patch_run: the stage's pairs, each head over its sample of them)."""
    loaded, p = target.loaded, target.p
    if (clean is None) != (corrupt is None):
        raise CoreError("give both --clean and --corrupt (a pair), or neither (every pair of the split)")
    if clean is not None:
        phrasing = (RUNNING_EXAMPLE_PHRASING if target.task == "addition" else 0) if phrasing is None else phrasing
        pair = [parse_question(target.task, q, phrasing, target.max_operand) for q in (clean, corrupt)]
        if max(e.answer for e in pair) >= p:
            raise CoreError(f"an answer is out of this run's numbers 0..{p - 1}")
        pool = select_split(build_examples(target.task, target.max_operand, target.dataset_seed), "train")
        texts = model_prompts(loaded, pair, pool, target.shots, target.dataset_seed)  # as the run's prompts are
        what = f"{pair[0].question!r} (answer {pair[0].answer}) against {pair[1].question!r} (answer {pair[1].answer})"
        sites = module_sites(loaded.n_layers, loaded.parts.n_heads if loaded.parts.has_heads else 0)
        result = patch_pairs(loaded, texts[:1], texts[1:], [pair[0].answer], [pair[1].answer], p, sites, 32,
                             progress)
        table = patching_table(result)
    else:
        everything = {e.id: e for e in build_examples(target.task, target.max_operand, target.dataset_seed)}
        examples = [everything[i] for i in target.ids]
        table = patch_run(loaded, examples, target.texts, p, target.max_operand, 32, progress)
        if table is None:
            raise CoreError(f"none of the {len(examples)} questions has a partner: {PAIR_RULE}")
        heads = table[table["kind"] == HEAD]
        what = (f"{int(table['n'].iloc[0])} pairs of {len(examples)} {target.split} questions ({PAIR_RULE})"
                + (f"; each head over a sample of {int(heads['n'].iloc[0])} of them" if len(heads) else ""))
    sites = [{"hook": site_hook(row.kind, int(row.layer), int(row.head), loaded.n_layers), **row._asdict()}
             for row in table.drop(columns=["clean_gap", "corrupt_gap"]).itertuples(index=False)]
    for s in sites:
        if s["recovered_low"] is not None and not np.isfinite(s["recovered_low"]):
            s["recovered_low"] = s["recovered_high"] = None
    first = table.iloc[0]
    return PatchReport(what, int(first["n"]), float(first["clean_gap"]), float(first["corrupt_gap"]), sites)


def site_hook(kind: str, layer: int, head: int, n_layers: int) -> str:
    """The TransformerLens name of a patched site; a head's is its layer's hook_z with the head in brackets."""
    if kind == HEAD:
        return f"{hook_name(Z, layer)}[{head}]"
    return hook_name(kind, layer, n_layers)
