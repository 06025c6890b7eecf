"""What `python -m core patch` prints: activation patching (core.analysis.patching) computed now on a run's model
(or a model), for one pair of prompts or for every pair of a split's questions (the pairing rule of the run's
patching stage, core.runs.patch_run), as text or as JSON.

Sites are named as the docs count layers, from 1, with TransformerLens' name (its blocks count from 0) beside:
"MLP 23 (blocks.22.hook_mlp_out)", "head 4 of attention 23 (blocks.22.attn.hook_z[4])" (heads count from 0), "MLPs
19-30 together (blocks.18-29.hook_mlp_out)". `--direction noise` patches the corrupted prompt's output into the clean
run (the share of the clean margin lost); `--contrast 10` pairs a split's questions with the second operand ten more.

A prompt of the pair is a question written as the pages write it ("15 + 93": the task's phrasing number
`--phrasing` and " Answer:" around it, its answer the task's) or any other text, read as given (free text; its
answer is `--answers`' or else the number the model answers to it). The two prompts must differ, in their answers
too, and be of the same token length (patching reads them position for position); where they are not, the refusal
says how long each is and where they first differ. The JSON holds what `ablate --json` holds: the split, the lines
of the text and the cached comparison (the run's own `patching` table over the same pairs: agrees or differs, or why
it is not compared).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from core.analysis.ablations import Condition
from core.analysis.evaluation import evaluate_conditions
from core.analysis.patch_table import CONTRASTS, DENOISE, DIRECTIONS, GROUP, with_defaults
from core.analysis.patching import module_sites, patch_pairs, patching_table
from core.errors import CoreError
from core.models.loading import prompt_texts
from core.models.names import ATTN, HEAD, MLP, RESID, Z, hook_name
from core.runs.ablate import Target, nan_to_none
from core.runs.cache import read_manifest, read_table
from core.runs.edit_arguments import check_pair, parse_answers, read_prompt
from core.runs.patch_run import PAIR_RULE, TENS_RULE, group_sites, pair_limits, patch_run
from core.runs.position_patch_run import PositionPatchReport, position_report
from core.runs.precompute import model_prompts
from core.tasks import RUNNING_EXAMPLE_PHRASING, build_examples, select_split

#: The sites printed without --json: those that recover most.
TOP_SITES = 12

#: A cached site's recovered share agrees with the one computed now over the same pairs to this much (float32
#: kernels batch the pairs differently from the pass that filled the cache).
AGREE_SHARE = 0.01


@dataclass
class PatchReport:
    """What `python -m core patch` prints: each site's recovered share, over one pair or the pairs of a split."""

    what: str
    pairs: int
    clean_gap: float
    corrupt_gap: float
    sites: list[dict] = field(default_factory=list)
    split: str = "given"  # the split whose pairs were read, or "given" for a pair given on the command line
    #: the run's cached patching beside this one (`cached_comparison`); None for a model that is no run
    cached: dict | None = None
    cached_line: str | None = None
    direction: str = DENOISE
    contrast: int = 1

    def text(self, top: int = TOP_SITES) -> str:
        """The pair(s), the two gaps and the sites that move most, one line each (layers counted from 1 as the docs
        count them, TransformerLens' name in brackets)."""
        over = " over pairs, 95% bootstrap interval" if self.pairs > 1 else ""
        if self.direction == DENOISE:
            how = ("patching a site's output from the clean prompt into the corrupted one restores this share of the "
                   "difference (0: nothing, 1: all of it)")
            moved = "answers moved to the clean one"
        else:
            how = ("patching a site's output from the corrupted prompt into the clean one takes away this share of "
                   "the clean answer's margin (0: nothing, 1: all of it)")
            moved = "answers moved to the corrupted one"
        lines = [f"{self.what}: logit(clean answer) - logit(corrupted answer) is {self.clean_gap:+.2f} on the clean "
                 f"prompt, {self.corrupt_gap:+.2f} on the corrupted one; {how}{over} (layers counted from 1, heads "
                 "from 0, TransformerLens' block names from 0):"]
        ranked = sorted(self.sites, key=lambda r: -np.nan_to_num(r["recovered"], nan=-np.inf))[:top]
        width = max((len(r["site"]) for r in ranked), default=0)
        for r in ranked:
            span = (f" ({r['recovered_low']:.2f} to {r['recovered_high']:.2f})"
                    if r["recovered_low"] is not None else "")
            lines.append(f"  {r['site']:<{width}} {r['recovered']:.3f}{span}, {moved}: {r['moved']:.0%}")
        if self.cached_line:
            lines.append(f"  {self.cached_line}")
        lines.append(f"  ({len(self.sites)} sites in all; --json prints every one)")
        return "\n".join(lines)

    def as_json(self) -> str:
        """Every field (as `ablate --json`: the split, the text's `lines`, the `cached` comparison), NaN as null."""
        fields = {k: v for k, v in asdict(self).items() if k != "cached_line"}
        return json.dumps(nan_to_none({**fields, "lines": self.text().splitlines()}), indent=1, allow_nan=False)


