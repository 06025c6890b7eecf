"""The words a class needs, in plain language, each tied to its definition in docs/method.md.

`TERMS` is shown whole on the Terms page, as tooltips on the controls, and, a few at a time
(`STEP_TERMS`), beside each Tour step, so a projector audience reads them without hovering.
"""

from __future__ import annotations

import re

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
    "matrix W_E.",
    "Cohen's kappa": "How well a linear probe reads n mod T from the numbers' vectors, on numbers it did not train "
    "on: 1 = perfectly, 0 = no better than guessing; below 0 is no better either (a probe that fitted noise in the "
    "numbers it trained on).",
    "validation split": "Questions kept out of training and used to choose a model (when to stop, which stage).",
    "test split": "Questions kept out of training and of every choice, to be scored once at the end: the honest score. "
    "A model stopped while its test score was in view (the earlier SmolLM2 stages, now history on the Training page) "
    "has no clean test score; its pages say so.",
    "split": "One of the three parts the questions are divided into: training (the model learns from it), validation "
    "(used to choose) and test (scored once at the end).",
    "token": "A piece of text the model reads or writes as one unit. GPT-2 has one token for each number 0..520; "
    "SmolLM2 as pre-trained writes numbers digit by digit, as several tokens; fine-tuned here, it gets one new token "
    "for each number 0..520 too (' 108'), so the default run reads and writes each number as one token.",
    "layer": "One block of the model: an attention part and an MLP part, each adding its output to the residual "
    "stream. Layer 0 is the embeddings; a 30-layer model has layers 1 to 30 (its code's blocks 0 to 29).",
    "attention": "The part of each layer that lets the vector at one position read from the other positions (here: "
    "the answer position reads the two numbers). The paper finds attention mostly picks the last digit.",
    "MLP": "Multi-layer perceptron: the part of each layer that transforms the vector at each position on its own. "
    "The paper finds MLPs mostly place the size of the answer.",
    "module": "An attention part or an MLP part of one layer: 'MLP 30' is layer 30's MLP.",
    "spectrum": "How strong each frequency is in a vector over the numbers: the sizes of its Fourier components.",
    "outlier": "A frequency far stronger than the others: here, above what the same numbers in shuffled order reach.",
    "phase": "Where a wave's peaks sit along the number line.",
    "probe": "A simple straight-line classifier trained to read one property (such as n mod 10) off the model's "
    "vectors. If it reads numbers it was not trained on, the property is written there plainly.",
    "t-SNE": "A way to draw many-dimensional vectors as points on a page so that neighbours stay neighbours; the "
    "distances between far-apart groups mean little.",
    "pre-training": "A language model's first, long training on a large amount of text, before any task.",
    "fine-tuning": "Training an already pre-trained model some more on one task (here: the addition questions).",
    "frozen": "Kept fixed while the rest of a model trains. The Fourier-frozen demo models have their number "
    "embeddings frozen to waves chosen by hand; the default run froze its lower 18 blocks (blocks 0..17) as "
    "pre-training made them and trained only its number rows and blocks 18..29, the top 12 of 30.",
    "delta": "What fine-tuning changed, stored apart from the pre-trained model: the new number rows and each "
    "trained weight matrix's change, cut to its strongest directions (SVD). `python -m core rebuild` adds it back "
    "onto the pre-trained model, which gives the fine-tuned model bit for bit.",
    "LoRA": "Low-rank adaptation: fine-tuning that learns a small change (two thin matrices) to each weight matrix "
    "instead of changing every weight.",
    "epoch": "One pass of training over every training question.",
    "seed": "The number that starts a training run's random choices (first weights, order of questions). Runs with "
    "other seeds show how much a result owes to luck.",
    "k-shot": "Asking a model that was not fine-tuned, with k solved examples in the prompt (4-shot: four solved sums, "
    "then the question); 0-shot: the question alone.",
    "LLM": "Large language model: a network trained on a large amount of text to predict the next token.",
    "parameters": "The numbers a model learns (its weights). SmolLM2-135M has 135 million.",
    "quantization": "Storing a model's weights with fewer bits to make it smaller (Q4_1: about 4 bits per weight).",
    "SVD": "Singular value decomposition: a matrix written as a sum of rank-one pieces, strongest first. Keeping "
    "the strongest k pieces gives the closest matrix of rank k.",
    "reverse-Polish": "Writing an operation after the numbers it applies to: “15,93+” is 15 + 93. The paper's "
    "appendix repeats its analysis on addition written so, and on multiplication.",
    "p-value": "How often chance alone would give a result at least this strong. Below 0.01: chance is an unlikely "
    "explanation.",
    "block": "One layer of the model as its code counts them, from 0, where the charts count layers from 1: block 17 "
    "is layer 18, so the default run's trained blocks 18..29 are layers 19 to 30, the top 12 of 30.",
    "loss": "The number training makes smaller: the cross-entropy of the right answer, low when the model gives the "
    "right answer a high probability.",
    "tied": "A tied model reads numbers in and writes answers out with the same number rows (its W_U is its input "
    "embedding); an untied one learns the two separately.",
    "Fourier-frozen": "A demo model trained here whose number embeddings are fixed to waves of periods 2, 2.5, 5, "
    "10, 100 and 520 chosen by hand and never trained: whatever it computes, it computes from those waves.",
    "phase shift": "A causal test: change one module's output so that its waves of periods 2, 2.5, 5 and 10 move by "
    "d numbers (the smallest change that does so) and see whether the answer's last digit moves by d too. Random "
    "edits of the same size are its control.",
    "activation patching": "Run two questions whose answers differ (15 + 93 and 15 + 94); copy one piece of the first "
    "run, one layer's output at the answer, into the second. If the second answer moves back toward the first's, that "
    "piece carried the difference. The share that comes back is read on the logit difference.",
    "logit difference": "The first answer's logit minus the second's: above zero when the model prefers the first.",
    "attention head": "A layer's attention is several heads side by side: each reads the other positions its own way "
    "and adds its own share to the stream; their sum is the layer's attention output.",
    "helix": "A line plus circles: the number n placed at n, and at cos and sin of 2 pi n / T for a few periods T "
    "(2, 5, 10, 100). A later paper (Kantamneni & Tegmark 2025) finds numbers sit on one inside language models.",
    "sd": "Standard deviation: how far, typically, one draw lies from the mean of all the draws. '70.0 ± 9.0' is a "
    "mean of 70.0 whose draws typically lie 9 points either side of it.",
    "95% interval": "The range a share counted on some questions most likely lies in: ranges made this way hold the "
    "true share 95 times in 100. '40.0 (37.1-43.0)' reads 40.0%, most likely between 37.1% and 43.0%.",
    "W_U bar": "How strong a period must be in a module's logits to count as the module's own: twice what W_U alone "
    "gives random vectors of the same size (the square root of the most any vector could reach, where that is less). "
    "Below it, a period may be W_U's doing, not the module's.",
    "rule": "A verdict's rule: the thresholds a run's numbers must pass for 'Agrees' or 'Partly agrees', written in "
    "the code beside each claim; docs/verdicts.md lists each step's and says which were fixed before the runs were "
    "read and which were changed after. 'The rule asks 8' means it needs at least 8.",
    "PCA": "Principal component analysis: the few directions along which a set of vectors varies most. Keeping a "
    "vector's part along the top r of them is the most any r directions can keep of those vectors on average.",
}

