"""The load test in small: a few sessions at once must never make a page fail (scripts/hall/loadtest.py).

The full matrix (1, 10, 25, 50 sessions, one process and `serve`) is a benchmark: docs/serving.md."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.files import PROJECT_ROOT

SHIPPED = any((PROJECT_ROOT / "cache").glob("*/manifest.json"))


def loadtest(tmp_path, *args):
    out = tmp_path / "rounds.json"
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.hall", "loadtest", *args, "--json", str(out)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.exists(), proc.stdout + proc.stderr
    return proc, json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
def test_three_sessions_at_once_on_one_process_see_no_error(tmp_path):
    """Three students open the shared link together and make their 5 changes (Next, tau, Spectra, layer, module)."""
    proc, report = loadtest(tmp_path, "--start", "single", "--sessions", "3", "--think", "0.2-0.8", "--settle", "0")
    (r,) = report["rounds"]
    assert r["errors"] == 0, r["error_examples"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert r["opened"] == 3 and r["changes"] == 15
    assert "| 3 |" in proc.stdout  # the table


def test_loadtest_refuses_a_server_on_another_machine(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.hall", "loadtest", "--url", "http://example.org:8501"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "only http servers on this machine" in proc.stdout + proc.stderr


def serve_module():
    spec = importlib.util.spec_from_file_location("serve", PROJECT_ROOT / "scripts" / "hall" / "serve.py")
    serve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(serve)
    return serve


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="HAProxy is not installed (bash run.sh setup installs it)")
def test_the_generated_proxy_config_is_valid_and_sticky(tmp_path):
    serve = serve_module()
    serve.write_error_pages(tmp_path)
    cfg = serve.haproxy_config("0.0.0.0", 8080, [8601, 8602, 8603], tmp_path, per_address=40)
    (tmp_path / "haproxy.cfg").write_text(cfg)
    check = subprocess.run(["haproxy", "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "bind 0.0.0.0:8080" in cfg and f"cookie {serve.COOKIE} insert" in cfg
    assert cfg.count("server w") == 3 and "option httpchk GET /_stcore/health" in cfg and "timeout tunnel" in cfg
    # a request that meets a dead worker goes to another one at once, and the dead one is out at its first refusal
    assert "option redispatch 1" in cfg and "retry-on conn-failure empty-response" in cfg
    assert "observe layer4 error-limit 1 on-error mark-down" in cfg
    # one address: at most 40 sessions open and 40 new per 10 s, 160 connections; refused with the one-line page
    assert "sc1_conn_cur gt 40" in cfg and "sc1_http_req_rate gt 40" in cfg and "sc0_conn_cur gt 160" in cfg
    page = (tmp_path / "error-429.http").read_bytes().decode()
    head, _, body = page.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 429") and f"Content-Length: {len(body.encode())}" in head
    assert "Too many connections from your network address" in body and 'http-equiv="refresh"' in body


def test_the_documented_proxy_config_is_the_generated_one():
    """docs/serving.md shows the configuration `serve` writes (2 workers, default address), whole."""
    cfg = serve_module().haproxy_config("0.0.0.0", 8080, [8601, 8602], Path("serve"))
    doc = (PROJECT_ROOT / "docs" / "serving.md").read_text()
    shown = doc.split("The generated configuration (shown for 2 workers, default address):", 1)[1]
    shown = shown.split("```\n", 2)[1]
    assert shown.rstrip() == "\n".join(cfg.splitlines()[1:]).rstrip()
