"""A tokenizer that garbles the prompt is refused with the reason (issue 68: a Qwen2-type folder turned "Put together
15 and 93. Answer:" into "1593.:" and ran on with exit 0); one whose folder's tokenizer.json is faithful but whose
model type's class is not is read from the file; whitespace alone is no garbling."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from core.errors import CoreError
from core.models.prompt_round_trip import check_round_trip, faithful_tokenizer, same_text
from core.models.random_models import save_random_model
from core.models.vocab import digit_tokenizer, number_tokenizer


def words_lost_tokenizer():
    """Numbers and punctuation only: every word becomes the unknown token, which decoding drops ("1593.:")."""
    vocab = {"<pad>": 0, "<unk>": 1, "<eos>": 2, ".": 3, ":": 4, **{str(n): 5 + n for n in range(200)}}
    core = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")


def test_a_tokenizer_that_garbles_the_prompt_is_refused_with_the_reason():
    with pytest.raises(CoreError, match=r"garbles the prompt: 'Put together 15 and 93. Answer:' .* decode to "
                                        r"'15 93 . :'"):
        check_round_trip(words_lost_tokenizer(), "models/garbled", 200)


@pytest.mark.parametrize("tokenizer, n_numbers", [(number_tokenizer(600), 601), (number_tokenizer(40), 41),
                                                  (digit_tokenizer(), 10)])
def test_whitespace_alone_and_a_small_number_range_are_not_garbling(tokenizer, n_numbers):
    check_round_trip(tokenizer, "tiny", n_numbers)  # decoded "Put together 15 and 93 . Answer :", or 1 and 2
    assert same_text("Answer: 108", "Answer :108") and not same_text("15 and 93", "1593")


def test_a_faithful_tokenizer_json_is_read_as_it_is_where_the_model_types_class_garbles_it(tmp_path):
    folder = save_random_model(tmp_path / "qwen2", "qwen2", n_layers=1, width=16, heads=2)
    chosen = AutoTokenizer.from_pretrained(folder)  # transformers' Qwen2 class rebuilds the word-level file
    read = faithful_tokenizer(chosen, str(folder))
    ids = read("Put together 15 and 93. Answer:", add_special_tokens=False)["input_ids"]
    assert read.convert_ids_to_tokens(ids) == ["Put", "together", "15", "and", "93", ".", "Answer", ":"]
    check_round_trip(read, str(folder), 601)
