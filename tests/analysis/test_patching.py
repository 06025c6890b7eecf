"""Activation patching (core.analysis.patching) against its definition: each corrupted prompt run alone with one
site's output at the answer position set to its own clean partner's, on every tiny architecture; the two ends of
the stream recover all and nothing; pairs follow their places in the lists, not the batches."""

import numpy as np
import pandas as pd
import pytest
import torch

from core.analysis.ablations import Condition, RowPatch
from core.analysis.pairs import corrupted, corrupted_text, pair_examples
from core.analysis.patch_table import DENOISE, GROUP, NOISE, with_defaults
from core.analysis.patching import (
    Site,
    checked_pairs,
    group_site,
    module_sites,
    patch_pairs,
    patching_table,
    recovered_share,
)
from core.errors import CoreError
from core.models.capture import capture, forward_batch, prepare_batches
from core.models.names import ATTN, HEAD, MLP, RESID, Z
from core.models.random_models import ARCHITECTURES, save_random_model
from core.runs.ablate import open_target
from core.tasks import build_examples, parse_question, with_operands

N_LAYERS = 2


def pairs_of(target, n=24):
    examples = {e.id: e for e in build_examples("addition", 260, 0)}
    chosen = [examples[i] for i in target.ids[:n]]
    pairs = pair_examples(chosen, 260)
    clean = [target.texts[target.ids.index(c.id)] for c, _ in pairs]
    corrupt = [corrupted_text(t, c, k) for t, (c, k) in zip(clean, pairs)]
    return pairs, clean, corrupt


@pytest.fixture(scope="module", params=ARCHITECTURES)
def tiny(request, tmp_path_factory):
    folder = save_random_model(tmp_path_factory.mktemp(request.param), request.param, n_layers=N_LAYERS)
    if request.param == "qwen2":
        pytest.skip("its tokenizer splits numbers into digits: an operand changed changes the prompt's length")
    return open_target(str(folder), limit=40, threads=1, log=lambda *_: None)


def gap_through(loaded, text, answer, other, p, handles) -> float:
    """The logit of `answer` minus that of `other` for one prompt alone, with the hooks `handles` in place (removed
    after)."""
    try:
        with torch.no_grad():
            logits = forward_batch(loaded, prepare_batches(loaded.tokenizer, [text], 1)[0])[0]
    finally:
        for h in handles:
            h.remove()
    ids = loaded.numbers.ids_for(p)
    return float(logits[ids[answer]] - logits[ids[other]])


