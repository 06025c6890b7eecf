"""Rebuilding a delta-only model's weights from the Ablations page (app/live/rebuild.py): the button shows only for a
run whose model ships its fine-tuning delta alone, the rebuild runs in a process of its own (one at a time, a second
press joins it) with its stages on a progress bar, a failed one says why in one line and writes nothing, and once it
is done the page computes live. A tiny Llama stands in for SmolLM2 (its base imported from a GGUF, its delta made by
hand), so the whole rebuild takes seconds."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import streamlit as st
import torch
from streamlit.testing.v1 import AppTest

from app.live import rebuild as rebuild_job
from app.live import rebuild_runner
from app.live.ablation import REBUILD_LABEL, rebuild_line
from app.live.rebuild import RebuildStatus, rebuild_root, rebuild_status, start_rebuild, write_status
from core.cli import main
from core.files import PROJECT_ROOT
from core.models.importer import import_gguf
from core.models.random_models import write_tiny_llama_gguf
from core.runs.cache import list_runs
from core.runs.live_model import live_model_folder, rebuildable_folder
from core.training.delta import (
    DELTA_FILE,
    DELTA_FORMAT,
    REBUILD_STAGES,
    load_base,
    merged_model,
    read_delta,
    rebuild,
    save_delta,
    state_digest,
    unique_state,
    write_model_folder,
)

#: The tiny task: operands 0..12, answers 0..24 (p = 25 number tokens added).
MAX_OPERAND, P = 12, 25
#: Seconds a tiny rebuild may take in its own process (loading torch and transformers is most of it).
REBUILD_WAIT_S = 180


def make_delta(base: Path, folder: Path) -> None:
    """A fine-tuning delta of the tiny base, made by hand: random number rows and LoRA factors on two maps of every
    block, with the digest of the weights they rebuild to (as `finetune` records it)."""
    g = torch.Generator().manual_seed(0)
    tensors = {"number_rows": (torch.randn(P, 64, generator=g) * 0.5).half()}
    for block in range(2):
        for sub, (rows, cols) in {"self_attn.q_proj": (64, 64), "mlp.down_proj": (64, 128)}.items():
            tensors[f"lora.{block}.{sub}.A"] = (torch.randn(4, cols, generator=g) * 0.05).half()
            tensors[f"lora.{block}.{sub}.B"] = (torch.randn(rows, 4, generator=g) * 0.05).half()
    meta = {"format": DELTA_FORMAT, "p": P, "rank": 4, "alpha": 8, "base": str(base), "recipe": "tiny-delta",
            "label": "tiny delta"}
    model, _ = merged_model(str(base), tensors, meta)
    meta["rebuilt_sha256"] = state_digest(unique_state(model))
    meta["base_sha256"] = state_digest(unique_state(load_base(str(base))))
    folder.mkdir(parents=True)
    save_delta(folder / DELTA_FILE, tensors, meta)


def weights_of(folder: Path) -> list[str]:
    return sorted(f.name for f in folder.iterdir() if f.name != DELTA_FILE and f.suffix == ".safetensors")


@pytest.fixture(scope="module")
def delta_env(tmp_path_factory):
    """A run computed from a tiny fine-tuned model whose folder then keeps only its delta and recipe, as the shipped
    default run's does; the folder's full contents are kept aside to put it back between tests."""
    root = tmp_path_factory.mktemp("rebuild")
    gguf, _ = write_tiny_llama_gguf(root / "tiny.gguf", quantize=None, n_layers=2)
    base = import_gguf(gguf, root / "base", {"origin": "test"}, log=lambda *_: None)
    models, cache = root / "models", root / "cache"
    folder = models / "tiny-delta"
    make_delta(base, folder)
    (folder / "recipe.json").write_text(json.dumps({"name": "tiny-delta", "n_layers": 2, "width": 64}))
    rebuild(folder, log=lambda *_: None)
    assert main(["precompute", "--model", str(folder), "--label", "tiny delta", "--cache-dir", str(cache),
                 "--max-operand", str(MAX_OPERAND), "--limit", "40", "--taus", "4", "--n-sample", "4",
                 "--no-progress"]) == 0
    shipped = root / "shipped"
    shipped.mkdir()
    for name in (DELTA_FILE, "recipe.json"):
        shutil.copy(folder / name, shipped / name)
    run = next(r for r in list_runs(cache) if r.manifest["label"] == "tiny delta")
    return {"models": models, "cache": cache, "folder": folder, "shipped": shipped, "run": run}


@pytest.fixture
def delta_only(delta_env, monkeypatch):
    """The model folder as a clone has it (delta and recipe, no weights), and the dashboard's environment."""
    shutil.rmtree(delta_env["folder"])
    shutil.copytree(delta_env["shipped"], delta_env["folder"])
    monkeypatch.setenv("FOURIER_MODELS_DIR", str(delta_env["models"]))
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(delta_env["cache"]))
    root = rebuild_root()
    shutil.rmtree(root, ignore_errors=True)  # no rebuild of an earlier test
    yield {**delta_env, "monkeypatch": monkeypatch}
    monkeypatch.setenv("FOURIER_MODELS_DIR", str(delta_env["models"]))
    wait_for_rebuild()  # never leave a rebuild writing into the next test's folder
    shutil.rmtree(root, ignore_errors=True)


