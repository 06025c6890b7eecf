"""The words a class needs, in plain language, each tied to its definition in docs/method.md.

`TERMS` is shown whole on the Terms page, as tooltips on the controls, and, a few at a time
(`STEP_TERMS`), beside each Tour step, so a projector audience reads them without hovering.
"""

from __future__ import annotations

from core.paper import TABLE1_TAU

TERMS = {
    "logit": "The model's score for one candidate answer. It scores every number 0..520 and answers with the highest.",
    "W_U": "The unembedding: the matrix that turns the model's last vector into one logit per number token. Reading "
    "any vector through W_U shows which numbers it pushes up.",
    "residual stream": "The running vector every layer adds its attention and MLP outputs to: h(l) = h(l-1) + Attn(l) "
    "+ MLP(l). The model reads its answer off the last one.",
    "logit lens": "Reading the residual stream at a middle layer through W_U, as if the model stopped there: which "
    "number would it answer now?",
    "final norm": "The layer norm the model applies before W_U. The paper reads layers without it; the usual logit "
    "lens "
    "applies it.",
    "module logits": "W_U times one module's output (an attention or MLP block at one layer): how much that module "
    "alone pushes each number up or down.",
    "Fourier component": "One sine/cosine pair of frequency k over the number line 0..520. Any vector over the numbers "
    "is a sum of such waves.",
    "frequency k": "How many times a wave repeats over the number line: k = 1 is one slow wave, k = 260 alternates "
    "between neighbours.",
    "period": "T = 520/k numbers per repetition (paper basis). T = 2 marks even/odd, T = 10 the last digit, T = 520 a "
    "broad bump.",
    "cutoff tau": f"Frequencies k < tau are 'low', k ≥ tau are 'high' (the paper uses tau = {TABLE1_TAU}, so periods "
    f"above {520 / TABLE1_TAU:.3g} are low).",
    "low-pass": "Keep the low frequencies (k < tau): removes the high band. The paper's 'high frequencies removed'.",
    "high-pass": "Keep the high frequencies (k ≥ tau): removes the low band. The paper's 'low frequencies removed'.",
    "basis": "'paper': the paper's Fourier basis (periods exactly 520/k, not exactly orthonormal). 'dft': the "
    "orthonormal real DFT on 521 points (periods 521/k).",
    "locking R": "Over every question, how closely a module's wave of period T follows the answer mod T: 1 = its peak "
    "always sits at the same distance from the answer, about 0 = no more than chance. A wave that is the same for "
    "every question is a bias, not a computation.",
    "chance threshold": "For each period, the R that shuffled answers exceed somewhere among all modules only rarely "
    "(5% over every module and period together, from 2,000 shuffles): a module above it follows the answer beyond "
    "chance.",
    "ablation": "Filtering every layer's attention and/or MLP output so that W_U reads no component at the removed "
    "frequencies (the smallest change that does so), then measuring accuracy.",
    "random control": "The same filter with as many random directions removed instead of the band's: if the band "
    "costs no more than random directions, the band is not special.",
    "rank": "How many independent directions a filter removes from a module output (the removed band's size as W_U "
    "sees it).",
    "erased": "A filter that removes every direction of a module output: nothing of the module is left.",
    "embedding": "The vector a model starts from for each token; for number tokens, the number rows of the input "
    "matrix.",
    "Cohen's kappa": "How well a linear probe reads n mod T from the numbers' vectors, on numbers it did not train "
    "on: 1 = perfectly, 0 = no better than guessing.",
    "validation split": "Questions kept out of training and used to choose a model (when to stop, which stage).",
    "test split": "Questions kept out of training and of every choice, scored once at the end: the honest score.",
}

#: The terms each Tour step uses, shown beside it.
STEP_TERMS = {
    "accuracy": ["logit", "validation split", "test split"],
    "logit_lens": ["residual stream", "W_U", "logit lens"],
    "module_waves": ["module logits", "period", "locking R", "chance threshold"],
    "spectra": ["Fourier component", "period", "cutoff tau"],
    "waves": ["Fourier component", "period"],
    "ablations": ["ablation", "cutoff tau", "random control"],
    "numbers": ["embedding", "period", "Cohen's kappa"],
    "training": ["embedding", "validation split"],
}


def step_terms(step: str) -> str:
    """The terms of one Tour step as short markdown lines."""
    return "  \n".join(f"**{name}**: {TERMS[name]}" for name in STEP_TERMS.get(step, []))


def term(name: str) -> str:
    """A term's plain-language definition (the one glossary), for a control's tooltip."""
    return TERMS[name]
