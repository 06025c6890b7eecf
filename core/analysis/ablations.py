"""Which filter on which modules: the ablation specs (docs/method.md, "Filter", "Controls"), torch-free.

An `Ablation` names a filter by what it removes (a band at a cutoff tau, all but one frequency, or
a random-subspace control) and the modules it acts on ("attn", "mlp" or "both", the names of
`core.models.names`); `Ablation.build` makes its `ProjectionFilter` from W_U. A `Condition` is a
built filter on its modules, what `core.analysis.evaluation.evaluate_conditions` runs. The
dashboard reads these at page load, so nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.analysis.filters import (
    ProjectionFilter,
    energy_matched_filter,
    keep_frequency,
    projection_filter,
    random_subspace_filter,
    removed_energy_share,
)
from core.analysis.fourier import FourierBasis, band_frequencies, check_tau
from core.errors import CoreError
from core.models.names import ATTN, BOTH, MLP, MODULE_SETS, POST, RESID, Z, check_modules
from core.models.positions import ANSWER, check_position

POSITIONS = ("last", "all")
#: removed = "random-low" / "random-high": a random subspace of the rank of the low / high band filter.
RANDOM_CONTROLS = {"random-low": "low", "random-high": "high"}
#: removed = "matched-low" / "matched-high": a random subspace matched to the band filter's rank *and* to the share
#: of the module outputs' energy it removes (`core.analysis.filters.energy_matched_filter`); needs those outputs'
#: second moment, so it exists only where a run's weights were at hand.
MATCHED_CONTROLS = {"matched-low": "low", "matched-high": "high"}
CONTROLS = {**RANDOM_CONTROLS, **MATCHED_CONTROLS}
RANDOM_CONTROL_SEED = 20240


def check_positions(positions: str) -> str:
    """`positions` if it is "last" (the answer position) or "all"; else a clear error."""
    if positions not in POSITIONS:
        raise CoreError(f"unknown positions {positions!r}: choose 'last' (answer position) or 'all'")
    return positions


@dataclass(frozen=True)
class Ablation:
    """Which filter, on which modules.

    removed: "none", "low", "high" (a band by tau), "keep" (one k), or a random-subspace control
    "random-low" / "random-high": a seeded random subspace of W_U's row space with the rank of the
    low / high band filter at the same tau, or "matched-low" / "matched-high": the same draw tilted until it
    removes as much of the modules' output energy as the band does (docs/method.md#controls); `draw` numbers
    a control's draws (draw 0 keeps the seed every run before draws existed used).
    """

    modules: str = "none"
    removed: str = "none"
    tau: int | None = None
    keep_k: int | None = None
    #: Which draw of a random-subspace control (0 for everything else): draws differ only in their seed.
    draw: int = 0

    def __post_init__(self):
        if self.removed == "none" or self.modules == "none":
            if not (self.removed == "none" and self.modules == "none"):
                raise CoreError("an ablation with no filter must have modules='none' and removed='none'")
            return
        check_modules(self.modules)
        if self.removed in ("low", "high") or self.removed in CONTROLS:
            if self.tau is None:
                raise CoreError(f"removing the {self.removed} band needs a cutoff tau")
        elif self.removed == "keep":
            if self.keep_k is None:
                raise CoreError("keep-one-frequency needs the frequency k to keep")
        else:
            raise CoreError(f"unknown band {self.removed!r}: choose low, high, keep, random-low, random-high, "
                            "matched-low, matched-high or none")

    def label(self) -> str:
        if self.removed == "none":
            return "no filter"
        what = {ATTN: "Attn", MLP: "MLP", BOTH: "Attn+MLP"}[self.modules]
        if self.removed == "keep":
            return f"{what}: keep only k = {self.keep_k}"
        if self.removed in CONTROLS:
            band = CONTROLS[self.removed]
            draw = f", draw {self.draw + 1}" if self.draw else ""
            match = "rank and energy" if self.removed in MATCHED_CONTROLS else "rank"
            return f"{what}: random subspace of the {band} band's {match} removed (tau = {self.tau}{draw})"
        return f"{what}: {self.removed} frequencies removed (tau = {self.tau})"

    def build(self, unembedding, basis: FourierBasis, second_moment=None) -> ProjectionFilter | None:
        """The filter this ablation names, built from W_U (None for no filter). An energy-matched control
        needs `second_moment`, the D x D sum of x x^T over the outputs of the modules it acts on."""
        if self.removed == "none":
            return None
        if self.removed == "keep":
            return keep_frequency(unembedding, basis, self.keep_k)
        check_tau(basis, self.tau)
        if self.removed in CONTROLS:
            band = CONTROLS[self.removed]
            banded = projection_filter(unembedding, basis, band_frequencies(basis, band, self.tau))
            seed = RANDOM_CONTROL_SEED + 1000 * int(self.tau) + (1 if band == "high" else 0) + 7919 * int(self.draw)
            if self.removed in RANDOM_CONTROLS:
                return random_subspace_filter(unembedding, banded.rank, seed)
            if second_moment is None:
                raise CoreError(f"{self.label()} needs the second moment of the {self.modules} outputs")
            target = removed_energy_share(banded, second_moment)
            return energy_matched_filter(unembedding, banded.rank, seed, second_moment, target).flt
        return projection_filter(unembedding, basis, band_frequencies(basis, self.removed, self.tau))


@dataclass(eq=False)
class FunctionEdit:
    """A researcher's own edit of one site: `fn` takes the module output at the answer position, a float32 tensor
    (rows, width), and returns the edited rows of the same shape (it may edit in place and return them). It stands
    where evaluation expects a filter (`width`, `rank`, `erased`)."""

    fn: object
    width: int
    rank: int = 0
    erased: bool = False

    def __post_init__(self):
        if not callable(self.fn):
            raise CoreError(f"the edit must be a function of the rows (a tensor), got {type(self.fn).__name__}")


#: The reach of an edit of every token: more tokens than any prompt has.
EVERY_TOKEN = 2**31


def tokens_back(back, rows=None) -> int:
    """The largest of `back` (tokens counted from the end: one for every prompt, or one per prompt) over the prompts
    at places `rows` (default: all)."""
    back = np.asarray(back)
    if back.ndim and rows is not None:
        back = back[np.asarray(rows)]
    return int(back.max())


@dataclass(frozen=True, eq=False)
class RowPatch:
    """Activation patching: each prompt's vector at one site replaced by a given one (the same site of the prompt it
    is paired with, or a fit of it; core.analysis.patching). `values` (prompts, width) is indexed by the prompt's
    place in the list evaluated, never by batch order; `back` says which token, counted from the end (1: the answer
    position), one for every prompt or one per prompt; `columns` (first, end) replaces only those columns (a head's
    slice of the attention's per-head outputs, TransformerLens' hook_z), else the whole vector. It stands where
    evaluation expects a filter (`width`, `rank`, `erased`)."""

    values: object
    back: object = 1
    columns: tuple[int, int] | None = None

    def __post_init__(self):
        shape = getattr(self.values, "shape", ())
        if len(shape) != 2 or shape[0] < 1:
            raise CoreError(f"a patch needs one vector per prompt, (prompts, width); got shape {tuple(shape)}")
        back = np.asarray(self.back)
        if back.ndim > 1 or (back.ndim == 1 and len(back) != shape[0]) or (back < 1).any():
            raise CoreError("a patch's token positions count from the end (1: the answer position): one for every "
                            f"prompt or one per prompt ({shape[0]}), each at least 1")

    @property
    def width(self) -> int:
        return int(self.values.shape[1])

    def reach(self, rows=None) -> int:
        """How far from the end the earliest patched token lies (1: the answer position only), over the prompts at
        places `rows` of the list evaluated (default: all)."""
        return tokens_back(self.back, rows)

    rank = 0
    erased = False


@dataclass(frozen=True, eq=False)
class LayerEdits:
    """An edit of a group of layers: one edit per 1-based layer of one module kind, each its own (a phase shift capped
    at that module's own output, or its random control), all in the same forward pass. It stands where evaluation
    expects a filter (`width`, `rank`, `erased`)."""

    by_layer: tuple[tuple[int, object], ...]

    def __post_init__(self):
        if not self.by_layer:
            raise CoreError("a group edit needs at least one layer")
        layers = [int(layer) for layer, _ in self.by_layer]
        if len(set(layers)) != len(layers):
            raise CoreError(f"a group edit names a layer twice: {sorted(layers)}")

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(int(layer) for layer, _ in self.by_layer)

    def at(self, layer: int):
        """The edit of `layer` (a KeyError for a layer the group does not hold)."""
        return dict(self.by_layer)[int(layer)]

    @property
    def width(self) -> int:
        return int(self.by_layer[0][1].width)

    rank = 0
    erased = False


@dataclass(frozen=True, eq=False)
class PlacedEdit:
    """An edit (a filter, a phase shift, a `FunctionEdit`, a `LayerEdits`) placed where it acts, as
    core.analysis.filter_hooks.place_conditions makes it from a `Condition`'s position and unit: `back`, per prompt
    (indexed by its place in the list evaluated) how far from its end the token lies (1: the answer position), or
    None for every token; `columns` (first, end), the slice of the site it acts on (a head's columns of the heads'
    outputs z, one neuron of hook_post), else the whole vector; `out_matrix`, for an edit of the stream's width on a
    head, the head's W_O^h (head_dim, width), through which the edit reaches z (`filter_hooks.placed_rows`).
    `width` is the model's stream width (checked when placed). It stands where evaluation expects a filter."""

    edit: object
    back: object = None
    columns: tuple[int, int] | None = None
    out_matrix: object | None = None
    width: int = 0

    def reach(self, rows=None) -> int:
        """How far from the end the earliest edited token lies over the prompts at places `rows` (default: all);
        `EVERY_TOKEN` for an edit of every token."""
        return EVERY_TOKEN if self.back is None else tokens_back(self.back, rows)

    @property
    def rank(self) -> int:
        return int(getattr(self.edit, "rank", 0))

    @property
    def erased(self) -> bool:
        return bool(getattr(self.edit, "erased", False)) and self.columns is None


#: The 1-based layer's unit sites a `Condition` edits one unit at a time (core.models.names): a head's output before
#: W_O (Z, `unit` the head) and one MLP neuron (POST, `unit` the neuron), both counted from 0.
UNIT_KINDS = (Z, POST)


@dataclass(frozen=True, eq=False)
class Condition:
    """One edited condition: a filter (None: the model as it is) on the attention and/or MLP outputs of
    every layer, or a phase shift (`core.analysis.phase_shift.PhaseShift`) on one layer's attention, MLP
    or residual stream (`layer`, 1-based; None: every layer), or a group's `LayerEdits` on the layers it holds.

    `position` says at which token of each prompt the edit acts (`core.models.positions`: "answer", the default, a
    token index counted on the prompt's own tokens, the operands "a" and "b", or "all"); `unit`, with modules Z or
    POST and a layer, edits one head (its output z_h before W_O: an edit of head_dim width, or of the stream's width
    applied to z_h W_O^h) or one MLP neuron (hook_post: an edit of width 1)."""

    flt: object | None
    modules: str = "both"
    layer: int | None = None
    position: object = "answer"
    unit: int | None = None

    def __post_init__(self):
        check_position(self.position)
        if isinstance(self.flt, RowPatch) and self.position != ANSWER:
            raise CoreError("a patch names its own tokens (RowPatch.back): leave the condition's position 'answer'")
        if self.unit is not None and (self.modules not in UNIT_KINDS or self.layer is None or int(self.unit) < 0):
            raise CoreError("one head or neuron (unit, counted from 0) is edited with modules 'z' (a head) or 'post' "
                            "(a neuron) and its layer")
        if self.modules in UNIT_KINDS and self.unit is not None:
            if isinstance(self.flt, (RowPatch, LayerEdits)) or self.flt is None:
                raise CoreError("a head or neuron is edited by a filter, a phase shift or a function; a patch names "
                                "its own columns")
            return
        if isinstance(self.flt, LayerEdits) and (self.layer is not None or self.modules not in (ATTN, MLP, RESID)):
            raise CoreError("a group edit names its own layers, of one kind of module: give no layer beside it, and "
                            "modules 'attn', 'mlp' or 'resid'")
        if isinstance(self.flt, RowPatch) and self.layer is None:
            raise CoreError("a patch replaces one site: give the layer whose output it replaces")
        if self.modules == RESID:
            if self.layers is None:
                raise CoreError("an edit of the residual stream needs the layer after which it acts")
        elif self.modules in UNIT_KINDS:
            if not isinstance(self.flt, (RowPatch, PlacedEdit)) or self.flt.columns is None:
                raise CoreError(f"the {'heads' if self.modules == Z else 'MLP neurons'} are edited one at a time: "
                                "give the unit (counted from 0), or a patch of its columns")
        else:
            check_modules(self.modules)

    @property
    def layers(self) -> tuple[int, ...] | None:
        """The 1-based layers whose outputs this condition edits (None: every layer)."""
        if isinstance(self.flt, LayerEdits):
            return self.flt.layers
        return None if self.layer is None else (int(self.layer),)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The module outputs this condition edits (`core.models.names`)."""
        return (self.modules,) if self.modules in (RESID, *UNIT_KINDS) else MODULE_SETS[self.modules]
