"""What a page shows in words, read from streamlit.testing's elements (shared by the tests of tests/app)."""

from __future__ import annotations

import json
import re

from app.figures.style import title_text


def spec_strings(spec) -> list[str]:
    """The words a chart shows: its titles (chart, axes, legends), subtitles and legend label expressions."""
    out = []

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("data", "datasets", "values"):
                    continue
                if k == "title" and v is not None:
                    out.append(title_text(v))
                elif k == "subtitle":
                    out.append(" ".join(v) if isinstance(v, list) else str(v))
                elif k == "labelExpr":
                    out.extend(re.findall(r"'([^']*)'", v))
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(spec)
    return out


def shown_text(at) -> list[str]:
    """Everything a page shows in words: headings, text, captions, boxes, metric and widget labels (and the options
    of pickers), expander labels, table headers and the charts' titles."""
    out = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "info", "warning", "error", "success"):
        out += [e.value for e in getattr(at, kind)]
    out += [f"{m.label} {m.value}" for m in at.metric]
    out += [e.label for e in at.expander]
    for kind in ("selectbox", "radio", "select_slider", "multiselect"):
        for w in getattr(at, kind):
            out += [w.label, *map(str, w.options)]
    for kind in ("slider", "toggle", "checkbox", "button", "number_input", "text_input"):
        out += [w.label for w in getattr(at, kind)]
    for chart in at.get("vega_lite_chart"):
        out += spec_strings(json.loads(chart.proto.spec))
    for table in at.dataframe:
        config = json.loads(table.proto.columns or "{}")
        out += [str(config.get(str(c), {}).get("label", c)) for c in table.value.columns]
    return out
