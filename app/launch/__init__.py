"""The dashboard started as a process from outside it: by the tests, the scripts, `serve` and the load test.

  server    a free port, the `streamlit run app/main.py` command, health checks
  browser   the dashboard in a real browser (headless Chromium): open a page, check it, screenshot it

Nothing in the dashboard imports these.
"""
