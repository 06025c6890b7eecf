"""The paper's reported numbers (Zhou et al., NeurIPS 2024), for side-by-side comparison.

Quoted from the paper, as docs/method.md#the-papers-results lists them. Accuracies in percent, losses as reported.
Most are for addition; `paper_findings(task)` says which of them a run of each task is judged by.
"""

from dataclasses import dataclass

#: Table 1: fine-tuned GPT-2-XL, filters on every layer (tau = 50): (validation loss, accuracy %).
#: Keys: (modules, band removed).
TABLE1_GPT2_XL = {
    ("none", "none"): (0.0073, 99.74),
    ("both", "low"): (4.0842, 5.94),
    ("attn", "low"): (0.0352, 99.12),
    ("mlp", "low"): (2.1399, 35.89),
    ("both", "high"): (1.8598, 27.08),
    ("attn", "high"): (0.5943, 78.36),
    ("mlp", "high"): (0.1213, 98.10),
}
TABLE1_TAU = 50

ACCURACY = {
    "GPT-2-XL fine-tuned": 99.74,
    "GPT-2-XL from scratch (500 epochs)": 94.44,
    "GPT-2-small from scratch": 53.95,
    "GPT-2-small, frozen pre-trained embeddings": 100.0,
}

#: Share (%) of wrong answers whose error is a multiple of 10.
MULTIPLE_OF_10 = {
    "GPT-J 4-shot": 93,
    "Phi-2 4-shot": 73,
    "GPT-3.5 0-shot": 100,
    "GPT-4 0-shot": 100,
    "PaLM-2 0-shot": 87,
}

#: Keep-one-frequency with period 2: predictions with the right parity (%).
PARITY_KEEP_PERIOD_2 = 99.59

#: Periods at which pre-trained embeddings and module logits show outliers.
OUTLIER_PERIODS = (2.0, 2.5, 5.0, 10.0)

#: Multiplication (the paper's appendix): fine-tuned GPT-2-XL's validation accuracy (%), and the periods at which
#: its module logits have outliers (the paper writes 3.3: 520/156, ten numbers per three repetitions).
MULTIPLICATION_ACCURACY_VAL = 74.58
MULTIPLICATION_OUTLIER_PERIODS = (2.0, 2.5, 10 / 3, 5.0, 10.0)

#: The steps of the story, as `core.claims.registry.RUN_CLAIMS` names them, that the paper measured on addition.
ADDITION_STEPS = ("accuracy", "logit_lens", "module_waves", "spectra", "waves", "ablations", "behaviour", "training")


@dataclass(frozen=True)
class TaskFindings:
    """What the paper reports for one task, to judge a run of that task by.

    `task`: the paper's task whose numbers these are (reverse-Polish runs read addition's); `accuracy`: fine-tuned
    GPT-2-XL's accuracy (%) on `accuracy_split`; `module_periods`: the periods of its module logits' outliers;
    `steps`: the steps of the story the paper measured on this task (a step outside them is "not tested" for a run
    of it, never judged by another task's numbers); `note`: said after the paper's finding when the numbers are
    another phrasing's ("" when they are the run's own)."""

    task: str
    accuracy: float
    accuracy_split: str
    module_periods: tuple[float, ...]
    steps: tuple[str, ...]
    note: str = ""

    def reports(self, step: str) -> bool:
        return step in self.steps

    def found_among(self, periods) -> list[float]:
        """Which of this task's `module_periods` are among `periods` (520/k values, read to 0.1%)."""
        return [t for t in self.module_periods if any(abs(t - float(x)) <= 1e-3 * t for x in periods)]

    @property
    def new_periods(self) -> tuple[float, ...]:
        """Periods this task's module logits add to addition's 2, 2.5, 5, 10 (multiplication: 3.33)."""
        return tuple(t for t in self.module_periods if not any(abs(t - s) < 1e-6 for s in OUTLIER_PERIODS))


ADDITION = TaskFindings("addition", ACCURACY["GPT-2-XL fine-tuned"], "test", OUTLIER_PERIODS, ADDITION_STEPS)
PAPER_BY_TASK = {
    "addition": ADDITION,
    "reverse-polish": TaskFindings(
        "addition", ADDITION.accuracy, "test", OUTLIER_PERIODS, ADDITION_STEPS,
        note="The paper's numbers are for addition written in words; its appendix repeats the analysis for the "
        "format \u201c15,93+\u201d.",
    ),
    # the appendix reports only the accuracy and the module spectra: every other step is "not tested" here
    "multiplication": TaskFindings(
        "multiplication", MULTIPLICATION_ACCURACY_VAL, "validation", MULTIPLICATION_OUTLIER_PERIODS,
        ("accuracy", "spectra"),
    ),
}


def paper_findings(task: str) -> TaskFindings:
    """The paper's numbers for a run of `task` (addition's for a task it does not name, as for the runs made before
    the task was recorded)."""
    return PAPER_BY_TASK.get(task, ADDITION)
