"""The lecture hall's faults in small (scripts/hall/faults.py): a worker killed while students click, and hostile
links on every page. The full runs (50 students, every parameter alone, the live stampede, the connection flood,
hostile uploads) are docs/serving.md's table: `.venv/bin/python -m scripts.hall faults`."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys

import pytest

from core.files import PROJECT_ROOT

SHIPPED = any((PROJECT_ROOT / "cache").glob("*/manifest.json"))


def faults(tmp_path, *args, timeout=150):
    out = tmp_path / "faults.json"
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.hall", "faults", *args, "--json", str(out)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def url_parameters_of_the_app() -> set[str]:
    """Every key the app reads from the URL: the first argument of each url_state call (example_picker's too)."""
    keys = set()
    for path in (PROJECT_ROOT / "app").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("url_state", "example_picker"):
                if node.func.id == "example_picker":
                    keys.add("example")  # its key's default
                elif node.args and isinstance(node.args[0], ast.Constant):
                    keys.add(node.args[0].value)
    return keys


def test_the_hostile_links_cover_every_url_parameter():
    code = (
        "import json\nfrom scripts.hall import fault_inputs as f\n"
        "print(json.dumps([sorted(f.LINK_PARAMS), f.PAGES]))"
    )
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    params, pages = json.loads(done.stdout)
    assert url_parameters_of_the_app() == set(params)
    main = (PROJECT_ROOT / "app" / "main.py").read_text()
    assert all(f'url_path="{p}"' in main for p in pages if p), pages


@pytest.mark.slow
@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
def test_hostile_links_open_every_page_with_a_note_and_the_default(tmp_path):
    """All of a page's parameters bad at once, four kinds of bad, nine pages, on one `streamlit run` process."""
    proc, rows = faults(tmp_path, "--faults", "links", "--quick", "--start", "single")
    (row,) = rows
    assert row["passed"], row["problems"] + [proc.stdout[-2000:]]
    assert row["details"]["values"] >= 200  # the bad values really tried (9 pages x 4 kinds x their parameters)


@pytest.mark.slow
@pytest.mark.alone  # the other students' click p95 is bounded: another test beside it would take its CPU
@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
@pytest.mark.skipif(shutil.which("haproxy") is None, reason="HAProxy is not installed (bash run.sh setup installs it)")
def test_a_killed_worker_s_students_come_back_to_their_view(tmp_path):
    """12 students on 2 workers; one worker is killed by its process id; it is out of the proxy's rotation within 5 s,
    its students reconnect within 10 s to the page and URL they had, nobody else loses a connection, the worker left
    (busier now) is never marked down by the health checks, and the killed one is back in the proxy's rotation."""
    proc, rows = faults(tmp_path, "--faults", "kill", "--quick", "--sessions", "12", "--workers", "2")
    (row,) = rows
    d = row["details"]
    assert d["students_on_victim"] >= 1 and len(d["recovery_s"]) >= d["students_on_victim"], row
    assert max(d["recovery_s"]) <= 10.0 and "came back to another view" not in " ".join(row["problems"]), row
    assert d["worker_back_s"] is not None and d["worker_back_s"] <= 60.0, row
    # a dead worker is taken out quickly (serve, or the health checks); a busy one is not a dead one (issue 60)
    assert d["worker_out_s"] is not None and d["worker_out_s"] <= 5.0, row
    assert not [w for w, _ in d["proxy_events"]["marked_down"] if w != d["victim"]], row
    assert not d["errors"] and not any("lost their connection" in p for p in row["problems"]), row
    # on this shared machine the others' p95 is checked against the absolute bound here; the full run also checks it
    # against the same students' p95 before the kill (docs/serving.md)
    assert d["others_after"]["p95"] <= 2.0, row
