"""Evaluate prompts under filters: accuracy, loss and predictions of every condition of an ablation grid.

`evaluate_conditions` runs many filter conditions (`core.analysis.ablations.Condition`) on the same
prompts, in eval mode, the model's own training flags given back after (`core.models.modes.evaluating`). With
filters at the answer position only, each batch's prefix (every token but the last) runs once and keeps its
key/value cache, and the last token runs for many conditions at once against copies of that cache
(`answer_position_passes`); `evaluate_by_full_recompute` is the
definition it must reproduce. `PrefixCache` keeps the prefixes between evaluations of the same
prompts (the dashboard's live filter); `GridProgress` makes a long grid resumable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from core.analysis.ablations import Condition, PlacedEdit, RowPatch, check_positions
from core.analysis.filter_hooks import ConditionHooks, filtered, place_conditions
from core.analysis.filters import ProjectionFilter
from core.errors import CoreError
from core.models.capture import forward_accepts, forward_batch, prepare_batches, progress_bar
from core.models.finite import require_finite_losses
from core.models.modes import evaluating
from core.models.names import ATTN, BOTH, MLP, MODULE_OUTPUTS, POST, RESID, Z


@dataclass
class Evaluation:
    """Results of running a set of prompts, with or without a filter."""

    answers: np.ndarray
    predictions: np.ndarray  # argmax over the number tokens 0..p-1
    losses: np.ndarray  # cross-entropy of the answer token over the whole vocabulary
    erased: bool = False
    rank: int = 0
    width: int = 0
    extra: dict = field(default_factory=dict)  # how it was computed (time, threads), for display
    #: with `contrast` answers: each prompt's logit of its answer minus that of its contrast answer (number tokens)
    gaps: np.ndarray | None = None

    def __repr__(self) -> str:
        """One line: how many prompts and the accuracy, never every prediction."""
        return f"Evaluation(n={self.n}, accuracy={self.accuracy:.4f}, loss={self.loss:.4f}, rank={self.rank})"

    @property
    def n(self) -> int:
        return int(len(self.answers))

    @property
    def accuracy(self) -> float:
        return float(np.mean(self.predictions == self.answers)) if self.n else float("nan")

    @property
    def loss(self) -> float:
        return float(np.mean(self.losses)) if self.n else float("nan")

    def within(self, d: int) -> float:
        return float(np.mean(np.abs(self.predictions - self.answers) <= d)) if self.n else float("nan")

    @property
    def parity_match(self) -> float:
        return float(np.mean((self.predictions - self.answers) % 2 == 0)) if self.n else float("nan")


def answer_losses(logits, answer_token_ids):
    """Cross-entropy of each row's answer token over the whole vocabulary (float32)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -logp.gather(1, answer_token_ids.view(-1, 1).to(logp.device)).squeeze(1)


def evaluate(
    loaded,
    texts: Sequence[str],
    answers: Sequence[int],
    p: int,
    flt: ProjectionFilter | None = None,
    modules: str = BOTH,
    positions: str = "last",
    batch_size: int = 32,
    progress: bool | None = None,
    desc: str = "evaluate",
    on_batch=None,
) -> Evaluation:
    """Run prompts (as the model reads them) with an optional filter; accuracy, loss, predictions.

    With positions="last" the prompt prefix runs once and the answer position runs against its
    key/value cache (`evaluate_conditions`); with "all" every position is filtered and recomputed.
    `on_batch(done, total)` is called after each batch (for progress bars in the dashboard).
    """
    return evaluate_conditions(
        loaded,
        texts,
        answers,
        p,
        [Condition(flt, modules)],
        positions,
        batch_size,
        progress=progress,
        desc=desc,
        on_batch=on_batch,
    )[0]


def evaluate_by_full_recompute(loaded, texts, answers, p: int, flt, modules: str = BOTH, batch_size: int = 32):
    """(predictions, losses) with the filter at the answer position, every position recomputed: the
    definition that the answer-position path (`evaluate_conditions`) must reproduce. For checks only
    (tests, `scripts/bench_core.py --full`); it costs one full pass per condition."""
    answers = np.asarray(answers, dtype=np.int64)
    ids = torch.as_tensor(loaded.numbers.ids_for(p))
    preds, losses = np.zeros(len(texts), np.int64), np.zeros(len(texts))
    with torch.no_grad(), evaluating(loaded.model), filtered(loaded, flt, modules, "last"):
        for batch in prepare_batches(loaded.tokenizer, list(texts), batch_size):
            logits = forward_batch(loaded, batch)
            preds[batch.indices] = logits[:, ids.to(logits.device)].argmax(-1).cpu().numpy()
            target = ids[torch.as_tensor(answers[batch.indices])].to(logits.device)
            losses[batch.indices] = answer_losses(logits, target).cpu().numpy()
    return preds, losses


