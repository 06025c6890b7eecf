"""docs/api.md's examples, executed in order in one namespace from the project's root: the page stays true."""

import os
import re

import pytest

from core.files import PROJECT_ROOT

PAGE = PROJECT_ROOT / "docs" / "api.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def test_the_page_has_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.skipif(not (PROJECT_ROOT / "models" / "fourier-frozen" / "config.json").exists(),
                    reason="the shipped demo model")
def test_every_example_runs(capsys, monkeypatch):
    monkeypatch.chdir(PROJECT_ROOT)
    monkeypatch.setitem(os.environ, "OMP_NUM_THREADS", "1")
    namespace: dict = {}
    for i, block in enumerate(BLOCKS, 1):
        exec(compile(block, f"docs/api.md block {i}", "exec"), namespace)  # noqa: S102 (the project's own page)
    out = capsys.readouterr().out
    assert "blocks.0.hook_mlp_out" in out and "MLP: low frequencies removed (tau = 50)" in out
