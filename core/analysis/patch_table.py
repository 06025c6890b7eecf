"""The patching table's vocabulary (core.analysis.patching writes it, core.claims.patching and the pages read it),
torch-free: its columns, the two directions of a patch, the group site, the two contrasts, and how a table cached
before they existed reads."""

from __future__ import annotations

import pandas as pd

#: A group of sites: one kind of module (attention or MLP) over a range of layers, patched together.
GROUP = "group"
#: The two directions of a patch: the clean prompt's activation into the corrupted run (restores), or the corrupted
#: prompt's into the clean run (takes away).
DENOISE = "denoise"
NOISE = "noise"
DIRECTIONS = (DENOISE, NOISE)
#: How much the corrupted question's second operand differs from the clean one's: 1 (the answer's last digit
#: changes) or 10 (its tens digit changes: the magnitude half of the paper).
CONTRASTS = (1, 10)
#: The columns of a patching table: one row per site, direction and contrast (head -1 for a whole module, the stream
#: or a group); `recovered` is the share the patch moves in its direction (core.analysis.patching); a group is the
#: outputs of `modules` of the layers `from_layer`..`layer` (a single site: its own layer and kind).
PATCH_COLUMNS = ("kind", "layer", "head", "n", "recovered", "recovered_low", "recovered_high", "moved",
                 "patched_gap", "clean_gap", "corrupt_gap", "direction", "contrast", "from_layer", "modules")


def with_defaults(table: pd.DataFrame) -> pd.DataFrame:
    """A patching table cached before noising, groups and the second contrast (version 1) read as what it was:
    denoising, contrast 1, every site its own layer and kind. A table that has the columns is returned as it is."""
    t = table.copy()
    if "direction" not in t.columns:
        t["direction"] = DENOISE
    if "contrast" not in t.columns:
        t["contrast"] = 1
    if "from_layer" not in t.columns:
        t["from_layer"] = t["layer"]
    if "modules" not in t.columns:
        t["modules"] = t["kind"]
    return t