def gap_alone(loaded, text, answer, other, p, site=None, value=None):
    """The definition: one prompt alone, every position computed, the site's output at the last token replaced."""
    handles = []
    parts = loaded.parts
    if site is not None:
        v = torch.as_tensor(value, dtype=torch.float32)

        def put(module, args, out):
            t = (out[0] if isinstance(out, tuple) else out).clone()
            t[:, -1, :] = v.to(t.dtype)
            return (t, *out[1:]) if isinstance(out, tuple) else t

        def put_input(module, args, kwargs):
            hidden = (args[0] if args else kwargs["hidden_states"]).clone()
            hidden[:, -1, :] = v.to(hidden.dtype)
            return ((hidden, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": hidden})

        if site.kind == RESID and site.layer == 0:
            handles.append(parts.blocks[0].register_forward_pre_hook(put_input, with_kwargs=True))
        else:
            mod = parts.blocks[site.layer - 1] if site.kind == RESID else parts.outputs(site.kind)[site.layer - 1]
            handles.append(mod.register_forward_hook(put))
    return gap_through(loaded, text, answer, other, p, handles)


def test_every_site_patched_as_its_definition_with_the_stream_recovering_all_at_the_top_and_none_at_the_bottom(tiny):
    loaded, p = tiny.loaded, tiny.p
    pairs, clean, corrupt = pairs_of(tiny)
    ca = np.array([c.answer for c, _ in pairs])
    ka = np.array([k.answer for _, k in pairs])
    sites = module_sites(loaded.n_layers)
    # batches of 3, sorted by length: the prompts' five phrasings differ in length, so batches mix the list's order
    result = patch_pairs(loaded, clean, corrupt, ca, ka, p, sites, batch_size=3, progress=False)
    kept = capture(loaded, clean, 3, (RESID, ATTN, MLP), False)
    for i in (0, 5, len(pairs) - 1):
        assert result.clean_gap[i] == pytest.approx(gap_alone(loaded, clean[i], ca[i], ka[i], p), abs=2e-4)
        assert result.corrupt_gap[i] == pytest.approx(gap_alone(loaded, corrupt[i], ca[i], ka[i], p), abs=2e-4)
        for s, site in enumerate(sites):
            value = kept[site.kind][i, site.layer if site.kind == RESID else site.layer - 1]
            want = gap_alone(loaded, corrupt[i], ca[i], ka[i], p, site, value)
            assert result.patched_gap[s, i] == pytest.approx(want, abs=2e-4), site
    top = sites.index(Site(RESID, loaded.n_layers))
    bottom = sites.index(Site(RESID, 0))
    np.testing.assert_allclose(result.patched_gap[top], result.clean_gap, atol=2e-4)
    np.testing.assert_allclose(result.patched_gap[bottom], result.corrupt_gap, atol=2e-4)
    table = patching_table(result)
    row = table[(table.kind == RESID) & (table.layer == loaded.n_layers)].iloc[0]
    assert row.recovered == pytest.approx(1.0, abs=1e-3)
    assert row.recovered_low <= row.recovered <= row.recovered_high
    assert table[(table.kind == RESID) & (table.layer == 0)].recovered.iloc[0] == pytest.approx(0.0, abs=1e-3)
    assert table.moved.between(0, 1).all() and (table.n == len(pairs)).all()


def test_pairs_are_matched_by_their_place_in_the_lists_not_by_batch(tiny):
    loaded, p = tiny.loaded, tiny.p
    pairs, clean, corrupt = pairs_of(tiny, 12)
    ca = np.array([c.answer for c, _ in pairs])
    ka = np.array([k.answer for _, k in pairs])
    sites = [Site(MLP, 1), Site(RESID, 1)]
    ahead = patch_pairs(loaded, clean, corrupt, ca, ka, p, sites, batch_size=4, progress=False)
    order = np.random.default_rng(0).permutation(len(pairs))
    shuffled = patch_pairs(loaded, [clean[i] for i in order], [corrupt[i] for i in order], ca[order], ka[order], p,
                           sites, batch_size=4, progress=False)
    np.testing.assert_allclose(shuffled.patched_gap, ahead.patched_gap[:, order], atol=2e-4)
    # a wrong pairing (each corrupted prompt given another's clean vector) gives other numbers: the test can fail
    wrong = patch_pairs(loaded, clean, corrupt[1:] + corrupt[:1], ca, np.roll(ka, -1), p, sites, batch_size=4,
                        progress=False)
    assert not np.allclose(wrong.patched_gap, ahead.patched_gap, atol=1e-3)


def test_the_corrupted_question_changes_the_answers_last_digit_in_the_same_phrasing():
    e = parse_question("addition", "15 + 93", phrasing=4)
    k = corrupted(e, 260)
    assert (k.a, k.b, k.answer, k.phrasing) == (15, 94, 109, 4) and k.question == "Put together 15 and 94."
    top = with_operands(e, 7, 260)
    assert (corrupted(top, 260).b, corrupted(top, 260).answer) == (259, 266)
    times = [x for x in build_examples("multiplication", 260, 0) if x.a == 0 or x.a % 10 == 0][:5]
    assert all(corrupted(x, 260) is None for x in times)
    pairs = pair_examples(build_examples("addition", 20, 0)[:50], 20)
    assert len(pairs) == 50 and all(c.answer % 10 != k.answer % 10 for c, k in pairs)


def test_the_share_is_a_ratio_of_means_and_none_where_the_prompts_are_not_told_apart():
    assert recovered_share([1.0, 3.0], [4.0, 4.0], [0.0, 0.0]) == pytest.approx(0.5)
    assert np.isnan(recovered_share([1.0], [2.0], [2.0]))


def test_bad_pairs_and_sites_are_refused(tiny):
    loaded, p = tiny.loaded, tiny.p
    with pytest.raises(CoreError, match="pair them one to one"):
        patch_pairs(loaded, ["a"], [], [1], [2], p)
    with pytest.raises(CoreError, match="same answer"):
        patch_pairs(loaded, ["a"], ["b"], [1], [1], p)
    with pytest.raises(CoreError, match="layers go from 1"):
        patch_pairs(loaded, ["a"], ["b"], [1], [2], p, [Site(MLP, 0)])
    with pytest.raises(CoreError, match="one vector per prompt"):
        RowPatch(np.zeros(3))
    with pytest.raises(CoreError, match="one site"):
        Condition(RowPatch(np.zeros((2, 4))), modules=MLP)
    with pytest.raises(CoreError, match="cannot read"):
        parse_question("addition", "15 plus 93")


def test_a_head_is_patched_as_its_definition_its_columns_of_the_output_projections_input(tiny):
    loaded, p = tiny.loaded, tiny.p
    if not loaded.parts.has_heads:
        pytest.skip(loaded.parts.heads_missing)
    pairs, clean, corrupt = pairs_of(tiny, 10)
    ca = np.array([c.answer for c, _ in pairs])
    ka = np.array([k.answer for _, k in pairs])
    H, dh = loaded.parts.n_heads, loaded.parts.head_dim
    sites = module_sites(loaded.n_layers, H)[-2 * H:]
    sites = [s for s in sites if s.kind == HEAD]
    assert len(sites) == loaded.n_layers * H or len(sites) == 2 * H
    result = patch_pairs(loaded, clean, corrupt, ca, ka, p, sites, batch_size=3, progress=False)
    z = capture(loaded, clean, 3, (), False, heads=True)[Z]
    for i in (0, len(pairs) - 1):
        for s, site in enumerate(sites):
            value = torch.as_tensor(z[i, site.layer - 1, site.head])

            def put(module, args):
                t = args[0].clone()
                t[:, -1, site.head * dh:(site.head + 1) * dh] = value.to(t.dtype)
                return (t, *args[1:])

            handle = loaded.parts.out_proj[site.layer - 1].register_forward_pre_hook(put)
            try:
                want = gap_alone(loaded, corrupt[i], ca[i], ka[i], p)
            finally:
                handle.remove()
            assert result.patched_gap[s, i] == pytest.approx(want, abs=2e-4), site
    # patching a head changes the answer's logits at all: the test can tell a patch from none
    assert not np.allclose(result.patched_gap, result.corrupt_gap[None], atol=1e-4)


def test_the_patch_command_prints_every_site_as_json_for_a_pair_and_for_a_split(tmp_path, capsys):
    import json

    from core.cli import main

    folder = save_random_model(tmp_path / "m", "llama", n_layers=N_LAYERS)
    assert main(["patch", str(folder), "--clean", "15 + 93", "--corrupt", "15 + 94", "--json", "--threads", "1",
                 "--no-progress"]) == 0
    pair = json.loads(capsys.readouterr().out)
    hooks = {s["hook"]: s for s in pair["sites"]}
    assert pair["pairs"] == 1 and f"blocks.{N_LAYERS - 1}.hook_resid_post" in hooks
    assert hooks[f"blocks.{N_LAYERS - 1}.hook_resid_post"]["recovered"] == pytest.approx(1.0, abs=1e-3)
    assert hooks["blocks.0.hook_resid_pre"]["recovered"] == pytest.approx(0.0, abs=1e-3)
    assert any(h.startswith("blocks.0.attn.hook_z[") for h in hooks)
    assert all(s["recovered_low"] is None for s in pair["sites"])  # one pair: no interval
    # layers as the docs count them (from 1), TransformerLens' block (from 0) beside; the groups too
    labels = {s["hook"]: s["site"] for s in pair["sites"]}
    assert labels[f"blocks.{N_LAYERS - 1}.hook_mlp_out"] == f"MLP {N_LAYERS} (blocks.{N_LAYERS - 1}.hook_mlp_out)"
    assert labels["blocks.0.attn.hook_z[1]"] == "head 1 of attention 1 (blocks.0.attn.hook_z[1])"
    assert labels[f"blocks.0-{N_LAYERS - 1}.hook_mlp_out"] == f"MLPs 1-{N_LAYERS} together (blocks.0-{N_LAYERS - 1}" \
        ".hook_mlp_out)"
    best = max(pair["sites"], key=lambda r: r["recovered"] if r["recovered"] is not None else -np.inf)
    assert best["site"] in pair["lines"][1]  # the text prints the label, not the 0-based hook alone
    assert main(["patch", str(folder), "--clean", "15 + 93", "--corrupt", "15 + 94", "--json", "--threads", "1",
                 "--no-progress", "--direction", "noise"]) == 0
    noised = json.loads(capsys.readouterr().out)
    top = {s["hook"]: s for s in noised["sites"]}[f"blocks.{N_LAYERS - 1}.hook_resid_post"]
    assert noised["direction"] == "noise" and top["recovered"] == pytest.approx(1.0, abs=1e-3)  # all of it lost
    assert "takes away" in noised["lines"][0]
    assert main(["patch", str(folder), "--limit", "30", "--json", "--threads", "1", "--no-progress"]) == 0
    split = json.loads(capsys.readouterr().out)
    assert 20 <= split["pairs"] <= 30 and all(s["recovered_low"] is not None for s in split["sites"]
                                              if s["kind"] == "resid" and s["layer"] == N_LAYERS)
    assert main(["patch", str(folder), "--limit", "30", "--json", "--threads", "1", "--no-progress", "--contrast",
                 "10", "--direction", "noise"]) == 0
    tens = json.loads(capsys.readouterr().out)
    assert tens["contrast"] == 10 and {s["direction"] for s in tens["sites"]} == {"noise"}
    assert "ten more" in tens["lines"][0]
    assert main(["patch", str(folder), "--clean", "15 + 93"]) == 2
    assert "give both --clean and --corrupt" in capsys.readouterr().err
    assert main(["patch", str(folder), "--clean", "15 plus 93", "--corrupt", "15 + 94"]) == 2  # free text, as given
    assert "the clean prompt is 3 tokens and the corrupted one" in capsys.readouterr().err  # not of the same length


def gap_with(loaded, text, answer, other, p, values_by_module):
    """The definition of a patch of several sites at once: one prompt alone, every position computed, each named
    module output ((kind, layer) -> vector) replaced at the last token."""
    handles = []
    for (kind, layer), value in values_by_module.items():
        v = torch.as_tensor(value, dtype=torch.float32)

        def put(module, args, out, v=v):
            t = (out[0] if isinstance(out, tuple) else out).clone()
            t[:, -1, :] = v.to(t.dtype)
            return (t, *out[1:]) if isinstance(out, tuple) else t

        mod = loaded.parts.blocks[layer - 1] if kind == RESID else loaded.parts.outputs(kind)[layer - 1]
        handles.append(mod.register_forward_hook(put))
    return gap_through(loaded, text, answer, other, p, handles)


def test_noising_puts_the_corrupted_output_into_the_clean_run_and_the_stream_loses_all_at_the_top_none_at_the_bottom(
        tiny):
    loaded, p = tiny.loaded, tiny.p
    pairs, clean, corrupt = pairs_of(tiny)
    ca = np.array([c.answer for c, _ in pairs])
    ka = np.array([k.answer for _, k in pairs])
    sites = module_sites(loaded.n_layers)
    result = patch_pairs(loaded, clean, corrupt, ca, ka, p, sites, batch_size=3, progress=False, direction=NOISE)
    assert result.direction == NOISE
    kept = capture(loaded, corrupt, 3, (RESID, ATTN, MLP), False)
    for i in (0, len(pairs) - 1):
        assert result.clean_gap[i] == pytest.approx(gap_alone(loaded, clean[i], ca[i], ka[i], p), abs=1e-3)
        assert result.corrupt_gap[i] == pytest.approx(gap_alone(loaded, corrupt[i], ca[i], ka[i], p), abs=1e-3)
        for j, site in enumerate(sites):
            if site.kind == RESID and site.layer == 0:
                continue  # the embedding's input: the definition's pre-hook is the first test's
            index = site.layer if site.kind == RESID else site.layer - 1
            value = kept[site.kind][i, index]
            want = gap_alone(loaded, clean[i], ca[i], ka[i], p, site, value)
            assert result.patched_gap[j, i] == pytest.approx(want, abs=1e-3), (site, i)
    table = patching_table(result)
    stream = table[table["kind"] == RESID].set_index("layer")["recovered"]
    # the last stream carries everything: noising it leaves the clean run where the corrupted one is (100% lost);
    # the stream before layer 1 at the answer position is the same token in both prompts: nothing lost
    assert stream[loaded.n_layers] == pytest.approx(1.0, abs=1e-4)
    assert stream[0] == pytest.approx(0.0, abs=1e-4)
    assert set(table["direction"]) == {NOISE} and set(table["contrast"]) == {1}
    # the share lost is one minus the share the noised run keeps, by its definition
    for j in range(len(sites)):
        kept_share = recovered_share(result.patched_gap[j], result.clean_gap, result.corrupt_gap)
        assert table["recovered"].iloc[j] == pytest.approx(1 - kept_share, abs=1e-9)
        if np.isfinite(table["recovered_low"].iloc[j]):
            assert table["recovered_low"].iloc[j] <= table["recovered_high"].iloc[j]
    moved = result.patched_gap  # the answers moved are those the noised run gives as the corrupted answer
    assert moved.shape == result.moved.shape


def test_a_group_patches_its_layers_together_as_its_definition_and_one_layer_alone_as_that_site(tiny):
    loaded, p = tiny.loaded, tiny.p
    pairs, clean, corrupt = pairs_of(tiny, n=12)
    ca = np.array([c.answer for c, _ in pairs])
    ka = np.array([k.answer for _, k in pairs])
    L = loaded.n_layers
    sites = [group_site(MLP, 1, L), group_site(ATTN, 1, L), group_site(MLP, L, L), Site(MLP, L)]
    kept = capture(loaded, clean, 3, (ATTN, MLP), False)
    for direction in (DENOISE, NOISE):
        source, target = (clean, corrupt) if direction == DENOISE else (corrupt, clean)
        kept = capture(loaded, source, 3, (ATTN, MLP), False)
        result = patch_pairs(loaded, clean, corrupt, ca, ka, p, sites, batch_size=3, progress=False,
                             direction=direction)
        for i in (0, len(pairs) - 1):
            for j, kind in ((0, MLP), (1, ATTN)):
                want = gap_with(loaded, target[i], ca[i], ka[i], p,
                                {(kind, layer): kept[kind][i, layer - 1] for layer in range(1, L + 1)})
                assert result.patched_gap[j, i] == pytest.approx(want, abs=1e-3), (direction, kind, i)
        # a group of one layer is that layer's site, exactly
        np.testing.assert_allclose(result.patched_gap[2], result.patched_gap[3], atol=1e-5)
        table = patching_table(result)
        groups = table[table["kind"] == GROUP]
        assert list(groups["from_layer"]) == [1, 1, L] and list(groups["modules"]) == [MLP, ATTN, MLP]


def test_the_tens_contrast_changes_the_answers_tens_digit_and_its_pairs_pass_the_checks():
    examples = build_examples("addition", 260, 0)
    pairs = pair_examples(examples, 260, step=10)
    assert len(pairs) > 1000
    for clean, other in pairs:
        assert abs(other.b - clean.b) == 10 and other.a == clean.a and other.phrasing == clean.phrasing
        assert (other.answer // 10) % 10 != (clean.answer // 10) % 10
    ca, ka = checked_pairs([c.question for c, _ in pairs], [k.question for _, k in pairs],
                           [c.answer for c, _ in pairs], [k.answer for _, k in pairs], p=521)
    assert (ca != ka).all() and len(ca) == len(pairs)
    q = parse_question("addition", "15 + 93")
    assert corrupted(q, 260, 10).answer == 118
    assert corrupted(parse_question("addition", "15 + 255"), 260, 10).b == 245  # ten less past the largest operand
    # a pair whose two prompts share an answer is refused
    with pytest.raises(CoreError, match="same answer"):
        checked_pairs(["a"], ["b"], [108], [108])


def test_a_table_cached_before_the_directions_reads_as_denoising_at_contrast_one():
    old = pd.DataFrame({"kind": [RESID, MLP], "layer": [0, 2], "head": [-1, -1], "n": [5, 5]})
    t = with_defaults(old)
    assert list(t["direction"]) == [DENOISE, DENOISE] and list(t["contrast"]) == [1, 1]
    assert list(t["from_layer"]) == [0, 2] and list(t["modules"]) == [RESID, MLP]
    t2 = old.assign(direction=[NOISE, NOISE], contrast=[10, 10], from_layer=[0, 1], modules=[RESID, MLP])
    assert list(with_defaults(t2)["direction"]) == [NOISE, NOISE]
