"""What a run's activation patching shows (the table `patching`, core.analysis.patching), in words computed from it.

The paper does not patch; patching is the field's standard causal test since (Meng et al. 2022), shown here beside the
paper's story, not as a verdict on it: no sentence here carries a verdict word. What is read is the logit difference,
how much higher the model scores the clean question's answer than the corrupted one's (in logits, the scores before
the softmax turns them into probabilities). Each reading is a sentence about this run's own table, for one direction
(denoising: the clean run's activation put into the corrupted run, the share of the difference it restores; noising:
the corrupted run's put into the clean run, the share of the clean answer's margin it takes away) and one contrast
(the corrupted question's second operand 1 more, so the answer's last digit differs, or 10 more, its tens digit):

* **where the difference reaches the answer position** (`stream_handover`): the stream at the answer position
  carries none of what tells "15 + 93" from "15 + 94" at the bottom (the same token " Answer:" in both) and all of
  it at the top. `HANDOVER_LOW` and `HANDOVER_HIGH` bound the layers between: the layer before the first whose
  interval reaches 10% (every layer up to it lies wholly below), and the first layer from which every interval lies
  wholly above 50%;
* **which single sites move most** (`top_sites`): modules and heads ranked by their share, each with its bootstrap
  interval over pairs; a site is named only where its interval's low end is above zero;
* **groups** (`groups_summary`): the trained layers' attention together and their MLPs together (every layer on a
  model trained whole), in each direction and contrast the table holds, beside the sum of the same layers' single
  shares in that reading (a group above the sum: the layers act together more than one by one); the attention of
  every layer moves all of it by construction (the answer position's token is the same in both prompts, so with
  every attention output patched the whole stream there is the other run's), and the sentence says so;
* **where the operands move into the answer position** (`position_summary`, the table `position_patching`): the first
  layer from which the stream at the answer position restores more than at any operand token.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.pairs import corrupted
from core.analysis.patch_table import DENOISE, GROUP, NOISE, with_defaults
from core.claims.base import pct
from core.errors import CoreError
from core.models.names import ATTN, HEAD, MLP, RESID
from core.runs.reader import RunReader, Table
from core.tasks import build_examples, running_example_id, task_name

#: The stream "carries none yet" below this share (the top of its interval), "half" from this one (its low end).
HANDOVER_LOW = 0.10
HANDOVER_HIGH = 0.50
#: How many sites of each kind a sentence names.
TOP = 3
#: How each kind of site is named on screen.
SITE_NAMES = {RESID: "Stream", ATTN: "Attention", MLP: "MLP", HEAD: "Head", GROUP: "Group"}
#: Each direction's verb and what its share is a share of, in a sentence.
DIRECTION_WORDS = {DENOISE: ("restores", "of the difference"), NOISE: ("takes away", "of the clean answer's margin")}
#: Each contrast in words.
CONTRAST_WORDS = {1: "second operand one more, so the answer's last digit differs",
                  10: "second operand ten more, so the answer's tens digit differs"}


def patching_table(run: RunReader) -> pd.DataFrame:
    """The run's patching table, every site named (`name_sites`)."""
    return name_sites(run.table(Table.PATCHING))


def name_sites(table: pd.DataFrame) -> pd.DataFrame:
    """A patching table (the run's, or one computed now for one pair), every site named (`site`: "attention of
    layer 22", "head 5 of layer 22", "the MLPs of layers 19 to 30 together"), a table cached before directions and
    contrasts read as denoising at contrast 1."""
    t = with_defaults(table)
    t["site"] = [site_name(k, int(layer), int(h), int(f), m)
                 for k, layer, h, f, m in zip(t["kind"], t["layer"], t["head"], t["from_layer"], t["modules"])]
    return t


def reading(table: pd.DataFrame, direction: str = DENOISE, contrast: int = 1) -> pd.DataFrame:
    """The rows of one direction and contrast (`with_defaults` applied first)."""
    t = with_defaults(table)
    return t[(t["direction"] == direction) & (t["contrast"] == int(contrast))]


#: The page's kinds of site: what each kind of row of the table is drawn as.
KIND_OF = {RESID: "sites", ATTN: "sites", MLP: "sites", HEAD: "heads", GROUP: "groups"}


