"""The view's state in the URL: each control's value mirrored into `st.query_params`, so a copied
link reopens the same page, run, layer, cutoff and ablation, and a link asking for something this
dashboard does not have says so on screen.
"""

from __future__ import annotations

import streamlit as st

from app.guards.literal_text import literal


def _from_url(key: str, default, cast) -> tuple[object, bool]:
    """(value, read): the link's value for `key` cast, or `default` with read False when the link has
    none or its text does not cast."""
    raw = st.query_params.get(key)
    if raw is None:
        return default, False
    try:
        return cast(raw), True
    except (TypeError, ValueError):
        return default, False


def url_state(key: str, default, cast=str, options=None, bounds: tuple | None = None):
    """Give the control `key` its value before it is drawn: the value it had (kept in a shadow
    key, because Streamlit forgets widget state when the page changes), else the URL's (a shared
    link), else `default`. Values outside `options` fall back to `default`. With `bounds` (lowest, highest) for a
    number: a link's value outside them is noted and falls back to `default`; a value the control had is clamped
    into them (the run changed to one with fewer layers or frequencies)."""
    shadow = f"_keep_{key}"
    from_link = False
    if key in st.session_state:
        value = st.session_state[key]
    elif shadow in st.session_state:
        value = st.session_state[shadow]
    else:
        value, from_link = _from_url(key, default, cast)
        if not from_link and st.query_params.get(key) is not None:
            _link_notice(key, st.query_params.get(key), default)  # the cast failed
    if options is not None and value not in options:
        if from_link:
            _link_notice(key, st.query_params.get(key), default)
        value = default
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        if from_link:
            _link_notice(key, st.query_params.get(key), default)
            value = default
        else:
            value = min(max(value, bounds[0]), bounds[1])
    st.session_state[key] = value
    return value


def _link_notice(key: str, asked, shown) -> None:
    """Say on screen when a shared link asks for something this dashboard does not have: one line, with the link's
    text shown as text (a link's markup is never drawn)."""
    seen = st.session_state.setdefault("_link_notices", set())
    if (key, asked) in seen:
        return
    seen.add((key, asked))
    what = "the default" if len(str(shown)) > 24 else literal(str(shown))
    text = " ".join(str(asked).split())
    text = literal(text[:40] + ("…" if len(text) > 40 else ""))
    st.toast(f"The link asks for {key} '{text}', which is not here: showing {what} instead.", icon="⚠️")


def to_url(*keys: str) -> None:
    """Mirror the given controls' values into the URL (and keep them across pages)."""
    for key in keys:
        value = st.session_state.get(key)
        st.session_state[f"_keep_{key}"] = value
        if value is None:
            if key in st.query_params:
                del st.query_params[key]
            continue
        text = str(int(value)) if isinstance(value, bool) else str(value)
        if st.query_params.get(key) != text:
            st.query_params[key] = text


FLAGS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def url_flag(text: str) -> bool:
    """A yes/no value as a link writes it (1, true, yes, on / 0, false, no, off); anything else is not a yes/no
    (ValueError: the link's notice, and the default)."""
    try:
        return FLAGS[str(text).strip().lower()]
    except KeyError:
        raise ValueError(f"not a yes/no value: {text!r}") from None
