"""Chart output: a chart's title, size and fonts (bigger in presentation mode), and the chart drawn
with its caption and downloads (PNG, SVG, CSV)."""

from __future__ import annotations

import json
import re
import textwrap

import altair as alt
import pandas as pd
import streamlit as st
import vl_convert as vlc

from app.guards.csv_safety import csv_text
from app.shared import vega_spec
from app.state import large
from core.runs import cache as run_cache

#: The narrowest a chart is drawn at 1024 x 768 (a Tour or comparison column), in pixels: normal, presentation mode.
NARROWEST = {False: 250, True: 450}
#: Average width of a title character, as a share of its font size (bold sans-serif, generous).
CHAR_WIDTH = 0.6


def styled(chart: alt.Chart, title: str, height: int | None = 320, row_step: int | None = None) -> alt.Chart:
    """Title, size and font sizes (bigger in presentation mode). `row_step`: pixels per row of a
    chart with a discrete y axis (a heatmap), instead of a fixed height. A title "what — run" is
    split: the run's name goes to a subtitle. The title wraps to the chart's drawn width in the browser
    (`wrapped_title`), so it is never cut, however narrow the column the chart is drawn in."""
    big = large()
    scale = 1.1 if big else 1
    what, _, run = title.partition(" — ")
    size_px, sub_px = (20, 16) if big else (15, 12)
    params = dict(fontSize=size_px, anchor="start", limit=10_000)  # no cut: the text wraps instead
    # the height Streamlit gives a stretched chart includes its title: add the title's lines (at the narrowest) to it
    extra = (len(_lines(what, NARROWEST[big], size_px)) - 1) * int(size_px * 1.2)
    if run:
        sub = _lines(run, NARROWEST[big], sub_px)
        params.update(subtitle=sub if len(sub) > 1 else sub[0], subtitleFontSize=sub_px, subtitleColor="#555")
        extra += len(sub) * int(sub_px * 1.25)
    size = alt.Step(int(row_step * scale)) if row_step else int(height * scale) + extra
    return (
        chart.properties(title=alt.TitleParams(wrapped_title(what, size_px), **params), height=size)
        .configure_axis(labelFontSize=16 if big else 11, titleFontSize=18 if big else 12)
        .configure_legend(labelFontSize=16 if big else 11, titleFontSize=16 if big else 12)
        .configure_text(fontSize=16 if big else 11)
    )


def wrapped_title(text: str, font_px: int) -> alt.ExprRef:
    """A title as a Vega expression that breaks it into lines fitting the chart's drawn width (the `width`
    signal, which Streamlit sets to the column's width), so it wraps instead of being cut with an ellipsis."""
    chars = f"max(8, floor((isFinite(width) ? width : 600) / {CHAR_WIDTH * font_px:g}))"
    pattern = "regexp('(.{1,' + " + chars + " + '})( +|$)', 'g')"  # breaks at plain spaces only
    kept = re.sub(r" ([+=−-]) ", "\u00a0\\1\u00a0", text)  # "15 + 93" stays on one line
    return alt.ExprRef(f"split(trim(replace({json.dumps(kept, ensure_ascii=False)}, {pattern}, '$1\\n')), '\\n')")


def title_text(title) -> str:
    """The plain text of a chart title as a spec holds it: a string, lines, or `wrapped_title`'s expression."""
    text = title.get("text", "") if isinstance(title, dict) else title
    if isinstance(text, dict) and "expr" in text:
        text = json.JSONDecoder().raw_decode(text["expr"], text["expr"].index('"'))[0]
    return (" ".join(text) if isinstance(text, list) else str(text)).replace("\u00a0", " ")


def _lines(text: str, width_px: int, font_px: int) -> list[str]:
    """`text` wrapped to lines that fit `width_px` at `font_px` (the subtitle, which Vega-Lite cannot wrap)."""
    return textwrap.wrap(text, max(8, int(width_px / (CHAR_WIDTH * font_px)))) or [""]


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
            lambda: csv_text(data),  # text cells a spreadsheet would run as formulas are escaped
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