def site_kinds(rows: pd.DataFrame) -> set[str]:
    """The page's kinds of site ("sites": stream, attention and MLP; "heads"; "groups") that `rows` hold."""
    return {KIND_OF[k] for k in set(rows["kind"]) if k in KIND_OF}


def readings(table: pd.DataFrame) -> list[tuple[str, int]]:
    """The (direction, contrast) readings a table holds, denoising at contrast 1 first."""
    t = with_defaults(table)
    found = {(str(d), int(c)) for d, c in zip(t["direction"], t["contrast"])}
    return sorted(found, key=lambda dc: (dc[1], dc[0] != DENOISE))


def site_name(kind: str, layer: int, head: int = -1, first: int | None = None, modules: str | None = None) -> str:
    """A site as the page names it (layers counted from 1)."""
    if kind == RESID:
        return "the stream before layer 1" if layer == 0 else f"the stream after layer {layer}"
    if kind == HEAD:
        return f"head {head} of layer {layer}"
    if kind == GROUP:
        return (f"{'the attention' if modules == ATTN else 'the MLPs'} of layers {first} to {layer} together"
                if first != layer else f"{'the attention' if modules == ATTN else 'the MLP'} of layer {layer}")
    return f"{'attention' if kind == ATTN else 'the MLP'} of layer {layer}"


