"""An edit's arguments read and checked before any model is loaded: `python -m core ablate|shift` answers a
mistyped run, a cutoff or a shift out of range, a layer the run's model lacks, in well under a second, without
importing torch.

The number line an edit is checked against is the run's (its manifest's task), or the task given on the command
line for a model (`EditScope`); `core.runs.ablate` uses the same checks once it has loaded the model.

A phase shift by d moves a wave of period T by d/T of a turn: not at all when d is a whole multiple of T. A d that
moves none of the chosen periods, or that is a multiple of the residue the report reads (the last digit, mod 10:
y + 10 has the last digit of y, so "moved by d" would hold of every answer that stayed), is refused; so is a d
that no answer y of the split can take to y + d on the number line (nothing would be counted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from core.analysis.fourier import check_tau, fourier_basis
from core.analysis.period_filters import parse_periods
from core.analysis.phase_shift import PERIOD_SETS, moved_periods, residue_modulus
from core.errors import CoreError, choices
from core.models.source import resolve_source
from core.runs.cache import read_manifest
from core.runs.run_names import find_run
from core.tasks import Example, build_examples, number_space, parse_question, select_split

#: A template question's shape, by task (anything else is free text).
QUESTION_SHAPES = {"addition": r"\d+\s*\+\s*\d+", "multiplication": r"\d+\s*[*×]\s*\d+",
                   "reverse-polish": r"\d+\s*,\s*\d+\s*\+?"}


def check_edit(p: int, tau: int | None = None, keep_k: int | None = None, periods: str | None = None,
               d: int | None = None, basis: str = "paper") -> None:
    """An edit's arguments against the number line 0..p-1 and its `basis`'s frequencies 1..K, before anything is
    loaded; a cutoff by the one rule every command applies (core.analysis.fourier.check_tau: 2..K, since tau = 1
    would remove no frequency from the low band)."""
    fourier = fourier_basis(p, basis)
    if tau is not None:
        try:
            check_tau(fourier, tau)
        except CoreError as exc:
            raise CoreError(f"--tau {tau}: {exc}") from None
    if keep_k is not None and not 1 <= keep_k <= fourier.n_freq:
        raise CoreError(f"--remove keep-{keep_k}: the frequencies of {p} numbers are 1..{fourier.n_freq}; choose K in "
                        f"1..{fourier.n_freq}")
    if periods is not None and periods not in PERIOD_SETS:
        raise CoreError(f"--periods {periods!r}: choose one of {choices(PERIOD_SETS)}")
    if d is not None and not 1 <= d < p:
        raise CoreError(f"--d {d}: a shift moves an answer y to y + d on the number line 0..{p - 1}; choose d in "
                        f"1..{p - 1} (the paper shifts by 1, 2 and 5)")
    if d is not None and periods is not None:
        check_shift_moves(periods, d)


def check_shift_moves(periods: str, d: int) -> None:
    """Refuse a shift by d that moves none of the chosen periods, or whose residue (the last digit) cannot move
    (module docstring)."""
    chosen = ", ".join(f"{t:g}" for t in PERIOD_SETS[periods])
    modulus = residue_modulus(PERIOD_SETS[periods])
    fine = [k for k in range(1, 10) if moved_periods(PERIOD_SETS[periods], k) and k % modulus][:3]
    such = f"such as {', '.join(map(str, fine[:-1]))} or {fine[-1]}"
    if not moved_periods(PERIOD_SETS[periods], d):
        raise CoreError(f"--d {d} is a whole multiple of every chosen period ({chosen}): the edit would move no wave. "
                        f"Choose a d that is not, {such}")
    if d % modulus == 0:  # a guard for a period set whose residue is not a multiple of every period in it
        raise CoreError(f"--d {d} is a multiple of {modulus}: y + {d} has the residue mod {modulus} of y, so a moved "
                        f"residue could not be told from one that stayed. Choose a d that is not, {such}")


def check_shift_reaches(answers, p: int, d: int, split: str) -> int:
    """How many of the split's `answers` y have y + d on the number line 0..p-1; none is a clear error."""
    reachable = sum(1 for y in answers if y + d <= p - 1)
    if not reachable:
        top = p - 1 - min(answers, default=0)
        raise CoreError(f"--d {d}: no {split} question's answer y has y + {d} on the number line 0..{p - 1}, so no "
                        f"answer could move by d; choose d of at most {max(1, top)}")
    return reachable


def parse_removed(text: str) -> tuple[str, int | None]:
    """--remove: "low", "high", "keep-K" or "periods[:T1,T2,...]" -> (removed, keep_k); the periods are read by
    core.analysis.period_filters.parse_periods."""
    if text in ("low", "high"):
        return text, None
    if text.startswith("keep-") and text[5:].isdigit():
        return "keep", int(text[5:])
    if text.startswith("periods"):
        parse_periods(text)
        return "periods", None
    raise CoreError(f"--remove {text!r}: choose low, high, keep-K (keep one frequency K, e.g. keep-52), or periods "
                    "(the paper's 2, 2.5, 5, 10 only; periods:2,5,10 names others)")


@dataclass(frozen=True)
class EditScope:
    """What an edit's arguments are checked against before a model loads: the number line 0..p-1, the model's
    layers (a run's manifest says; None for a model not yet loaded), and the split and its answers."""

    p: int
    n_layers: int | None
    split: str
    answers: tuple[int, ...]
    task: str = "addition"
    max_operand: int = 260
    basis: str = "paper"  # the run's Fourier basis (a model's: the paper's)

    def check_layer(self, layer: int) -> None:
        if self.n_layers is not None and not 1 <= int(layer) <= self.n_layers:
            raise CoreError(f"--layer {layer}: this run's model has layers 1..{self.n_layers}")


