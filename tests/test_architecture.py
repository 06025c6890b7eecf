"""The shape of the code, checked: core's packages import only downwards, no module imports
itself back in a circle (function-local imports included), no module in core/ is over 600 lines,
no private name crosses a module, and nothing edits sys.path.

The layers, lowest first (a module may import its own layer and the ones below it):
  foundation  core.errors, core.files, core.paper, core.threads, core.tasks, core (SCHEMA_VERSION)
  models      core.models.*    loading a model, its module names, capture hooks, vocabularies, import
  analysis    core.analysis.*  Fourier bases, spectra, phase locking, filters, number representations
  training    core.training.*  training, fine-tuning and the delta format
  runs        core.runs.*      the cache and its reader, the precompute stages, summaries, live ablations
  claims      core.claims.*    the paper's findings as rules on a run's tables
  interface   core.cli, core.__main__
and app/ sits on top of core; core never imports app.
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
    if module in ("core.cli", "core.__main__"):
        return "interface"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return parts[1]
    raise AssertionError(f"{module} is in no layer: add it to the docstring's table and to LAYERS")


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
LOCAL_IMPORTS_ALLOWED = {"core.cli", "app.live.ablation"}


def test_imports_sit_at_the_top_of_each_file():
    local = []
    for m, p in MODULES.items():
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
