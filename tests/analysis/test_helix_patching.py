"""The helix's causal test (core.analysis.helix_patching) on tiny models: the operand's token is found where the
whole prompt has it, a patch before the answer position is the definition (one prompt alone, every position, a hook
at that token), and putting the clean operand's own embedding in makes the corrupted prompt the clean one."""

import numpy as np
import pytest
import torch

from core.analysis.ablations import Condition, RowPatch
from core.analysis.evaluation import evaluate_conditions
from core.analysis.helix_patching import CONDITIONS, RANDOM_DRAWS, helix_patching, operand_corrupted, operand_pairs
from core.errors import CoreError
from core.models.capture import forward_batch, prepare_batches
from core.models.names import RESID
from core.models.random_models import save_random_model
from core.runs.ablate import open_target
from core.tasks import build_examples, parse_question


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = save_random_model(tmp_path_factory.mktemp("llama"), "llama", n_layers=2)
    target = open_target(str(folder), limit=80, threads=1, log=lambda *_: None)
    examples = {e.id: e for e in build_examples("addition", 260, 0)}
    return target, [examples[i] for i in target.ids]


def test_the_operand_token_is_where_the_whole_prompt_has_it(tiny):
    target, examples = tiny
    pairs = operand_pairs(target.loaded.tokenizer, examples, target.texts, 260)
    assert len(pairs.clean) == len(examples)
    tok = target.loaded.tokenizer
    for text, prefix, back, a in zip(pairs.clean[:10], pairs.prefixes[:10], pairs.back[:10], pairs.operands[:10]):
        ids, cut = tok(text)["input_ids"], tok(prefix)["input_ids"]
        assert ids[len(ids) - back] == cut[-1] and prefix.endswith(str(a))
    e = parse_question("addition", "260 + 260")
    assert operand_corrupted(e, 260).a == 259  # one less at the largest operand
    assert operand_corrupted(parse_question("multiplication", "5 * 0"), 260) is None  # the same answer: no pair


def test_a_patch_before_the_answer_position_is_its_definition(tiny):
    target, examples = tiny
    loaded, p = target.loaded, target.p
    pairs = operand_pairs(loaded.tokenizer, examples, target.texts, 260)
    n = 6
    values = np.random.default_rng(0).normal(size=(n, loaded.width)).astype(np.float32)
    run = evaluate_conditions(loaded, pairs.corrupt[:n], pairs.clean_answers[:n], p,
                              [Condition(RowPatch(values, back=pairs.back[:n]), modules=RESID, layer=1)],
                              batch_size=4, contrast=pairs.corrupt_answers[:n], progress=False)[0]
    ids = loaded.numbers.ids_for(p)
    for i in range(n):
        def put(module, args, out, i=i):
            t = out[0].clone() if isinstance(out, tuple) else out.clone()
            t[:, t.shape[1] - pairs.back[i], :] = torch.as_tensor(values[i])
            return (t, *out[1:]) if isinstance(out, tuple) else t

        handle = loaded.parts.blocks[0].register_forward_hook(put)
        try:
            with torch.no_grad():
                logits = forward_batch(loaded, prepare_batches(loaded.tokenizer, [pairs.corrupt[i]], 1)[0])[0]
        finally:
            handle.remove()
        want = float(logits[ids[pairs.clean_answers[i]]] - logits[ids[pairs.corrupt_answers[i]]])
        assert run.gaps[i] == pytest.approx(want, abs=2e-4)


def test_the_clean_operands_own_embedding_restores_everything_and_the_table_has_every_condition(tiny):
    target, examples = tiny
    pairs = operand_pairs(target.loaded.tokenizer, examples, target.texts, 260)
    table = helix_patching(target.loaded, pairs, target.p, 261, layers=(0, 1), progress=False)
    assert len(table) == 2 * (len(CONDITIONS) - 1 + RANDOM_DRAWS)
    own = table[(table.layer == 0) & (table.condition == "activation")].iloc[0]
    assert own.recovered == pytest.approx(1.0, abs=1e-3)
    assert set(table.condition) == set(CONDITIONS) and (table.n == table.n.iloc[0]).all()
    assert (table[table.condition == "helix"]["rank"] == 8).all()
    assert (table[table.condition == "line"]["rank"] == 1).all()
    assert table.recovered_low.le(table.recovered).all() and table.recovered.le(table.recovered_high).all()
    with pytest.raises(CoreError, match="layers"):
        helix_patching(target.loaded, pairs, target.p, 261, layers=(9,), progress=False)