#: Words a class may not know, as the pages write them (regular expressions, matched case-insensitively unless
#: they contain a capital), each with the TERMS entry that explains it. The one word list: a test reads every
#: page's labels, captions, badges and chart titles and fails on a listed word without an entry, and on an
#: acronym that is not listed here (tests/app/test_words.py).
JARGON = {
    r"\blogits?\b": "logit",
    r"\bW_U\b|\bunembedding\b": "W_U",
    r"\bW_U bar\b": "W_U bar",
    r"\brules?\b": "rule",
    r"\bresidual stream\b": "residual stream",
    r"\blogit lens\b": "logit lens",
    r"\bfinal norm\b": "final norm",
    r"\bmodule logits\b": "module logits",
    r"\bmodules?\b": "module",
    r"\bFourier\b(?!-frozen)": "Fourier component",
    r"\bfrequenc(y|ies)\b": "frequency k",
    r"\bperiods?\b": "period",
    r"\btau\b": "cutoff tau",
    r"\blow-pass\b": "low-pass",
    r"\bhigh-pass\b": "high-pass",
    r"\bbasis\b|\bDFT\b": "basis",
    r"\block(s|ing)?\b|\bR = ": "locking R",
    r"\bchance threshold\b|\bshuffle": "chance threshold",
    r"\bablations?\b": "ablation",
    r"\brandom control\b": "random control",
    r"\brank\b": "rank",
    r"\berased\b": "erased",
    r"\bembeddings?\b|\bW_E\b": "embedding",
    r"\bkappa\b": "Cohen's kappa",
    r"\bvalidation\b": "validation split",
    r"\btest split\b": "test split",
    r"\bsplits?\b": "split",
    r"\btokens?\b|\btokenizer\b": "token",
    r"\blayers?\b": "layer",
    r"\battention\b": "attention",
    r"\bMLPs?\b": "MLP",
    r"\bspectr(um|a)\b": "spectrum",
    r"\boutliers?\b": "outlier",
    r"\bphase\b": "phase",
    r"\bprobes?\b": "probe",
    r"\bt-SNE\b|\bSNE\b": "t-SNE",
    r"\bpre-train": "pre-training",
    r"\bfine-tun": "fine-tuning",
    r"\bLoRA\b": "LoRA",
    r"\bfrozen\b(?<!fourier-frozen)": "frozen",
    r"\bdeltas?\b": "delta",
    r"\bepochs?\b": "epoch",
    r"\bseeds?\b": "seed",
    r"\b(k|\d+)-shot\b": "k-shot",
    r"\bLLMs?\b": "LLM",
    r"\bparameters\b": "parameters",
    r"\bquantiz|\bQ4_1\b": "quantization",
    r"\bp = \d|\bp-value": "p-value",
    r"\bSVD\b": "SVD",
    r"\breverse-Polish\b": "reverse-Polish",
    r"\bblocks?\b": "block",
    r"\bloss\b": "loss",
    r"\b(un)?tied\b": "tied",
    r"\bFourier-frozen\b": "Fourier-frozen",
    r"\bphase.shift|\bshift\w*\b[^.]{0,40}\bwaves\b": "phase shift",
    r"\bcontrols?\b": "random control",
    r"\bpatch(es|ing|ed)?\b": "activation patching",
    r"\blogit difference\b": "logit difference",
    r"\bheads?\b(?! of the)": "attention head",
    r"\bhelix\b": "helix",
    r"\bPCA\b|\bprincipal directions?\b": "PCA",
    r"\bsd\b": "sd",
    r"\bWilson\b|\b95% intervals?\b": "95% interval",
}

