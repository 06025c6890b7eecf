#!/usr/bin/env bash
# One entry point for a fresh machine.
#   bash run.sh app [--cache-dir DIR] [--port PORT]
#                      set up, then start the dashboard on the shipped runs, or another cache folder's (http://localhost:8501,
#                      or the port given; STREAMLIT_SERVER_PORT works too)
#   bash run.sh test   set up, then run the test suite
#   bash run.sh serve [--workers N] [--bind ADDR] [--port PORT]
#                      set up, then serve a class: N dashboard processes behind HAProxy (docs/serving.md)
#   bash run.sh handout [--run NAME] [--out handouts]
#                      set up, then write the Tour as an HTML and a PDF handout for one run (scripts/handout.py)
#   bash run.sh setup  set up only: .venv with the pinned requirements, Chromium for the browser test, HAProxy for serve
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venv
PY="$VENV/bin/python"

setup_python() {
  if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV"
  fi
  # torch==2.13.0 is pinned: on these machines it installs the local CPU wheel. An unpinned torch would
  # pull several GB of CUDA packages.
  "$PY" -m pip install -q --disable-pip-version-check -r requirements.txt
  # The project itself, editable (pyproject.toml): `import core` and `import app` work from any script or test,
  # and the `core` command runs `python -m core`. Its dependencies are the pins just installed.
  "$PY" -m pip install -q --disable-pip-version-check --no-deps -e .
}

setup_browser() {
  # The real-browser test drives Debian's Chromium (headless). Installed here when missing and when we can.
  if command -v chromium >/dev/null 2>&1; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "run.sh: could not install chromium; the browser test will be skipped" >&2
  else
    echo "run.sh: chromium is not installed (apt-get install chromium); the browser test will be skipped" >&2
  fi
}

setup_proxy() {
  # `serve` puts the dashboard processes behind HAProxy from the system's packages. Installed here when missing.
  if command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null) \
      || { echo "run.sh: could not install haproxy (apt-get install haproxy); serve needs it" >&2; return 1; }
  else
    echo "run.sh: serve needs HAProxy: install it (sudo apt-get install haproxy), then run this again" >&2; return 1
  fi
}

case "${1:-}" in
  setup)
    setup_python; setup_browser; setup_proxy || true ;;
  test)
    setup_python; setup_browser
    # both cores: a pytest worker each, one thread each (OMP_NUM_THREADS: torch's threads of two tests side by side
    # would wait on each other), a test file kept on one worker (its fixtures are built once); then the tests that
    # hold a time bound measured on this machine, with nothing beside them (the `alone` marker). docs/testing.md
    status=0
    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$PY" -m pytest -n 2 --dist loadfile -m "not alone" tests || status=$?
    alone=$(grep -rlF --include='*.py' 'pytest.mark.alone' tests || true)
    if [ -n "$alone" ]; then
      "$PY" -m pytest -m alone $alone || status=$((status ? status : $?))
    fi
    exit "$status" ;;
  app)
    shift
    port=()
    while [ $# -gt 0 ]; do
      case "$1" in
        --cache-dir)  # another cache folder (the default: the project's cache/)
          [ -n "${2:-}" ] && [ -d "$2" ] || { echo "run.sh app: --cache-dir needs an existing folder, got '${2:-}'" >&2; exit 2; }
          export FOURIER_CACHE_DIR="$(cd "$2" && pwd)"; shift 2 ;;
        --port)  # another port (the default: 8501, or STREAMLIT_SERVER_PORT)
          [[ "${2:-}" =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] && [ "$2" -le 65535 ] \
            || { echo "run.sh app: --port needs a port number 1..65535, got '${2:-}'" >&2; exit 2; }
          port=(--server.port "$2"); shift 2 ;;
        *) echo "run.sh app: unknown option '$1' (--cache-dir DIR, --port PORT)" >&2; exit 2 ;;
      esac
    done
    want="${port[1]:-${STREAMLIT_SERVER_PORT:-8501}}"
    if (exec 3<>"/dev/tcp/127.0.0.1/$want") 2>/dev/null; then
      echo "run.sh app: port $want is already in use (another dashboard?): choose another with --port PORT" >&2; exit 2
    fi
    setup_python
    # live computations in a process of their own, as under serve (app/live/runner.py; restarted should it stop),
    # which preloads the warmed models; the live path warmed in the background at the lowest priority
    # (app/live/warmup_runner.py): the default run's weights rebuilt when missing, its live sample's and every demo's
    # prefixes written, so that the first click costs what a later one costs
    export FOURIER_LIVE_DIR="$(mktemp -d -t fourier-live-XXXXXX)" FOURIER_LIVE_RUNNER=external
    ( while kill -0 $$ 2>/dev/null; do "$PY" -m app.live.runner --parent $$; sleep 1; done ) &
    "$PY" -m app.live.warmup_runner --parent $$ &
    exec "$PY" -m streamlit run app/main.py "${port[@]}" ;;
  handout)
    setup_python
    shift
    exec "$PY" scripts/handout.py "$@" ;;
  serve)
    setup_python; setup_proxy || exit 1
    shift
    "$PY" -m app.live.warmup_runner --parent $$ &  # as for `app`: the live path warmed at the lowest priority
    exec "$PY" -m scripts.hall serve "$@" ;;
  *)
    echo "usage: bash run.sh app|serve|handout|test|setup" >&2; exit 2 ;;
esac