@dataclass
class GridProgress:
    """Partial results of `evaluate_conditions`, for checkpoints: rows done so far in every condition."""

    predictions: np.ndarray  # (C, N) int64
    losses: np.ndarray  # (C, N) float64
    done: np.ndarray  # (N,) bool: rows whose results are final in every condition
    gaps: np.ndarray | None = None  # (C, N) float64: logit of the answer minus the contrast's (with contrast answers)

    @classmethod
    def empty(cls, n_conditions: int, n: int) -> "GridProgress":
        return cls(np.zeros((n_conditions, n), np.int64), np.zeros((n_conditions, n)), np.zeros(n, bool),
                   np.zeros((n_conditions, n)))

    def fits(self, n_conditions: int, n: int) -> bool:
        return (
            self.predictions.shape == (n_conditions, n)
            and self.losses.shape == (n_conditions, n)
            and self.done.shape == (n,)
            and (self.gaps is None or self.gaps.shape == (n_conditions, n))
        )


class PrefixCache:
    """Key/value caches of the prompts' prefixes, kept between evaluations of the same prompts.

    Every filter condition at the answer position starts from the same prefix, so a process that
    evaluates one condition after another on the same prompts (the dashboard's live filter) runs
    the prefix once and keeps it, up to `max_bytes`; batches beyond the budget are recomputed.
    """

    def __init__(self, max_bytes: int = 512 * 2**20):
        self.max_bytes = max_bytes
        self.key = None
        self.entries: dict[int, list] = {}
        self.bytes = 0
        self.batches = None  # the tokenized, batched prompts (core.models.capture.PreparedBatch)
        #: where prefixes are also kept on disk (core.runs.prefix_store.PrefixStore, set by the caller for the prompts
        #: it evaluates next): a batch missing in memory is read from it, and a computed one written to it
        self.store = None
        #: how many batches' prefixes came from memory, came from disk, or were computed (since made)
        self.counts = {"memory": 0, "disk": 0, "computed": 0}

    def use_for(self, key) -> None:
        """Start over when the prompts (or their batching) change."""
        if key != self.key:
            self.key, self.entries, self.bytes, self.batches = key, {}, 0, None

    def get(self, batch_no: int):
        found = self.entries.get(batch_no)
        if found is not None:
            self.counts["memory"] += 1
        elif self.store is not None:
            found = self.store.load(batch_no)
            if found is not None:
                self.counts["disk"] += 1
                self._keep(batch_no, found)
        return found

    def put(self, batch_no: int, prefix: list) -> None:
        self.counts["computed"] += 1
        self._keep(batch_no, prefix)
        if self.store is not None:
            self.store.save(batch_no, prefix)

    def _keep(self, batch_no: int, prefix: list) -> None:
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in prefix)
        if self.bytes + size <= self.max_bytes:
            self.entries[batch_no] = prefix
            self.bytes += size


#: Rows of one answer-position pass (conditions x prompts): wide enough that per-call overhead is small.
ROWS_PER_CALL = 512
#: A call that runs several last tokens a row (an edit before the answer position) holds at most `ROWS_PER_CALL` rows,
#: and over this many tokens a row, as many tokens as ROWS_PER_CALL x this (every row keeps its copy of the prefix).
WHOLE_PROMPT_TOKENS = 8


