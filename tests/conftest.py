"""Shared fixtures: tiny random-init models of several architectures, built once per session."""

from __future__ import annotations

import os
import warnings

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=UserWarning)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """model_dir(arch, **kw) -> folder of a saved random-init model (cached per arguments)."""
    from core.random_models import save_random_model

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
    """loaded_model(arch, **kw) -> core.models.LoadedModel (cached)."""
    from core.models import load_model

    cache = {}

    def load(arch="gpt2", **kw):
        key = (arch, tuple(sorted(kw.items())))
        if key not in cache:
            cache[key] = load_model(str(model_dir(arch, **kw)))
        return cache[key]

    return load