#: The terms each Tour step uses, shown beside it.
STEP_TERMS = {
    "accuracy": ["token", "logit", "test split"],
    "logit_lens": ["residual stream", "W_U", "logit lens"],
    "module_waves": ["module logits", "period", "locking R", "chance threshold"],
    "spectra": ["Fourier component", "period", "cutoff tau"],
    "waves": ["Fourier component", "period"],
    "ablations": ["ablation", "cutoff tau", "random control"],
    "numbers": ["embedding", "period", "Cohen's kappa"],
    "training": ["embedding", "validation split"],
    "operations": ["period", "reverse-Polish", "W_U"],
}


def jargon_flags(pattern: str) -> int:
    """How a JARGON pattern matches: in any case when it is written in lower case, else exactly as written."""
    return re.IGNORECASE if pattern.islower() else 0


def jargon_in(text: str) -> list[str]:
    """The TERMS entries that explain the listed words `text` uses, in the order of JARGON (a pattern with a
    capital letter matches case-sensitively, the others in any case)."""
    found = []
    for pattern, name in JARGON.items():
        if name not in found and re.search(pattern, text, jargon_flags(pattern)):
            found.append(name)
    return found


def step_term_names(step: str, text: str = "") -> list[str]:
    """The terms a Tour step shows: its own (STEP_TERMS) first, then every term the words of its screen use."""
    names = list(STEP_TERMS.get(step, []))
    return names + [name for name in jargon_in(text) if name not in names]


def step_terms(step: str, text: str = "") -> list[str]:
    """The terms of one Tour step (`step_term_names`), each as one short markdown line."""
    return [f"**{name}**: {TERMS[name]}" for name in step_term_names(step, text)]


def term(name: str) -> str:
    """A term's plain-language definition (the one glossary), for a control's tooltip."""
    return TERMS[name]


def new_step_terms(step: str, text: str = "") -> tuple[list[str], list[str]]:
    """(the terms this Tour step introduces, every other term its screen uses), each as `step_terms` writes them.
    A step introduces its own terms (STEP_TERMS) that no earlier step introduced; the rest (an earlier step's, and
    words of the run's name such as "LLM" or "block" that every step repeats) are one click away on a projector."""
    order = list(STEP_TERMS)
    met = {name for s in order[: order.index(step)] for name in STEP_TERMS[s]} if step in order else set()
    fresh = [n for n in STEP_TERMS.get(step, []) if n not in met]
    line = lambda name: f"**{name}**: {TERMS[name]}"  # noqa: E731
    return [line(n) for n in fresh], [line(n) for n in step_term_names(step, text) if n not in fresh]


def term_name(term_line: str) -> str:
    """The term a `step_terms` line defines ("**period**: ..." -> "period")."""
    return term_line.split("**")[1]