def evaluate_conditions(
    loaded,
    texts: Sequence[str],
    answers: Sequence[int],
    p: int,
    conditions: Sequence[Condition],
    positions: str = "last",
    batch_size: int = 32,
    rows_per_call: int = ROWS_PER_CALL,
    progress: bool | None = None,
    desc: str = "evaluate",
    on_batch=None,
    resume: GridProgress | None = None,
    on_checkpoint=None,
    checkpoint_every_s: float = 30.0,
    prefix_cache: PrefixCache | None = None,
    in_order: bool = False,
    contrast: Sequence[int] | None = None,
) -> list[Evaluation]:
    """Evaluate every condition on the same prompts; one `Evaluation` per condition, in order.

    positions="last" (filters at the answer position only): each batch's prefix (every token but
    the last) runs once, without filters, keeping its key/value cache; then the last token runs
    for many conditions at once against copies of that cache, condition-major, up to
    `rows_per_call` rows per call, each condition's rows filtered by its own filter. The last
    token gets its own position id and the full attention mask, so left-padded rows compute what
    they compute in a full pass. positions="all" recomputes every position for every condition.

    `resume`/`on_checkpoint(progress)` make a long grid resumable: batches already done in
    `resume` are skipped, and `on_checkpoint` receives the partial results every
    `checkpoint_every_s` seconds. `prefix_cache` keeps the prefixes' key/value caches for the
    next evaluation of the same prompts. `in_order` batches the prompts in the order given instead
    of by length (a running estimate over a sample whose every prefix is representative). `contrast`, a second
    number per prompt, adds each prompt's logit of its answer minus that of its contrast (`Evaluation.gaps`: the
    logit difference activation patching reads, core.analysis.patching). NaN or infinite logits or losses stop it
    with where they start (`core.models.finite`).
    """
    conditions = place_conditions(loaded, texts, list(conditions))  # positions and units resolved (filter_hooks)
    answers = _checked_inputs(loaded, texts, answers, p, conditions, positions)
    others = None if contrast is None else _checked_inputs(loaded, texts, contrast, p, conditions, positions)
    number_ids = torch.as_tensor(loaded.numbers.ids_for(p))
    n, C = len(texts), len(conditions)
    state = resume if resume is not None and resume.fits(C, n) else GridProgress.empty(C, n)
    if others is not None and state.gaps is None:  # a checkpoint made without contrast answers: start again
        state = GridProgress.empty(C, n)
    prepared = _batches(loaded, texts, batch_size, prefix_cache, by_length=not in_order)
    batches = [(i, b) for i, b in enumerate(prepared) if not state.done[b.indices].all()]
    total_done = int(state.done.sum())
    bar = progress_bar(n * C, desc, progress)
    bar.update(total_done * C)
    last_save = time.monotonic()

    def record(c: int, rows: np.ndarray, logits) -> None:
        ids = number_ids.to(logits.device)
        state.predictions[c, rows] = logits[:, ids].argmax(-1).cpu().numpy()
        target = ids[torch.as_tensor(answers[rows], device=logits.device)]
        state.losses[c, rows] = answer_losses(logits, target).cpu().numpy()
        if others is not None:
            other = ids[torch.as_tensor(others[rows], device=logits.device)]
            picked = logits.float().gather(1, torch.stack([target, other], 1))
            state.gaps[c, rows] = (picked[:, 0] - picked[:, 1]).cpu().numpy()

    try:
        with evaluating(loaded.model):
            if positions == "all":
                for c, cond in enumerate(conditions):
                    with filtered(loaded, cond.flt, cond.modules, "all"):
                        for _, batch in batches:
                            record(c, batch.indices, forward_batch(loaded, batch))
                            bar.update(len(batch.indices))
                state.done[:] = True
                if on_batch is not None:
                    on_batch(n, n)
            else:
                with ConditionHooks(loaded) as hooks:
                    for batch_no, batch in batches:
                        stored = _StoredPrefix(prefix_cache, batch_no) if prefix_cache is not None else None
                        passes = answer_position_passes(loaded, batch, conditions, hooks, rows_per_call, stored=stored)
                        for c, logits in passes:
                            record(c, batch.indices, logits)
                            # NaN or infinite logits make the loss NaN: stop, naming where they start (free when fine)
                            require_finite_losses(loaded, batch, state.losses[c, batch.indices],
                                                  edited=conditions[c].flt is not None)
                            bar.update(len(batch.indices))
                        state.done[batch.indices] = True
                        total_done += len(batch.indices)
                        if on_batch is not None:
                            on_batch(total_done, n)
                        if on_checkpoint is not None and time.monotonic() - last_save > checkpoint_every_s:
                            on_checkpoint(state)
                            last_save = time.monotonic()
    except BaseException:
        # interrupted or failed: hand over what is finished, so the caller can resume from it
        if on_checkpoint is not None and positions == "last" and state.done.any():
            on_checkpoint(state)
        raise
    finally:
        bar.close()
    return [
        Evaluation(
            answers=answers,
            predictions=state.predictions[c].copy(),
            losses=state.losses[c].copy(),
            erased=bool(cond.flt is not None and cond.flt.erased),
            rank=cond.flt.rank if cond.flt is not None else 0,
            width=loaded.width,
            gaps=None if others is None else state.gaps[c].copy(),
        )
        for c, cond in enumerate(conditions)
    ]


