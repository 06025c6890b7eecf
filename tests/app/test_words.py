"""Words a class knows: every page's labels, captions, badges and chart titles, on the shipped runs, use only words
the Terms page explains.

The word list is app.glossary.JARGON (one place): each listed word maps to its Terms entry. On top of the list,
any acronym or identifier (capitals inside a word, an underscore) a page shows must be listed there or be a name
(of a model, a file format, a machine). Badges come from the verdict vocabulary (core.claims.base), which the
Terms page defines. In normal mode no caption is longer than 60 words: the rest goes to an expander or a table.
"""

from __future__ import annotations

import functools
import re

import pytest
import streamlit as st
from screen_text import shown_text
from streamlit.testing.v1 import AppTest

from app.furniture import code_spans
from app.glossary import JARGON, TERMS, jargon_flags
from app.tour.steps import STEPS
from core.claims.base import VERDICT_LABELS, VERDICT_MEANINGS
from core.claims.features import claim_training
from core.claims.registry import run_claims
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs
from core.runs.origin import describe_run
from core.runs.reader import RunReader

CACHE = PROJECT_ROOT / "cache"
SHIPPED = [r for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []
PAGES = [
    "views/logit_lens.py",
    "views/spectra.py",
    "views/waves.py",
    "views/ablations.py",
    "views/numbers.py",
    "views/patching.py",
    "views/training.py",
    "views/behaviour.py",
    "views/terms.py",
]
#: Names a class reads as names, not as words to learn: models, their makers and packages, file formats, machines.
NAMES = {
    "SmolLM2", "GPT", "XL", "RoBERTa", "PaLM", "HuggingFaceTB", "PyPI", "CPU", "GPU", "MB", "KB", "CSV", "PNG",
    "SVG", "API", "URL", "GGUF", "Phi", "NeurIPS", "NVIDIA", "H100", "HTML", "PDF",
}  # fmt: skip
#: An acronym (two capitals in a word) or an identifier (an underscore inside a word).
TECHNICAL = re.compile(r"\b[A-Za-z0-9]*[A-Z][A-Za-z0-9]*[A-Z][A-Za-z0-9_]*\b|\b\w+_\w+\b")
MAX_CAPTION_WORDS = 60


def unexplained(texts: list[str]) -> list[str]:
    """Acronyms and identifiers in `texts` (code spans aside) that are neither a listed word nor a name, and badges
    that are not in the verdict vocabulary."""
    bad = []
    for text in texts:
        for badge in re.findall(r":\w+-badge\[([^\]]+)\]", text):
            if badge not in VERDICT_LABELS.values():
                bad.append(f"badge {badge!r}")
        words = re.sub(r"`[^`]*`", " ", text)
        for word in TECHNICAL.findall(words):
            listed = any(re.search(p, word, jargon_flags(p)) for p in JARGON)
            if listed or word.lstrip("0123456789.") in NAMES:  # "5.0MB": a unit after a number
                continue
            bad.append(f"{word!r} in {text[:80]!r}")
    return bad


def test_every_listed_word_and_verdict_is_on_the_terms_page(monkeypatch):
    assert set(JARGON.values()) <= set(TERMS), set(JARGON.values()) - set(TERMS)
    assert set(VERDICT_LABELS) == set(VERDICT_MEANINGS)
    if not SHIPPED:
        pytest.skip("no shipped runs in cache/")
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(CACHE))
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at.run()
    at.switch_page("views/terms.py")
    at.run()
    shown = "\n".join(m.value for m in at.markdown)
    assert all(f"**{name}**" in shown for name in TERMS), [n for n in TERMS if f"**{n}**" not in shown]
    assert all(VERDICT_LABELS[v] in shown and VERDICT_MEANINGS[v] in shown for v in VERDICT_LABELS)


def test_the_word_list_finds_the_words_it_lists():
    """Each entry of the list matches the word it stands for (a pattern that matches nothing explains nothing)."""
    samples = {"MLP": "MLPs", "attention": "attention", "layer": "layers", "token": "tokens", "probe": "probes",
               "t-SNE": "t-SNE", "LoRA": "LoRA", "fine-tuning": "fine-tuned", "epoch": "epochs", "seed": "3 seeds",
               "k-shot": "4-shot"}  # fmt: skip
    for entry, word in samples.items():
        assert any(re.search(p, word, jargon_flags(p)) for p, e in JARGON.items() if e == entry), entry
    assert unexplained(["the Q4_1 weights", "a GGUF file", "W_U and W_E", "`a,b,answer_given`"]) == []
    assert unexplained(["an FFN block", "the kv_cache", ":red-badge[Not tested here]"]) != []


def representative_runs():
    """The default run (the sidebar's first), a 2-layer demo run and a model that writes digits."""
    if not SHIPPED:
        return []
    default = min(SHIPPED, key=lambda r: (r.manifest["task"].get("split") != "test",  # the run the sidebar opens with
                                          r.manifest.get("display_order", 100), r.manifest.get("label", "")))
    small = [r for r in SHIPPED if r.manifest.get("n_layers") == 2 and "phase_locking" in r.manifest["tables"]]
    digits = [r for r in SHIPPED if "examples" not in r.manifest["tables"]]
    return list({r.name: r for r in [default, *small[:1], *digits[:1]]}.values())


@functools.cache
def walk(name: str) -> tuple[list[str], list[tuple]]:
    """(every text shown, captions over the limit as (page, step, start)) on every page and Tour step of one run,
    in normal mode."""
    at = AppTest.from_file(str(PROJECT_ROOT / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"run": name})
    at.run()
    texts, long_captions = [], []
    views = [(page, None) for page in PAGES] + [("views/tour.py", step) for step in range(1, len(STEPS) + 1)]
    for page, step in views:
        at.switch_page(page)
        if step is not None:
            at.session_state["step"] = step
        at.run()
        assert not at.exception, (page, step, [e.message for e in at.exception])
        texts += shown_text(at)
        long_captions += [(page, step, len(c.value.split()), c.value) for c in at.caption
                          if len(c.value.split()) > MAX_CAPTION_WORDS]
    return texts, long_captions


@pytest.fixture
def shipped_cache(monkeypatch):
    monkeypatch.setenv("FOURIER_CACHE_DIR", str(CACHE))
    st.cache_data.clear()


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
@pytest.mark.parametrize("run", representative_runs(), ids=lambda r: r.name[:24])
def test_every_page_and_tour_step_uses_explained_words(run, shipped_cache):
    texts, _ = walk(run.name)
    assert unexplained(texts) == []


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
def test_no_caption_is_longer_than_60_words_in_normal_mode(shipped_cache):
    for run in representative_runs():
        _, long_captions = walk(run.name)
        assert long_captions == [], run.name


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
def test_every_sentence_about_every_shipped_run_uses_explained_words():
    """The claims' sentences (paper, measured, reason, headline), run labels and descriptions of every shipped run."""
    runs = [RunReader(CACHE, r.name) for r in SHIPPED]
    texts = []
    for run in runs:
        texts += [run.label, code_spans(describe_run(run.manifest))]  # as the Tour shows it
        for c in run_claims(run).values():
            texts += [c.paper, c.measured, c.reason, c.short]
    t = claim_training(runs)
    texts += [t.paper, t.measured, t.reason]
    assert unexplained(texts) == []
