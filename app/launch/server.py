"""Starting the dashboard as a local process: a free port, the `streamlit run` command, health checks.

One place for what the browser test (app/launch/browser.py), `serve` (scripts/hall/serve.py) and the load test
(scripts/hall/loadtest.py) each need to start and wait for a dashboard on localhost.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

from core.files import PROJECT_ROOT


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def streamlit_command(port: int, address: str = "127.0.0.1") -> list[str]:
    """`streamlit run app/main.py` on one port, headless, with this interpreter."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(PROJECT_ROOT / "app" / "main.py"),
        "--server.address",
        address,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
    ]


def healthy(base: str) -> bool:
    """Whether the dashboard at `base` (http://host:port) answers its health check."""
    try:
        with urllib.request.urlopen(base + "/_stcore/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def wait_healthy(base: str, proc: subprocess.Popen | None = None, timeout: float = 120) -> None:
    """Until the dashboard at `base` answers; raises RuntimeError if `proc` exits or time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode})")
        if healthy(base):
            return
        time.sleep(0.3)
    raise RuntimeError(f"{base} did not answer in {timeout:.0f} s")