def wait_for_rebuild(seen: list | None = None) -> RebuildStatus:
    """The machine's rebuild once it ends; `seen` collects every status looked at on the way."""
    start = time.monotonic()
    status = rebuild_status()
    while status.running and time.monotonic() - start < REBUILD_WAIT_S:
        if seen is not None:
            seen.append(status)
        time.sleep(0.05)
        status = rebuild_status()
    return status


def test_the_button_shows_only_for_a_model_that_ships_its_delta(delta_only):
    run, folder = delta_only["run"], delta_only["folder"]
    assert rebuildable_folder(run.manifest) == folder.resolve()
    reason = live_model_folder(run.manifest)[1]
    assert "ships only the fine-tuning delta" in reason and "python -m core rebuild" in reason
    at = ablations_page(run)
    assert [b.label for b in at.button if b.label == REBUILD_LABEL] == [REBUILD_LABEL]
    assert any("Or rebuild them here with the button below" in i.value for i in at.info)
    assert not rebuild_root().exists()  # a page that only looks leaves nothing behind
    # the delta gone, the weights have to be trained again: no button, the command that trains them
    (folder / DELTA_FILE).unlink()
    assert rebuildable_folder(run.manifest) is None
    at = ablations_page(run)
    assert not any(b.label == REBUILD_LABEL for b in at.button)
    assert any("python -m core train --recipe tiny-delta" in i.value for i in at.info)
    # a model folder the dashboard does not load models from: nothing it could rebuild either
    (folder / DELTA_FILE).write_bytes(b"")
    assert rebuildable_folder(run.manifest) is not None
    delta_only["monkeypatch"].setenv("FOURIER_MODELS_DIR", str(folder.parent.parent / "elsewhere"))
    assert rebuildable_folder(run.manifest) is None


def test_the_rebuild_runs_in_the_background_once_and_reports_its_stages(delta_only):
    run, folder = delta_only["run"], delta_only["folder"]
    started = time.monotonic()
    first = start_rebuild(folder)
    assert time.monotonic() - started < 5, "start_rebuild must return at once, the rebuild going on in its process"
    assert first.running and first.is_for(folder) and first.stage == "starting"
    again = start_rebuild(folder)  # a second press (another session) joins the running rebuild
    assert again.running and again.started == first.started
    seen = []
    done = wait_for_rebuild(seen)
    assert done.state == "done" and done.fraction == 1.0, done
    stages = [s.stage for s in seen]
    assert set(stages) <= {"starting", *REBUILD_STAGES}
    assert "merging" in stages, stages  # the tiny merge is quick: the stages after it may pass between two looks
    fractions = [s.fraction for s in seen]
    assert fractions == sorted(fractions) and all(0 <= f <= 1 for f in fractions)
    assert any(s.stage == "merging" and "Rebuilding the weights, merging" in rebuild_line(s) for s in seen)
    assert {s.detail for s in seen if s.stage == "merging"} <= {
        "loading the base model and adding the number tokens", *(f"{i} of 4 weight matrices merged" for i in range(5))}
    # the weights are the ones the run was computed from: live computation is open
    assert weights_of(folder) == ["model.safetensors"]
    assert live_model_folder(run.manifest) == (folder.resolve(), "")
    assert rebuildable_folder(run.manifest) is None  # its weights are here: no button any more
    assert not list(folder.parent.glob(".writing-*"))
    assert "rebuilt" in (rebuild_root() / "job.log").read_text()


