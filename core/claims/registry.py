"""The paper's claims, one per step of the story, next to what a run measures, with a verdict.

Every sentence the dashboard says about a run is built here from that run's tables, so a caption
never asserts what the data beside it does not show. A claim carries:

* `paper`: the paper's finding, with its model and number (quoted from core.paper / docs/method.md#the-papers-results);
* `measured`: this run's corresponding measurement, computed from its cached tables;
* `verdict`: one of `core.claims.base.VERDICTS` ("agrees", "partly", "does not", "not tested" where the run
  was measured but cannot decide, e.g. features that were planted by hand, "does not apply" where the model
  cannot show the claim at all), by a rule written next to each claim;
* `reason`: one line on why, where it is known (two layers; a low-rank W_U; planted features);
* `numbers`: the figures behind `measured`, for tests and downloads.

A `run` here is anything with `.manifest` (dict) and `.table(name)` (a DataFrame), normally a
`core.runs.reader.RunReader` (the dashboard's shares its tables across sessions). No Streamlit here.
"""

from core.claims.accuracy import claim_accuracy
from core.claims.base import STEP_MEASURES, Claim, task_of, unreported
from core.claims.features import claim_behaviour, claim_embeddings, claim_numbers
from core.claims.last_digit import claim_module_waves
from core.claims.mechanism import claim_ablations, claim_logit_lens, claim_waves
from core.claims.spectra import claim_spectra
from core.errors import CoreError
from core.paper import ACCURACY, MULTIPLICATION_ACCURACY_VAL, MULTIPLICATION_OUTLIER_PERIODS, paper_findings
from core.tasks import task_name

__all__ = ["PAPER_SHORT", "RUN_CLAIMS", "run_claims", "best_run", "may_stand_in", "paper_short"]

#: Tour steps that are claims about one run, in order (step 8 is over all runs).
RUN_CLAIMS = {
    "accuracy": claim_accuracy,
    "logit_lens": claim_logit_lens,
    "module_waves": claim_module_waves,
    "spectra": claim_spectra,
    "waves": claim_waves,
    "ablations": claim_ablations,
    "embeddings": claim_embeddings,
    "numbers": claim_numbers,
    "behaviour": claim_behaviour,
}


#: The claims about what a model does with a task (the number representations are the same whatever the task).
TASK_STEPS = ("accuracy", "logit_lens", "module_waves", "spectra", "waves", "ablations", "behaviour")


def run_claims(run) -> dict[str, Claim]:
    """Every per-run claim of the story for one run. A claim the model cannot show (its manifest's
    `not_applicable` says why: a digit-splitting tokenizer) "does not apply"; one the run's tables cannot
    answer otherwise (no sampled example, no band ablations, a stage `precompute --stages` left out: the manifest's
    `not_computed`) is "not tested", saying what is missing."""
    out = {}
    task = task_of(run)
    for name, f in RUN_CLAIMS.items():
        try:
            out[name] = f(run)
        except (CoreError, KeyError, IndexError, ValueError) as exc:
            manifest = getattr(run, "manifest", None) or {}
            missing = manifest.get("not_applicable") or {}
            why = next(iter(missing.values()), None) if missing else None
            left = next((f"its {t.replace('_', ' ')} table was {reason}"
                         for t, reason in (manifest.get("not_computed") or {}).items() if f"'{t}'" in str(exc)), None)
            measured = (
                f"Does not apply to this model: {why}." if why else
                f"Not measured on this run: {left}." if left else f"This run's tables cannot answer it ({exc})."
            )
            out[name] = Claim(
                name,
                paper_short(name, task),
                measured,
                "does not apply" if why else "not tested",
                "" if why else ("a stage was left out when this run was made" if left
                                else "this run's tables cannot answer it"),
                numbers={"not_applicable": bool(why)},
                headline="Does not apply to this model." if why else
                "Not measured on this run (a stage was left out)." if left else "This run's tables cannot answer it.",
            )
            if name in TASK_STEPS and not paper_findings(task).reports(name):
                out[name] = unreported(out[name], run)
        out[name].paper_short = paper_short(name, task)
    return out


