"""The paper's datasets: addition, its reverse-Polish variant, multiplication; splits; k-shot prompts.

Addition (docs/method.md#task-and-data): every pair a <= b of operands 0..max_operand (combinations with
replacement; 34,191 pairs for 0..260), each given one of five phrasings drawn once with a seeded
generator, followed by " Answer:". The pairs are shuffled with the same seed and split 80/10/10
into train / val / test. The running example "Put together 15 and 93. Answer:" -> 108 is always
in the test split, with that phrasing, under the id "15+93".

The number space of a task is 0..p-1: p = 2 * max_operand + 1 (521 for the paper), the range of
every answer, and the rows of the unembedding that the Fourier analysis reads.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Iterable, Sequence

from core.errors import CoreError, choices

ADDITION_PHRASINGS = (
    "Total of {a} and {b}.",
    "Add together {a} and {b}.",
    "Calculate {a} + {b}.",
    "What is the sum of {a} and {b}?",
    "Put together {a} and {b}.",
)
REVERSE_POLISH_PHRASINGS = ("{a},{b}+",)
MULTIPLICATION_PHRASINGS = (
    "What is the product of {a} and {b}?",
    "Find the product of {a} multiplied by {b}.",
    "Calculate {a} times {b}.",
    "{a} multiplied by {b} equals what?",
    "Multiplication of {a} with {b}.",
)
PHRASINGS = {"addition": ADDITION_PHRASINGS, "reverse-polish": REVERSE_POLISH_PHRASINGS,
             "multiplication": MULTIPLICATION_PHRASINGS}
ANSWER_CUE = " Answer:"
TASKS = ("addition", "reverse-polish", "multiplication")
SPLITS = ("train", "val", "test")
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
RUNNING_EXAMPLE = (15, 93)
RUNNING_EXAMPLE_PHRASING = 4  # "Put together {a} and {b}."
PAPER_MAX_OPERAND = 260
#: Largest operand: answers 0..2046 fit the 2048 numbers `core.models.number_tokens` scans a tokenizer for
#: (and the example list, about max_operand^2 / 2 pairs, stays small).
MAX_OPERAND_LIMIT = 1023


@dataclass(frozen=True)
class Example:
    """One question. `prompt` is what the model reads; the answer is a number in 0..p-1."""

    id: str
    task: str
    split: str
    a: int
    b: int
    answer: int
    question: str
    phrasing: int

    @property
    def prompt(self) -> str:
        return self.question + ANSWER_CUE


def number_space(task: str, max_operand: int = PAPER_MAX_OPERAND) -> int:
    """p, the size of the number space 0..p-1 a task's answers live in."""
    check_task(task, max_operand)
    return 2 * max_operand + 1


def check_task(task: str, max_operand: int) -> None:
    if task not in TASKS:
        raise CoreError(f"unknown task {task!r}: choose one of {choices(TASKS)}")
    if not isinstance(max_operand, int) or isinstance(max_operand, bool) or max_operand < 1:
        raise CoreError(f"max_operand must be a whole number >= 1, got {max_operand!r}")
    if max_operand > MAX_OPERAND_LIMIT:
        raise CoreError(
            f"max_operand {max_operand} asks for answers 0..{2 * max_operand}, "
            "but no tokenizer is scanned for more than "
            f"{2 * MAX_OPERAND_LIMIT + 2} single-token numbers: use --max-operand {MAX_OPERAND_LIMIT} or less "
            f"({PAPER_MAX_OPERAND} is the paper's)"
        )


#: How the pages name each task.
TASK_NAMES = {"addition": "addition", "reverse-polish": "reverse-Polish addition", "multiplication": "multiplication"}
#: The operation's sign, as the pages write a question ("15 + 93", "4 × 7"); reverse-Polish is written as read.
OPERATION_SIGNS = {"addition": "+", "multiplication": "×"}


#: What a model does on each task, as a title says it ("How a language model adds").
TASK_VERBS = {"addition": "adds", "reverse-polish": "adds", "multiplication": "multiplies"}


def task_verb(task: str) -> str:
    """The task as a verb ("adds", "multiplies"); "adds" for an unknown task, as the paper's title has it."""
    return TASK_VERBS.get(task, "adds")


def task_name(task: str) -> str:
    """The task as the pages name it ("reverse-Polish addition"); an unknown task's own name."""
    return TASK_NAMES.get(task, str(task))


def expression(task: str, a: int, b: int) -> str:
    """A question as the pages write it: "15 + 93", "4 × 7", or in the reverse-Polish format "15,93+"."""
    if task == "reverse-polish":
        return f"{a},{b}+"
    return f"{a} {OPERATION_SIGNS.get(task, '+')} {b}"


