"""The shape of the code, checked: core's packages and app's folders import only downwards, no module
imports itself back in a circle (function-local imports included), no module in core/, app/ or scripts/ is over 600
lines, app/ keeps few modules at its top level, no private name crosses a module, imports sit at the top of each file
(core/, app/ and scripts/), nothing edits sys.path, and the figures name each encoding channel by its class.

The layers, lowest first (a module may import its own layer and the ones below it):
  foundation  core.errors, core.files, core.paper, core.threads, core.tasks, core (SCHEMA_VERSION)
  models      core.models.*    loading a model, its module names, capture hooks, vocabularies, import
  analysis    core.analysis.*  Fourier bases, spectra, phase locking, filters, number representations
  training    core.training.*  training, fine-tuning and the delta format
  runs        core.runs.*      the cache and its reader, the precompute stages, summaries, live ablations
  claims      core.claims.*    the paper's findings as rules on a run's tables
  interface   core.cli (its parser: core.cli.arguments), core.__main__
and app/ sits on top of core; core never imports app.

Inside app/ (app/__init__.py draws them), lowest first; the folders of one row do not import each other:
  app.guards                a link's values, uploads, literal text, CSV cells
  app                       its own modules: the furniture every page shares
  app.figures, app.live     the figures; live computations
  app.tour                  the Tour's steps, its classroom controls, the handout
  app.views                 the pages
  app.main, app.launch      the entry point; starting the dashboard from outside
No page is imported by a figure or the Tour, and no module of app.figures or app.tour (but the Tour's
classroom controls) imports Streamlit.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["foundation", "models", "analysis", "training", "runs", "claims", "interface", "app"]
FOUNDATION = {"core", "core.errors", "core.files", "core.paper", "core.threads", "core.tasks"}
MAX_LINES = 600
#: app's layers, lowest first; the folders of one row are siblings and do not import each other.
APP_LAYERS = [
    ("app.guards",),
    ("app",),  # app's own modules: the furniture every page shares
    ("app.figures", "app.live"),
    ("app.tour",),
    ("app.views",),
    ("app.main", "app.launch"),
]
#: At most this many modules at app's top level (its __init__.py not counted); the rest live in its folders.
MAX_APP_TOP_LEVEL = 8
#: The one module of app.tour that draws on the page (the Tour's classroom controls) and so imports Streamlit.
STREAMLIT_IN_THE_TOUR = {"app.tour.classroom"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> str:
    if module.startswith("app"):
        return "app"
    if module in FOUNDATION:
        return "foundation"
    if module in ("core.cli", "core.__main__") or module.startswith("core.cli."):
        return "interface"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return parts[1]
    raise AssertionError(f"{module} is in no layer: add it to the docstring's table and to LAYERS")


def app_layer_of(module: str) -> str:
    """`module`'s row in APP_LAYERS: its folder (app.figures, app.views, ...), app.main, or app for app's own
    modules."""
    folder = ".".join(module.split(".")[:2])
    if any(folder in row for row in APP_LAYERS) and folder != "app":
        return folder
    if module == "app" or (module.count(".") == 1 and (ROOT / "app" / f"{module.split('.')[1]}.py").exists()):
        return "app"
    raise AssertionError(f"{module} is in no layer of app: add its folder to app/__init__.py's list and to APP_LAYERS")


def app_rank(module: str) -> int:
    return next(i for i, row in enumerate(APP_LAYERS) if app_layer_of(module) in row)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for d in ("core", "app") for p in sorted((ROOT / d).rglob("*.py"))}


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every project module `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from core.runs import cache` imports the module core.runs.cache
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names
            ]
        else:
            continue
        found.update(n for n in names if n in modules)
    return found


MODULES = project_modules()
GRAPH = {m: imports_of(p, MODULES) - {m} for m, p in MODULES.items()}
#: The scripts (scripts/): outside the layers (they sit on top of core and app), but held to the same size and
#: top-of-file import rules as core's and app's modules.
SCRIPTS = {module_name(p): p for p in sorted((ROOT / "scripts").glob("*.py"))}


def test_every_import_runs_down_the_layers():
    upward = [
        f"{m} ({layer_of(m)}) imports {d} ({layer_of(d)})"
        for m, deps in GRAPH.items()
        for d in deps
        if LAYERS.index(layer_of(d)) > LAYERS.index(layer_of(m))
    ]
    assert not upward, "imports that run back up:\n" + "\n".join(sorted(upward))


def test_no_import_circle():
    seen, on_path, circles = set(), [], []

    def visit(m):
        on_path.append(m)
        for d in sorted(GRAPH[m]):
            if d in on_path:
                circles.append(" -> ".join(on_path[on_path.index(d) :] + [d]))
            elif d not in seen:
                visit(d)
        on_path.pop()
        seen.add(m)

    for m in sorted(GRAPH):
        if m not in seen:
            visit(m)
    assert not circles, "import circles:\n" + "\n".join(circles)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("core")))
def test_core_modules_stay_small(module):
    n = len(MODULES[module].read_text().splitlines())
    assert n <= MAX_LINES, f"{module} has {n} lines; split it along its seams (at most {MAX_LINES})"


def test_app_imports_run_down_its_layers():
    wrong = [
        f"{m} ({app_layer_of(m)}) imports {d} ({app_layer_of(d)})"
        for m, deps in GRAPH.items()
        if m.startswith("app")
        for d in deps
        if d.startswith("app")
        and (app_rank(d) > app_rank(m) or (app_rank(d) == app_rank(m) and app_layer_of(d) != app_layer_of(m)))
    ]
    assert not wrong, "app imports that run back up (or across a row):\n" + "\n".join(sorted(wrong))


def test_no_figure_and_no_tour_module_imports_a_page():
    wrong = [
        f"{m} imports {d}"
        for m, deps in GRAPH.items()
        if m.startswith(("app.figures", "app.tour"))
        for d in deps
        if d.startswith("app.views")
    ]
    assert not wrong, "\n".join(sorted(wrong))


def imports_streamlit(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        if any(n == "streamlit" or n.startswith("streamlit.") for n in names):
            return True
    return False


def test_the_figures_and_the_tour_steps_do_not_import_streamlit():
    """A figure or a Tour step is the same on screen, in the handout and from the command line: only the page
    draws it (app.furniture.show_chart, app/views), and only the Tour's classroom controls call Streamlit."""
    wrong = [
        m
        for m, p in MODULES.items()
        if m.startswith(("app.figures", "app.tour")) and m not in STREAMLIT_IN_THE_TOUR and imports_streamlit(p)
    ]
    assert not wrong, f"these import streamlit: {sorted(wrong)}"


