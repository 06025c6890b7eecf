"""A head, a neuron and any position on the one edit path: a head's zero ablation equals removing its result from
the attention output, an edit of the stream's width reaches z_h through W_O^h, an edit at an operand equals a patch of
that token, and the head ablation reports its control."""

import numpy as np
import pytest
import torch

from core.analysis.ablations import Condition, FunctionEdit, RowPatch
from core.analysis.evaluation import evaluate_conditions
from core.errors import CoreError
from core.models.capture import capture_hooks
from core.models.positions import steps_back
from core.runs.edit_arguments import EditScope, parse_head

PROMPTS = ["Put together 15 and 93. Answer:", "Total of 1 and 2. Answer:", "Calculate 100 + 7. Answer:",
           "Add together 9 and 250. Answer:"]
ANSWERS = np.array([108, 3, 107, 259])


def zero(width):
    return FunctionEdit(lambda rows: torch.zeros_like(rows), width)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_head_is_edited_like_a_module(loaded_model, arch):
    lm = loaded_model(arch)
    acts = capture_hooks(lm, PROMPTS, ["blocks.1.attn.hook_result", "blocks.1.hook_attn_out"])
    without = acts["blocks.1.hook_attn_out"] - acts["blocks.1.attn.hook_result"][:, 2]
    conditions = [Condition(zero(lm.parts.head_dim), "z", 2, unit=2), Condition(RowPatch(without), "attn", 2),
                  Condition(zero(lm.width), "z", 2, unit=2), Condition(zero(lm.width), "mlp", 1, position="b"),
                  Condition(RowPatch(np.zeros((4, lm.width), np.float32),
                                     back=steps_back(lm.tokenizer, PROMPTS, "b")), "mlp", 1),
                  Condition(zero(1), "post", 1, unit=3)]
    gaps = [e.gaps for e in evaluate_conditions(lm, PROMPTS, ANSWERS, 600, conditions, contrast=ANSWERS + 1,
                                                progress=False)]
    assert np.allclose(gaps[0], gaps[1], atol=1e-4)  # z_h = 0 is attention's output without head 2's result
    assert np.allclose(gaps[2], gaps[0], atol=1e-4)  # the result zeroed, reached through pinv(W_O^h)
    assert np.allclose(gaps[3], gaps[4], atol=1e-5)  # an edit at "b" is a patch of that token


def test_a_unit_the_model_lacks_or_an_edit_of_the_wrong_width_is_refused(loaded_model):
    lm = loaded_model("llama")
    for cond, why in ((Condition(zero(16), "z", 1, unit=9), "heads are 0..3"),
                      (Condition(zero(5), "z", 1, unit=0), "not on 5 numbers"),
                      (Condition(zero(1), "post", 1, unit=10**6), "neurons are 0..")):
        with pytest.raises(CoreError, match=why):
            evaluate_conditions(lm, PROMPTS, ANSWERS, 600, [cond], progress=False)
    with pytest.raises(CoreError, match="one at a time"):
        Condition(zero(16), "z", 1)


def test_a_head_ablation_reports_its_effect_beside_its_control(model_dir):
    from core.runs.ablate import open_target
    from core.runs.unit_ablation import ablate_head

    target = open_target(str(model_dir("llama")), limit=8, threads=1, log=lambda *_: None)
    report = ablate_head(target, 2, 3, "mean", position="all", progress=False)
    control = report.figures["control"]
    assert report.figures["site"] == "blocks.1.attn.hook_z[3]" and control["units"] == [0, 1, 2]
    assert np.isfinite(control["mean"]) and {"change", "loss_change"} <= set(report.figures) and "change" in control
    with pytest.raises(CoreError, match="heads are 0..3"):
        ablate_head(target, 1, 4, progress=False)


def test_a_head_is_named_as_the_docs_count_or_as_transformerlens_names_it():
    scope = EditScope(p=600, n_layers=2, split="test", answers=())
    assert parse_head("2.3", scope) == parse_head("blocks.1.attn.hook_z[3]", scope) == (2, 3)
    for bad, said in (("0.1", "counted from 1"), ("3.0", "layers 1..2"), ("blocks.2.attn.hook_z[0]", "layers 1..2"),
                      ("1-2", "write L.H")):
        with pytest.raises(CoreError, match=said):
            parse_head(bad, scope)
