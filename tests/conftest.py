"""Shared fixtures: tiny random-init models of several architectures, built once per session, and the dashboard's
cache (`app_env`), built once per test run.

The environment below (offline hub, quiet tokenizers) must be set before transformers is first
imported, which is why this file, loaded before every test module, imports the project inside its
fixtures."""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=UserWarning)


@pytest.fixture(scope="session", autouse=True)
def streamlit_components_scanned_once():
    """streamlit.testing's AppTest scans every installed distribution's metadata for Streamlit components each time
    a new AppTest first runs (0.6 s here, about three quarters of a Tour step's run); the installed packages do not
    change during a test run, so the scan is made once and its answer reused. The served dashboard scans once per
    server already."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:  # another Streamlit: its AppTest scans as it will
        yield
        return
    scan = manifest_scanner.scan_component_manifests
    manifest_scanner.scan_component_manifests = functools.cache(scan)
    yield
    manifest_scanner.scan_component_manifests = scan


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """model_dir(arch, **kw) -> folder of a saved random-init model (cached per arguments)."""
    from core.models.random_models import save_random_model

    made = {}

    def make(arch="gpt2", n_layers=2, width=64, heads=4, max_number=600, seed=0):
        key = (arch, n_layers, width, heads, max_number, seed)
        if key not in made:
            folder = tmp_path_factory.mktemp(f"{arch}-{n_layers}x{width}")
            made[key] = save_random_model(folder, arch, n_layers, width, heads, max_number, seed)
        return made[key]

    return make


@pytest.fixture(scope="session")
def loaded_model(model_dir):
    """loaded_model(arch, **kw) -> core.models.loading.LoadedModel (cached)."""
    from core.models.loading import load_model

    cache = {}

    def load(arch="gpt2", **kw):
        key = (arch, tuple(sorted(kw.items())))
        if key not in cache:
            cache[key] = load_model(str(model_dir(arch, **kw)))
        return cache[key]

    return load


def built_once(tmp_path_factory, name: str, build) -> Path:
    """A folder `build(folder)` fills once per test run, shared by the pytest workers of `pytest -n 2`: the first
    worker to ask builds it while the others wait on a lock, then all read it (treat it as read-only; copy it to
    change it). A build that fails leaves its error for the other workers, which fail at once instead of building
    again. Alone (no workers): a folder of this session."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    run_dir = tmp_path_factory.getbasetemp().parent  # this test run's folder, above each worker's own
    folder, failed = run_dir / name, run_dir / f"{name}.failed"
    with open(run_dir / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if failed.exists():
            pytest.fail(f"building {name} failed in another worker: {failed.read_text()}")
        if not (folder / ".built").exists():  # in place: the runs built there name their models' paths
            shutil.rmtree(folder, ignore_errors=True)  # what a worker that died half way left
            folder.mkdir(exist_ok=True)
            try:
                build(folder)
            except BaseException as exc:
                failed.write_text(f"{type(exc).__name__}: {exc}")
                raise
            (folder / ".built").touch()
    return folder


#: app_env's broken run (a copy of the tiny trained run with an unreadable table).
BROKEN_RUN = "zz-broken-0000000000"


def build_app_env(root: Path) -> None:
    """app_env's cache: a trained tiny model, a random llama, a model that writes numbers as digits, a broken run."""
    from core.cli import main
    from core.models.random_models import save_random_model
    from core.models.vocab import digit_tokenizer
    from core.runs.cache import list_runs
    from core.training.recipe import Recipe
    from core.training.train import train

    models, cache = root / "models", root / "cache"
    recipe = Recipe(
        name="tiny-trained",
        label="tiny trained",
        out=str(models / "tiny-trained"),
        width=64,
        heads=4,
        epochs=2,
        batch_size=256,
        lr=3e-3,
        warmup_steps=5,
        eval_train_subset=200,
        precision="float32",
        max_operand=100,
        freeze={"kind": "fourier", "periods": [2, 5, 10, 200]},
    )
    train(recipe, log=lambda *_: None)
    common = [
        "--cache-dir",
        str(cache),
        "--max-operand",
        "100",
        "--limit",
        "120",
        "--taus",
        "10,50",
        "--n-sample",
        "4",
        "--no-progress",
    ]
    assert main(["precompute", "--model", str(models / "tiny-trained"), *common]) == 0
    # outside the models folder the dashboard is given: a run whose model it cannot run live
    llama = save_random_model(root / "random-llama", "llama", 2, 64, 4, 600, 0)
    assert main(["precompute", "--model", str(llama), "--label", "random llama", *common]) == 0
    digits = save_random_model(models / "digit-llama", "llama", tokenizer=digit_tokenizer())
    assert (
        main(
            [
                "precompute",
                "--model",
                str(digits),
                "--label",
                "digit model",
                *common[:-1],
                "--display-order",
                "200",
                "--no-progress",
            ]
        )
        == 0
    )
    runs = list_runs(cache)
    broken = cache / BROKEN_RUN
    shutil.copytree(next(r for r in runs if r.manifest["label"] == "tiny trained").path, broken)
    (broken / "examples.parquet").write_bytes(b"not parquet")


@pytest.fixture(scope="session")
def app_env(tmp_path_factory):
    """A cache with: a trained tiny model (training log, live-capable), a random llama, a model that writes numbers
    as digits, a broken run; built once per test run (`built_once`)."""
    from core.runs.cache import list_runs

    root = built_once(tmp_path_factory, "appenv", build_app_env)
    models, cache = root / "models", root / "cache"
    runs = [r for r in list_runs(cache) if r.name != BROKEN_RUN]
    return {"root": root, "models": models, "cache": cache, "runs": {r.manifest["label"]: r for r in runs}}
