"""Word-level tokenizers in which every number 0..N is one token.

The project's own demo models and the tests' tiny models use these: each word, punctuation mark
and number of the prompts is one token, so the number tokens are known exactly and nothing is
downloaded. Spaces are dropped by the pre-tokenizer (GPT-2 keeps them inside its number tokens,
" 108"; here "108" alone stands for the answer, and `core.models.number_tokens.find_number_tokens` finds it
either way).
"""

from __future__ import annotations

from typing import Sequence

from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

from core.tasks import TASKS, vocabulary_words

SPECIAL_TOKENS = ("<pad>", "<unk>", "<eos>")


def number_tokenizer(max_number: int, extra_words: Sequence[str] = (), tasks: Sequence[str] = TASKS):
    """A fast tokenizer whose vocabulary is the special tokens, 0..max_number, and the prompt words."""
    vocab: dict[str, int] = {}
    for tok in SPECIAL_TOKENS:
        vocab[tok] = len(vocab)
    for n in range(max_number + 1):
        vocab[str(n)] = len(vocab)
    for w in list(vocabulary_words(tasks)) + list(extra_words):
        if w not in vocab:
            vocab[w] = len(vocab)
    core = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(), pre_tokenizers.Digits(individual_digits=False)]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>"
    )
    return tok


def digit_tokenizer(extra_words: Sequence[str] = (), tasks: Sequence[str] = TASKS):
    """A word-level tokenizer that splits every number into its digits (like Llama's)."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for d in range(10):
        vocab[str(d)] = len(vocab)
    for w in list(vocabulary_words(tasks)) + list(extra_words):
        vocab.setdefault(w, len(vocab))
    core = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(), pre_tokenizers.Digits(individual_digits=True)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")