def named_channel(value: ast.expr) -> bool:
    """Whether an encoding's value names its channel's class: `alt.Y(...)`, `alt.Y2Datum(...)` (a capitalised
    `alt.` call), a variable (holding one, as the figures write them), or a list, tuple or `a if c else b` of those.
    A string, a dict, `alt.value(...)`, `alt.datum(...)` or `alt.condition(...)` is not."""
    if isinstance(value, ast.Name):
        return True
    if isinstance(value, (ast.List, ast.Tuple)):
        return all(named_channel(v) for v in value.elts)
    if isinstance(value, ast.IfExp):
        return named_channel(value.body) and named_channel(value.orelse)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        return ast.unparse(value.func.value) == "alt" and value.func.attr[:1].isupper()
    return False


def shorthand_encodings(path: Path) -> list[str]:
    """Where a chart's `.encode(...)` in `path` (a module that imports Altair) gives a channel by a bare value
    (`named_channel`): "line 12: y='magnitude:Q'"."""
    tree = ast.parse(path.read_text())
    if not any(isinstance(n, ast.Import) and any(a.name == "altair" for a in n.names) for n in ast.walk(tree)):
        return []
    return [
        f"line {kw.value.lineno}: {kw.arg}={ast.unparse(kw.value)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "encode"
        for kw in node.keywords
        if kw.arg not in ("encoding", "errors") and not named_channel(kw.value)  # those two: str.encode's
    ]


def test_shorthand_encodings_are_found(tmp_path):
    """The check below finds each kind of bare channel value, and passes a channel given by its class."""
    path = tmp_path / "figure.py"
    path.write_text(
        "import altair as alt\n"
        'alt.Chart(d).encode(x="k:Q", y=alt.Y("m:Q"), tooltip=["k", alt.Tooltip("m")], x2=alt.value(0), '
        'y2=alt.datum(1), text=alt.Text("t:N"), color=c, opacity=alt.condition(s, alt.value(1), alt.value(0)), '
        'size=alt.Size("s:Q") if big else "s:Q", detail=f"{name}:N", shape={"field": "s"})\n'
        'line.encode(errors="replace")  # not a chart\n'
    )
    found = [f.split(": ", 1)[1].split("=", 1)[0] for f in shorthand_encodings(path)]
    assert found == ["x", "tooltip", "x2", "y2", "opacity", "size", "detail", "shape"], found
    path.write_text(path.read_text().replace("import altair as alt\n", ""))
    assert shorthand_encodings(path) == []  # a module without Altair is not read