def test_a_failed_rebuild_says_why_in_one_line_and_writes_nothing(delta_only):
    folder = delta_only["folder"]
    tensors, meta = read_delta(folder / DELTA_FILE)
    tensors["number_rows"][0, 0] += 1  # not the delta that was trained: the digest differs
    save_delta(folder / DELTA_FILE, tensors, meta)
    assert rebuild_runner.main([str(folder)]) == 1  # the rebuilding process's work, here in the test's own
    failed = rebuild_status()
    assert failed.state == "failed" and "\n" not in failed.message
    assert "differ from the ones trained" in failed.message
    assert sorted(f.name for f in folder.iterdir()) == [DELTA_FILE, "recipe.json"]
    assert not list(folder.parent.glob(".writing-*"))
    at = ablations_page(delta_only["run"])  # the page says so, with the button to try again
    assert [e.value for e in at.error] == [f"The rebuild failed: {failed.message}"]
    assert any(b.label == REBUILD_LABEL for b in at.button)


def test_a_rebuild_whose_process_died_is_failed(delta_only):
    """A status that says running with nobody holding the lock (the process was killed): failed, with what to do."""
    folder = delta_only["folder"]
    killed = RebuildStatus("running", str(folder.resolve()), "merging", "", 0.4, time.time())
    write_status(rebuild_root(create=True), killed)
    status = rebuild_status()
    assert status.state == "failed" and "stopped before it finished" in status.message
    assert "python -m core rebuild" in status.message and "\n" not in status.message


def test_the_write_is_whole_or_nothing(delta_only, monkeypatch):
    """A write that fails half way (here: the tokenizer) leaves the folder as it was, and no staging folder."""
    folder = delta_only["folder"]
    model, tokenizer = merged_model(*read_delta_with_base(folder))

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(tokenizer, "save_pretrained", broken)
    with pytest.raises(OSError, match="disk full"):
        write_model_folder(folder, model, tokenizer, {"kind": "fine-tuned"})
    assert sorted(f.name for f in folder.iterdir()) == [DELTA_FILE, "recipe.json"]
    assert not list(folder.parent.glob(".writing-*"))


def read_delta_with_base(folder: Path):
    tensors, meta = read_delta(folder / DELTA_FILE)
    return meta["base"], tensors, meta


def test_the_page_rebuilds_and_then_computes_live(delta_only):
    """Pressed on the page: the progress bar while it runs (the page's runs go on meanwhile), then the live
    controls, and a live ablation computed on the rebuilt weights."""
    run = delta_only["run"]
    at = ablations_page(run)
    next(b for b in at.button if b.label == REBUILD_LABEL).click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert rebuild_status().running  # in the background: the page's run ended before the rebuild did
    bars = [p for p in at.get("progress")]
    assert bars and "Rebuilding the weights" in bars[0].proto.text
    start = time.monotonic()
    while rebuild_status().running and time.monotonic() - start < REBUILD_WAIT_S:
        time.sleep(0.2)
    assert rebuild_status().state == "done", rebuild_status()
    at.run()  # the next look (the progress bar's own timer, every second, in a browser)
    assert not at.exception, [e.message for e in at.exception]
    assert not any(b.label == REBUILD_LABEL for b in at.button)
    assert any("The weights were rebuilt here" in m.value for m in at.success)
    live = next(b for b in at.button if b.label.endswith("with this filter"))
    live.click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any(m.label == "accuracy" for m in at.metric)


def ablations_page(run) -> AppTest:
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at.query_params["run"] = run.name
    at.run()
    at.switch_page("views/ablations.py")
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_the_status_file_is_read_safely(tmp_path):
    (tmp_path / "status.json").write_text("[1, 2]")
    assert rebuild_job.read_status(tmp_path).state == "idle"
    (tmp_path / "status.json").write_text("{not json")
    assert rebuild_job.read_status(tmp_path).state == "idle"
