"""What a Tour figure rests on: how many questions (or numbers, runs) of which split, of which run, and why only
some where a table holds a sample; each counted from the table the figure reads or from the figure's own data.
app.tour.steps attaches one `Evidence` to every figure of a step; its `sentence` is the line under the caption."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from core.claims.operations import short_name
from core.runs.reader import RunReader, Table
from core.tasks import expression, task_name


@dataclass(frozen=True)
class Evidence:
    """What a figure rests on, counted from the table it reads: `count` items (`unit`: "test questions",
    "numbers", ...) of the `split`, out of `total` in the split where the figure reads only some of them, for
    the run labelled `run`. `sample`: why only some (the run's cached sample), when so."""

    count: int
    unit: str
    split: str
    run: str
    total: int | None = None
    sample: str = ""

    def sentence(self, name_runs: bool = True) -> str:
        """One line under the caption: "From 16 of the 3,419 test questions (...); run: X."; without the run where
        the screen names it already (`name_runs` False: a Tour step on a projector)."""
        of = f" of the {self.total:,}" if self.total is not None and self.total != self.count else ""
        unit = self.unit if self.count != 1 or of else self.unit.removesuffix("s")
        why = f" ({self.sample})" if self.sample else ""
        runs = f"; {self.runs_said}" if name_runs else ""
        if self.unit == "questions":  # "16 of the 3,419 test questions"
            return f"From {self.count:,}{of} {self.split} {unit}{why}{runs}."
        split = f" on the {self.split} split" if self.split else ""
        return f"From {self.count:,}{of} {unit}{why}{split}{runs}."

    @property
    def runs_said(self) -> str:
        return f"runs: {self.run}" if ";" in self.run else f"run: {self.run}"


def questions(run: RunReader, count: int, sample: str = "") -> Evidence:
    """`count` questions of the run's split (of all the split's questions, the examples table's rows)."""
    total = len(run.table(Table.EXAMPLES))
    return Evidence(int(count), "questions", run.split, run.label, total, sample if count != total else "")


def one_question(run: RunReader, example: pd.Series) -> Evidence:
    """A figure of one question (the running example 15 + 93)."""
    return questions(run, 1, f"{expression(run.task, example['a'], example['b'])} = {example['answer']}")


def phase_questions(run: RunReader) -> Evidence:
    """The questions the phase tables read: the `n` of the phase_locking table, and why only a sample when so
    (the manifest's `phase_locking` note)."""
    n = int(run.table(Table.PHASE_LOCKING)["n"].iloc[0])
    note = run.manifest.get("phase_locking") or {}
    return questions(run, n, note.get("why") or "the run's cached sample")


def sampled_questions(run: RunReader, table: Table) -> int:
    """How many questions a per-example table (module_logits, final_waves) holds."""
    return int(run.table(table)["example_id"].nunique())


def table_questions(run: RunReader, frame: pd.DataFrame) -> Evidence:
    """The questions behind a table whose rows carry their count in an `n` column (layer_accuracy, ablations)."""
    counts = frame["n"].unique()
    if len(counts) != 1:  # rows over different numbers of questions: name the largest, say it varies
        return questions(run, int(counts.max()), "rows over different numbers of questions")
    return questions(run, int(counts[0]))


def numbers_read(run: RunReader) -> Evidence:
    """The numbers whose representations step 7 reads (the manifest's `number_representations`)."""
    reps = run.number_representations
    n = int(reps.get("n_numbers", run.p))
    context = reps.get("context")
    sample = f"0..{n - 1} in the text “{context.replace('{n}', 'n')}”" if context else ""
    return Evidence(n, "numbers", "", run.label, sample=sample)


def training_runs(curves: pd.DataFrame, logs: dict[str, pd.DataFrame]) -> Evidence:
    """Step 8's curves, counted from the frame the figure draws (`training_summaries.training_curves`): one legend
    entry per curve (a model at one width), each the mean of its seeds, each seed one training run, scored on the
    validation split; `logs` names the runs whose logs they are."""
    seeds = curves.groupby("run")["seeds"].max()
    entries = f"{len(seeds)} curve{'s' if len(seeds) != 1 else ''}, one per model and width"
    return Evidence(int(seeds.sum()), "training runs", "validation", "; ".join(logs),
                    sample=f"{entries}, each seed a run")


def over(e: Evidence) -> str:
    """ "all 3,419 test questions", or "16 of the 3,419 test questions (a sample)"."""
    if e.total == e.count:
        return f"all {e.count:,} {e.split} questions"
    return f"{e.count:,} of the {e.total:,} {e.split} questions (a sample)"


def bars_questions(run: RunReader, bars: pd.DataFrame) -> Evidence:
    """What the causal figure's bars (`shift_bars`' data: module, n) are over, read from the bars drawn: one count
    when they share it, else each count with the bars over it ("all 3,419 for attention 19-30, MLP 19-30; 256, a
    sample, for whole stream 30, attention 24")."""
    counts = bars.drop_duplicates("module").groupby("n", sort=False)["module"].agg(list)
    if len(counts) == 1:
        return questions(run, int(counts.index[0]))
    total = len(run.table(Table.EXAMPLES))
    each = "; ".join(f"{'all ' if n == total else ''}{int(n):,} for {', '.join(modules)}"
                     for n, modules in sorted(counts.items(), reverse=True))
    # led by the fewest questions a bar rests on, "From 256 of the 3,419", then what each bar is over
    return Evidence(int(counts.index.min()), "questions", run.split, run.label, total, f"each bar over its own: {each}")


def operation_evidence(shown: dict) -> Evidence:
    """Step 9's figures: one run per operation, each over its own split's questions."""
    counts = ", ".join(f"{len(r.table(Table.EXAMPLES)):,}" for r in shown.values())
    split = next(iter(shown.values())).split if shown else ""
    return Evidence(len(shown), "runs", "", "; ".join(f"{short_name(r)} ({task_name(t)})" for t, r in shown.items()),
                    sample=f"{split} questions: {counts}")
