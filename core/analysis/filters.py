"""Fourier filters on module outputs (the paper's definition A.6, docs/method.md#filter) and evaluation under them.

For a module output x in R^D and a set G of frequencies to remove, the filter returns the y
closest to x whose logits have no component at those frequencies:

    y = argmin ||x - y||^2  subject to  (F W_U y)_i = 0 for every row i of F with frequency in G.

With A = F[G rows] W_U, that is the orthogonal projection onto the null space of A:
y = x - Q Q^T x, Q an orthonormal basis of A's row space (from an SVD, in float64). When Q
spans all of R^D (a model narrower than the number of removed rows) the filter erases the
output entirely; `ProjectionFilter.erased` says so and evaluation results carry the flag.

Low-pass removes the high band (k >= tau), high-pass removes the low band (1 <= k < tau),
keep-one-frequency removes every non-constant frequency but one. The constant row is never
removed. Filters act through forward hooks on the attention and/or MLP module of every layer, at
the answer position (or at every position).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from core.errors import CoreError
from core.analysis.fourier import FourierBasis, band_frequencies, check_tau

MODULE_SETS = {"attn": ("attn",), "mlp": ("mlp",), "both": ("attn", "mlp")}
POSITIONS = ("last", "all")
#: removed = "random-low" / "random-high": a random subspace of the rank of the low / high band filter.
RANDOM_CONTROLS = {"random-low": "low", "random-high": "high"}
RANDOM_CONTROL_SEED = 20240


def rank_tolerance(s_max: float, shape: tuple[int, int], weight_dtype=None) -> float:
    """Singular values at or below this count as zero: numpy's matrix_rank convention,
    S.max() * max(M, N) * eps, with eps of the dtype the weights are stored in (their rounding
    error, not float64's, is what an SVD of the stored weights sees)."""
    return float(s_max) * max(shape) * _eps(weight_dtype)


def _eps(dtype) -> float:
    if dtype is None:
        return float(np.finfo(np.float32).eps)
    name = str(dtype).replace("torch.", "")
    if name == "bfloat16":
        return 2.0**-7
    try:
        return float(np.finfo(np.dtype(name)).eps)
    except TypeError:
        return float(np.finfo(np.float32).eps)


def unembedding_rank(unembedding, weight_dtype=None) -> int:
    """The rank of W_U's number rows, counting singular values above `rank_tolerance`."""
    W_U, weight_dtype = _unembedding_matrix(unembedding, weight_dtype)
    return _rank(np.linalg.svd(W_U, compute_uv=False), W_U.shape, weight_dtype)


def _unembedding_matrix(unembedding, weight_dtype=None) -> tuple[np.ndarray, object]:
    """(W_U as a float64 array, the dtype the model stores it in) from an array, a tensor or an Unembed."""
    weight_dtype = weight_dtype if weight_dtype is not None else _weight_dtype(unembedding)
    matrix = unembedding if hasattr(unembedding, "shape") else getattr(unembedding, "weight", unembedding)
    return _as_numpy(matrix), weight_dtype


def _rank(singular_values: np.ndarray, shape: tuple[int, int], weight_dtype) -> int:
    """How many singular values stand above `rank_tolerance`."""
    s = singular_values
    return int((s > rank_tolerance(s.max(), shape, weight_dtype)).sum()) if s.size and s.max() > 0 else 0


def _weight_dtype(unembedding):
    """The dtype the model stores W_U in: an Unembed's, a tensor's `weight_dtype` tag, else the array's own."""
    tagged = getattr(unembedding, "weight_dtype", None)
    if tagged is not None:
        return tagged
    return getattr(unembedding, "dtype", None)


@dataclass(eq=False)
class ProjectionFilter:
    """Projection onto the null space of F[removed rows] W_U."""

    removed: tuple[int, ...]  # frequencies removed
    basis_name: str
    q: np.ndarray  # (D, rank) orthonormal columns spanning the row space of A
    width: int
    _torch_cache: dict = field(default_factory=dict, repr=False)

    @property
    def rank(self) -> int:
        return int(self.q.shape[1])

    @property
    def erased(self) -> bool:
        """True when the constraint leaves only y = 0: the module output is wiped out."""
        return self.rank >= self.width

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Filter vectors (last axis D) with numpy, in float64."""
        x = np.asarray(x, dtype=float)
        if self.erased:
            return np.zeros_like(x)
        return x - (x @ self.q) @ self.q.T

    def torch_q(self, device):
        import torch

        key = str(device)
        if key not in self._torch_cache:
            self._torch_cache[key] = torch.as_tensor(self.q, dtype=torch.float32, device=device)
        return self._torch_cache[key]


def projection_filter(unembedding, basis: FourierBasis, removed: Sequence[int], weight_dtype=None) -> ProjectionFilter:
    """The filter that removes the frequencies `removed` from what W_U reads off a module output.

    `unembedding`: W_U's number rows (p, D) as an array or tensor, or a `core.models.loading.Unembed`. The
    rank of A = F[removed] W_U counts singular values above `rank_tolerance` for the dtype the
    weights are stored in (`weight_dtype`, else the one the unembedding carries).
    """
    W_U, weight_dtype = _unembedding_matrix(unembedding, weight_dtype)
    if W_U.ndim != 2 or W_U.shape[0] != basis.p:
        raise CoreError(f"the unembedding must have {basis.p} number rows, got shape {W_U.shape}")
    removed = tuple(sorted({int(k) for k in removed}))
    if any(k < 1 or k > basis.n_freq for k in removed):
        raise CoreError(f"frequencies to remove must lie in 1..{basis.n_freq} (the constant is never removed)")
    D = W_U.shape[1]
    rows = basis.rows_of(removed)
    if len(rows) == 0:
        return ProjectionFilter(removed, basis.name, np.zeros((D, 0)), D)
    A = basis.matrix[rows] @ W_U
    _, s, vt = np.linalg.svd(A, full_matrices=False)
    rank = _rank(s, A.shape, weight_dtype)
    return ProjectionFilter(removed, basis.name, vt[:rank].T.copy(), D)


def random_subspace_filter(unembedding, rank: int, seed: int, weight_dtype=None) -> ProjectionFilter:
    """A control for a frequency filter of rank r: remove a random r-dimensional subspace instead.

    The subspace is drawn uniformly (Haar) from the row space of W_U's number rows, the directions
    W_U reads (a subspace drawn from all of R^D would be mostly invisible to W_U and change nothing
    a frequency filter could change). When r reaches the rank of W_U the whole row space is removed.
    """
    W_U, weight_dtype = _unembedding_matrix(unembedding, weight_dtype)
    D = W_U.shape[1]
    if rank >= D:
        return ProjectionFilter((), "random", np.eye(D), D)
    if rank <= 0:
        return ProjectionFilter((), "random", np.zeros((D, 0)), D)
    _, s, vt = np.linalg.svd(W_U, full_matrices=False)
    r_w = _rank(s, W_U.shape, weight_dtype)
    row_space = vt[:r_w].T  # (D, r_w)
    if rank >= r_w:
        return ProjectionFilter((), "random", row_space.copy(), D)
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((r_w, rank))
    q, r = np.linalg.qr(g)
    q = q * np.sign(np.diag(r))  # Haar-uniform orthonormal columns
    return ProjectionFilter((), "random", row_space @ q, D)


def _as_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def low_pass(unembedding, basis: FourierBasis, tau: int) -> ProjectionFilter:
    """Keep frequencies below tau: remove the high band k >= tau."""
    return projection_filter(unembedding, basis, band_frequencies(basis, "high", tau))


def high_pass(unembedding, basis: FourierBasis, tau: int) -> ProjectionFilter:
    """Keep frequencies at or above tau: remove the low band 1 <= k < tau."""
    return projection_filter(unembedding, basis, band_frequencies(basis, "low", tau))


def keep_frequency(unembedding, basis: FourierBasis, k: int) -> ProjectionFilter:
    """Keep one frequency k (and the constant): remove every other frequency."""
    if not 1 <= int(k) <= basis.n_freq:
        raise CoreError(f"frequency to keep must lie in 1..{basis.n_freq}, got {k}")
    return projection_filter(unembedding, basis, [j for j in basis.frequencies if j != int(k)])


@dataclass(frozen=True)
class Ablation:
    """Which filter, on which modules.

    removed: "none", "low", "high" (a band by tau), "keep" (one k), or a random-subspace control
    "random-low" / "random-high": a seeded random subspace of W_U's row space with the rank of the
    low / high band filter at the same tau (docs/method.md#controls).
    """

    modules: str = "none"
    removed: str = "none"
    tau: int | None = None
    keep_k: int | None = None

    def __post_init__(self):
        if self.removed == "none" or self.modules == "none":
            if not (self.removed == "none" and self.modules == "none"):
                raise CoreError("an ablation with no filter must have modules='none' and removed='none'")
            return
        if self.modules not in MODULE_SETS:
            raise CoreError(f"unknown modules {self.modules!r}: choose attn, mlp or both")
        if self.removed in ("low", "high") or self.removed in RANDOM_CONTROLS:
            if self.tau is None:
                raise CoreError(f"removing the {self.removed} band needs a cutoff tau")
        elif self.removed == "keep":
            if self.keep_k is None:
                raise CoreError("keep-one-frequency needs the frequency k to keep")
        else:
            raise CoreError(f"unknown band {self.removed!r}: choose low, high, keep, random-low, random-high or none")

    def label(self) -> str:
        if self.removed == "none":
            return "no filter"
        what = {"attn": "Attn", "mlp": "MLP", "both": "Attn+MLP"}[self.modules]
        if self.removed == "keep":
            return f"{what}: keep only k = {self.keep_k}"
        if self.removed in RANDOM_CONTROLS:
            return f"{what}: random subspace of the {RANDOM_CONTROLS[self.removed]} band's rank removed (tau = {self.tau})"
        return f"{what}: {self.removed} frequencies removed (tau = {self.tau})"

    def build(self, unembedding, basis: FourierBasis) -> ProjectionFilter | None:
        if self.removed == "none":
            return None
        if self.removed == "keep":
            return keep_frequency(unembedding, basis, self.keep_k)
        check_tau(basis, self.tau)
        if self.removed in RANDOM_CONTROLS:
            band = RANDOM_CONTROLS[self.removed]
            matched = projection_filter(unembedding, basis, band_frequencies(basis, band, self.tau))
            seed = RANDOM_CONTROL_SEED + 1000 * int(self.tau) + (1 if band == "high" else 0)
            return random_subspace_filter(unembedding, matched.rank, seed)
        return projection_filter(unembedding, basis, band_frequencies(basis, self.removed, self.tau))


def _filter_hook(flt: ProjectionFilter, positions: str):

    def hook(module, args, out):
        t = out[0] if isinstance(out, tuple) else out
        if t.requires_grad:
            t = t.clone()
        sel = t[:, -1, :] if positions == "last" else t
        if flt.erased:
            sel.zero_()
        else:
            q = flt.torch_q(sel.device)
            x = sel.float()
            sel.copy_((x - (x @ q) @ q.T).to(sel.dtype))
        if isinstance(out, tuple):
            return (t, *out[1:])
        return t

    return hook


@contextmanager
def filtered(loaded, flt: ProjectionFilter | None, modules: str = "both", positions: str = "last"):
    """Apply `flt` to the chosen modules' outputs at every layer while the block is active."""
    if positions not in POSITIONS:
        raise CoreError(f"unknown positions {positions!r}: choose 'last' (answer position) or 'all'")
    if flt is None:
        yield
        return
    if modules not in MODULE_SETS:
        raise CoreError(f"unknown modules {modules!r}: choose attn, mlp or both")
    if flt.width != loaded.width:
        raise CoreError(f"the filter was built for width {flt.width}, the model has width {loaded.width}")
    handles = []
    try:
        for kind in MODULE_SETS[modules]:
            for mod in getattr(loaded.parts, kind):
                handles.append(mod.register_forward_hook(_filter_hook(flt, positions)))
        yield
    finally:
        for h in handles:
            h.remove()


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
    import torch

    logp = torch.log_softmax(logits.float(), dim=-1)
    return -logp.gather(1, answer_token_ids.view(-1, 1).to(logp.device)).squeeze(1)


def evaluate(
    loaded,
    texts: Sequence[str],
    answers: Sequence[int],
    p: int,
    flt: ProjectionFilter | None = None,
    modules: str = "both",
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
        loaded, texts, answers, p, [Condition(flt, modules)], positions, batch_size, progress=progress, desc=desc, on_batch=on_batch
    )[0]


def evaluate_by_full_recompute(loaded, texts, answers, p: int, flt, modules: str = "both", batch_size: int = 32):
    """(predictions, losses) with the filter at the answer position, every position recomputed: the
    definition that the answer-position path (`evaluate_conditions`) must reproduce. For checks only
    (tests, `scripts/bench_core.py --full`); it costs one full pass per condition."""
    import torch

    from core.models.capture import forward_batch, prepare_batches

    answers = np.asarray(answers, dtype=np.int64)
    ids = torch.as_tensor(loaded.numbers.ids_for(p))
    preds, losses = np.zeros(len(texts), np.int64), np.zeros(len(texts))
    with torch.no_grad(), filtered(loaded, flt, modules, "last"):
        for batch in prepare_batches(loaded.tokenizer, list(texts), batch_size):
            logits = forward_batch(loaded, batch)
            preds[batch.indices] = logits[:, ids.to(logits.device)].argmax(-1).cpu().numpy()
            target = ids[torch.as_tensor(answers[batch.indices])].to(logits.device)
            losses[batch.indices] = answer_losses(logits, target).cpu().numpy()
    return preds, losses


@dataclass(frozen=True, eq=False)
class Condition:
    """One ablated condition: a filter (None: the model as it is) on the attention and/or MLP outputs."""

    flt: ProjectionFilter | None
    modules: str = "both"

    def __post_init__(self):
        if self.modules not in MODULE_SETS:
            raise CoreError(f"unknown modules {self.modules!r}: choose attn, mlp or both")


@dataclass
class GridProgress:
    """Partial results of `evaluate_conditions`, for checkpoints: rows done so far in every condition."""

    predictions: np.ndarray  # (C, N) int64
    losses: np.ndarray  # (C, N) float64
    done: np.ndarray  # (N,) bool: rows whose results are final in every condition

    @classmethod
    def empty(cls, n_conditions: int, n: int) -> "GridProgress":
        return cls(np.zeros((n_conditions, n), np.int64), np.zeros((n_conditions, n)), np.zeros(n, bool))

    def fits(self, n_conditions: int, n: int) -> bool:
        return self.predictions.shape == (n_conditions, n) and self.losses.shape == (n_conditions, n) and self.done.shape == (n,)


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

    def use_for(self, key) -> None:
        """Start over when the prompts (or their batching) change."""
        if key != self.key:
            self.key, self.entries, self.bytes, self.batches = key, {}, 0, None

    def get(self, batch_no: int):
        return self.entries.get(batch_no)

    def put(self, batch_no: int, prefix: list) -> None:
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in prefix)
        if self.bytes + size <= self.max_bytes:
            self.entries[batch_no] = prefix
            self.bytes += size


#: Rows of one answer-position pass (conditions x prompts): wide enough that per-call overhead is small.
ROWS_PER_CALL = 512


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
    next evaluation of the same prompts.
    """
    import time

    import torch

    from core.models.capture import prepare_batches, progress_bar

    if positions not in POSITIONS:
        raise CoreError(f"unknown positions {positions!r}: choose 'last' (answer position) or 'all'")
    conditions = list(conditions)
    if not conditions:
        raise CoreError("no conditions to evaluate")
    for c in conditions:
        if c.flt is not None and c.flt.width != loaded.width:
            raise CoreError(f"the filter was built for width {c.flt.width}, the model has width {loaded.width}")
    answers = np.asarray(answers, dtype=np.int64)
    if len(answers) != len(texts):
        raise CoreError(f"{len(texts)} prompts but {len(answers)} answers")
    if len(answers) and (answers.min() < 0 or answers.max() >= p):
        raise CoreError(f"answers must lie in 0..{p - 1}")
    number_ids = torch.as_tensor(loaded.numbers.ids_for(p))
    n, C = len(texts), len(conditions)
    state = resume if resume is not None and resume.fits(C, n) else GridProgress.empty(C, n)
    if prefix_cache is not None:
        prefix_cache.use_for((id(loaded.model), tuple(texts), batch_size))
        if prefix_cache.batches is None:
            prefix_cache.batches = prepare_batches(loaded.tokenizer, texts, batch_size)
        prepared = prefix_cache.batches
    else:
        prepared = prepare_batches(loaded.tokenizer, texts, batch_size)
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

    try:
        if positions == "all":
            for c, cond in enumerate(conditions):
                with filtered(loaded, cond.flt, cond.modules, "all"):
                    for _, batch in batches:
                        record(c, batch.indices, _full_pass(loaded, batch))
                        bar.update(len(batch.indices))
            state.done[:] = True
            if on_batch is not None:
                on_batch(n, n)
        else:
            with _ConditionHooks(loaded) as hooks:
                for batch_no, batch in batches:
                    stored = _StoredPrefix(prefix_cache, batch_no) if prefix_cache is not None else None
                    for c, logits in _answer_position_passes(loaded, batch, conditions, hooks, rows_per_call, stored=stored):
                        record(c, batch.indices, logits)
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
        )
        for c, cond in enumerate(conditions)
    ]


def _full_pass(loaded, batch):
    from core.models.capture import forward_batch

    return forward_batch(loaded, batch)


class _ConditionHooks:
    """Hooks on every attention and MLP module that filter, per block of rows, the last position.

    `plan` maps "attn"/"mlp" to [(first row, end row, filter)]; empty while the prefix runs.
    """

    def __init__(self, loaded):
        self.parts = loaded.parts
        self.plan: dict[str, list] = {}
        self.handles = []

    def _hook(self, kind: str):
        def hook(module, args, out):
            steps = self.plan.get(kind)
            if not steps:
                return None
            t = out[0] if isinstance(out, tuple) else out
            if t.requires_grad:
                t = t.clone()
            last = t[:, -1, :]
            for start, stop, flt in steps:
                rows = last[start:stop]
                if flt.erased:
                    rows.zero_()
                else:
                    q = flt.torch_q(rows.device)
                    x = rows.float()
                    rows.copy_((x - (x @ q) @ q.T).to(rows.dtype))
            if isinstance(out, tuple):
                return (t, *out[1:])
            return t

        return hook

    def __enter__(self):
        for kind in ("attn", "mlp"):
            for mod in getattr(self.parts, kind):
                self.handles.append(mod.register_forward_hook(self._hook(kind)))
        # registered after, run before the filter hooks (prepend): the first attention runs on one copy
        first = self.parts.attn[0]
        self.handles.append(first.register_forward_pre_hook(self._share_input, with_kwargs=True, prepend=True))
        self.handles.append(first.register_forward_hook(self._share_output, prepend=True))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []
        self.plan = {}
        self.shared = None

    #: (copies, rows per copy) while a call runs conditions whose first-attention inputs are identical
    shared: tuple[int, int] | None = None

    def _share_input(self, module, args, kwargs):
        """Every condition's answer position reaches layer 1's attention unchanged: keep one copy."""
        if not self.shared:
            return None
        copies, rows = self.shared
        total = copies * rows
        return _first_rows(args, total, rows), _first_rows(kwargs, total, rows)

    def _share_output(self, module, args, out):
        if not self.shared:
            return None
        copies = self.shared[0]
        t = out[0] if isinstance(out, tuple) else out
        t = t.repeat(copies, *([1] * (t.dim() - 1)))
        return (t, *out[1:]) if isinstance(out, tuple) else t


def _first_rows(value, total: int, rows: int):
    """`value` with every tensor whose first dimension is `total` cut to its first `rows` rows."""
    import torch

    if isinstance(value, torch.Tensor):
        return value[:rows] if value.dim() and value.shape[0] == total else value
    if isinstance(value, tuple):
        return tuple(_first_rows(v, total, rows) for v in value)
    if isinstance(value, list):
        return [_first_rows(v, total, rows) for v in value]
    if isinstance(value, dict):
        return {k: _first_rows(v, total, rows) for k, v in value.items()}
    return value


@dataclass
class _StoredPrefix:
    cache: PrefixCache
    batch_no: int


def _answer_position_passes(
    loaded,
    batch,
    conditions: Sequence[Condition],
    hooks: _ConditionHooks,
    rows_per_call: int,
    share_first: bool = True,
    stored: _StoredPrefix | None = None,
):
    """Yield (condition index, answer-position logits (B, vocab)) for every condition on one batch.

    With `share_first`, the first layer's attention (whose input at the answer position is the
    same in every condition: no filter has acted yet) runs on one copy of the batch and its output
    is copied to every condition before the filters act.
    """
    import torch

    from core.models.capture import forward_accepts

    model = loaded.model
    device = loaded.input_device
    ids = batch.input_ids.to(device)
    mask = batch.attention_mask.to(device)
    pos = batch.position_ids.to(device)
    B, S = ids.shape
    hooks.plan = {}
    prefix = None
    if S > 1:
        prefix = stored.cache.get(stored.batch_no) if stored is not None else None
        if prefix is None:
            with torch.no_grad():
                out = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=pos[:, :-1], use_cache=True)
            prefix = _cache_tensors(out.past_key_values)
            if stored is not None:
                stored.cache.put(stored.batch_no, prefix)
    per_call = max(1, rows_per_call // B)
    extra = {"logits_to_keep": 1} if forward_accepts(model, "logits_to_keep") else {}
    copies = _PrefixCopies(prefix, min(per_call, len(conditions)), B) if prefix is not None else None
    for first in range(0, len(conditions), per_call):
        group = conditions[first : first + per_call]
        G = len(group)
        plan: dict[str, list] = {"attn": [], "mlp": []}
        for g, cond in enumerate(group):
            if cond.flt is None:
                continue
            for kind in MODULE_SETS[cond.modules]:
                plan[kind].append((g * B, (g + 1) * B, cond.flt))
        kwargs = dict(
            input_ids=ids[:, -1:].repeat(G, 1),
            attention_mask=mask.repeat(G, 1),
            position_ids=pos[:, -1:].repeat(G, 1),
            use_cache=True,
            **extra,
        )
        if copies is not None:
            kwargs["past_key_values"] = copies.cache(G)
        hooks.plan = plan
        hooks.shared = (G, B) if G > 1 and copies is not None and share_first else None
        try:
            with torch.no_grad():
                logits = model(**kwargs).logits[:, -1, :]
        finally:
            hooks.plan = {}
            hooks.shared = None
        for g in range(G):
            yield first + g, logits[g * B : (g + 1) * B]


def _cache_tensors(cache) -> list[tuple]:
    """(keys, values) of every layer of a transformers cache."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise CoreError(
            "this model's key/value cache has an unknown layout; evaluate with positions='all' (--positions all)"
        )
    return [(layer.keys, layer.values) for layer in layers]


