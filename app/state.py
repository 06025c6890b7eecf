"""What one rerun of the dashboard knows: the cache folder it reads and the view the sidebar chose.

The sidebar (app/sidebar.py) builds a `View` once per rerun; main.py hands it to the page with
`showing(view)`, and a page reads it with `page_view()` (app/sidebar.py), which stops the page with
an explanation when there is no run. The view lives for that one rerun only (a context variable
of the script's thread), not in `st.session_state`: the widgets keep their own state there, and
the URL mirrors them, so a shared link rebuilds the same view.

Code that Streamlit runs outside the page script (an `st.fragment` rerun, a widget's `on_click`
callback) runs outside `showing(view)` and sees no view: such code must take what it needs as
arguments. None exists today (the Tour's one callback moves the step and reads no view).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from core.files import PROJECT_ROOT
from core.runs.reader import Basis, RunReader


def cache_dir() -> Path:
    """The cache folder the dashboard reads (FOURIER_CACHE_DIR, default: the project's cache/)."""
    return Path(os.environ.get("FOURIER_CACHE_DIR", PROJECT_ROOT / "cache"))


@dataclass(frozen=True)
class View:
    """The sidebar's selection: what every page draws."""

    #: the chosen run, and the run drawn beside it (only pages that compare offer one)
    run: RunReader
    compare: RunReader | None
    #: the dataset split whose runs the sidebar lists
    split: str
    #: the Fourier basis of the spectra ("paper" or "dft") and the cutoff between low and high frequencies
    basis: str
    tau: int
    #: presentation mode: large type for a projector
    large: bool

    @property
    def fourier(self) -> Basis:
        """The chosen basis over the chosen run's numbers (span, k_max, periods)."""
        return self.run.basis(self.basis)


_CURRENT: ContextVar[View | None] = ContextVar("fourier_view", default=None)


@contextmanager
def showing(view: View | None):
    """Hand `view` to the page run inside this block (and to the figures it builds)."""
    token = _CURRENT.set(view)
    try:
        yield view
    finally:
        _CURRENT.reset(token)


def current_view() -> View | None:
    """The view of this rerun, or None when there is no run to show (or outside a page)."""
    return _CURRENT.get()


_PROJECTOR: ContextVar[bool] = ContextVar("fourier_projector_sizes", default=False)


@contextmanager
def projector_sizes():
    """Presentation mode's sizes for the figures built inside this block, outside any page: the handout's slides and
    its PDF draw the same figures as the page does, in the type a room can read."""
    token = _PROJECTOR.set(True)
    try:
        yield
    finally:
        _PROJECTOR.reset(token)


def large() -> bool:
    """Presentation mode in this rerun (or inside `projector_sizes`)."""
    v = _CURRENT.get()
    return _PROJECTOR.get() or bool(v is not None and v.large)
