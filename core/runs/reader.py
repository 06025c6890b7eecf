"""One reader of a cached run, for the dashboard, the claims and the scripts (no torch, no Streamlit).

A run is a folder of the cache (core.runs.cache): a manifest and long-format tables. `RunReader`
gives its manifest's fields as typed properties, its tables by checked name (`Table`, one member per
table of the cache's `TABLE_COLUMNS`), and the Fourier basis facts the pages draw with (`basis`:
span, k_max and periods, from core.analysis.fourier, so the period rule lives in one place; see
docs/method.md, "Fourier basis").

How a table is loaded is the reader's one seam: by default it is read from disk once per reader; the
dashboard hands in a loader that shares one copy of each table across all sessions (app/common.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Callable

import pandas as pd

from core.analysis.fourier import fourier_basis
from core.errors import CoreError
from core.paper import TABLE1_TAU
from core.runs.cache import read_manifest, read_table
from core.runs.tables import TABLE_COLUMNS


class Table(StrEnum):
    """The tables a run can hold (core.runs.cache.TABLE_COLUMNS), by name."""

    EXAMPLES = "examples"
    LAYER_ACCURACY = "layer_accuracy"
    MODULE_SPECTRA = "module_spectra"
    MODULE_SPECTRA_BASELINE = "module_spectra_baseline"
    MODULE_LOGITS = "module_logits"
    FINAL_WAVES = "final_waves"
    EMBEDDING_SPECTRUM = "embedding_spectrum"
    EMBEDDING_CLUSTERS = "embedding_clusters"
    ABLATIONS = "ablations"
    ABLATION_ERRORS = "ablation_errors"
    ERROR_ANALYSIS = "error_analysis"
    TRAINING_LOG = "training_log"
    NUMBER_SPECTRUM = "number_spectrum"
    NUMBER_PROBES = "number_probes"
    GENERATIONS = "generations"
    PHASE_LOCKING = "phase_locking"
    WAVE_PEAKS = "wave_peaks"
    PHASE_SHIFT = "phase_shift"
    PHASE_SHIFT_ANSWERS = "phase_shift_answers"
    GROUP_SHIFT = "group_shift"
    GROUP_SHIFT_ANSWERS = "group_shift_answers"
    PERIOD_ABLATION = "period_ablation"
    NUMBER_ROWS_ORIGIN = "number_rows_origin"
    PATCHING = "patching"
    HEAD_SPECTRA = "head_spectra"
    HEAD_LOCKING = "head_locking"
    HELIX_FIT = "helix_fit"
    HELIX_POINTS = "helix_points"
    HELIX_PATCHING = "helix_patching"
    HELIX_CLOCK = "helix_clock"
    ATTRIBUTION = "attribution"
    POSITION_PATCHING = "position_patching"
    NEURON_FITS = "neuron_fits"
    NEURONS = "neurons"

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns every run's copy of this table has (it may carry more)."""
        return TABLE_COLUMNS[self.value]


if {t.value for t in Table} != set(TABLE_COLUMNS):  # the cache gained or lost a table: name it here too
    raise CoreError(
        f"internal: Table and TABLE_COLUMNS differ: {sorted({t.value for t in Table} ^ set(TABLE_COLUMNS))}"
    )


def table_name(name: Table | str) -> Table:
    """`name` as a Table; an unknown name is an error, not an empty read."""
    try:
        return Table(name)
    except ValueError:
        raise CoreError(f"internal: no table {name!r} in a run (tables: {', '.join(t.value for t in Table)})") from None


@dataclass(frozen=True)
class Basis:
    """What a page needs of a Fourier basis over a run's numbers 0..p-1: period T = span / k, k = 1..k_max."""

    name: str
    p: int
    span: int
    k_max: int

    def period(self, k: float) -> float:
        return self.span / k


@lru_cache(maxsize=64)
def basis_of(p: int, name: str) -> Basis:
    """The facts of core.analysis.fourier's basis `name` over p numbers (its rules, not a copy of them)."""
    b = fourier_basis(int(p), name)
    return Basis(name, int(p), int(round(float(b.period(1)))), b.n_freq)


def read_run_table(cache_dir: str | Path, run: str, name: Table | str) -> pd.DataFrame:
    """One table of a run from disk, categorical columns as text (as every reader sees them)."""
    frame = read_table(cache_dir, run, table_name(name).value)
    for col in frame.columns:
        if isinstance(frame[col].dtype, pd.CategoricalDtype):
            frame[col] = frame[col].astype(str)
    return frame


#: A table loader: (reader, table) -> frame.
Loader = Callable[["RunReader", Table], pd.DataFrame]


