"""What a figure actually draws: its Vega-Lite spec rendered to SVG by vl-convert (as the handout renders it)
and read back, so that a chart whose data has rows but whose drawing is empty fails a test.

`undrawn(spec)` lists what is missing: a mark layer of the compiled spec with no drawn element (bars from zero
on a log scale vanish so), drawn elements that all have no size, an axis with fewer than two labels. An
empty list: everything the spec asks for is on the drawing.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import vl_convert as vlc

SVG = "{http://www.w3.org/2000/svg}"
#: a rect mark's path: "M x,y h w v h h -w Z"
RECT_PATH = re.compile(r"M[-\d.e]+,[-\d.e]+h([-\d.e]+)v([-\d.e]+)")


def leaf_marks(vega: dict) -> dict[str, str]:
    """{name: type} of every non-group mark in a compiled Vega spec (recursively through groups)."""
    found = {}
    for mark in vega.get("marks", []):
        if mark.get("type") == "group":
            found.update(leaf_marks(mark))
        elif mark.get("name") and mark.get("role") != "axis":
            found[mark["name"]] = mark["type"]
    return found


def has_size(element) -> bool:
    d = element.get("d")
    if d is None:
        return True  # lines, text, symbols: drawn where they are
    m = RECT_PATH.match(d)
    return m is None or (float(m.group(1)) != 0 and float(m.group(2)) != 0)


def undrawn(spec: dict | str) -> list[str]:
    spec_json = spec if isinstance(spec, str) else json.dumps(spec)
    vega = vlc.vegalite_to_vega(spec_json)
    vega = json.loads(vega) if isinstance(vega, str) else vega
    root = ET.fromstring(vlc.vegalite_to_svg(spec_json))
    drawn: dict[str, list] = {}
    axes = []
    for g in root.iter(f"{SVG}g"):
        cls = (g.get("class") or "").split()
        if "role-mark" in cls and len(cls) > 2:
            drawn.setdefault(cls[2], []).extend(list(g))
        if "role-axis" in cls and g.get("aria-roledescription") == "axis":
            labels = [t for lab in g.iter(f"{SVG}g") if "role-axis-label" in (lab.get("class") or "")
                      for t in lab.iter(f"{SVG}text")]
            axes.append((g.get("aria-label") or "an axis", len(labels)))
    problems = []
    for name, kind in leaf_marks(vega).items():
        elements = drawn.get(name, [])
        if not elements:
            problems.append(f"{kind} layer {name} draws nothing")
        elif not any(has_size(e) for e in elements):
            problems.append(f"{kind} layer {name}: every element has no size")
    # an axis of one category has one label by right ("a discrete scale with 1 value")
    problems += [f"{label}: {n} label(s)" for label, n in axes if n < 2 and "with 1 value" not in label]
    return problems