def _checked_inputs(loaded, texts, answers, p: int, conditions: list, positions: str) -> np.ndarray:
    """The answers as an int64 array, after every input of `evaluate_conditions` is checked."""
    check_positions(positions)
    if not conditions:
        raise CoreError("no conditions to evaluate")
    if positions == "all" and any(c.layers is not None or isinstance(c.flt, (RowPatch, PlacedEdit))
                                  for c in conditions):
        raise CoreError("an edit of one layer (a phase shift) acts at the answer position only: use positions='last'")
    for c in conditions:
        in_heads = isinstance(c.flt, RowPatch) and c.flt.columns is not None  # a head's or neuron's columns
        if c.flt is not None and not in_heads and c.flt.width != loaded.width:
            raise CoreError(f"the filter was built for width {c.flt.width}, the model has width {loaded.width}")
    answers = np.asarray(answers, dtype=np.int64)
    if len(answers) != len(texts):
        raise CoreError(f"{len(texts)} prompts but {len(answers)} answers")
    if len(answers) and (answers.min() < 0 or answers.max() >= p):
        raise CoreError(f"answers must lie in 0..{p - 1}")
    return answers


def _batches(loaded, texts, batch_size: int, prefix_cache: PrefixCache | None, by_length: bool = True) -> list:
    """The prompts' left-padded batches, kept with the prefix cache (made once per set of prompts)."""
    if prefix_cache is None:
        return prepare_batches(loaded.tokenizer, texts, batch_size, by_length)
    prefix_cache.use_for((id(loaded.model), tuple(texts), batch_size, by_length))
    if prefix_cache.batches is None:
        prefix_cache.batches = prepare_batches(loaded.tokenizer, texts, batch_size, by_length)
    return prefix_cache.batches


@dataclass
class _StoredPrefix:
    """Where one batch's prefix is kept between evaluations: a `PrefixCache` and the batch's number."""

    cache: PrefixCache
    batch_no: int


