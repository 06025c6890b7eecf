"""A real browser (Debian's Chromium, headless) opens every dashboard page and saves a screenshot."""

import importlib.util

import pytest

from app import browser

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        browser.chromium_path() is None or importlib.util.find_spec("playwright") is None,
        reason="needs Chromium and playwright: `bash run.sh setup` installs both",
    ),
]


def test_every_page_in_a_real_browser(app_env, tmp_path):
    shots = tmp_path / "screenshots"
    with browser.serve(app_env["cache"], app_env["models"]) as base, browser.browser() as b:
        for name, path in browser.PAGES.items():
            report = browser.visit(b, f"{base}/{path}", shots / f"{name}.png")
            assert report["errors"] == [], (name, report["errors"])
            assert report["title"], name
            assert report["charts"] >= 1, name
            assert (shots / f"{name}.png").stat().st_size > 20_000, name
        # a shared link reopens the same view
        run = app_env["runs"]["random llama"].name
        report = browser.visit(b, f"{base}/?run={run}&step=3&tau=20")
        assert report["errors"] == [] and report["charts"] >= 1


def test_csv_upload_in_a_real_browser(app_env, tmp_path):
    csv = tmp_path / "api-model.csv"
    csv.write_text("a,b,answer_given\n15,93,108\n20,30,60\n1,2,3\n40,2,32\n")
    with browser.serve(app_env["cache"], app_env["models"]) as base, browser.browser() as b:
        text = browser.upload(b, f"{base}/behaviour", csv)
    assert "answers in api-model.csv" in text
    assert "50.00%" in text  # 2 of 4 right; both errors (+10, -10) are multiples of 10
    assert "100%" in text
