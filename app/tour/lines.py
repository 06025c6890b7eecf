"""What a Tour step says beside its figure: the note when it does not follow a sidebar setting, the line beside its
badge about the shown run, and whom that line speaks of. The steps themselves, their questions and figures, are in
app/tour/steps.py."""

from __future__ import annotations

from app.figures import wave_sum
from app.shared import shared_on_run
from app.tour.steps import WAVES_SHOWN, Step, StepChoice, example_of
from core.claims.accuracy import selection_note
from core.claims.base import Claim, pct
from core.claims.operations import operation_runs, short_name
from core.paper import ACCURACY, TABLE1_TAU
from core.runs import summaries
from core.runs.reader import RunReader, Table
from core.tasks import expression_of_id, task_name

#: The Fourier basis every step reads: the paper's, the one the verdicts are judged in (core.claims).
TOUR_BASIS = "paper"
#: The sidebar controls a step does not follow, because its verdict is judged at the paper's setting.
FIXED_SETTINGS = {"spectra": ("tau", "basis"), "waves": ("basis",), "ablations": ("tau",), "numbers": ("basis",)}
#: The pages where each sidebar control is used.
CONTROL_PAGES = {"tau": ("Spectra", "Ablations"), "basis": ("Spectra", "Waves", "Numbers")}


def step_tau(step: Step, run: RunReader) -> int:
    """The cutoff tau a step reads: the paper's (50), or for the ablations the run's cached tau nearest to it."""
    if step.key == "ablations" and run.has(Table.ABLATIONS):
        return int(summaries.nearest_tau(run.table(Table.ABLATIONS), TABLE1_TAU))
    return TABLE1_TAU


def settings_note(step: Step, run: RunReader, tau: int, basis: str, runs_of_step: list | None = None) -> str:
    """One sentence when the step does not follow a sidebar control set otherwise (tau, basis), or the sidebar's
    run at all (step 8): which setting the step shows and where the sidebar's is used. Empty when they agree."""
    if step.key == "training":
        return "This step compares the small models trained here; the run chosen in the sidebar is not used."
    if step.key == "operations":
        shown = operation_runs(runs_of_step, run) if runs_of_step else {}
        mine = " (the sidebar's run among them)" if run in shown.values() else " (the sidebar's run is not among them)"
        return (f"One run of each operation{mine}: "
                + "; ".join(f"{task_name(t)}: {short_name(r)}" for t, r in shown.items()) + ".")
    fixed = FIXED_SETTINGS.get(step.key, ())
    mine = {"tau": step_tau(step, run), "basis": TOUR_BASIS}
    theirs = {"tau": int(tau), "basis": basis}
    differ = [c for c in fixed if mine[c] != theirs[c]]
    if not differ:
        return ""
    said = {"tau": f"tau = {mine['tau']}", "basis": f"{TOUR_BASIS} basis"}
    side = {"tau": f"tau = {theirs['tau']}", "basis": f"{theirs['basis']} basis"}
    pages = list(dict.fromkeys(p for c in differ for p in CONTROL_PAGES[c]))
    return (
        f"Shown at the paper's {' and '.join(said[c] for c in differ)}, where its verdict is judged; the sidebar's "
        f"{' and '.join(side[c] for c in differ)} apply on the {', '.join(pages[:-1])} and {pages[-1]} pages."
    )


#: Said after a line whose numbers are over every question when the figure shows one of them; what follows names
#: that question and says whether it is one of those the line counts.
ONE_OF_THEM = "The figure shows"


def unclean_test(run: RunReader) -> bool:
    """Whether the run's accuracy is a test score that is not a clean held-out figure (its training looked at the test
    split: core.claims.accuracy.selection_note), which step 1 must say wherever it shows that score."""
    return run.split == "test" and bool(selection_note(run))


def example_wave_peak(run: RunReader, basis: str) -> tuple[str, int, int]:
    """(the question, its answer, where the sum of its WAVES_SHOWN strongest waves peaks) of the run's running
    example, in `basis`: what step 5's figure draws (`waves_panels`)."""
    example = example_of(run)
    peak = wave_sum.sum_peak(wave_sum.wave_frames(run, example, basis, WAVES_SHOWN))
    return expression_of_id(example.name), int(example["answer"]), peak


def run_line(step: Step, claim: Claim, run: RunReader, basis: str = TOUR_BASIS) -> str:
    """The one line beside the badge about the shown run: its numbers can be found in the step's figure (drawn in
    `basis`), or the line says where they come from. Step 1 sets this run's test accuracy beside the paper's test
    accuracy (the validation figure, on which the verdict is judged, is with the other numbers under the line)."""
    n = claim.numbers
    if step.key == "accuracy" and "accuracy" in n:
        paper_split = "validation" if n.get("paper_split") == "validation" else "test"
        unclean = " It is not a clean test score: the Why says why." if unclean_test(run) else ""
        return (
            f"{pct(n['accuracy'])} of its {n['n']} {run.split} prompts right (the paper's GPT-2-XL: "
            f"{n.get('paper_accuracy', ACCURACY['GPT-2-XL fine-tuned'])}% of its {paper_split} prompts).{unclean}"
        )
    if step.key == "waves" and claim.verdict != "does not apply" and run.has(Table.FINAL_WAVES):
        question, answer, peak = shared_on_run(example_wave_peak, run, basis)
        where = ("one where they do" if peak == answer
                 else f"one where they do not: their sum peaks at {peak}, not at the answer {answer}")
        return f"{claim.short.rstrip('.')}. {ONE_OF_THEM} {question}, {where}."
    return claim.short


def who_line(step: Step, choice: StepChoice, short_label: str) -> str:
    """Whom the line beside the badge speaks of: "This run" only for the sidebar's run itself."""
    if step.key == "training":
        return "The small models trained here"
    if step.key == "operations":
        return "These runs"
    if choice.switched_from is not None:
        return f"Shown run ({short_label})"
    return "This run"
