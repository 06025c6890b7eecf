"""What every session shares: figures built once per run version and choice, ready to send.

A class that opens the same link asks for the same figures. Building an Altair chart (every
channel is validated against the Vega-Lite schema) and converting it to the spec Streamlit sends
cost most of a rerun, and they are the same for every session. So each figure function of
`app.figures.logits` (and of `numbers`, `training`, `phase`, `operations`, and named ones of `helix`, `heads`,
`patching`, `attribution`) is wrapped by `shared_figure`: its result is kept in one `st.cache_resource` per
server process, keyed by the function, its arguments (a run by its cache folder, name and
creation time, so a rebuilt run is drawn afresh) and presentation mode (which changes font
sizes), together with the chart already converted to Streamlit's Vega-Lite spec. `vega_spec`
hands that spec to `st.vega_lite_chart`, which then writes exactly the element `st.altair_chart`
would have written (tests/app/test_shared.py compares them byte for byte).

Shared objects are read-only: a figure's DataFrames are handed out as shallow copies (pandas
copies on write, so a page that changes one changes its own copy), a dict as a read-only view, and a chart is never
changed after it is built (Altair's methods return new charts). `shared_view` and `shared_on_run` share a run's
readings (a summary of one of its tables; a sentence, table or pairs of `core.claims`) the same way.

FOURIER_SHARED_FIGURES=0 turns the sharing off (every rerun builds its own figures, as before).
"""

from __future__ import annotations

import functools
import hashlib
import os
from types import MappingProxyType

import pandas as pd
import streamlit as st

from app.state import cache_dir, large
from core.runs.reader import RunReader, Table

try:  # Streamlit's own (private) converter; without it `show_chart` falls back to st.altair_chart
    from streamlit.elements.vega_charts import _convert_altair_to_vega_lite_spec
except ImportError:  # pragma: no cover - a Streamlit without it
    _convert_altair_to_vega_lite_spec = None

#: Attribute under which a shared chart carries its converted spec (set with object.__setattr__:
#: Altair's own __setattr__ would put it into the chart's properties).
SPEC_ATTR = "_shared_vega_lite_spec"


class Unkeyable(TypeError):
    """An argument this module cannot turn into a cache key: the figure is built unshared."""


def _key(value):
    """A hashable, cheap key for a figure argument."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, RunReader):
        return ("run", value.name, value.created)
    if isinstance(value, pd.Series):
        return (
            "series",
            value.name,
            tuple((k, _key(v) if not hasattr(v, "item") else v.item()) for k, v in value.items()),
        )
    if isinstance(value, pd.DataFrame):
        digest = hashlib.blake2b(pd.util.hash_pandas_object(value, index=True).to_numpy().tobytes(), digest_size=16)
        return ("frame", tuple(map(str, value.columns)), tuple(map(str, value.dtypes)), value.shape, digest.hexdigest())
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_key(v) for v in value))
    if isinstance(value, dict):  # e.g. a claim's numbers handed to a figure's legend
        return ("dict", tuple(sorted(((type(k).__name__, str(k)), _key(v)) for k, v in value.items())))
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    raise Unkeyable(type(value).__name__)


def convert(chart) -> dict | None:
    """The Vega-Lite spec Streamlit makes of an Altair chart (data as named Arrow datasets), or None
    when this Streamlit has no such converter (then `show_chart` falls back to st.altair_chart)."""
    return None if _convert_altair_to_vega_lite_spec is None else _convert_altair_to_vega_lite_spec(chart)


def vega_spec(chart) -> dict | None:
    """The converted spec of a shared chart (a fresh top-level copy: Streamlit pops its datasets),
    or None for a chart that was not built by a shared figure."""
    spec = chart.__dict__.get(SPEC_ATTR) if hasattr(chart, "__dict__") else None
    return dict(spec) if spec is not None else None


@st.cache_resource(show_spinner=False, max_entries=400)
def _build(name: str, key: tuple, _func, _args, _kwargs):
    result = _func(*_args, **_kwargs)
    chart = result[0] if isinstance(result, tuple) and result else None
    if chart is not None and hasattr(chart, "to_dict"):
        spec = convert(chart)
        if spec is not None:
            object.__setattr__(chart, SPEC_ATTR, spec)
    return result


def sharing() -> bool:
    return os.environ.get("FOURIER_SHARED_FIGURES", "1") != "0"


def _read_only(result):
    if isinstance(result, pd.DataFrame):
        return result.copy(deep=False)
    if isinstance(result, dict):  # e.g. a run's pairs: every session reads the one dict, none may change it
        return MappingProxyType(result)
    if not isinstance(result, tuple):
        return result
    return tuple(x.copy(deep=False) if isinstance(x, pd.DataFrame) else x for x in result)


def shared_view(run: RunReader, func, table: Table, *args, **kwargs):
    """`func(run.table(table), *args, **kwargs)` computed once per process for a run version and the
    arguments, for all sessions: for the pure functions of `core.runs.summaries` a page calls on one of a
    run's tables (keyed by the run, not by hashing the table's content)."""
    return _shared_on_run(f"{func.__module__}.{func.__qualname__}", _on_table, run, (func, Table(table)), args,
                          kwargs, key=(Table(table).value,))


def shared_on_run(func, run: RunReader, *args, **kwargs):
    """`func(run, *args, **kwargs)` computed once per process for a run version and the arguments, for all sessions:
    for the readings of `core.claims` a page shows of a run (tables, sentences, pairs: read, never changed)."""
    return _shared_on_run(f"{func.__module__}.{func.__qualname__}", func, run, (), args, kwargs)


def _shared_on_run(name: str, call, run: RunReader, fixed: tuple, args: tuple, kwargs: dict, key: tuple = ()):
    """`call(run, *fixed, *args, **kwargs)` built once per process (`_build`), keyed by `name`, the cache folder, the
    run's version, `key` and the arguments; computed unshared when sharing is off or an argument has no key."""
    if not sharing():
        return call(run, *fixed, *args, **kwargs)
    try:
        full = (str(cache_dir()), _key(run), *key, tuple(_key(a) for a in args),
                tuple(sorted((k, _key(v)) for k, v in kwargs.items())))
    except Unkeyable:
        return call(run, *fixed, *args, **kwargs)
    return _read_only(_build(name, full, call, (run, *fixed, *args), kwargs))


def _on_table(run, func, table, *args, **kwargs):
    return func(run.table(table), *args, **kwargs)


def shared_figure(func):
    """Build `func(*args)` once per process for all sessions (see the module's docstring)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if not sharing():
            return func(*args, **kwargs)
        try:
            key = (
                str(cache_dir()),
                large(),
                tuple(_key(a) for a in args),
                tuple(sorted((k, _key(v)) for k, v in kwargs.items())),
            )
        except Unkeyable:
            return func(*args, **kwargs)
        return _read_only(_build(f"{func.__module__}.{func.__qualname__}", key, func, args, kwargs))

    wrapper.unshared = func
    return wrapper


def share_figures(namespace: dict, names: list[str] | None = None) -> None:
    """Wrap the figure functions of a module (every public function defined in it, or `names`)."""
    module = namespace["__name__"]
    for name, obj in list(namespace.items()):
        if names is not None and name not in names:
            continue
        if (
            name.startswith("_")
            or not callable(obj)
            or getattr(obj, "__module__", None) != module
            or isinstance(obj, type)
        ):
            continue
        if hasattr(obj, "unshared"):
            continue
        namespace[name] = shared_figure(obj)