def same_length(tokenizer, clean: str, corrupt: str) -> None:
    """Refuse two prompts of different token lengths, saying how long each is and where they first differ."""
    a, b = (tokenizer(t)["input_ids"] for t in (clean, corrupt))
    if len(a) == len(b):
        return
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    shown = [repr(tokenizer.decode(ids[first:first + 1])) if first < len(ids) else "the end" for ids in (a, b)]
    raise CoreError(f"the clean prompt is {len(a)} tokens and the corrupted one {len(b)}: they first differ at token "
                    f"{first} ({shown[0]} against {shown[1]}). Patching reads the two position for position: give "
                    "prompts of the same token length")


def pair_prompts(target: Target, clean: str, corrupt: str, phrasing: int | None, answers: str | None
                 ) -> tuple[list[str], list[int], str]:
    """(the two prompts as the model reads them, their answers, the pair in words) of a command-line pair
    (`read_prompt`: a question in the run's phrasing and shots, or free text as given); a free text's answer is
    `answers`' or the number the model answers to it."""
    loaded, p = target.loaded, target.p
    phrasing = (RUNNING_EXAMPLE_PHRASING if target.task == "addition" else 0) if phrasing is None else phrasing
    questions = [read_prompt(target.task, q, phrasing, target.max_operand) for q in (clean, corrupt)]
    pool = select_split(build_examples(target.task, target.max_operand, target.dataset_seed), "train")
    texts = [model_prompts(loaded, [q], pool, target.shots, target.dataset_seed)[0] if q is not None
             else prompt_texts(loaded, [text])[0] for q, text in zip(questions, (clean, corrupt))]
    same_length(loaded.tokenizer, *texts)
    given = parse_answers(answers, p)
    if given is not None:
        chosen = list(given)
    else:
        chosen = [q.answer if q is not None else None for q in questions]
        if None in chosen:  # free text: the number the model answers to it
            runs = evaluate_conditions(loaded, texts, [0, 0], p, [Condition(None)], progress=False)[0]
            chosen = [int(a) if a is not None else int(m) for a, m in zip(chosen, runs.predictions)]
        if chosen[0] == chosen[1]:
            raise CoreError(f"the model answers {chosen[0]} to both prompts, so there is no logit difference to "
                            "recover: give --answers CLEAN,CORRUPT")
    said = [f"{q.question!r}" if q is not None else f"{text!r}" for q, text in zip(questions, (clean, corrupt))]
    return texts, chosen, f"{said[0]} (answer {chosen[0]}) against {said[1]} (answer {chosen[1]})"


