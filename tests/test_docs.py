"""The documentation: a one-screen README, links that resolve, method citations that exist, and
docs/results.md and docs/findings.md exactly as scripts/results.py and scripts/findings.py write them from the
shipped cache."""

from __future__ import annotations

import importlib
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from core.runs.cache import list_runs

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARKDOWN = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
SOURCES = [p for d in ("core", "app", "scripts", "tests") for p in sorted((ROOT / d).rglob("*.py"))]


def anchors(md: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in md.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def headings(md: Path) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#{1,6} (.+)$", md.read_text(encoding="utf-8"), re.M)}


def test_readme_fits_on_one_screen():
    assert (ROOT / "README.md").stat().st_size <= 10_000
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash run.sh app" in text and "bash run.sh test" in text


@pytest.mark.parametrize("md", MARKDOWN, ids=[str(p.relative_to(ROOT)) for p in MARKDOWN])
def test_relative_links_resolve(md):
    """Every link to a file of the project (and to a heading of a markdown file) points at something."""
    text = md.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold commands, not links
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        file = (md.parent / path).resolve() if path else md
        if not file.exists():
            bad.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            bad.append(target)
    assert bad == [], bad


def test_method_citations_exist():
    """Code cites docs/method.md by anchor (docs/method.md#filter) or by heading (docs/method.md, "Filter")."""
    have_anchors, have_headings = anchors(DOCS / "method.md"), headings(DOCS / "method.md")
    bad = []
    for src in SOURCES:
        text = src.read_text(encoding="utf-8")
        bad += [f"{src.name}: #{a}" for a in re.findall(r"docs/method\.md#([\w-]+)", text) if a not in have_anchors]
        bad += [f"{src.name}: {h!r}" for h in re.findall(r'docs/method\.md, "([^"]+)"', text) if h not in have_headings]
    assert bad == [], bad


@pytest.mark.parametrize("document", ["results", "findings"])
def test_each_generated_document_is_what_its_script_writes(document, capsys):
    """docs/results.md and docs/findings.md are written whole by scripts/results.py and scripts/findings.py (every
    figure, lock and verdict read from the run tables); from the shipped cache each comes out byte for byte."""

    if not any(r.ok for r in list_runs(ROOT / "cache", deep=False)):
        pytest.skip("no shipped runs in cache/")
    script = importlib.import_module(f"scripts.{document}")  # run in this process: what it reads is read once
    try:
        code = script.main(["--cache-dir", str(ROOT / "cache")])
    finally:  # its memos hold every shipped table: let them go
        script.run_of.cache_clear()
        script.claims.cache_clear()
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    assert out == (DOCS / f"{document}.md").read_text(encoding="utf-8"), (
        f"docs/{document}.md is out of date: run .venv/bin/python scripts/{document}.py --write"
    )


def test_run_sh_app_refuses_a_bad_cache_folder_or_option_in_one_line_before_setting_up():
    """`bash run.sh app --cache-dir DIR` points the dashboard at another cache folder (docs/serving.md); a folder that
    is not there or an unknown option is refused with exit code 2 and one line, before any set-up runs."""
    for args, said in ((["--cache-dir", "/no/such/folder"], "needs an existing folder"),
                       (["--cache-dir"], "needs an existing folder"),
                       (["--colour", "red"], "unknown option '--colour'"),
                       (["--port", "http"], "needs a port number"),
                       (["--port", "70000"], "needs a port number")):
        done = subprocess.run(["bash", "run.sh", "app", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done


def test_run_sh_app_refuses_a_port_in_use_at_once_and_names_the_option():
    """With the port taken (another dashboard), `bash run.sh app --port N` says so in one line before setting up,
    instead of failing after Streamlit's 25 s start."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args, env in ((["--port", str(port)], {}), ([], {"STREAMLIT_SERVER_PORT": str(port)})):
            done = subprocess.run(["bash", "run.sh", "app", *args], cwd=ROOT, capture_output=True, text=True,
                                  timeout=30, env={**os.environ, **env})
            assert done.returncode == 2 and f"port {port} is already in use" in done.stderr, done
            assert "--port PORT" in done.stderr and len(done.stderr.strip().splitlines()) == 1