#: The paper's finding of each claim in a few words, for runs that cannot test it.
PAPER_SHORT = {
    "accuracy": f"Fine-tuned GPT-2-XL answers {ACCURACY['GPT-2-XL fine-tuned']}% of the test prompts right.",
    "logit_lens": "GPT-2-XL approximates the answer in its middle layers and makes it exact only late.",
    "module_waves": "In GPT-2-XL an MLP favours the answer's parity (period 2) and an attention layer its last digit "
    "(5, 10).",
    "spectra": "GPT-2-XL's module logits have outliers at periods 2, 2.5, 5, 10; MLPs carry the low frequencies.",
    "waves": "Long waves place the bump, short waves pick 108; their sum peaks at 108.",
    "ablations": "In GPT-2-XL, removing the MLPs' low or attention's high band hurts (35.9%, 78.4%); the opposite "
    "bands do not "
    "(99.1%, 98.1%).",
    "embeddings": "Pre-trained number embeddings have outliers at periods 2, 2.5, 5, 10; from scratch none.",
    "numbers": "Pre-trained models represent numbers with outliers at periods 2, 2.5, 5, 10; from scratch none.",
    "behaviour": "Prompted LLMs' errors are mostly multiples of 10 (GPT-J 4-shot 93%).",
}


#: The paper's multiplication findings in a few words (core.paper.PAPER_BY_TASK); the steps it did not measure on
#: multiplication say so (`paper_short`).
MULTIPLICATION_SHORT = {
    "accuracy": f"Fine-tuned GPT-2-XL answers {MULTIPLICATION_ACCURACY_VAL}% of the multiplication validation "
    "prompts right.",
    "spectra": "GPT-2-XL's module logits on multiplication have outliers at periods "
    f"{', '.join(f'{t:.3g}' for t in MULTIPLICATION_OUTLIER_PERIODS)}.",
}


def paper_short(step: str, task: str) -> str:
    """The paper's finding for `step` in a few words, for a run of `task`: addition's (PAPER_SHORT; reverse-Polish
    runs read it too), multiplication's where the paper measured it, and "reports no ..." where it did not. The
    number representations are the pre-trained model's whatever its task: the same line for every task."""
    findings = paper_findings(task)
    if findings.task == "addition" or step in ("embeddings", "numbers"):
        return PAPER_SHORT[step]
    if findings.reports(step):
        return MULTIPLICATION_SHORT[step]
    return f"The paper reports no {STEP_MEASURES.get(step, 'figure')} for {task_name(task)}."


def best_run(claims_by_run: dict[str, Claim], preferred: str | None = None, order: list[str] | None = None) -> str:
    """The run (key of `claims_by_run`) whose verdict shows a step best; ties go to `preferred`, then `order`."""
    if not claims_by_run:
        raise CoreError("no runs to choose from")
    order = order or list(claims_by_run)
    rank = {name: i for i, name in enumerate(order)}
    return max(claims_by_run, key=lambda n: (claims_by_run[n].score, n == preferred, -rank.get(n, len(rank))))


#: Verdicts of the accuracy step (step 1) under which a run does its task: at least "partly" (core.claims.accuracy).
DOES_THE_TASK = ("agrees", "partly")


def may_stand_in(step: str, task: str, chosen_task: str, accuracy: Claim) -> bool:
    """Whether a run of `task` whose accuracy step is `accuracy` may be shown on `step` in place of the sidebar's run
    of `chosen_task` ("best run"): only a run of the same task, so the Tour never swaps in another task's claim;
    and on the steps about how a model does its task (`TASK_STEPS`), only one that does it (its accuracy step at
    least "partly", `DOES_THE_TASK`): a model that fails the task shows nothing of how the task is done. The
    number-representation steps (embeddings, numbers) read what pre-training put into the numbers, whatever the
    model's skill."""
    if task != chosen_task:
        return False
    return step not in TASK_STEPS or accuracy.verdict in DOES_THE_TASK