def patch_command(target: Target, clean: str | None = None, corrupt: str | None = None, phrasing: int | None = None,
                  progress=None, answers: str | None = None, positions: bool = False, direction: str = DENOISE,
                  contrast: int = 1) -> PatchReport | PositionPatchReport:
    """`python -m core patch`: with `clean` and `corrupt` (questions like "15 + 93" in the same phrasing,
    `phrasing`, by default the running example's for addition, else the first; or any texts: `pair_prompts`),
    that one pair; without them, every pair of the target's questions (core.runs.patch_run: the stage's pairs; a
    deep model's heads and other readings over its samples, `pair_limits`). `answers` ("108,109") names the two
    answers compared. With `positions`, the pair's stream patched at every token and layer instead
    (core.runs.position_patch_run.position_report).
    `direction` (denoise, noise) and, for a split, `contrast` (1 or 10: the partner's second operand that much more)
    choose which reading is printed."""
    loaded, p = target.loaded, target.p
    if direction not in DIRECTIONS:
        raise CoreError(f"--direction {direction!r}: choose {' or '.join(DIRECTIONS)}")
    if int(contrast) not in CONTRASTS:
        raise CoreError(f"--contrast {contrast}: choose {' or '.join(map(str, CONTRASTS))} (how much more the "
                        "corrupted question's second operand is)")
    check_pair(target.task, clean, corrupt, phrasing, target.max_operand, p, answers)
    if clean is not None:
        texts, chosen, what = pair_prompts(target, clean, corrupt, phrasing, answers)
        if positions:
            report = position_report(loaded, texts[0], texts[1], chosen[0], chosen[1], p, what, progress)
            report.cached, report.cached_line = cached_position_line(target)
            return report
        sites = module_sites(loaded.n_layers, loaded.parts.n_heads if loaded.parts.has_heads else 0)
        sites += group_sites(loaded)
        result = patch_pairs(loaded, texts[:1], texts[1:], chosen[:1], chosen[1:], p, sites, 32, progress,
                             direction)
        table = patching_table(result, contrast=contrast)
    else:
        everything = {e.id: e for e in build_examples(target.task, target.max_operand, target.dataset_seed)}
        examples = [everything[i] for i in target.ids]
        own = target.run_name is not None and target.split == target.run_split  # a run's split: read as its design
        every = own and not read_manifest(target.run_dir, target.run_name).get("design")
        heads_read, extra_read = pair_limits(loaded, examples, every_question=every)
        table = patch_run(loaded, examples, target.texts, p, target.max_operand, 32, progress,
                          extra_pairs=extra_read, head_pairs=heads_read)
        if table is None:
            raise CoreError(f"none of the {len(examples)} questions has a partner: {PAIR_RULE}")
        table = table[(table["direction"] == direction) & (table["contrast"] == int(contrast))]
        heads = table[table["kind"] == HEAD]
        rule = TENS_RULE if int(contrast) == 10 else PAIR_RULE
        what = (f"{direction}, {int(table['n'].iloc[0])} pairs of {len(examples)} {target.split} questions ({rule})"
                + (f"; each head over a sample of {int(heads['n'].iloc[0])} of them"
                   if len(heads) and heads['n'].iloc[0] < table['n'].iloc[0] else ""))
    sites = [{"hook": site_hook(row.kind, int(row.layer), int(row.head), loaded.n_layers, int(row.from_layer),
                                row.modules),
              "site": site_label(row.kind, int(row.layer), int(row.head), loaded.n_layers, int(row.from_layer),
                                 row.modules), **row._asdict()}
             for row in table.drop(columns=["clean_gap", "corrupt_gap"]).itertuples(index=False)]
    for s in sites:
        if s["recovered_low"] is not None and not np.isfinite(s["recovered_low"]):
            s["recovered_low"] = s["recovered_high"] = None
    first = table.iloc[0]
    cached, line = cached_comparison(target, table, pair=clean is not None)
    return PatchReport(what, int(first["n"]), float(first["clean_gap"]), float(first["corrupt_gap"]), sites,
                       "given" if clean is not None else target.split, cached, line, direction, int(contrast))


