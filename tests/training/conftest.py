"""The fine-tuning tests' shared base model: a tiny Llama written as a GGUF file and imported as SmolLM2-135M is
(core.models.importer), once per test module."""

import pytest

from core.models.importer import import_gguf
from core.models.random_models import write_tiny_llama_gguf


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    root = tmp_path_factory.mktemp("ft")
    path, _ = write_tiny_llama_gguf(root / "tiny.gguf", quantize=None, n_layers=3)
    return import_gguf(path, root / "base", {"origin": "test"}, log=lambda *_: None)