class RunReader:
    """A run of a cache folder: its manifest, its tables by `Table`, its basis facts.

    `manifest`: the run's manifest when the caller has it already (the dashboard lists runs once);
    `label`: how to name the run (default: the manifest's label); `load`: how to read a table
    (default: from disk, once per reader)."""

    def __init__(
        self,
        cache_dir: str | Path,
        name: str,
        manifest: dict | None = None,
        label: str | None = None,
        load: Loader | None = None,
    ):
        self.cache_dir, self.name = str(cache_dir), name
        self.manifest = manifest if manifest is not None else read_manifest(cache_dir, name)
        self.label = label if label is not None else self.manifest.get("label", name)
        self._load = load
        self._tables: dict[Table, pd.DataFrame] = {}

    def __repr__(self) -> str:
        return f"RunReader({self.cache_dir!r}, {self.name!r})"

    # ------------------------------------------------------------------ tables

    def table(self, name: Table) -> pd.DataFrame:
        """The table `name` (a `Table`; a string naming no table is an error, and so is a table this run's
        manifest does not list: the same error the cache gives, raised before any loader is asked)."""
        t = table_name(name)
        if not self.has(t):
            raise CoreError(f"run {self.name} has no table {t.value!r}")
        if self._load is not None:
            return self._load(self, t)
        if t not in self._tables:
            self._tables[t] = read_run_table(self.cache_dir, self.name, t)
        return self._tables[t]

    def has(self, name: Table) -> bool:
        return table_name(name).value in self.tables

    @property
    def tables(self) -> dict:
        """The manifest's table entries (file, rows, sha256, columns) by name."""
        return self.manifest.get("tables") or {}

    def not_applicable(self, name: Table) -> str | None:
        """Why this run lacks the table `name`, when its manifest says (a digit-splitting model's)."""
        return (self.manifest.get("not_applicable") or {}).get(table_name(name).value)

    def not_computed(self, name: Table) -> str | None:
        """Why `precompute --stages` left the table `name` out of this run, when it did."""
        return (self.manifest.get("not_computed") or {}).get(table_name(name).value)

    def why_absent(self, name: Table) -> str | None:
        """Why this run lacks the table `name`, whichever the manifest says: it does not apply to the model, or a
        stage was left out (None when the manifest says neither)."""
        return self.not_applicable(name) or self.not_computed(name)

    # ------------------------------------------------------------------ manifest fields

    @property
    def created(self) -> str:
        """When the run was made: it keys every cache of the run's tables, so a rebuilt run is read afresh."""
        return str(self.manifest.get("created", ""))

    @property
    def p(self) -> int:
        """How many numbers the number line has (0..p-1)."""
        return int(self.manifest["p"])

    @property
    def n_layers(self) -> int:
        return int(self.manifest["n_layers"])

    @property
    def width(self):
        return self.manifest.get("width")

    @property
    def split(self) -> str:
        return (self.manifest.get("task") or {}).get("split", "test")

    @property
    def task(self) -> str:
        """The run's task ("addition", "reverse-polish", "multiplication"; core.tasks.TASKS)."""
        return str((self.manifest.get("task") or {}).get("task", "addition"))

    @property
    def max_operand(self) -> int:
        """The task's largest operand (its questions' operands go from 0 to it)."""
        return int((self.manifest.get("task") or {}).get("max_operand", 260))

    @property
    def dataset_seed(self) -> int:
        return int((self.manifest.get("task") or {}).get("dataset_seed", 0))

    @property
    def n_examples(self):
        return (self.manifest.get("task") or {}).get("n_examples")

    @property
    def run_basis(self) -> str:
        """The basis the run's filters (ablations) were computed in."""
        return self.manifest.get("basis", "paper")

    @property
    def unembedding_rank(self):
        return self.manifest.get("unembedding_rank")

    @property
    def number_representations(self) -> dict:
        return self.manifest.get("number_representations") or {}

    # ------------------------------------------------------------------ the Fourier basis

    def basis(self, name: str = "paper") -> Basis:
        """The basis `name` over this run's numbers (span, k_max, periods)."""
        return basis_of(self.p, name)

    def default_tau(self, basis: str = "paper") -> int:
        """The paper's cutoff (Table 1's tau), or the highest frequency of a shorter number line."""
        return min(TABLE1_TAU, self.basis(basis).k_max)

    def clamp_tau(self, tau: int, basis: str = "paper") -> int:
        """A cutoff inside 2..k_max of the basis."""
        return max(2, min(int(tau), self.basis(basis).k_max))
