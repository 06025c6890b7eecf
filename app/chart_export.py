"""Chart output: a chart's title, size and fonts (bigger in presentation mode), and the chart drawn
with its caption and downloads (PNG, SVG, CSV)."""

from __future__ import annotations

import textwrap

import altair as alt
import pandas as pd
import streamlit as st
import vl_convert as vlc

from app.shared import vega_spec
from app.state import large
from core.runs import cache as run_cache


def styled(chart: alt.Chart, title: str, height: int | None = 320, row_step: int | None = None) -> alt.Chart:
    """Title, size and font sizes (bigger in presentation mode). `row_step`: pixels per row of a
    chart with a discrete y axis (a heatmap), instead of a fixed height. A title "what — run" is
    split: the run's name goes to a subtitle, so neither is cut on a narrow screen."""
    big = large()
    scale = 1.1 if big else 1
    what, _, run = title.partition(" — ")
    text = _wrap(what, 36 if big else 60)
    params = dict(fontSize=20 if big else 15, anchor="start")
    extra = (len(text) - 1) * (24 if big else 18) if isinstance(text, list) else 0
    if run:
        sub = _wrap(run, 48)
        params.update(subtitle=sub, subtitleFontSize=16 if big else 12, subtitleColor="#555")
        extra += (len(sub) if isinstance(sub, list) else 1) * (19 if big else 15)
    # the height Streamlit gives a stretched chart includes its title: add the title's lines to it
    size = alt.Step(int(row_step * scale)) if row_step else int(height * scale) + extra
    return (
        chart.properties(title=alt.TitleParams(text, **params), height=size)
        .configure_axis(labelFontSize=16 if big else 11, titleFontSize=18 if big else 12)
        .configure_legend(labelFontSize=16 if big else 11, titleFontSize=16 if big else 12)
        .configure_text(fontSize=16 if big else 11)
    )


def _wrap(text: str, width: int) -> str | list[str]:
    """A title as lines of at most `width` characters (Vega does not wrap titles; a long one is cut)."""
    lines = textwrap.wrap(text, width)
    return lines[0] if len(lines) == 1 else lines


def _file_stem(chart, key: str) -> str:
    """Download file names name the model: the chart's key plus the run in its subtitle, if any."""
    title = getattr(chart, "title", None)
    sub = getattr(title, "subtitle", None) if title is not None else None
    sub = " ".join(sub) if isinstance(sub, list) else sub if isinstance(sub, str) else ""
    return f"{key}-{run_cache.slugify(sub)}" if sub else key


def show_chart(chart: alt.Chart, data: pd.DataFrame, caption: str, *, key: str, name: str | None = None) -> None:
    """The chart, its one-line caption, and downloads of the chart (PNG, SVG) and its data (CSV)."""
    name = name or _file_stem(chart, key)
    spec = vega_spec(chart)  # a figure shared by all sessions comes converted already (app/shared.py)
    if spec is not None:
        st.vega_lite_chart(spec=spec, width="stretch", theme=None)
    else:
        st.altair_chart(chart, width="stretch", theme=None)  # the chart's own colours: the same as the PNG/SVG download
    st.caption(caption)
    # one button that keeps its word on a narrow column; the files are made only when one is clicked
    # (vl-convert renders the same Vega-Lite spec as the screen)
    with st.popover("Download", icon=":material/download:"):
        st.download_button(
            "Chart as PNG",
            lambda: _png(chart.to_json()),
            f"{name}.png",
            "image/png",
            key=f"{key}-png",
            on_click="ignore",
        )
        st.download_button(
            "Chart as SVG",
            lambda: _svg(chart.to_json()),
            f"{name}.svg",
            "image/svg+xml",
            key=f"{key}-svg",
            on_click="ignore",
        )
        st.download_button(
            "Data as CSV",
            lambda: data.to_csv(index=False),
            f"{name}.csv",
            "text/csv",
            key=f"{key}-csv",
            on_click="ignore",
        )


@st.cache_data(show_spinner=False, max_entries=64)
def _png(spec: str) -> bytes:
    return vlc.vegalite_to_png(spec, scale=2)


@st.cache_data(show_spinner=False, max_entries=64)
def _svg(spec: str) -> str:
    return vlc.vegalite_to_svg(spec)
