"""A real browser (Debian's Chromium, headless) opens every dashboard page and saves a screenshot."""

import importlib.util

import pytest

from app import browser
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs

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
            assert report["charts"] >= 1 or name == "terms", name  # the Terms page is text
            assert (shots / f"{name}.png").stat().st_size > 20_000, name
        # a shared link reopens the same view
        run = app_env["runs"]["random llama"].name
        report = browser.visit(b, f"{base}/?run={run}&step=3&tau=20")
        assert report["errors"] == [] and report["charts"] >= 1
        for alias in ("tour", "start"):  # links people type or keep from older versions open the Tour
            report = browser.visit(b, f"{base}/{alias}?run={run}&step=2")
            assert report["errors"] == [] and report["charts"] >= 1, alias


def test_csv_upload_in_a_real_browser(app_env, tmp_path):
    csv = tmp_path / "api-model.csv"
    csv.write_text("a,b,answer_given\n15,93,108\n20,30,60\n1,2,3\n40,2,32\n")
    with browser.serve(app_env["cache"], app_env["models"]) as base, browser.browser() as b:
        text = browser.upload(b, f"{base}/behaviour", csv)
    assert "answers in api-model.csv" in text
    assert "50.00%" in text  # 2 of 4 right; both errors (+10, -10) are multiples of 10
    assert "100%" in text


def test_no_chart_is_taller_than_a_projector_screen_on_the_shipped_runs():
    """Presentation mode at 1024x768, on the deepest shipped run (30 layers; the figures that grow with
    depth are the risk): every page and every Tour step draws each chart within the screen's height."""

    cache = PROJECT_ROOT / "cache"
    runs = sorted(
        (r for r in list_runs(cache) if r.ok and "phase_locking" in r.manifest["tables"]),
        key=lambda r: r.manifest["n_layers"],
    )
    if not runs:
        pytest.skip("no shipped runs with number logits")
    targets = {f"{n}": p for n, p in browser.PAGES.items()} | {f"tour-{i}": f"?step={i}" for i in range(1, 9)}
    with browser.serve(cache) as base, browser.browser() as b:
        for run in runs[-1:]:
            for name, path in targets.items():
                joiner = "&" if "?" in path else "?"
                report = browser.visit(b, f"{base}/{path}{joiner}large=1&run={run.name}", width=1024, height=768)
                assert report["errors"] == [], (run.name, name, report["errors"])
                assert max(report["chart_heights"] or [0]) <= 700, (run.name, name, report["chart_heights"])
