"""Position x layer patching: the embedding of the one token that differs restores everything, the last layer's
stream restores everything at the answer position only, and pairs of different token lengths are refused."""

import json
from unittest import mock

import numpy as np
import pytest
import torch

import core.analysis.evaluation as evaluation
from core.analysis.ablations import EVERY_TOKEN, Condition, FunctionEdit, RowPatch
from core.analysis.evaluation import evaluate_conditions
from core.analysis.position_patching import differing_reach, position_patch, position_table
from core.errors import CoreError
from core.models.positions import steps_back

CLEAN, CORRUPT = "Put together 15 and 93. Answer:", "Put together 15 and 94. Answer:"


def test_the_differing_token_at_the_embeddings_and_the_answer_position_at_the_top_restore_all(loaded_model):
    lm = loaded_model("gpt2")
    table = position_table(position_patch(lm, [CLEAN], [CORRUPT], [108], [109], 600))
    cell = table.set_index(["role", "layer"])["recovered"]
    top = lm.n_layers
    assert cell[("b", 0)].max() == pytest.approx(1.0, abs=1e-4)  # the corrupted run made the clean one
    assert cell[("answer", top)] == pytest.approx(1.0, abs=1e-4)
    others = table[(table["layer"] == top) & (table["role"] != "answer")]["recovered"]
    assert np.allclose(others, 0, atol=1e-5)  # the logits read the answer position only
    assert set(table["layer"]) == set(range(top + 1)) and (table["role"] == "a").any()


def test_prompts_of_different_lengths_are_refused_saying_how(loaded_model):
    lm = loaded_model("gpt2")
    with pytest.raises(CoreError, match="as many tokens"):
        position_patch(lm, [CLEAN], ["Put together 15 and 94 and 5. Answer:"], [108], [109], 600)


def test_the_command_prints_cells_and_refuses_positions_without_a_pair(model_dir, capsys):
    from core.cli import main

    folder = str(model_dir("llama"))
    assert main(["patch", folder, "--positions"]) == 2
    assert "--positions patches one pair" in capsys.readouterr().err
    assert main(["patch", folder, "--clean", "15 + 93", "--corrupt", "15 + 94", "--positions", "--json",
                 "--threads", "1", "--no-progress"]) == 0
    printed = json.loads(capsys.readouterr().out)
    cells = printed["cells"]
    assert printed["split"] == "given" and "(answer 108)" in printed["lines"][0] and "cached" in printed
    assert {"position", "token", "layer", "recovered"} <= set(cells[0])
    assert len({c["layer"] for c in cells}) == 3


