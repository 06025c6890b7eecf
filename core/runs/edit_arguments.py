"""An edit's arguments read and checked before any model is loaded: `python -m core ablate|shift` answers a
mistyped run, a cutoff or a shift out of range in well under a second, without importing torch.

The number line an edit is checked against is the run's (its manifest's task), or the task given on the command
line for a model; `core.runs.ablate` uses the same checks once it has loaded the model.
"""

from __future__ import annotations

from pathlib import Path

from core.analysis.phase_shift import PERIOD_SETS
from core.errors import CoreError
from core.models.source import resolve_source
from core.runs.cache import read_manifest
from core.runs.run_names import find_run
from core.tasks import number_space


def check_edit(p: int, tau: int | None = None, keep_k: int | None = None, periods: str | None = None,
               d: int | None = None) -> None:
    """An edit's arguments against the number line 0..p-1 (frequencies 1..p//2), before anything is loaded."""
    top = p // 2
    if tau is not None and not 1 <= tau <= top:
        raise CoreError(f"--tau {tau}: the frequencies of {p} numbers are 1..{top}; choose a cutoff in 1..{top}")
    if keep_k is not None and not 1 <= keep_k <= top:
        raise CoreError(f"--remove keep-{keep_k}: the frequencies of {p} numbers are 1..{top}")
    if periods is not None and periods not in PERIOD_SETS:
        raise CoreError(f"--periods {periods!r}: choose one of {', '.join(PERIOD_SETS)}")
    if d is not None and not 1 <= d < p:
        raise CoreError(f"--d {d}: a shift moves an answer y to y + d on the number line 0..{p - 1}; choose d in "
                        f"1..{p - 1} (the paper shifts by 1, 2 and 5)")


def parse_removed(text: str) -> tuple[str, int | None]:
    """--remove: "low", "high" or "keep-K" -> (removed, keep_k)."""
    if text in ("low", "high"):
        return text, None
    if text.startswith("keep-") and text[5:].isdigit():
        return "keep", int(text[5:])
    raise CoreError(f"--remove {text!r}: choose low, high, or keep-K (keep one frequency K, e.g. keep-52)")


def edit_number_space(source: str, cache_dir: str | Path, task: str, max_operand: int) -> int:
    """p of the number line an edit of `source` works on: the run's own task where `source` names a run of
    `cache_dir` (a near miss is refused here, with the runs it could mean), else the task given for a model (a
    folder that holds no model, or a hub id the hub cannot give, is refused here: core.models.source)."""
    found = find_run(cache_dir, source)
    if found:
        t = read_manifest(cache_dir, found).get("task") or {}
        task, max_operand = t.get("task", task), int(t.get("max_operand", max_operand))
    else:
        resolve_source(source)  # a folder that is no model, or a hub id the hub cannot give, is refused here too
    return number_space(task, max_operand)