class _PrefixCopies:
    """Key/value buffers holding `copies` condition-major copies of one batch's prefix, plus one slot.

    Filled once per batch; every call for a group of conditions writes only the answer token's
    keys and values into the last slot, so no call copies the prefix again.
    """

    def __init__(self, prefix: list[tuple], copies: int, batch_rows: int):
        self.rows = batch_rows
        self.prefix_len = prefix[0][0].shape[-2]
        self.buffers = []
        for k, v in prefix:
            bufs = []
            for t in (k, v):
                B, H, S, d = t.shape
                buf = t.new_empty((copies, B, H, S + 1, d))
                buf[:, :, :, :S] = t  # broadcast over the copies
                bufs.append(buf.view(copies * B, H, S + 1, d))
            self.buffers.append(tuple(bufs))

    def cache(self, copies: int):
        """A transformers cache over the first `copies` copies (a view: nothing is copied)."""
        from transformers.cache_utils import DynamicCache

        rows = copies * self.rows
        cache = DynamicCache()
        cache.layers = [_PrefixLayer(k[:rows], v[:rows], self.prefix_len) for k, v in self.buffers]
        return cache


def _prefix_layer_class():
    from transformers.cache_utils import DynamicLayer

    class PrefixLayer(DynamicLayer):
        """A cache layer over a preallocated buffer: the prefix, then one slot for the new token."""

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
            if key_states.shape[-2] != 1 or rows > self.keys.shape[0]:
                raise CoreError("internal: the answer-position pass must run one token per row against the prefix cache")
            # fewer rows than the buffer: the first layer's attention runs on one copy (_SharedFirstAttention)
            keys, values = self.keys[:rows], self.values[:rows]
            keys[:, :, self.prefix_len :] = key_states
            values[:, :, self.prefix_len :] = value_states
            return keys, values

    return PrefixLayer


def _PrefixLayer(keys, values, prefix_len):
    global _PREFIX_LAYER
    if _PREFIX_LAYER is None:
        _PREFIX_LAYER = _prefix_layer_class()
    return _PREFIX_LAYER(keys, values, prefix_len)


_PREFIX_LAYER = None
