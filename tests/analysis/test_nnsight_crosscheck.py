"""One capture and one patching number against nnsight (https://nnsight.net), on the shipped 2-layer demo: what MLP 1
writes at the answer position, and the share of the logit difference restored by the stream after layer 1 and by head
0 of layer 1, for 15 + 93 against 15 + 94. Runs where nnsight is installed, skipped otherwise (it is no dependency of
the project: docs/api.md says how it was run, and the numbers it compared)."""

import numpy as np
import pytest

from core.analysis.patching import Site, patch_pairs, recovered_share
from core.files import PROJECT_ROOT
from core.models.capture import capture, prepare_batches
from core.models.names import HEAD, MLP, RESID
from core.runs.ablate import open_target

nnsight = pytest.importorskip("nnsight")
DEMO = PROJECT_ROOT / "models" / "fourier-frozen"
CLEAN, CORRUPT = "Put together 15 and 93. Answer:", "Put together 15 and 94. Answer:"


@pytest.mark.skipif(not (DEMO / "config.json").exists(), reason="the shipped demo model")
def test_a_capture_and_a_patch_agree_with_nnsight():
    import torch

    target = open_target(str(DEMO), task="addition", limit=10, threads=1, log=lambda *_: None)
    loaded, p = target.loaded, target.p
    ids = loaded.numbers.ids_for(p)
    model = nnsight.NNsight(loaded.model)
    dh = loaded.parts.head_dim

    def trace(text, resid=None, z=None):
        """nnsight's own run of one prompt: MLP 1's output, the stream after block 1, attention 1's W_O input, the
        answer position's logits; `resid` or `z` (head 0's columns) put in at the answer position first."""
        batch = prepare_batches(loaded.tokenizer, [text], 1)[0]
        with torch.no_grad(), model.trace(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                          position_ids=batch.position_ids, use_cache=False):
            # nnsight reads and writes in the order the model runs: W_O's input, the MLP, the block's output, logits
            if z is not None:
                model.transformer.h[0].attn.c_proj.input[:, -1, :dh] = z
            heads = model.transformer.h[0].attn.c_proj.input[:, -1, :dh].save()
            mlp = model.transformer.h[0].mlp.output[:, -1, :].save()
            if resid is not None:
                model.transformer.h[0].output[:, -1, :] = resid
            stream = model.transformer.h[0].output[:, -1, :].save()
            logits = model.output.logits[:, -1, :].save()
        return mlp, stream, heads, logits[0, ids[108]] - logits[0, ids[109]]

    mlp, stream, z, clean_gap = trace(CLEAN)
    ours = capture(loaded, [CLEAN], 1, (MLP,), False)
    np.testing.assert_allclose(ours[MLP][0, 0], mlp[0].numpy(), atol=1e-5)
    corrupt_gap = trace(CORRUPT)[3]
    theirs = [recovered_share([float(trace(CORRUPT, resid=stream)[3])], [float(clean_gap)], [float(corrupt_gap)]),
              recovered_share([float(trace(CORRUPT, z=z)[3])], [float(clean_gap)], [float(corrupt_gap)])]
    sites = [Site(RESID, 1), Site(HEAD, 1, 0)]
    result = patch_pairs(loaded, [CLEAN], [CORRUPT], [108], [109], p, sites, 1, False)
    mine = [recovered_share(result.patched_gap[i], result.clean_gap, result.corrupt_gap) for i in range(2)]
    np.testing.assert_allclose(mine, theirs, atol=1e-5)
    assert abs(mine[0] - mine[1]) > 0.01  # two different sites: the comparison can tell them apart