def expression_of_id(example_id_: str) -> str:
    """A question's id ("15+93", "4*7", "15,93+") as the pages write it ("15 + 93", "4 × 7", "15,93+")."""
    text = str(example_id_)
    if text.endswith("+") and "," in text:
        return text
    for sign, shown in (("*", "×"), ("+", "+")):
        a, found, b = text.partition(sign)
        if found and a.strip().isdigit() and b.strip().isdigit():
            return f"{a.strip()} {shown} {b.strip()}"
    return text


def commonest_answer(answers: Iterable[int]) -> tuple[int, float]:
    """(answer, share): the answer that occurs most often and the share of questions it answers, the accuracy of a
    model that always says it (multiplication's 0, the answer of every question with an operand 0)."""
    counts: dict[int, int] = {}
    for a in answers:
        counts[int(a)] = counts.get(int(a), 0) + 1
    if not counts:
        raise CoreError("no answers to count")
    answer = max(counts, key=lambda x: (counts[x], -x))
    return answer, counts[answer] / sum(counts.values())


def example_id(task: str, a: int, b: int) -> str:
    if task == "addition":
        return f"{a}+{b}"
    if task == "reverse-polish":
        return f"{a},{b}+"
    return f"{a}*{b}"


def answer_of(task: str, a: int, b: int) -> int:
    """The answer of a question of `task` on the operands a, b."""
    return a * b if task == "multiplication" else a + b


def with_operands(example: Example, a: int, b: int, split: str | None = None) -> Example:
    """The question `example` asks, on the operands a, b instead, in the same phrasing (a patching pair's other
    prompt: core.analysis.patching)."""
    phrasing = PHRASINGS[example.task][example.phrasing]
    return Example(example_id(example.task, a, b), example.task, split or example.split, int(a), int(b),
                   answer_of(example.task, a, b), phrasing.format(a=a, b=b), example.phrasing)


def parse_question(task: str, text: str, phrasing: int = 0, max_operand: int = PAPER_MAX_OPERAND) -> Example:
    """A question written as the pages write it ("15 + 93", "15+93", "4 * 7", "4 × 7", "15,93+") as an example of
    `task` in phrasing number `phrasing`; a text that is not two operands and the task's sign, an operand out of
    0..max_operand or a phrasing the task lacks is a clear error."""
    check_task(task, max_operand)
    sign = {"addition": "+", "multiplication": "*"}.get(task)
    raw = str(text).strip().replace("×", "*")
    if task == "reverse-polish":
        body = raw[:-1] if raw.endswith("+") else raw
        a, found, b = body.partition(",")
    else:
        a, found, b = raw.partition(sign)
    if not (found and a.strip().isdigit() and b.strip().isdigit()):
        shape = {"addition": "15 + 93", "reverse-polish": "15,93+", "multiplication": "4 * 7"}[task]
        raise CoreError(f"cannot read {text!r} as a question of {task}: write two whole numbers the way {shape!r} is")
    a, b = int(a), int(b)
    if max(a, b) > max_operand:
        raise CoreError(f"{text!r}: operands go from 0 to {max_operand} in this task")
    phrasings = PHRASINGS[task]
    if not 0 <= phrasing < len(phrasings):
        raise CoreError(f"phrasing {phrasing}: {task} has phrasings 0..{len(phrasings) - 1}")
    return Example(example_id(task, a, b), task, "given", a, b, answer_of(task, a, b),
                   phrasings[phrasing].format(a=a, b=b), phrasing)


def running_example_id(task: str, max_operand: int = PAPER_MAX_OPERAND) -> str | None:
    """Id of 15 + 93 for the addition tasks when it is in range, else None."""
    a, b = RUNNING_EXAMPLE
    if task in ("addition", "reverse-polish") and b <= max_operand:
        return example_id(task, a, b)
    return None


def _pairs(task: str, max_operand: int) -> list[tuple[int, int]]:
    p = 2 * max_operand + 1
    pairs = [(a, b) for a in range(max_operand + 1) for b in range(a, max_operand + 1)]
    if task == "multiplication":
        # Restricted to answers that are numbers of the task's number space (single tokens).
        pairs = [(a, b) for a, b in pairs if a * b < p]
    return pairs


def build_examples(task: str = "addition", max_operand: int = PAPER_MAX_OPERAND, seed: int = 0) -> list[Example]:
    """All examples of a task, each with its split; deterministic in (task, max_operand, seed). Built once per
    process for each (task, max_operand, seed) (a third of a second each; the claims of every run ask for it);
    each call gets its own list of the same frozen examples."""
    return list(_built_examples(task, int(max_operand), int(seed)))