def edit_scope(source: str, cache_dir: str | Path, task: str, max_operand: int, split: str | None = None,
               dataset_seed: int = 0) -> EditScope:
    """The `EditScope` of an edit of `source`: the run's own task, split and layers where `source` names a run of
    `cache_dir` (a near miss is refused here, with the runs it could mean), else the task given for a model (a
    folder that holds no model, or a hub id the hub cannot give, is refused here: core.models.source)."""
    found = find_run(cache_dir, source)
    n_layers, basis = None, "paper"
    if found:
        manifest = read_manifest(cache_dir, found)
        t = manifest.get("task") or {}
        task, max_operand = t.get("task", task), int(t.get("max_operand", max_operand))
        dataset_seed = int(t.get("dataset_seed", dataset_seed))
        n_layers = int(manifest["n_layers"]) if isinstance(manifest.get("n_layers"), int) else None
        split = split or t.get("split", "test")
        basis = manifest["basis"] if manifest.get("basis") in ("paper", "dft") else basis
    else:
        resolve_source(source)  # a folder that is no model, or a hub id the hub cannot give, is refused here too
    split = split or "test"
    answers = tuple(e.answer for e in select_split(build_examples(task, max_operand, dataset_seed), split))
    return EditScope(number_space(task, max_operand), n_layers, split, answers, task, max_operand, basis)


def parse_head(text: str, scope: EditScope) -> tuple[int, int]:
    """--head L.H (the layer counted from 1, as the docs count, the head from 0) or the head's TransformerLens name
    `blocks.N.attn.hook_z[H]` (N counted from 0): (layer counted from 1, head), the layer checked against the run's
    model; the head's range is checked once the model is loaded."""
    text = str(text).strip()
    named = re.fullmatch(r"blocks\.(\d+)\.attn\.hook_z\[(\d+)\]", text)
    if named:
        layer, head = int(named.group(1)) + 1, int(named.group(2))
    else:
        layer, dot, head = text.partition(".")
        if not dot or not layer.isdigit() or not head.isdigit():
            raise CoreError(f"--head {text!r}: write L.H, the layer counted from 1 and the head from 0 (1.0: head 0 of "
                            "layer 1), or the head's TransformerLens name, blocks.N.attn.hook_z[H] (N counted from 0)")
        layer, head = int(layer), int(head)
        if layer < 1:
            raise CoreError(f"--head {text!r}: layers are counted from 1 here (layer 1 is blocks.0); for "
                            "TransformerLens' numbering write blocks.N.attn.hook_z[H]")
    scope.check_layer(layer)
    return layer, head


def read_prompt(task: str, text: str, phrasing: int, max_operand: int) -> Example | None:
    """A prompt of the command line: a question of the task's shape ("15 + 93") as its example (its operands
    checked), None for free text (read as given)."""
    if re.fullmatch(QUESTION_SHAPES[task], str(text).strip()):
        return parse_question(task, text, phrasing, max_operand)
    if not str(text).strip():
        raise CoreError("an empty prompt: give a question like '15 + 93' or the text itself")
    return None


def parse_answers(text: str | None, p: int) -> tuple[int, int] | None:
    """--answers CLEAN,CORRUPT: the two answers whose logits are compared, on the number line 0..p-1."""
    if text is None:
        return None
    parts = [x.strip() for x in str(text).split(",")]
    if len(parts) != 2 or not all(x.isdigit() for x in parts):
        raise CoreError(f"--answers {text!r}: give the clean and the corrupted answer as two whole numbers, like "
                        "108,109")
    clean, corrupt = int(parts[0]), int(parts[1])
    if max(clean, corrupt) >= p:
        raise CoreError(f"--answers {text!r}: the numbers of this run are 0..{p - 1}")
    if clean == corrupt:
        raise CoreError(f"--answers {text!r}: the two answers are the same, so there is no logit difference to recover")
    return clean, corrupt


def check_pair(task: str, clean: str | None, corrupt: str | None, phrasing: int | None, max_operand: int, p: int,
               answers: str | None = None) -> None:
    """Every refusal of a command-line pair that needs no model: one prompt without the other, two equal prompts,
    two questions with the same answer, an operand or an answer off the number line."""
    if (clean is None) != (corrupt is None):
        raise CoreError("give both --clean and --corrupt (one pair), or neither (every pair of the split)")
    if clean is None:
        if answers is not None:
            raise CoreError("--answers goes with --clean and --corrupt (one pair)")
        return
    if clean.strip() == corrupt.strip():
        raise CoreError(f"--clean and --corrupt are the same prompt ({clean!r}): patching one into the other has "
                        "nothing to recover; give two prompts whose answers differ")
    questions = [read_prompt(task, q, phrasing or 0, max_operand) for q in (clean, corrupt)]
    given = parse_answers(answers, p)
    if given is None and all(questions):
        if questions[0].answer == questions[1].answer:
            raise CoreError(f"{clean!r} and {corrupt!r} have the same answer ({questions[0].answer}): patching reads "
                            "the logit of one answer against the other's; change an operand")
        if max(q.answer for q in questions) >= p:
            raise CoreError(f"an answer is out of this run's numbers 0..{p - 1}")