def cached_comparison(target: Target, table, pair: bool) -> tuple[dict | None, str | None]:
    """(figures, line): the run's cached `patching` table beside the one computed now. Compared (agrees when every
    site's recovered share is within `AGREE_SHARE`) only when both read the very same pairs: the run's own split and
    questions; otherwise the line says why not. None for a model that is no run, or a run without the table."""
    if target.run_name is None or "patching" not in read_manifest(target.run_dir, target.run_name).get("tables", {}):
        return None, None
    cached = with_defaults(read_table(target.run_dir, target.run_name, "patching"))
    table = with_defaults(table)
    first = table.iloc[0]
    same = cached[(cached["direction"] == first["direction"]) & (cached["contrast"] == first["contrast"])]
    if not len(same):
        return None, None
    pairs = int(same.loc[~same["kind"].isin((HEAD, GROUP)), "n"].iloc[0])
    figures = {"table": "patching", "run": target.run_name, "pairs": pairs, "split": target.run_split,
               "same_questions": False, "agrees": None, "largest_difference": None, "sites_compared": 0}
    head = f"cached patching of run {target.run_name}: {pairs:,} pairs of its {target.run_split} questions"
    if pair:
        return figures, f"{head} (not compared: this patch read one pair given on the command line)"
    if target.split != target.run_split:
        return figures, (f"{head} (not compared: this patch read the {target.split} split, the cache the "
                         f"{target.run_split} split)")
    examples = read_table(target.run_dir, target.run_name, "examples", columns=["id"])
    if set(examples["id"]) != set(target.ids):
        return figures, f"{head} (not compared: this patch read {len(target.ids):,} questions, not the same set)"
    keys = ["kind", "layer", "head", "from_layer", "modules", "direction", "contrast"]
    both = table.merge(cached, on=keys, suffixes=("", "_cached"))
    both = both[both["n"] == both["n_cached"]]
    gaps = (both["recovered"] - both["recovered_cached"]).abs().dropna()
    if not len(gaps):
        return figures, f"{head} (not compared: no site was read over the same pairs)"
    largest = float(gaps.max())
    figures.update(same_questions=True, agrees=largest <= AGREE_SHARE, largest_difference=largest,
                   sites_compared=int(len(gaps)))
    said = "agrees" if figures["agrees"] else "DIFFERS"
    return figures, f"{head} ({said}: largest difference {largest:.4f} over {len(gaps)} sites)"


def cached_position_line(target: Target) -> tuple[dict | None, str | None]:
    """(figures, line): the run's cached `position_patching` table, named beside one pair's cells but not compared
    (the cache reads many pairs of one layout, this patch one pair given on the command line). None for a model that
    is no run, or a run without the table."""
    if (target.run_name is None
            or "position_patching" not in read_manifest(target.run_dir, target.run_name).get("tables", {})):
        return None, None
    cached = read_table(target.run_dir, target.run_name, "position_patching", columns=["n"])
    pairs = int(cached["n"].iloc[0])
    figures = {"table": "position_patching", "run": target.run_name, "pairs": pairs, "split": target.run_split,
               "same_questions": False, "agrees": None}
    return figures, (f"cached position patching of run {target.run_name}: {pairs:,} pairs of its {target.run_split} "
                     "questions (not compared: this patch read one pair given on the command line)")


def site_hook(kind: str, layer: int, head: int, n_layers: int, first: int | None = None,
              modules: str | None = None) -> str:
    """The TransformerLens name of a patched site (blocks counted from 0); a head's is its layer's hook_z with the
    head in brackets, a group's its blocks' range ("blocks.18-29.hook_mlp_out")."""
    if kind == HEAD:
        return f"{hook_name(Z, layer)}[{head}]"
    if kind == GROUP:
        one = hook_name(modules, layer, n_layers)
        return one.replace(f"blocks.{layer - 1}.", f"blocks.{first - 1}-{layer - 1}.", 1)
    return hook_name(kind, layer, n_layers)


def site_label(kind: str, layer: int, head: int, n_layers: int, first: int | None = None,
               modules: str | None = None) -> str:
    """A site as the docs count it (layers from 1) with its TransformerLens name beside: "MLP 23
    (blocks.22.hook_mlp_out)", "stream after layer 22 (blocks.22.hook_resid_pre)", "head 4 of attention 23
    (blocks.22.attn.hook_z[4])", "MLPs 19-30 together (blocks.18-29.hook_mlp_out)"."""
    hook = site_hook(kind, layer, head, n_layers, first, modules)
    if kind == RESID:
        words = "stream before layer 1" if layer == 0 else f"stream after layer {layer}"
    elif kind == HEAD:
        words = f"head {head} of attention {layer}"
    elif kind == GROUP:
        words = f"{'attention' if modules == ATTN else 'MLPs'} {first}-{layer} together"
    else:
        words = f"{'attention' if kind == ATTN else 'MLP' if kind == MLP else kind} {layer}"
    return f"{words} ({hook})"