def interval_words(point: float, low: float, high: float, digits: int = 0) -> str:
    """"8% (95% interval 6% to 10%)"; the point alone where the interval is not known (one pair)."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return pct(point, digits)
    return f"{pct(point, digits)} (95% interval {pct(low, digits)} to {pct(high, digits)})"


def stream_handover(table: pd.DataFrame) -> tuple[int | None, int | None]:
    """(the last layer up to which every stream restores less than `HANDOVER_LOW` for sure, the first layer from
    which every stream restores at least `HANDOVER_HIGH` for sure): interval high ends below the one, low ends above
    the other (None where no layer is), so the first is always below the second."""
    stream = table[table["kind"] == RESID].sort_values("layer")
    layers = stream["layer"].astype(int).to_numpy()
    top = stream["recovered_high"].fillna(stream["recovered"]).to_numpy()  # one pair: no interval, its point
    bottom = stream["recovered_low"].fillna(stream["recovered"]).to_numpy()
    reached = np.flatnonzero(~(top < HANDOVER_LOW))
    low = None if len(reached) and reached[0] == 0 else int(layers[reached[0] - 1] if len(reached) else layers[-1])
    held = bottom >= HANDOVER_HIGH
    falls = np.flatnonzero(~held)
    start = falls[-1] + 1 if len(falls) else 0
    high = int(layers[start]) if start < len(layers) else None
    return low, high


def top_sites(table: pd.DataFrame, kinds=(ATTN, MLP), top: int = TOP) -> pd.DataFrame:
    """The `top` sites of `kinds` that move most, among those whose interval's low end is above zero (one pair, no
    interval: whose share is)."""
    low = table["recovered_low"].fillna(table["recovered"])
    rows = table[table["kind"].isin(kinds) & (low > 0)]
    return rows.sort_values("recovered", ascending=False).head(top)


def site_phrase(row) -> str:
    return f"{row.site}, {interval_words(row.recovered, row.recovered_low, row.recovered_high)}"


def patching_summary(run: RunReader, direction: str = DENOISE, contrast: int = 1, extras: bool = True) -> str:
    """This run's patching in a few sentences for one reading (direction, contrast), every number from its table
    (module docstring); with `extras`, the groups and the other readings the table holds after it."""
    full = patching_table(run)
    words = reading_summary(full, direction, contrast, f"{task_name(run.task)} questions ({run.split} split")
    if extras and words:
        words = " ".join([words] + [s for s in (groups_summary(run, full), readings_summary(run, full)) if s])
    return words or f"This run's patching table holds no {direction} reading with the second operand {contrast} more."


def reading_summary(full: pd.DataFrame, direction: str, contrast: int, over: str) -> str:
    """The sentences of one reading of a named patching table (`name_sites`): over its pairs of `over` (the questions
    and "(split" they come from), the stream's handover (denoising), the single modules and the heads that move most;
    "" where the table lacks the reading. One pair (no interval) is said as one pair."""
    t = reading(full, direction, contrast)
    if not len(t):
        return ""
    singles = t[~t["kind"].isin((HEAD, GROUP))]
    n = int(singles["n"].iloc[0])
    verb, of_what = DIRECTION_WORDS[direction]
    low, high = stream_handover(t) if direction == DENOISE else (None, None)
    words = [f"{'For one pair' if n == 1 else f'Over {n:,} pairs'} of {over}; each question against the same question "
             f"with its {CONTRAST_WORDS[int(contrast)]})"]
    if direction == NOISE:
        words[0] += (f", patching one site from the corrupted run into the clean one {verb} a share {of_what} (the "
                     "logit difference: how much higher the clean answer scores than the corrupted one).")
    elif low is not None and high is not None:
        below = "before layer 1" if low == 0 else f"after every layer up to layer {low}"
        words[0] += (f", the stream at the answer position carries under {pct(HANDOVER_LOW, 0)} of what tells the two "
                     f"answers apart {below}, and over {pct(HANDOVER_HIGH, 0)} from layer {high} on: the difference "
                     "reaches the answer position "
                     + (f"at layer {high}." if low + 1 == high else f"between layers {low + 1} and {high}."))
    else:
        words[0] += ", the stream at the answer position does not pass from carrying none of the difference to "\
            "carrying half of it at any clear layer."
    modules = top_sites(t)
    lead = "restore" if direction == DENOISE else "take away"
    if len(modules):
        reach = float(t.loc[t["kind"].isin((ATTN, MLP)), "recovered_high"].max())
        words.append(f"The single modules that {lead} most: " + "; ".join(site_phrase(r) for r in
                                                                         modules.itertuples()) + "."
                     + (f" No single module {verb} half (the highest interval ends at {pct(reach, 0)})."
                        if reach < 0.5 else ""))
    else:
        words.append(f"No single attention or MLP output {verb} a share whose interval lies above zero.")
    heads = t[t["kind"] == HEAD]
    if len(heads):
        shown = top_sites(t, (HEAD,))
        m = int(heads["n"].iloc[0])
        lead_heads = (f"Of the {len(heads)} heads (each over the same {m:,} pairs)" if m == n else
                      f"Of the {len(heads)} heads (each over a sample of {m:,} of the pairs)")
        words.append(f"{lead_heads}, the most: " + "; ".join(site_phrase(r) for r in shown.itertuples()) + "."
                     if len(shown) else f"{lead_heads}, none {verb} a share whose interval lies above zero.")
    return " ".join(words)


def group_against_sum(t: pd.DataFrame) -> pd.DataFrame:
    """Each group row of one reading with `single_sum`, the sum of the same layers' single shares of its kind in
    that reading (NaN where a layer's single share is missing)."""
    rows = []
    for g in t[t["kind"] == GROUP].itertuples():
        singles = t[(t["kind"] == g.modules) & t["layer"].between(g.from_layer, g.layer)]
        full = len(singles) == g.layer - g.from_layer + 1 and np.isfinite(singles["recovered"]).all()
        rows.append({**g._asdict(), "single_sum": float(singles["recovered"].sum()) if full else float("nan"),
                     "n_single": int(singles["n"].iloc[0]) if len(singles) else 0})
    return pd.DataFrame(rows)


def groups_summary(run: RunReader, table: pd.DataFrame | None = None) -> str:
    """The groups in each reading the table holds: each group's share with its interval, beside the sum of its
    layers' single shares (read over the pairs those were read over), no verdict word."""
    full = patching_table(run) if table is None else table
    out = []
    for direction, contrast in readings(full):
        g = group_against_sum(reading(full, direction, contrast))
        if not len(g):
            continue
        share = "the share of the difference restored" if direction == DENOISE else \
            "the share of the clean answer's margin taken away"
        parts = []
        last = int(full.loc[full["kind"] == RESID, "layer"].max()) if (full["kind"] == RESID).any() else None
        for r in g.itertuples():
            said = f"{r.site}, {interval_words(r.recovered, r.recovered_low, r.recovered_high)}"
            if np.isfinite(r.single_sum):
                said += f" against {pct(r.single_sum, 0)} for its layers one at a time, added up"
            if r.modules == ATTN and int(r.from_layer) == 1 and int(r.layer) == last:
                said += (" (all of it by construction: with every layer's attention output taken from the other run, "
                         "everything at the answer position, whose token both prompts share, is that run's)")
            parts.append(said)
        out.append(f"Patched together ({'denoising' if direction == DENOISE else 'noising'}, second operand {contrast} "
                   f"more, {int(g['n'].iloc[0]):,} pairs), {share}: " + "; ".join(parts) + ".")
    return " ".join(out)


def readings_summary(run: RunReader, table: pd.DataFrame | None = None) -> str:
    """One sentence per reading other than denoising at contrast 1: its single module that moves most, with its
    interval, and its pairs."""
    full = patching_table(run) if table is None else table
    out = []
    for direction, contrast in readings(full):
        if (direction, contrast) == (DENOISE, 1):
            continue
        t = reading(full, direction, contrast)
        verb, of_what = DIRECTION_WORDS[direction]
        best = top_sites(t, top=1)
        n = int(t.loc[~t["kind"].isin((HEAD, GROUP)), "n"].iloc[0])
        name = "Noising" if direction == NOISE else "Denoising"
        head = f"{name} with the second operand {contrast} more ({n:,} pairs)"
        out.append(f"{head}: the single module that {verb} most is {site_phrase(best.iloc[0])} {of_what}."
                   if len(best) else f"{head}: no single module {verb} a share whose interval lies above zero.")
    return " ".join(out)


def patching_grid(run: RunReader, direction: str = DENOISE, contrast: int = 1,
                  table: pd.DataFrame | None = None) -> pd.DataFrame:
    """The figure's frame for one reading of the run's table (or of `table`, one computed now): one row per stream
    and module site (layer, `where`: Stream, Attention, MLP), with its share, interval and the share of pairs
    moved."""
    t = reading(patching_table(run) if table is None else name_sites(table), direction, contrast)
    t = t[t["kind"].isin((RESID, ATTN, MLP))].copy()
    t["where"] = t["kind"].map(SITE_NAMES)
    return t[["where", "layer", "site", "recovered", "recovered_low", "recovered_high", "moved", "n"]]


def heads_patched(run: RunReader, direction: str = DENOISE, contrast: int = 1,
                  table: pd.DataFrame | None = None) -> pd.DataFrame:
    """The heads' frame for a heads x layers figure (the run's table, or `table`): layer, head, share, interval,
    pairs."""
    t = reading(patching_table(run) if table is None else name_sites(table), direction, contrast)
    return t[t["kind"] == HEAD][["layer", "head", "site", "recovered", "recovered_low", "recovered_high", "moved",
                                 "n"]].copy()


def groups_patched(run: RunReader, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """The groups' frame (the run's table, or `table`): every reading's groups with their interval and the sum of
    their layers' single shares (`group_against_sum`), with `reading` in words."""
    full = patching_table(run) if table is None else name_sites(table)
    frames = [group_against_sum(reading(full, d, c)) for d, c in readings(full)]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=["site", "direction", "contrast", "recovered", "recovered_low", "recovered_high",
                                     "single_sum", "n", "reading"])
    g = pd.concat(frames, ignore_index=True)
    g["reading"] = [f"{d}, +{c}" for d, c in zip(g["direction"], g["contrast"])]
    return g


def example_pair(run: RunReader, contrast: int = 1) -> tuple[str, int, str, int]:
    """(clean question, its answer, corrupted question, its answer) of the run's first question that has a partner
    at `contrast` (15 + 93 first where the run has it): what the page shows as its example."""
    pair = next(iter(split_pairs(run, contrast).values()), None)
    if pair is None:
        raise CoreError(f"run {run.name}: no question has a partner with its second operand {contrast} more")
    clean, other = pair
    return clean.question, clean.answer, other.question, other.answer


#: How the command line writes a question of each task (core.tasks.parse_question reads it back).
SHORT_FORMS = {"addition": "{a} + {b}", "multiplication": "{a} * {b}", "reverse-polish": "{a},{b}+"}


def split_pairs(run: RunReader, contrast: int = 1) -> dict[str, tuple]:
    """Every question of the run's split that has a partner at `contrast` (core.analysis.pairs.corrupted), by its
    id, the running example's first, then in the split's order: (clean example, corrupted example)."""
    by_id = {e.id: e for e in build_examples(run.task, run.max_operand, run.dataset_seed)}
    ids = sorted(run.table(Table.EXAMPLES)["id"], key=lambda i: i != running_example_id(run.task, run.max_operand))
    out = {}
    for i in ids:
        other = corrupted(by_id[i], run.max_operand, int(contrast))
        if other is not None:
            out[i] = (by_id[i], other)
    return out


def pair_words(clean, other) -> str:
    """A pair as the page names it: 'Put together 15 and 93.' (108) against 'Put together 15 and 94.' (109)."""
    return f"\u201c{clean.question}\u201d ({clean.answer}) against \u201c{other.question}\u201d ({other.answer})"


def short_form(example) -> str:
    """The question as `python -m core patch --clean` takes it ("15 + 93"), its phrasing given apart."""
    return SHORT_FORMS[example.task].format(a=example.a, b=example.b)


#: The roles of the position x layer table's tokens (core.runs.position_patch_run), as the figure labels them.
ROLE_NAMES = {"a": "first operand", "b": "second operand", "answer": "answer position"}


def position_grid(run: RunReader) -> pd.DataFrame:
    """The position x layer figure's frame: one row per cell, with `label` the token's text and place ("3: 93") and
    `what` its role in words."""
    t = run.table(Table.POSITION_PATCHING).copy()
    t["label"] = [f"{int(p)}: {tok.strip() or repr(tok)}" for p, tok in zip(t["position"], t["token"])]
    t["what"] = t["role"].map(ROLE_NAMES).fillna("")
    return t


def position_handover(table: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per layer (0: the embeddings), the largest share restored at an operand's token and the share restored at the
    answer position."""
    operands = table[table["role"].isin(("a", "b"))].groupby("layer")["recovered"].max()
    answer = table[table["role"] == "answer"].set_index("layer")["recovered"]
    return operands.sort_index(), answer.sort_index()


def position_summary(run: RunReader) -> str:
    """Where the operands' digits move into the answer position, in the run's own numbers (no verdict: the paper does
    not patch). Rule, on the cells' point estimates (each with its bootstrap interval on the page): `first` is the
    layer after the last one at which an operand's token restores at least as much as the answer position, so from
    `first` on the answer position restores more at every layer; the sentence quotes both at `first - 1` and at
    `first`. Where the answer position is ahead at every layer, or never at the top, it says so."""
    table = run.table(Table.POSITION_PATCHING)
    operands, answer = position_handover(table)
    n = int(table["n"].iloc[0])
    layers = [int(x) for x in answer.index if x in operands.index]
    if not layers:
        return (f"Over {n:,} pairs the table holds no operand token (the prompts' numbers were not found), so where "
                "the operands move cannot be read from it.")
    opening = f"Patched token by token over {n:,} pairs ({run.split} split)"
    behind = [layer for layer in layers if operands[layer] >= answer[layer]]
    if not behind:
        return (f"{opening}, the answer position restores more than any operand's token at every layer, from the "
                f"embeddings ({pct(answer[layers[0]])} against {pct(operands[layers[0]])}) on.")
    if behind[-1] == layers[-1]:
        return (f"{opening}, an operand's token restores at least as much as the answer position even after the last "
                f"layer ({pct(operands[layers[-1]])} against {pct(answer[layers[-1]])}).")
    last = behind[-1]
    first = layers[layers.index(last) + 1]
    return (f"{opening}, the stream at an operand's token restores {pct(operands[last])} after layer {last} and the "
            f"answer position {pct(answer[last])}; after layer {first} the answer position restores "
            f"{pct(answer[first])} and the operands' tokens at most {pct(operands[first])}, and from there on the "
            f"answer position stays ahead: the difference between the two questions moves from the operands into the "
            f"answer position between layer {last} and layer {first} (layer 0: the embeddings).")
