"""`verify` checks what a run's tables say, not only their checksums (issue 68): a table edited and its checksum
recomputed the way the writer computes it passes every checksum, so only these checks can catch it: NaN where
nothing may be missing, a patching row past the model's layers, an unfiltered accuracy the examples table does not
give. A run is named to `verify` as to every other command (words, id, a path to its folder), and `list` says which
checks it ran."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from core.cli import main
from core.files import PROJECT_ROOT, sha256_file
from core.runs.cache import MANIFEST, verify_run
from core.runs.run_names import locate_run, run_of_cache
from core.runs.table_checks import invariant_problems

CACHE = PROJECT_ROOT / "cache"
RUN = "scratch-multiplication-demo-trained-here-multiplication-test-f68a05f30b"  # 2 layers, 8 heads, 168 questions

needs_shipped = pytest.mark.skipif(not (CACHE / RUN).is_dir(), reason="the shipped cache")


def copy_run(tmp_path: Path) -> Path:
    run = tmp_path / "cache" / RUN
    shutil.copytree(CACHE / RUN, run)
    return run


def rewrite_table(run: Path, table: str, edit) -> None:
    """`edit(frame)` applied to one table, written as the writer writes it, its checksum and rows recomputed."""
    manifest = json.loads((run / MANIFEST).read_text())
    entry = manifest["tables"][table]
    path = run / entry["file"]
    frame = pd.read_parquet(path)
    edit(frame)
    frame.reset_index(drop=True).to_parquet(path, index=False, compression="zstd")
    entry.update(rows=len(frame), sha256=sha256_file(path))
    (run / MANIFEST).write_text(json.dumps(manifest, indent=1))


def nan_accuracy(frame):
    frame.loc[frame.index[3], "accuracy"] = np.nan


def layer_5(frame):
    """The MLP sites of one direction and contrast only: 2 rows (one per layer) moved to layer 5."""
    first = frame["kind"] == "mlp"
    if "direction" in frame:
        first &= frame["direction"] == frame["direction"].iloc[0]
    if "contrast" in frame:
        first &= frame["contrast"] == frame["contrast"].iloc[0]
    frame.loc[first, "layer"] = 5


def unfiltered_99(frame):
    frame.loc[(frame["modules"] == "none") & (frame["removed"] == "none"), "accuracy"] = 0.99


def interval_off(frame):
    frame.loc[frame.index[0], "recovered_low"] = frame["recovered"].iloc[0] + 0.5


EDITS = {
    "NaN in a column that is never missing": (
        "ablations", nan_accuracy,
        "table ablations: column accuracy is NaN or empty in 1 row of"),
    "a patching row past the model's layers": (
        "patching", layer_5,
        "rows at layer 5..5, outside the model's 2 layers: modules and heads of 1..2"),
    "an unfiltered accuracy the examples do not give": (
        "ablations", unfiltered_99,
        "table ablations: the unfiltered accuracy (modules none, removed none) 99.00% is not the examples table's "
        "13.69% (the mean of correct over the same 168 test questions)"),
    "a point outside its interval": ("patching", interval_off,
                                     "table patching: recovered lies far outside its interval"),
}


@needs_shipped
@pytest.mark.parametrize("what", list(EDITS))
def test_a_table_edited_with_its_checksum_recomputed_fails_verify(what, tmp_path):
    table, edit, line = EDITS[what]
    run = copy_run(tmp_path)
    rewrite_table(run, table, edit)
    problems = verify_run(run, deep=True)
    assert not any("sha256" in p for p in problems)  # the checksum passes: only what the table says can catch it
    assert any(line in p for p in problems), problems
    assert all("\n" not in p and p.endswith("recompute the run") or "float32" in p for p in problems), problems
    assert verify_run(run, deep=False) == []  # the shallow check reads no table: `list` says so


@needs_shipped
def test_verify_names_a_run_as_every_command_does(tmp_path, capsys):
    run = copy_run(tmp_path)
    cache = str(run.parent)
    for name, given in (("scratch-multiplication", cache), ("f68a05f30b", cache), (str(run), "elsewhere")):
        name, found_in = locate_run(name, given)  # a path to a run folder names its own cache folder
        assert run_of_cache(found_in, name) == RUN
    assert main(["verify", "scratch-multiplication", "--cache-dir", cache]) == 0
    assert capsys.readouterr().out.strip() == f"{RUN}: ok"
    assert main(["verify", "scratch-multiplikation", "--cache-dir", cache]) == 2
    assert f"did you mean {RUN}" in capsys.readouterr().err
    assert main(["verify", "trained-gpt2", "--cache-dir", cache]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no run named 'trained-gpt2'") and f"did you mean {RUN}" in err
    assert main(["list", "--json", "--cache-dir", cache]) == 0
    assert [r["checks"] for r in json.loads(capsys.readouterr().out)] == ["shallow"]
    assert main(["list", "--cache-dir", cache]) == 0
    assert "shallow checks" in capsys.readouterr().out


def test_a_share_of_a_spread_near_float32_noise_may_miss_its_interval_by_its_rounding_only():
    """A noising row of a random tiny model (the corrupted run's stream patched in after the last layer): its gaps
    about 0.02 apart by 2.7e-4, the patched run's gap off the corrupted one by float32 noise, so its share 1.00009
    lies 6e-5 above an interval 5.5e-5 wide: rounding, not an edit. 2e-4 above it is too, but not with gaps 5
    apart, and 1e-2 above it is not either way."""
    row = {"kind": "resid", "layer": 2, "head": -1, "n": 40, "recovered": 1.000087, "recovered_low": 0.999974,
           "recovered_high": 1.000029, "moved": 1.0, "patched_gap": -0.021517, "clean_gap": -0.021789,
           "corrupt_gap": -0.021517, "direction": "noise", "contrast": 10}
    assert not [p for p in invariant_problems("patching", pd.DataFrame([row])) if "far outside" in p]
    row["recovered"] = 1.0002
    assert not [p for p in invariant_problems("patching", pd.DataFrame([row])) if "far outside" in p]
    wide_apart = {**row, "clean_gap": 5.0, "corrupt_gap": 0.0, "patched_gap": 0.0}
    assert [p for p in invariant_problems("patching", pd.DataFrame([wide_apart])) if "far outside" in p]
    off = {**row, "recovered": 1.01}  # 1e-2 off: beyond what the gaps' rounding can give
    assert [p for p in invariant_problems("patching", pd.DataFrame([off])) if "far outside" in p]