def _stream_hooks(block, layer: int, edit):
    """A forward hook on block `layer` (0: a pre-hook on the first block, its input) calling edit(hidden)."""
    if layer == 0:
        def pre(module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            out = edit(hidden)
            if out is None:
                return None
            return ((out, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": out})
        return block.register_forward_pre_hook(pre, with_kwargs=True)

    def post(module, args, out):
        hidden = out[0] if isinstance(out, tuple) else out
        new = edit(hidden)
        if new is None:
            return None
        return (new, *out[1:]) if isinstance(out, tuple) else new
    return block.register_forward_hook(post)


def _gap_by_definition(lm, clean: str, corrupt: str, answers, p: int, back: int, layer: int) -> float:
    """One pair alone, no batch, no cache: the corrupted prompt with the stream h(layer) at its token `back` from the
    end set to the clean prompt's; logit(clean answer) - logit(corrupted answer) over the number tokens."""
    blocks = lm.parts.blocks
    block = blocks[0] if layer == 0 else blocks[layer - 1]
    ids = {t: torch.tensor([lm.tokenizer(t)["input_ids"]]) for t in (clean, corrupt)}
    kept = {}
    def keep(h):
        kept["h"] = h[0, -back].clone()

    handle = _stream_hooks(block, layer, keep)
    with torch.no_grad():
        lm.model(input_ids=ids[clean])
    handle.remove()

    def put(h):
        h = h.clone()
        h[0, -back] = kept["h"]
        return h

    handle = _stream_hooks(block, layer, put)
    with torch.no_grad():
        logits = lm.model(input_ids=ids[corrupt]).logits[0, -1]
    handle.remove()
    numbers = torch.as_tensor(lm.numbers.ids_for(p))
    return float(logits[numbers[answers[0]]] - logits[numbers[answers[1]]])


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_every_cell_is_its_definition_run_alone_whether_run_on_the_last_tokens_or_taken_as_the_corrupted_run(
        loaded_model, arch):
    """Pairs of different lengths in one batch (left-padded), each cell against the pair run alone with a hook: the
    cells the evaluation runs on the last tokens against the prefix, and those before the first differing token that
    it takes from the corrupted run without running them."""
    lm = loaded_model(arch)
    clean = [CLEAN, "What is 7 plus 41? Answer:", "Add 30 and 12, please. Answer:"]
    corrupt = [CORRUPT, "What is 7 plus 42? Answer:", "Add 30 and 13, please. Answer:"]
    answers = [(108, 109), (48, 49), (42, 43)]
    result = position_patch(lm, clean, corrupt, [a for a, _ in answers], [b for _, b in answers], 600, batch_size=3)
    reach = differing_reach(lm.tokenizer(clean)["input_ids"], lm.tokenizer(corrupt)["input_ids"])
    assert 1 < reach < len(result.tokens), "the pairs should leave some cells before their first difference"
    for i, (back, layer) in enumerate(result.cells):
        for j in range(len(clean)):
            want = _gap_by_definition(lm, clean[j], corrupt[j], answers[j], 600, back, layer)
            assert result.patched_gap[i, j] == pytest.approx(want, abs=1e-3), (back, layer, j)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_edits_before_the_answer_run_on_the_last_tokens_as_on_whole_prompts_shared_or_not(loaded_model, arch):
    """Patches a few tokens back, one per prompt at its second operand, and module edits at an operand's token, above
    layer 1 (so a call's conditions share the blocks below them), in calls of few rows over left-padded batches: the
    same gaps as every token of every prompt run again for every condition."""
    lm = loaded_model(arch)
    prompts = [CLEAN, "What is 7 plus 41? Answer:", "Add 30 and 12, please. Answer:", "Sum 5 and 6. Answer:"]
    answers, others = np.array([108, 48, 42, 11]), np.array([109, 49, 43, 12])
    rng = np.random.default_rng(0)
    patch = lambda back: RowPatch(rng.normal(size=(len(prompts), lm.width)).astype(np.float32), back=back)  # noqa: E731
    double = lambda: FunctionEdit(lambda rows: 2 * rows, lm.width)  # noqa: E731
    at_b = steps_back(lm.tokenizer, prompts, "b")
    conditions = [Condition(None), Condition(patch(2), "resid", 1), Condition(patch(3), "resid", 2),
                  Condition(patch(at_b), "resid", 1), Condition(patch(at_b), "attn", 2),
                  Condition(double(), "mlp", 2, position="a"), Condition(double(), "attn", 2, position="b"),
                  Condition(patch(1), "mlp", 2)]
    reading = dict(p=600, contrast=others, batch_size=3, progress=False)
    for rows in (3, 9, 512):
        fast = evaluate_conditions(lm, prompts, answers, conditions=conditions, rows_per_call=rows, **reading)
        with mock.patch.object(evaluation, "edit_reach", lambda *a: EVERY_TOKEN):
            whole = evaluate_conditions(lm, prompts, answers, conditions=conditions, rows_per_call=rows, **reading)
        for c, (f, w) in enumerate(zip(fast, whole)):
            assert np.allclose(f.gaps, w.gaps, atol=1e-4), (rows, c)
        assert not np.allclose(fast[1].gaps, fast[0].gaps, atol=1e-3)  # the patches do change the answer
