"""Which conditions of a deep model's precompute read every question, and which read a fixed sample.

On a model whose blocks are large (`core.runs.live_sample.reads_sample`: a 30-layer, 576-wide model
takes about 1.5 ms per condition and question at the answer position on 2 CPU threads), the ablation
grid (about 190 conditions) and the phase shift (17 conditions for each of 2L + 1 modules) over
every question of a 3,419-question split would take well over an hour. The precompute then reads:

* **every question** for what the verdicts read: the unfiltered model, and at Table 1's tau (the
  grid's tau nearest the paper's) the six band filters (attention, MLP, both x low, high) with the
  first draw of their rank-matched and of their energy-matched control (`every_question`);
* a **fixed sample** of SAMPLE questions for everything else: the tau sweep, keep-one-frequency, and the
  further control draws. It is the first SAMPLE questions of the live filter's sample
  (`core.runs.live_sample.live_sample`: LIVE_SAMPLE questions stratified by the answer's size, in an order
  whose every prefix is itself close to stratified), so a live filter's first SAMPLE questions are these.
  Each such row's `n` is the sample's size and its change in accuracy is measured against the unfiltered
  model on the same sample;
* for the phase shift, a **screen**: every module's shift of all four short periods (no controls)
  on the first SCREEN questions of the sample (themselves close to stratified); the SCREEN_KEEP
  modules whose last digit moves most there, and the residual stream, then get every condition
  (all period sets, their controls) on the whole sample (`screened_modules`). Modules that were not
  kept keep their screen rows (n = SCREEN x shifts), which cannot pass the causal rule (it needs
  controls): the screen can drop a module, never make one pass.

Why these sizes: on the 30-layer stand-in the conditions that read every question, the measurement
pass, the number stage and building the grid's filters already take about 410 s on 2 CPU threads,
near the machine's compute floor (docs/speed.md), so the 600 s a precompute may take leave about 190 s
for what reads the sample; at 2.5 ms a condition and question that is SAMPLE = 256 (a 95% interval
of at most about +-6 points), not the live filter's 512 (+-4.3 points).

A 2-layer demo model, or a model with a split no larger than the sample, reads every question for
everything (no `Design`), and so does any run asked for with `every_question=True`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from core.runs.live_sample import LIVE_SAMPLE, live_sample, reads_sample

#: Questions the sampled conditions read: the first ones of the live filter's sample (module docstring).
SAMPLE = 256
#: Questions of the sample the phase-shift screen reads (the sample's first ones, close to stratified).
SCREEN = 64
#: Modules (attention or MLP layers) that pass the screen and get every phase-shift condition on the sample.
SCREEN_KEEP = 8


@dataclass(frozen=True)
class Design:
    """A sampled precompute: `sample` holds row positions in the split (in the live sample's order),
    `screen` how many of its first rows the phase-shift screen reads."""

    sample: np.ndarray
    screen: int
    n_split: int

    def option(self) -> str:
        """The design as the run's options record it: what sets its numbers, so that a run cached, or a staging
        folder left, by a design of other sizes is not taken for this one (core.runs.cache.RunWriter)."""
        return f"sampled ({len(self.sample)}-question sample, {self.screen}-question screen, keep {SCREEN_KEEP})"

    def manifest(self, every_question_labels: list[str]) -> dict:
        """What the manifest says about the design (docs/cache-format.md)."""
        return {
            "kind": "sampled",
            "n_split": int(self.n_split),
            "sample": int(len(self.sample)),
            "screen": int(self.screen),
            "screen_keep": SCREEN_KEEP,
            "every_question": list(every_question_labels),
        }


def design_for(answers, n_layers: int, width: int, every_question: bool = False) -> Design | None:
    """The design of a precompute over questions with these `answers` (in the split's order): None (every
    condition reads every question) unless the model is large and the split larger than the sample."""
    answers = np.asarray(answers)
    if every_question or not reads_sample(len(answers), n_layers, width, LIVE_SAMPLE):
        return None
    frame = pd.DataFrame({"answer": answers}, index=np.arange(len(answers)))
    sample = live_sample(frame, LIVE_SAMPLE).index.to_numpy()[:SAMPLE]
    return Design(sample=sample, screen=min(SCREEN, len(sample)), n_split=len(answers))


def reads_every_question(spec, table1_tau: int | None) -> bool:
    """Whether a grid condition (core.analysis.ablations.Ablation) reads every question under a sampled
    design: the unfiltered model; at `table1_tau` the band filters and the first draw of each control."""
    if spec.removed == "none":
        return True
    if table1_tau is None or spec.tau is None or int(spec.tau) != int(table1_tau):
        return False
    if spec.removed in ("low", "high"):
        return True
    return spec.removed.startswith(("random-", "matched-")) and int(spec.draw) == 0


def screened_modules(screen_rows: pd.DataFrame, keep: int | None = None) -> list[tuple[str, int]]:
    """The `keep` (default SCREEN_KEEP) attention or MLP modules whose last digit moves most on the screen:
    pooled over the shifts d, the share of questions whose residue moved (`residue_moved` x `n`), largest
    first (ties: the order of the rows, attention before MLP, lower layers first)."""
    rows = screen_rows[screen_rows["kind"].isin(["attn", "mlp"])]
    moved = (rows["residue_moved"] * rows["n"]).groupby([rows["kind"], rows["layer"]], sort=False).sum()
    total = rows["n"].groupby([rows["kind"], rows["layer"]], sort=False).sum()
    share = (moved / total).reset_index(name="share")
    share["order"] = np.arange(len(share))
    top = share.sort_values(["share", "order"], ascending=[False, True], kind="stable")
    top = top.head(SCREEN_KEEP if keep is None else keep)
    return [(str(k), int(l)) for k, l in zip(top["kind"], top["layer"])]


def sampled_cells_note(ablations: pd.DataFrame, manifest: dict) -> str | None:
    """What a run of a deep model read on its fixed sample (its manifest's `design`), in words for the page;
    None when every condition read every question."""
    design = manifest.get("design")
    if not design:
        return None
    full = ablations["label"].isin(design["every_question"])
    taus = sorted({int(t) for t in ablations.loc[full & ablations["removed"].isin(["low", "high"]), "tau"]})
    at = f"tau = {taus[0]}" if len(taus) == 1 else "Table 1's tau"
    return (
        f"This model is deep, so not every filter was run on every question. Table 1's cells at {at}, the unfiltered "
        f"model and one draw of each control read all {design['n_split']:,} questions; the other cutoffs, "
        f"keep-one-frequency and the further control draws read a fixed sample of {design['sample']} questions "
        "(stratified by the answer's size; the first ones a live filter reads), so their accuracy is shown "
        "with its 95% interval and its change is measured against the unfiltered model on the same sample."
    )
