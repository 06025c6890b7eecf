"""What every claim shares: the Claim record and the small helpers that write a claim's numbers the
same way everywhere (core.claims.registry explains the claims; a run is read by core.runs.reader)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd

from core.analysis.phase import SHORT_PERIODS
from core.errors import CoreError
from core.paper import TaskFindings, paper_findings
from core.runs.origin import built_control
from core.runs.reader import Table
from core.runs.summaries import running_example
from core.tasks import task_name

VERDICTS = ("agrees", "partly", "does not", "not tested", "does not apply")
#: How well a verdict shows a step (to pick the shipped run that shows it best).
VERDICT_SCORE = {"agrees": 3, "partly": 2, "not tested": 1, "does not": 0, "does not apply": 0}
#: The one vocabulary of verdicts: the word a badge shows for each, and what it means (the Terms page shows these).
VERDICT_LABELS = {
    "agrees": "Agrees",
    "partly": "Partly agrees",
    "does not": "Does not agree",
    "not tested": "Can't tell here",
    "does not apply": "Does not apply",
}
VERDICT_MEANINGS = {
    "agrees": "This run's measurement meets the step's test of the paper's finding; the reason beside the badge "
    "quotes the measurement that meets it.",
    "partly": "This run shows part of what the paper found; the reason says which part differs.",
    "does not": "This run could show the paper's finding, was measured, and does not show it.",
    "not tested": "This run was measured but cannot decide the question: too few examples, too few errors, or "
    "features that were put in by hand, so finding them proves nothing.",
    "does not apply": "This model cannot show the finding at all, because of how it is built (for example, it "
    "writes numbers as several digit tokens, so there are no number logits to read).",
}


@dataclass
class Claim:
    step: str
    paper: str
    measured: str
    verdict: str
    reason: str = ""
    numbers: dict = field(default_factory=dict)
    #: One short sentence for a projector (the measured text's gist); `measured` keeps every number.
    headline: str = ""
    #: The paper's finding in a few words, for a projector (core.claims.registry.paper_short sets it).
    paper_short: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise CoreError(f"internal: unknown verdict {self.verdict!r}")
        if not self.reason.strip():  # every reason states its evidence: at least the measurement's first clause
            self.reason = measured_clause(self.measured)

    @property
    def short(self) -> str:
        """The headline, or the measured text's first sentence when a claim has none."""
        return self.headline or self.measured.split(". ")[0].rstrip(".") + "."

    @property
    def score(self) -> int:
        return VERDICT_SCORE[self.verdict]


# ----------------------------------------------------------------------------- helpers


def measured_clause(measured: str) -> str:
    """A measured text's first sentence without its full stop (a decimal point, "99.5%", does not end a sentence):
    the evidence a claim whose rule gives no reason of its own states as its reason."""
    first = re.split(r"(?<=[.!?])\s+(?=[A-Z0-9“\"])", measured.strip(), maxsplit=1)[0]
    return unnested(first.rstrip(".").strip())


def unnested(text: str) -> str:
    """`text` with brackets inside brackets written as a clause instead ("(10 is 2 tokens ('1' + '0'))" becomes
    "(10 is 2 tokens, '1' + '0')"), so a reason reads with one level of brackets."""
    out, depth = [], 0
    for ch in text:
        if ch == "(":
            depth += 1
            if depth > 1:
                while out and out[-1] == " ":
                    out.pop()
                out.append(", ")
                continue
        elif ch == ")":
            depth -= 1
            if depth >= 1:
                continue
        out.append(ch)
    return "".join(out)


def pct(x: float, digits: int = 1) -> str:
    """A share as a percentage, to `digits` decimals."""
    return f"{100 * x:.{digits}f}%"


def seeds(n) -> str:
    n = int(n)
    return f"{n} seed" + ("s" if n != 1 else "")


def periods(values) -> str:
    return ", ".join(f"{float(t):.3g}" for t in values)


def running_example_of(run) -> pd.Series:
    """The example the Tour's charts show (core.runs.summaries.running_example); its id is the Series' name."""
    return running_example(run.table(Table.EXAMPLES))


def same_period(a: float, b: float) -> bool:
    """Whether two periods are one (the tables store 520/k as floats; 520/259 = 2.008 is not period 2)."""
    return abs(float(a) - float(b)) <= 1e-3 * max(abs(float(a)), abs(float(b)))


def is_short(period: float) -> bool:
    return any(abs(period - t) < 1e-6 for t in SHORT_PERIODS)


#: A rank of W_U's number rows at or below this makes every spectrum read through it sparse by construction.
LOW_RANK = 32


def structural_reason(run, spectra: bool = False) -> str:
    """What about this model limits what it can show: few layers (not for a control built with each module held to
    one band, whose modules do one job each by construction); for spectra, a low-rank unembedding."""
    m = run.manifest
    bits = []
    if isinstance(m.get("n_layers"), int) and m["n_layers"] <= 4 and not built_control(m):
        bits.append(f"only {m['n_layers']} layers, so each module has to do both jobs")
    rank = m.get("unembedding_rank")
    if spectra and isinstance(rank, int) and rank <= LOW_RANK:
        bits.append(f"W_U's number rows have rank {rank}, so every spectrum read through it is sparse by construction")
    return "; ".join(bits)


# ----------------------------------------------------------------------------- the run's task


def task_of(run) -> str:
    """The run's task, from its manifest ("addition" for a run that does not say)."""
    return str(((run.manifest or {}).get("task") or {}).get("task", "addition"))


def findings_of(run) -> TaskFindings:
    """The paper's numbers a run is judged by: its task's (core.paper.paper_findings)."""
    return paper_findings(task_of(run))


def judged(claim: Claim, run) -> Claim:
    """`claim` as the run's task makes it: for a step the paper measured on that task, its finding with the note that
    says when the numbers are another phrasing's (reverse-Polish); for one it did not, `unreported`."""
    findings = findings_of(run)
    if not findings.reports(claim.step):
        return unreported(claim, run)
    if findings.note:
        claim.paper = f"{claim.paper} {findings.note}"
    return claim


#: What the paper measured at each step, as "the paper reports no ... for multiplication" names it.
STEP_MEASURES = {
    "accuracy": "accuracy",
    "logit_lens": "logit lens (how exact each layer's answer is)",
    "module_waves": "test of which module computes the last digit",
    "spectra": "module spectra",
    "waves": "strongest waves of the final logits",
    "ablations": "Table 1 (frequency bands filtered out)",
    "behaviour": "count of errors that are multiples of 10",
    "training": "training with frozen number embeddings",
}


def unreported(claim: Claim, run) -> Claim:
    """`claim` for a run whose task the paper did not measure this step on: the run's measurement stays, the paper's
    side says there is nothing to compare with, and the verdict is "not tested" (a model that cannot show the step at
    all stays "does not apply"). Another task's numbers are never borrowed."""
    task = task_name(task_of(run))
    what = STEP_MEASURES.get(claim.step, "figure")
    paper = f"The paper reports no {what} for {task}: its figures for this step are for addition."
    nothing = f"the paper reports no {what} for {task}, so there is nothing to compare this run with"
    if claim.verdict == "does not apply":
        verdict, reason = claim.verdict, (f"{claim.reason}; {nothing}" if claim.reason else nothing)
    else:
        verdict, reason = "not tested", nothing
    return Claim(claim.step, paper, claim.measured, verdict, reason, {**claim.numbers, "paper_task": None},
                 headline=claim.headline)