def test_figures_name_each_encoding_channel_by_its_class():
    """app/figures/__init__.py: a bare string costs Altair about 3 ms of schema hashing, a channel's class nothing."""
    wrong = {str(p.relative_to(ROOT)): f for p in (ROOT / "app").rglob("*.py") if (f := shorthand_encodings(p))}
    assert not wrong, wrong


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("app")))
def test_app_modules_stay_small(module):
    n = len(MODULES[module].read_text().splitlines())
    assert n <= MAX_LINES, f"{module} has {n} lines; split it along its seams (at most {MAX_LINES})"


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_scripts_stay_small(script):
    n = len(SCRIPTS[script].read_text().splitlines())
    assert n <= MAX_LINES, f"{script} has {n} lines; split it along its seams (at most {MAX_LINES})"


def test_app_keeps_few_modules_at_its_top_level():
    top = sorted(p.name for p in (ROOT / "app").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_APP_TOP_LEVEL, (
        f"app/ has {len(top)} modules at its top level ({', '.join(top)}); at most {MAX_APP_TOP_LEVEL}: "
        "put a module in the folder of its concern (app/__init__.py)"
    )


def test_no_private_name_crosses_a_module():
    crossing = []
    for d in ("core", "app", "scripts", "tests"):
        for p in (ROOT / d).glob("**/*.py"):
            for node in ast.walk(ast.parse(p.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("core", "app")):
                    crossing += [
                        f"{p.relative_to(ROOT)}: {a.name}"
                        for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")
                    ]
    assert not crossing, "private names imported from another module:\n" + "\n".join(crossing)


def test_nothing_edits_sys_path():
    edits_of = ("sys.path." + "insert", "sys.path." + "append")  # written so that this file does not find itself
    edits = [
        str(p.relative_to(ROOT))
        for d in ("core", "app", "scripts", "tests")
        for p in (ROOT / d).glob("**/*.py")
        if any(e in p.read_text() for e in edits_of)
    ]
    assert not edits, f"these edit sys.path; the package is installed (pip install -e .), import it: {edits}"


#: The only places an import may sit inside a function: the command line loads a subcommand's
#: module when that subcommand runs (so `python -m core list` does not load torch), and the
#: dashboard loads the live-ablation engine (torch) only when a user asks for a live computation.
LOCAL_IMPORTS_ALLOWED = {"core.cli", "app.live.ablation"}  # core.cli.arguments imports at its top


def test_imports_sit_at_the_top_of_each_file():
    local = []
    for m, p in {**MODULES, **SCRIPTS}.items():
        if m in LOCAL_IMPORTS_ALLOWED:
            continue
        for fn in ast.walk(ast.parse(p.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                local += [
                    f"{p.relative_to(ROOT)}:{n.lineno}"
                    for n in fn.body
                    for n in ast.walk(n)
                    if isinstance(n, (ast.Import, ast.ImportFrom))
                ]
    assert not local, f"{len(set(local))} imports inside functions; move them to the top:\n" + "\n".join(
        sorted(set(local))
    )


def test_the_dashboard_pages_load_without_torch():
    """DESIGN: the app never imports torch at page load unless the user asks for live computation."""
    pages = sorted(p for p in (ROOT / "app").rglob("*.py") if p.name != "main.py" and "views" not in p.parts)
    code = (
        "import sys\n"
        + "".join(f"import {module_name(p)}\n" for p in pages)
        # the Ablations page asks on every render whether the run can be computed live (the shipped runs' folders)
        + "from core.runs.cache import list_runs\nfrom core.runs.live_model import live_model_folder\n"
        + "[live_model_folder(r.manifest) for r in list_runs('cache') if r.manifest]\n"
        + "heavy = [m for m in ('torch', 'transformers', 'safetensors') if m in sys.modules]\n"
        + "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_code_passes_the_linter():
    """ruff with pyproject.toml's rules: pyflakes, pycodestyle (lines at most 120), sorted imports."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "core", "app", "scripts", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
