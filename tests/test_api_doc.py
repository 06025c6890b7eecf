"""docs/api.md's examples, executed in order in one namespace from the project's root: the page stays true."""

import re

import pytest

from core.files import PROJECT_ROOT

PAGE = PROJECT_ROOT / "docs" / "api.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.skipif(not (PROJECT_ROOT / "models" / "fourier-frozen" / "config.json").exists(),
                    reason="the shipped demo model")
def test_every_example_runs(capsys, monkeypatch):
    monkeypatch.chdir(PROJECT_ROOT)
    assert len(BLOCKS) >= 3, "the page lost its examples"
    namespace: dict = {}
    for i, block in enumerate(BLOCKS, 1):
        exec(compile(block, f"docs/api.md block {i}", "exec"), namespace)  # noqa: S102 (the project's own page)
    out = capsys.readouterr().out
    assert "blocks.0.hook_mlp_out" in out and "MLP: low frequencies removed (tau = 50)" in out