@functools.lru_cache(maxsize=8)
def _built_examples(task: str, max_operand: int, seed: int) -> tuple[Example, ...]:
    check_task(task, max_operand)
    phrasings = PHRASINGS[task]
    rng = random.Random(seed)
    pairs = _pairs(task, max_operand)
    chosen = [rng.randrange(len(phrasings)) for _ in pairs]
    order = list(range(len(pairs)))
    rng.shuffle(order)
    n = len(order)
    n_train = round(SPLIT_FRACTIONS[0] * n)
    n_val = round(SPLIT_FRACTIONS[1] * n)
    split_of = {}
    for rank, idx in enumerate(order):
        split_of[idx] = "train" if rank < n_train else ("val" if rank < n_train + n_val else "test")

    running = running_example_id(task, max_operand)
    if running is not None:
        ridx = pairs.index(RUNNING_EXAMPLE)
        if task == "addition":
            chosen[ridx] = RUNNING_EXAMPLE_PHRASING
        if split_of[ridx] != "test":
            # Swap places with the first test example so the split sizes stay the same.
            swap = next(i for i in order if split_of[i] == "test")
            split_of[swap], split_of[ridx] = split_of[ridx], "test"

    examples = []
    for idx in order:
        a, b = pairs[idx]
        answer = answer_of(task, a, b)
        examples.append(
            Example(
                id=example_id(task, a, b),
                task=task,
                split=split_of[idx],
                a=a,
                b=b,
                answer=answer,
                question=phrasings[chosen[idx]].format(a=a, b=b),
                phrasing=chosen[idx],
            )
        )
    return tuple(examples)


def select_split(examples: Iterable[Example], split: str) -> list[Example]:
    """Examples of one split ("train", "val", "test") or all of them ("all")."""
    if split == "all":
        return list(examples)
    if split not in SPLITS:
        raise CoreError(f"unknown split {split!r}: choose one of {choices((*SPLITS, 'all'))}")
    return [e for e in examples if e.split == split]


def subsample(
    examples: Sequence[Example], limit: int | None, seed: int = 0, keep_ids: Iterable[str] = ()
) -> list[Example]:
    """A seeded subset of at most `limit` examples that always holds the ids in `keep_ids`."""
    if limit is None or limit >= len(examples):
        return list(examples)
    if limit < 1:
        raise CoreError(f"limit must be at least 1, got {limit}")
    keep = [e for e in examples if e.id in set(keep_ids)]
    rest = [e for e in examples if e.id not in set(keep_ids)]
    rng = random.Random(seed)
    picked = rng.sample(rest, max(0, limit - len(keep)))
    return keep[:limit] + picked


def find_example(examples: Iterable[Example], example_id_: str) -> Example:
    for e in examples:
        if e.id == example_id_:
            return e
    raise CoreError(f"no example with id {example_id_!r}")


def with_shots(
    examples: Sequence[Example], pool: Sequence[Example], shots: int, seed: int = 0, answer_text=None
) -> list[str]:
    """Prompts with `shots` solved examples from `pool` (the training split) before each question.

    Each question gets its own examples, drawn with a generator seeded by (seed, question id), so
    a prompt does not change when the set of questions around it does. A question never sees
    itself among its examples. `answer_text(d)` is the text that follows a solved example's
    prompt (default " d"); pass the model's own (`core.models.number_tokens.NumberTokens.answer_text`, after its
    prompt suffix) so the examples show the very tokens the model is scored on.
    """
    if answer_text is None:
        answer_text = lambda n: f" {n}"  # noqa: E731
    if shots < 0:
        raise CoreError(f"shots must be 0 or more, got {shots}")
    if shots == 0:
        return [e.prompt for e in examples]
    if len(pool) <= shots:
        raise CoreError(f"{shots}-shot prompts need more than {shots} training examples, have {len(pool)}")
    prompts = []
    for e in examples:
        rng = random.Random(f"{seed}:{e.id}")
        demo = []
        while len(demo) < shots:
            cand = pool[rng.randrange(len(pool))]
            if cand.id != e.id and cand not in demo:
                demo.append(cand)
        prompts.append("".join(f"{d.prompt}{answer_text(d.answer)}\n" for d in demo) + e.prompt)
    return prompts


def vocabulary_words(tasks: Sequence[str] = TASKS) -> list[str]:
    """The words and symbols the prompts use (besides numbers), for word-level tokenizers."""
    texts = list(ADDITION_PHRASINGS) if "addition" in tasks else []
    if "reverse-polish" in tasks:
        texts += REVERSE_POLISH_PHRASINGS
    if "multiplication" in tasks:
        texts += MULTIPLICATION_PHRASINGS
    texts.append(ANSWER_CUE)
    words: list[str] = []
    for t in texts:
        for piece in _split_words(t.replace("{a}", " ").replace("{b}", " ")):
            if piece not in words:
                words.append(piece)
    return words


def _split_words(text: str) -> list[str]:
    out, cur = [], ""
    for ch in text:
        if ch.isalnum():
            cur += ch
        else:
            if cur:
                out.append(cur)
                cur = ""
            if not ch.isspace():
                out.append(ch)
    if cur:
        out.append(cur)
    return out