def answer_position_passes(
    loaded,
    batch,
    conditions: Sequence[Condition],
    hooks: ConditionHooks,
    rows_per_call: int,
    share_unedited: bool = True,
    stored: _StoredPrefix | None = None,
):
    """Yield (condition index, answer-position logits (B, vocab)) for every condition on one batch.

    With `share_unedited`, what every condition of a call computes alike runs on one copy of the batch and
    its output is copied to every condition before the first edit acts: the first layer's attention for filters
    of every layer, and for edits of one layer (a phase shift) every block before the lowest layer the call edits,
    and that layer's attention (`first_edited_layer`); and each MLP runs once per distinct input among the call's
    conditions (`mlp_sharing`: a filter of the MLPs alone leaves the first MLP's input unedited). An edit of a token
    before the answer position (`RowPatch.back` or a `PlacedEdit`'s back k > 1) leaves the tokens before it as they
    are: a call then runs its last k tokens (k its conditions' earliest, `edit_reach`) against the prefix of the rest,
    and every position of the batch only where an edit reaches the first token or every token (then no prefix is
    kept). The seam an interrupted grid is tested at (tests/runs/test_precompute.py replaces it to stop a grid part
    way).
    """
    model = loaded.model
    device = loaded.input_device
    ids = batch.input_ids.to(device)
    mask = batch.attention_mask.to(device)
    pos = batch.position_ids.to(device)
    B, S = ids.shape
    hooks.plan = {}
    hooks.example_ids = np.asarray(batch.indices)
    prefix = None
    extra = {"logits_to_keep": 1} if forward_accepts(model, "logits_to_keep") else {}
    reaches = [min(edit_reach([c], batch.indices), S) for c in conditions]  # S: the first token, or every token
    if S > 1 and min(reaches) < S:
        prefix = stored.cache.get(stored.batch_no) if stored is not None else None
        if prefix is None:
            with torch.no_grad(), evaluating(model):  # the prefix's keys and values are kept, not its logits
                out = model(
                    input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=pos[:, :-1], use_cache=True,
                    **extra,
                )
            prefix = _cache_tensors(out.past_key_values)
            if stored is not None:
                stored.cache.put(stored.batch_no, prefix)
    # a call's rows: `rows_per_call` answer tokens; over several tokens a row, no more rows and no more tokens than
    # `rows_per_call` x WHOLE_PROMPT_TOKENS
    tokens = max(reaches)
    per_call = max(1, (rows_per_call * WHOLE_PROMPT_TOKENS // max(tokens, WHOLE_PROMPT_TOKENS) if tokens > 1
                       else rows_per_call) // B)
    copies = None
    for first in range(0, len(conditions), per_call):
        group = conditions[first : first + per_call]
        G = len(group)
        run = max(reaches[first : first + per_call])  # the last tokens this call runs: all S, no prefix, or fewer
        cached = run < S
        if cached and (copies is None or copies.new_tokens != run):
            kept = [(k[:, :, : S - run], v[:, :, : S - run]) for k, v in prefix]
            copies = _PrefixCopies(kept, min(per_call, len(conditions)), B, run)
        plan: dict[str, list] = {kind: [] for kind in (*MODULE_OUTPUTS, RESID, Z, POST)}
        for g, cond in enumerate(group):
            if cond.flt is None:
                continue
            for kind in cond.kinds:
                plan[kind].append((g * B, (g + 1) * B, cond.flt, cond.layers))
        last = slice(S - run, S)  # every position, or the last `run` tokens against the prefix
        kwargs = dict(
            input_ids=ids[:, last].repeat(G, 1),
            attention_mask=mask.repeat(G, 1),
            position_ids=pos[:, last].repeat(G, 1),
            use_cache=cached,
            **extra,
        )
        if cached:
            kwargs["past_key_values"] = copies.cache(G)
        hooks.plan = plan
        share = G > 1 and cached and share_unedited
        hooks.shared = (G, B, first_edited_layer(group, loaded.n_layers)) if share else None
        hooks.mlp_share = mlp_sharing(group, loaded.n_layers, B) if G > 1 and share_unedited else {}
        try:
            with torch.no_grad(), evaluating(model):
                logits = model(**kwargs).logits[:, -1, :]
        finally:
            hooks.end_call()
        for g in range(G):
            yield first + g, logits[g * B : (g + 1) * B]


def edit_reach(conditions: Sequence[Condition], rows=None) -> int:
    """How many tokens from the end the earliest token any of `conditions` edits lies, over the prompts at places
    `rows` of the list evaluated (default: all of them); 1: the answer position only, `ablations.EVERY_TOKEN` for an
    edit of every token (`RowPatch.reach`, `PlacedEdit.reach`). The tokens before it compute what they compute
    unedited."""
    return max((c.flt.reach(rows) for c in conditions if isinstance(c.flt, (RowPatch, PlacedEdit))), default=1)


def edited_before_mlp(cond: Condition, layer: int, n_layers: int) -> frozenset | None:
    """The sites (kind, layer) `cond` edits before the input of MLP `layer` (1-based) is read: attention and the heads
    of layers up to it, MLPs and neurons of the layers below it, the stream after the blocks below it; None when it
    edits that MLP's own neurons (its output is then its own whatever its input)."""
    if cond.flt is None:
        return frozenset()
    layers = range(1, n_layers + 1) if cond.layers is None else cond.layers
    if POST in cond.kinds and layer in layers:
        return None
    before = {ATTN: layer + 1, Z: layer + 1, MLP: layer, POST: layer, RESID: layer}  # edited layers below these
    return frozenset((kind, j) for kind in cond.kinds for j in layers if j < before[kind])


def mlp_sharing(conditions: Sequence[Condition], n_layers: int, rows: int) -> dict[int, tuple]:
    """{layer: (kept, inverse, copies, rows)} for each MLP that some of a call's `conditions` (one copy of `rows`
    rows each) give the same input: the same edit (the same object, position and unit) at the same sites before it,
    or none (`edited_before_mlp`). The MLP then runs once per distinct input (`ConditionHooks.mlp_share`). Left out:
    a layer where every condition's input is its own, and a layer whose neurons some condition edits (that edit acts
    inside the MLP, on its rows of the whole call)."""
    out = {}
    for layer in range(1, n_layers + 1):
        keys = []
        for cond in conditions:
            sites = edited_before_mlp(cond, layer, n_layers)
            if sites is None:
                break
            keys.append(None if not sites else (id(cond.flt), repr(cond.position), cond.unit, sites))
        if len(keys) < len(conditions):  # a neuron edit of this layer: its MLP runs on every copy
            continue
        first = {}
        for g, key in enumerate(keys):
            first.setdefault(key, g)
        if len(first) == len(keys):
            continue
        kept = sorted(first.values())
        slot = {g: i for i, g in enumerate(kept)}
        inverse = [slot[first[key]] for key in keys]
        out[layer] = (torch.as_tensor(kept), torch.as_tensor(inverse), len(keys), rows)  # moved to each MLP's device
    return out


def first_edited_layer(conditions: Sequence[Condition], n_layers: int) -> int:
    """The lowest layer whose output any of `conditions` edits (1-based; 0 for the stream before the first block,
    which is then edited as that block's input and nothing is shared): 1 for a filter of every layer, the
    condition's lowest layer for an edit of some layers; n_layers + 1 when none edits anything. An edit of the heads'
    outputs (Z) acts inside its layer's attention, so it counts as an edit of the layer before (that attention runs
    on every copy)."""
    layers = [1 if c.layers is None else min(c.layers) - (c.modules == Z) for c in conditions if c.flt is not None]
    return min(layers, default=int(n_layers) + 1)


def _cache_tensors(cache) -> list[tuple]:
    """(keys, values) of every layer of a transformers cache."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise CoreError(
            "this model's key/value cache has an unknown layout; evaluate with positions='all' (--positions all)"
        )
    return [(layer.keys, layer.values) for layer in layers]


class _PrefixCopies:
    """Key/value buffers holding `copies` condition-major copies of one batch's prefix, plus `new_tokens` slots.

    Filled once per batch (and number of new tokens); every call for a group of conditions writes only its new
    tokens' keys and values into the last slots, so no call copies the prefix again.
    """

    def __init__(self, prefix: list[tuple], copies: int, batch_rows: int, new_tokens: int = 1):
        self.rows = batch_rows
        self.new_tokens = int(new_tokens)
        self.prefix_len = prefix[0][0].shape[-2]
        self.buffers = []
        for k, v in prefix:
            bufs = []
            for t in (k, v):
                B, H, S, d = t.shape
                buf = t.new_empty((copies, B, H, S + self.new_tokens, d))
                buf[:, :, :, :S] = t  # broadcast over the copies
                bufs.append(buf.view(copies * B, H, S + self.new_tokens, d))
            self.buffers.append(tuple(bufs))

    def cache(self, copies: int):
        """A transformers cache over the first `copies` copies (a view: nothing is copied)."""
        rows = copies * self.rows
        cache = DynamicCache()
        cache.layers = [_PrefixLayer(k[:rows], v[:rows], self.prefix_len) for k, v in self.buffers]
        return cache


class _PrefixLayer(DynamicLayer):
    """A cache layer over a preallocated buffer: the prefix, then a slot for each new token."""

    def __init__(self, keys, values, prefix_len: int):
        super().__init__()
        self.keys, self.values = keys, values
        self.prefix_len = prefix_len
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def get_seq_length(self) -> int:
        return self.prefix_len

    def update(self, key_states, value_states, *args, **kwargs):
        rows = key_states.shape[0]
        if key_states.shape[-2] != self.keys.shape[-2] - self.prefix_len or rows > self.keys.shape[0]:
            raise CoreError("internal: a pass against the prefix cache must run as many tokens as the cache has slots")
        # fewer rows than the buffer: the blocks before the first edit run on one copy (ConditionHooks.shared)
        keys, values = self.keys[:rows], self.values[:rows]
        keys[:, :, self.prefix_len :] = key_states
        values[:, :, self.prefix_len :] = value_states
        return keys, values
