"""What a run's activation patching shows (the table `patching`, core.analysis.patching), in words computed from it.

The paper does not patch; patching is the field's standard causal test since (Meng et al. 2022), shown here beside the
paper's story, not as a verdict on it. Each reading is a sentence about this run's own table:

* **where the difference reaches the answer position** (`stream_handover`): the stream at the answer position
  carries none of what tells "15 + 93" from "15 + 94" at the bottom (the same token " Answer:" in both) and all of
  it at the top. `HANDOVER_LOW` and `HANDOVER_HIGH` bound the layers between: the layer before the first whose
  interval reaches 10% restored (every layer up to it lies wholly below), and the first layer from which every
  interval lies wholly above 50%;
* **which single sites restore most** (`top_sites`): modules and heads ranked by their recovered share, each with
  its bootstrap interval over pairs; a site is named only where its interval's low end is above zero;
* **where the operands move into the answer position** (`position_summary`, the table `position_patching`): the first
  layer from which the stream at the answer position restores more than at any operand token.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.pairs import corrupted
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
SITE_NAMES = {RESID: "Stream", ATTN: "Attention", MLP: "MLP", HEAD: "Head"}


def patching_table(run: RunReader) -> pd.DataFrame:
    """The run's patching table, every site named (`site`: "attention of layer 22", "head 5 of layer 22")."""
    t = run.table(Table.PATCHING).copy()
    t["site"] = [site_name(k, int(layer), int(h)) for k, layer, h in zip(t["kind"], t["layer"], t["head"])]
    return t


def site_name(kind: str, layer: int, head: int = -1) -> str:
    """A site as the page names it."""
    if kind == RESID:
        return "the stream before layer 1" if layer == 0 else f"the stream after layer {layer}"
    if kind == HEAD:
        return f"head {head} of layer {layer}"
    return f"{'attention' if kind == ATTN else 'the MLP'} of layer {layer}"


def stream_handover(table: pd.DataFrame) -> tuple[int | None, int | None]:
    """(the last layer up to which every stream restores less than `HANDOVER_LOW` for sure, the first layer from
    which every stream restores at least `HANDOVER_HIGH` for sure): interval high ends below the one, low ends above
    the other (None where no layer is), so the first is always below the second."""
    stream = table[table["kind"] == RESID].sort_values("layer")
    layers = stream["layer"].astype(int).to_numpy()
    reached = np.flatnonzero(~(stream["recovered_high"].to_numpy() < HANDOVER_LOW))
    low = None if len(reached) and reached[0] == 0 else int(layers[reached[0] - 1] if len(reached) else layers[-1])
    held = stream["recovered_low"].to_numpy() >= HANDOVER_HIGH
    falls = np.flatnonzero(~held)
    start = falls[-1] + 1 if len(falls) else 0
    high = int(layers[start]) if start < len(layers) else None
    return low, high


def top_sites(table: pd.DataFrame, kinds=(ATTN, MLP), top: int = TOP) -> pd.DataFrame:
    """The `top` sites of `kinds` that restore most, among those whose interval's low end is above zero."""
    rows = table[table["kind"].isin(kinds) & (table["recovered_low"] > 0)]
    return rows.sort_values("recovered", ascending=False).head(top)


def site_phrase(row) -> str:
    return (f"{site_name(row.kind, int(row.layer), int(row.head))} ({pct(row.recovered, 0)}, "
            f"{pct(row.recovered_low, 0)} to {pct(row.recovered_high, 0)})")


def patching_summary(run: RunReader) -> str:
    """This run's patching in a few sentences, every number from its table (module docstring)."""
    t = patching_table(run)
    n = int(t.loc[t["kind"] != HEAD, "n"].iloc[0])
    low, high = stream_handover(t)
    words = [f"Over {n:,} pairs of {task_name(run.task)} questions ({run.split} split; each question against the same "
             "question with its second operand one more, so the answer's last digit differs)"]
    if low is not None and high is not None:
        words[0] += (f", the stream at the answer position carries under {pct(HANDOVER_LOW, 0)} of what tells the two "
                     f"answers apart up to layer {low}, and over {pct(HANDOVER_HIGH, 0)} from layer {high} on: the "
                     "difference reaches the answer position "
                     + (f"at layer {high}." if low + 1 == high else f"between layers {low + 1} and {high}."))
    else:
        words[0] += ", the stream at the answer position does not pass from carrying none of the difference to "\
            "carrying half of it at any clear layer."
    modules = top_sites(t)
    if len(modules):
        reach = float(t.loc[t["kind"].isin((ATTN, MLP)), "recovered_high"].max())
        words.append("The single modules that restore most: " + "; ".join(site_phrase(r) for r in
                                                                        modules.itertuples()) + "."
                     + (f" No single module restores half (the highest interval ends at {pct(reach, 0)})."
                        if reach < 0.5 else ""))
    else:
        words.append("No single attention or MLP output restores a share whose interval lies above zero.")
    heads = t[t["kind"] == HEAD]
    if len(heads):
        shown = top_sites(t, (HEAD,))
        m = int(heads["n"].iloc[0])
        lead = f"Of the {len(heads)} heads (each over a sample of {m:,} of the pairs)"
        words.append(f"{lead}, the most: " + "; ".join(site_phrase(r) for r in shown.itertuples()) + "."
                     if len(shown) else f"{lead}, none restores a share whose interval lies above zero.")
    return " ".join(words)


def patching_grid(run: RunReader) -> pd.DataFrame:
    """The figure's frame: one row per stream and module site (layer, `where`: Stream, Attention, MLP), with its
    share, interval and the share of pairs moved, in words for the tooltip."""
    t = patching_table(run)
    t = t[t["kind"] != HEAD].copy()
    t["where"] = t["kind"].map(SITE_NAMES)
    return t[["where", "layer", "site", "recovered", "recovered_low", "recovered_high", "moved", "n"]]


def heads_patched(run: RunReader) -> pd.DataFrame:
    """The heads' frame for a heads x layers figure: layer, head, share, interval, pairs."""
    t = patching_table(run)
    return t[t["kind"] == HEAD][["layer", "head", "site", "recovered", "recovered_low", "recovered_high", "moved",
                                 "n"]].copy()


def example_pair(run: RunReader) -> tuple[str, int, str, int]:
    """(clean question, its answer, corrupted question, its answer) of the run's first question that has a partner
    (15 + 93 first where the run has it): what the page shows as its example."""
    by_id = {e.id: e for e in build_examples(run.task, run.max_operand, run.dataset_seed)}
    ids = sorted(run.table(Table.EXAMPLES)["id"], key=lambda i: i != running_example_id(run.task, run.max_operand))
    for i in ids:
        clean = by_id[i]
        other = corrupted(clean, run.max_operand)
        if other is not None:
            return clean.question, clean.answer, other.question, other.answer
    raise CoreError(f"run {run.name}: no question has a partner")


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
