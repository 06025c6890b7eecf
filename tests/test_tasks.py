from collections import Counter

import pytest

from core.errors import CoreError
from core.tasks import (
    ADDITION_PHRASINGS,
    build_examples,
    find_example,
    number_space,
    running_example_id,
    select_split,
    subsample,
    vocabulary_words,
    with_shots,
)


@pytest.fixture(scope="module")
def addition():
    return build_examples("addition", 260, seed=0)


def test_addition_has_every_pair_once(addition):
    assert len(addition) == 261 * 262 // 2 == 34191
    pairs = {(e.a, e.b) for e in addition}
    assert len(pairs) == len(addition)
    assert all(0 <= e.a <= e.b <= 260 and e.answer == e.a + e.b for e in addition)
    assert len({e.id for e in addition}) == len(addition)
    assert number_space("addition", 260) == 521


def test_split_is_80_10_10_and_seeded(addition):
    counts = Counter(e.split for e in addition)
    assert counts["train"] == round(0.8 * 34191)
    assert counts["val"] == round(0.1 * 34191)
    assert counts["test"] == 34191 - counts["train"] - counts["val"]
    again = build_examples("addition", 260, seed=0)
    assert [(e.id, e.split, e.question) for e in again] == [(e.id, e.split, e.question) for e in addition]
    other = build_examples("addition", 260, seed=1)
    assert [e.split for e in other] != [e.split for e in addition]


def test_five_phrasings_all_used_and_end_with_answer(addition):
    used = Counter(e.phrasing for e in addition)
    assert set(used) == set(range(5))
    assert min(used.values()) > 0.15 * len(addition)
    e = addition[0]
    assert e.prompt == ADDITION_PHRASINGS[e.phrasing].format(a=e.a, b=e.b) + " Answer:"


def test_running_example_in_test_with_its_phrasing():
    for seed in range(5):
        ex = build_examples("addition", 260, seed=seed)
        e = find_example(ex, running_example_id("addition"))
        assert e.split == "test"
        assert e.prompt == "Put together 15 and 93. Answer:"
        assert e.answer == 108
    with pytest.raises(CoreError, match="no example"):
        find_example(ex, "999+999")


def test_reverse_polish_and_multiplication():
    rp = build_examples("reverse-polish", 20)
    assert all(e.question == f"{e.a},{e.b}+" for e in rp)
    mul = build_examples("multiplication", 260)
    assert mul and all(e.answer == e.a * e.b < 521 for e in mul)
    assert any("product" in e.question for e in mul)
    assert running_example_id("multiplication") is None


def test_bad_inputs_say_what_to_do():
    with pytest.raises(CoreError, match="choose one of"):
        build_examples("subtraction")
    with pytest.raises(CoreError, match="split"):
        select_split(build_examples("addition", 5), "dev")
    with pytest.raises(CoreError, match="max_operand"):
        build_examples("addition", 0)


def test_k_shot_prompts_come_from_training_split(addition):
    test = select_split(addition, "test")[:20]
    train = select_split(addition, "train")
    prompts = with_shots(test, train, 4, seed=0)
    train_prompts = {f"{e.prompt} {e.answer}" for e in train}
    for e, p in zip(test, prompts):
        lines = p.split("\n")
        assert len(lines) == 5 and lines[-1] == e.prompt
        assert all(line in train_prompts for line in lines[:4])
    assert with_shots(test, train, 4, seed=0) == prompts
    assert with_shots(test, train, 0) == [e.prompt for e in test]


def test_subsample_keeps_running_example(addition):
    test = select_split(addition, "test")
    sub = subsample(test, 10, seed=3, keep_ids=["15+93"])
    assert len(sub) == 10 and sub[0].id == "15+93"
    assert subsample(test, 10, seed=3, keep_ids=["15+93"]) == sub


def test_vocabulary_words_cover_prompts():
    words = vocabulary_words()
    for w in ("Put", "together", "Answer", ":", "?", "+", ",", "product"):
        assert w in words
