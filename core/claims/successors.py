"""What the paper's successors' views show on the shipped runs, one paragraph a run, for docs/findings.md: activation
patching (core.claims.patching: by site, and token by token), attribution patching against it
(core.claims.attribution), attention head by head (core.claims.heads), the helix (core.claims.helix) and single MLP
neurons (core.claims.neurons), each sentence that run's own, computed from its tables. Runs without any of those
tables (no weights here when they were cached) are not named."""

from __future__ import annotations

from core.claims.attribution import attribution_summary
from core.claims.heads import heads_summary
from core.claims.helix import helix_summary
from core.claims.neurons import neuron_summary
from core.claims.patching import patching_summary, position_summary
from core.runs.reader import RunReader, Table

#: What the section says before the runs: where each view comes from.
INTRO = ("Views that came after the paper, each measured on the runs whose weights are here: activation patching "
         "between two questions whose answers differ in their last digit (Meng et al. 2022; the Patching page), site "
         "by site and token by token, with attribution patching, its one-pass estimate (Syed et al. 2023), beside it; "
         "attention read head by head (the Waves page), the helix of Kantamneni & Tegmark (2025) (the Numbers page), "
         "and single MLP neurons fitted by a helix of a+b or by the operands' digits (Nikankin et al. 2024, a bag of "
         "heuristics; the Ablations page). The paper makes no claim about them, so none carries a verdict; each "
         "sentence is the run's own.")


def successor_paragraphs(runs: list[RunReader]) -> list[str]:
    """One paragraph per run that has a successor table: its label, then its patching (by site, by token, attribution),
    heads, helix and neuron sentences."""
    out = []
    for run in runs:
        parts = []
        if run.has(Table.PATCHING):
            parts.append("**Patching.** " + patching_summary(run))
        if run.has(Table.POSITION_PATCHING):
            parts.append("**Token by token.** " + position_summary(run))
        if run.has(Table.PATCHING) and run.has(Table.ATTRIBUTION):
            parts.append("**Attribution.** " + attribution_summary(run))
        if run.has(Table.HEAD_LOCKING):
            parts.append("**Heads.** " + heads_summary(run))
        if run.has(Table.HELIX_FIT):
            parts.append("**Helix.** " + helix_summary(run))
        if run.has(Table.NEURON_FITS) and run.has(Table.NEURONS):
            parts.append("**Single neurons.** " + neuron_summary(run))
        if parts:
            out.append(f"*{run.label}.* " + " ".join(parts))
    return out
