"""Number-token fine-tuning (core.training.finetune) on a tiny Llama whose byte-level tokenizer splits numbers
into digits, as SmolLM2's does: tokens, training wrapper, resume, delta, bit-for-bit rebuild."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from core.analysis.numbers import number_representations
from core.claims.registry import run_claims
from core.errors import CoreError
from core.files import PROJECT_ROOT
from core.models.loading import load_model
from core.models.number_tokens import find_number_tokens
from core.models.parts import find_parts
from core.runs.cache import verify_run
from core.runs.live_model import live_model_folder
from core.runs.origin import describe_run, run_origin
from core.runs.precompute import PrecomputeOptions, precompute
from core.runs.reader import RunReader
from core.tasks import build_examples, select_split
from core.training.answers import AdditionBatches, answer_loss, evaluate_split, training_device
from core.training.delta import (
    DELTA_FILE,
    DELTA_FORMAT,
    add_number_tokens,
    epochs_said,
    load_base,
    merge_lora,
    merged_model,
    read_delta,
    rebuild,
    save_delta,
    state_digest,
    unique_state,
)
from core.training.finetune import answer_balanced_draw, finetune, initial_number_rows, scaled_rows
from core.training.frozen_blocks import FrozenBottom, length_batches
from core.training.lora import FineTuneModel, load_start_delta
from core.training.recipe import Recipe
from core.training.standin import make_standin


def tiny_recipe(base: Path, out: Path, **changes):
    fields = dict(
        name="tiny-ft",
        label="tiny fine-tune",
        out=str(out),
        arch="llama",
        n_layers=3,
        width=64,
        heads=4,
        task="addition",
        max_operand=12,
        dataset_seed=0,
        init_from=str(base),
        number_tokens={"layer": 2, "context": "The number {n}", "checkpoint_steps": 2},
        lora={"rank": 4, "alpha": 8},
        epochs=2,
        batch_size=16,
        lr=3e-3,
        weight_decay=0.0,
        warmup_steps=2,
        precision="float32",
        seed=0,
        eval_train_subset=40,
        threads=1,
    )
    fields.update(changes)
    recipe = Recipe(**fields)
    recipe.check()
    return recipe


class Stop(Exception):
    """Raised from a training log to interrupt a run, as a killed process would."""


def stop_at_step_2(msg):
    """A training log that interrupts the run at its first mid-epoch checkpoint (checkpoint_steps 2)."""
    if "step 2/" in msg:
        raise Stop


def delta_after_a_resume(recipe):
    """Train `recipe`, interrupted at step 2 and then resumed; the delta it writes."""

    with pytest.raises(Stop):
        finetune(recipe, log=stop_at_step_2)
    finetune(recipe, log=lambda *_: None)
    return read_delta(Path(recipe.out) / DELTA_FILE)[0]


def test_added_number_tokens_are_single_tokens_with_their_space(tiny_base):
    tok = AutoTokenizer.from_pretrained(tiny_base)
    assert find_number_tokens(tok).P == 10  # digits split before
    n0 = len(tok)
    ids = add_number_tokens(tok, 25)
    assert list(ids) == list(range(n0, n0 + 25))
    enc = tok("Put together 15 and 9. Answer: 24")["input_ids"]
    assert tok.convert_ids_to_tokens(enc)[-1] == " 24" and ids[15] in enc and ids[9] in enc
    assert tok.decode(enc) == "Put together 15 and 9. Answer: 24"
    found = find_number_tokens(tok, p=25)
    assert found.P == 25 and found.convention == "leading-space" and found.first_split == 25
    with pytest.raises(CoreError, match="already writes numbers such as .* as one token"):
        add_number_tokens(tok, 25)


def test_wrapper_starts_as_the_base_model_and_merges_exactly(tiny_base):
    base = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(tiny_base)
    n0 = len(tok)
    add_number_tokens(tok, 25)
    rows = np.random.default_rng(0).normal(size=(25, 64)).astype(np.float32)
    tuned = FineTuneModel(base, rows, 4, 8, ("q_proj", "v_proj", "down_proj"), seed=0)
    words = torch.tensor([tok("Put together the and. Answer:")["input_ids"]])  # no number token in it
    with torch.no_grad():
        got, want = tuned.model(words).logits, ref(words).logits
    # B = 0: the original tokens' logits are the base model's; the new tokens' are h . row
    assert torch.allclose(got[..., :n0], want, atol=1e-5)
    assert got.shape[-1] == n0 + 25
    ids = torch.tensor([tok("Put together 15 and 9. Answer:")["input_ids"]])
    # give the LoRA factors values, then the merged model must compute what the wrapper computes
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for v in tuned.trainable().values():
            v.copy_(torch.randn(v.shape, generator=g) * 0.05)
        got = tuned.model(ids).logits
    tensors = {k: v.detach().clone() for k, v in tuned.trainable().items()}
    merged, mtok = merged_model(str(tiny_base), tensors, {"format": DELTA_FORMAT, "p": 25, "rank": 4, "alpha": 8})
    assert mtok("Put together 15 and 9. Answer:")["input_ids"] == ids[0].tolist()
    with torch.no_grad():
        again = merged(ids).logits
    assert torch.allclose(got, again, atol=1e-4), float((got - again).abs().max())
    assert merged.get_input_embeddings().weight.data_ptr() == merged.get_output_embeddings().weight.data_ptr()
    assert torch.equal(merged.get_input_embeddings().weight[:n0], ref.get_input_embeddings().weight)


def test_finetune_resumes_mid_epoch_and_rebuilds_bit_for_bit(tiny_base, tmp_path):
    quiet = lambda *_: None  # noqa: E731
    whole = finetune(tiny_recipe(tiny_base, tmp_path / "whole"), log=quiet)
    assert (whole.out / DELTA_FILE).stat().st_size < 200_000
    log = whole.log
    # validation chooses: the test split is never read while training, only once on the rebuilt model
    assert sorted(log["split"].unique()) == ["train", "val"] and log["epoch"].max() == 2
    summary = json.loads((whole.out / "train_summary.json").read_text())
    assert summary["delta_bytes"] == (whole.out / DELTA_FILE).stat().st_size
    assert 0 <= summary["rebuilt_val_accuracy_float32"] <= 1 and 0 <= summary["rebuilt_test_accuracy_float32"] <= 1

    # the same recipe run again from nothing writes the same delta: its digest is the recorded one
    twice = finetune(tiny_recipe(tiny_base, tmp_path / "twice"), log=quiet)
    assert read_delta(twice.out / DELTA_FILE)[1]["rebuilt_sha256"] == read_delta(whole.out / DELTA_FILE)[1][
        "rebuilt_sha256"]

    # interrupted after the first mid-epoch checkpoint, then resumed: the same delta, bit for bit
    part = tiny_recipe(tiny_base, tmp_path / "part")
    with pytest.raises(Stop):
        finetune(part, log=stop_at_step_2)
    assert (tmp_path / "part" / "checkpoint" / "progress.json").exists()
    assert not (tmp_path / "part" / DELTA_FILE).exists()
    resumed_msgs = []
    finetune(part, log=resumed_msgs.append)
    assert any("resuming" in m and "step 2" in m for m in resumed_msgs)
    a, meta_a = read_delta(whole.out / DELTA_FILE)
    b, meta_b = read_delta(tmp_path / "part" / DELTA_FILE)
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert meta_a["rebuilt_sha256"] == meta_b["rebuilt_sha256"]
    for name in ("trainable.safetensors", "optimizer.safetensors"):  # float32 state, not only the float16 delta
        x, y = load_file(str(whole.out / "checkpoint" / name)), load_file(str(tmp_path / "part" / "checkpoint" / name))
        assert set(x) == set(y) and all(torch.equal(x[k], y[k]) for k in x), name

    pd.testing.assert_frame_equal(
        whole.log.drop(columns="seconds"),
        pd.read_parquet(tmp_path / "part" / "training_log.parquet").drop(columns="seconds"),
    )
    # a checkpoint made with other settings is not resumed silently
    with pytest.raises(CoreError, match="other settings .*lr.*--restart"):
        finetune(tiny_recipe(tiny_base, tmp_path / "part", lr=1e-2), log=quiet)

    # an independent rebuild in a fresh folder gives the recorded weights; the folder loads as a
    # single-token model and its original rows are the base model's
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(whole.out / DELTA_FILE, fresh / DELTA_FILE)
    rebuild(fresh, log=quiet)
    lm = load_model(str(fresh))
    assert lm.select_numbers(25).P >= 25
    # the rebuilt folder, loaded on its own, scores what the training run recorded for it

    test = select_split(build_examples("addition", 12, 0), "test")
    ids = lm.numbers.ids_for(25)
    acc, _ = evaluate_split(lm.model, AdditionBatches(lm.tokenizer, test, ids), ids, 16, "float32")
    assert acc == summary["rebuilt_test_accuracy_float32"]
    assert state_digest(unique_state(lm.model)) == meta_a["rebuilt_sha256"]
    base_w = load_file(str(tiny_base / "model.safetensors"))["model.embed_tokens.weight"]
    assert torch.equal(lm.model.get_input_embeddings().weight[: base_w.shape[0]], base_w)
    assert json.loads((fresh / "provenance.json").read_text())["kind"] == "fine-tuned"

    reps = number_representations(lm, 25)  # each number one token now: layer 0 is its new row
    assert reps.single_token and list(reps.tokens_per_number) == [1] * 25
    assert np.allclose(reps.vectors[0], a["number_rows"].float().numpy())

    # a tampered delta is refused, with what to do
    tensors, meta = read_delta(fresh / DELTA_FILE)

    tensors["number_rows"][0, 0] += 1
    save_file(tensors, str(fresh / DELTA_FILE), metadata=meta)
    with pytest.raises(CoreError, match="differ from the ones trained"):
        rebuild(fresh, log=quiet)


def test_initial_rows_are_the_scaled_representations(tiny_base):
    lm = load_model(str(tiny_base))
    base_rows = (
        AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
        .get_input_embeddings()
        .weight.detach()
        .numpy()
    )
    reps = number_representations(lm, 25, "The number {n}")
    for centre in (False, True):
        rows = initial_number_rows(lm, 25, 2, "The number {n}", base_rows, centre=centre, log=lambda *_: None)
        want = reps.vectors[2] - (reps.vectors[2].mean(0) if centre else 0)
        want = want * np.linalg.norm(base_rows, axis=1).mean() / np.linalg.norm(want, axis=1).mean()
        assert np.allclose(rows, want, atol=1e-5)
        assert np.isclose(np.linalg.norm(rows, axis=1).mean(), np.linalg.norm(base_rows, axis=1).mean(), rtol=1e-5)
    assert not np.allclose(
        scaled_rows(reps.vectors[2], base_rows, False), scaled_rows(reps.vectors[2], base_rows, True)
    )


def test_the_stand_in_is_the_recipe_s_start_untrained(tiny_base, tmp_path):
    recipe = tiny_recipe(tiny_base, tmp_path / "ft")
    out = make_standin(recipe, out=tmp_path / "standin", log=lambda *_: None)
    lm, base = load_model(str(out)), load_model(str(tiny_base))
    p = 25  # the tiny recipe's answers 0..24
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert [len(tokenizer(f" {n}", add_special_tokens=False)["input_ids"]) for n in (0, 7, 24)] == [1, 1, 1]
    rows = lm.model.get_input_embeddings().weight.detach().numpy()
    base_rows = base.model.get_input_embeddings().weight.detach().numpy()
    want = initial_number_rows(base, p, 2, "The number {n}", base_rows, log=lambda *_: None)
    assert np.allclose(rows[len(base_rows):], want, atol=1e-6)  # the new rows, as the recipe starts them
    assert np.array_equal(rows[: len(base_rows)], base_rows)  # nothing else changed: nothing trained
    for (name, a), b in zip(lm.model.named_parameters(), base.model.parameters()):
        if "embed" not in name and "lm_head" not in name:
            assert torch.equal(a, b), name
    assert json.loads((out / "provenance.json").read_text())["kind"] == "stand-in"
    said = []
    make_standin(recipe, out=out, log=said.append)  # kept, not made again
    assert "already holds" in said[0]
    with pytest.raises(CoreError, match="not here"):
        make_standin(tiny_recipe(tmp_path / "nowhere", tmp_path / "ft2"), out=tmp_path / "s2", log=lambda *_: None)


def test_merge_is_elementwise_and_exact():
    g = torch.Generator().manual_seed(0)
    W, A, B = torch.randn(7, 5, generator=g), torch.randn(3, 5, generator=g), torch.randn(7, 3, generator=g)
    got = merge_lora(W, A, B, 2.0)
    want = (W.double() + 2.0 * (B.double() @ A.double())).float()
    assert got.dtype == torch.float32 and torch.allclose(got, want, atol=1e-6)
    assert torch.equal(merge_lora(W, A, B, 2.0), got)


def test_finetune_errors_are_clear(tiny_base, tmp_path):
    with pytest.raises(CoreError, match="not here"):
        finetune(tiny_recipe(tmp_path / "nowhere", tmp_path / "o"), log=lambda *_: None)
    with pytest.raises(CoreError, match="no fine-tuning delta"):
        rebuild(tmp_path)
    base = dict(name="x", label="x", out=str(tmp_path), init_from=str(tiny_base))
    with pytest.raises(CoreError, match="checkpoint_steps"):
        Recipe(**base, number_tokens={"checkpoint_steps": 0}).check()
    with pytest.raises(CoreError, match="lora is used only with number_tokens"):
        Recipe(**base, lora={"rank": 4}).check()
    with pytest.raises(CoreError, match="set init_from"):
        Recipe(name="x", label="x", out=str(tmp_path), number_tokens={}).check()
    for bad in (-0.1, "0.1", True, 11):
        with pytest.raises(CoreError, match="rows_lr_ratio .* must be a number in 0..10"):
            Recipe(**base, number_tokens={"rows_lr_ratio": bad}).check()
    for bad in (0, 1.5, "0.99", True):
        with pytest.raises(CoreError, match="stop_at_val_accuracy must be a fraction"):
            Recipe(**base, number_tokens={"stop_at_val_accuracy": bad}).check()


def test_frozen_rows_stay_put_and_the_stop_rule_ends_training_early(tiny_base, tmp_path):
    spec = {
        "layer": 2,
        "context": "The number {n}",
        "checkpoint_steps": 2,
        "rows_lr_ratio": 0.0,
        "stop_at_val_accuracy": 1e-9,
    }
    msgs = []
    run = finetune(tiny_recipe(tiny_base, tmp_path / "s", number_tokens=spec, epochs=3), log=msgs.append)
    # any accuracy meets a threshold of 1e-9: one epoch of the three is run, and the summary says so
    assert run.log["epoch"].max() == 1
    assert any("stopping after epoch 1 of 3" in m for m in msgs)
    assert json.loads((run.out / "train_summary.json").read_text())["epochs_run"] == 1
    # rows_lr_ratio 0: the shipped rows are the starting rows (float16), while LoRA did move
    tensors, _ = read_delta(run.out / DELTA_FILE)
    base = load_model(str(tiny_base))
    start = initial_number_rows(
        base, 25, 2, "The number {n}", base.model.get_input_embeddings().weight.detach().numpy(), log=lambda *_: None
    )
    assert torch.equal(tensors["number_rows"], torch.as_tensor(start).half())
    assert any(k.endswith(".B") and tensors[k].abs().max() > 0 for k in tensors)
    # resuming a run that met its stop rule trains no further
    again = finetune(tiny_recipe(tiny_base, tmp_path / "s", number_tokens=spec, epochs=3), log=lambda *_: None)
    assert again.log["epoch"].max() == 1
    # a plain recipe (no rule) runs every epoch, and its rows move
    moved = finetune(tiny_recipe(tiny_base, tmp_path / "m", epochs=1), log=lambda *_: None)
    assert not torch.equal(read_delta(moved.out / DELTA_FILE)[0]["number_rows"], torch.as_tensor(start).half())


@pytest.mark.slow
def test_fine_tuned_model_gets_the_whole_pipeline_and_says_what_it_is(tiny_base, tmp_path, monkeypatch):
    result = finetune(tiny_recipe(tiny_base, tmp_path / "model", epochs=1), log=lambda *_: None)
    path = precompute(
        PrecomputeOptions(
            model=str(result.out), max_operand=12, cache_dir=str(tmp_path / "cache"), threads=1, progress=False
        )
    )
    assert not verify_run(path, deep=True)
    m = json.loads((path / "manifest.json").read_text())
    assert {
        "examples",
        "layer_accuracy",
        "module_spectra",
        "module_spectra_baseline",
        "final_waves",
        "ablations",
        "number_spectrum",
        "training_log",
    } <= set(m["tables"])
    assert not m.get("not_applicable")  # single tokens now: every analysis applies
    assert m["p"] == 25 and m["n_layers"] == 3
    assert run_origin(m)["kind"] == "fine-tuned"
    # the trained rows against their start, rebuilt from the base model as training built it
    base = load_model(str(tiny_base))
    own_rows = base.model.get_input_embeddings().weight.detach().numpy()
    start = initial_number_rows(base, 25, 2, "The number {n}", own_rows)
    trained = load_model(str(result.out)).number_embedding(25).numpy()
    moved = pd.read_parquet(path / "number_rows_origin.parquet")
    expected = np.linalg.norm(trained - start, axis=1) / np.linalg.norm(start, axis=1)
    np.testing.assert_allclose(moved["moved"], expected, rtol=1e-4)
    assert moved["moved"].median() > 0  # the rows were trained
    reason = run_claims(RunReader(tmp_path / "cache", path.name))["numbers"].reason
    assert f"moved them by a median {np.median(expected):.0%} of their norm" in reason
    # without its rebuilt weights (a fresh clone), live work says how to rebuild them

    monkeypatch.setenv("FOURIER_MODELS_DIR", str(tmp_path))
    for f in result.out.glob("model*.safetensors"):
        f.unlink()
    folder, why = live_model_folder({"model": {"source": str(result.out)}})
    assert folder is None and f"python -m core rebuild {result.out}" in why
    with pytest.raises(CoreError, match="only a fine-tuning delta.*python -m core rebuild"):
        precompute(
            PrecomputeOptions(
                model=str(result.out), max_operand=12, cache_dir=str(tmp_path / "c2"), threads=1, progress=False
            )
        )
    text = describe_run(m)
    assert "fine-tuned here" in text and "LoRA" in text and "0..24" in text


def test_length_batches_cover_every_example_once_with_one_length_each():
    lengths = np.array([5, 7, 5, 9, 7, 7, 5, 9, 9, 9, 5])
    batches = length_batches(lengths, 3, np.random.default_rng(0))
    flat = np.concatenate(batches)
    assert sorted(flat) == list(range(len(lengths)))
    assert all(len(set(lengths[b])) == 1 and 1 <= len(b) <= 3 for b in batches)
    again = length_batches(lengths, 3, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))


def test_answer_balanced_draw_evens_out_rare_answers():
    """power 1: each answer's share of the draw is about equal, however many questions it has; power
    0.5: in between; the draw is seeded and its batches (by length) hold exactly the drawn examples."""

    answers = np.repeat([3, 7, 9], [20, 200, 2000])  # a rare, a middling and a common answer
    n = len(answers)
    share = lambda draw: np.array([(answers[draw] == a).mean() for a in (3, 7, 9)])  # noqa: E731
    even = answer_balanced_draw(answers, 1.0, np.random.default_rng(0))
    assert len(even) == n and np.allclose(share(even), 1 / 3, atol=0.04)
    half = share(answer_balanced_draw(answers, 0.5, np.random.default_rng(0)))
    plain = np.array([20, 200, 2000]) / n
    assert half[0] > plain[0] * 2 and half[2] < plain[2] and half[0] < 1 / 3
    assert np.array_equal(even, answer_balanced_draw(answers, 1.0, np.random.default_rng(0)))
    lengths = np.random.default_rng(1).integers(5, 8, n)
    batches = length_batches(lengths, 64, np.random.default_rng(0), even)
    assert sorted(np.concatenate(batches)) == sorted(even)
    assert all(len(set(lengths[b])) == 1 for b in batches)


def test_frozen_lower_blocks_train_only_the_top_and_resume_exactly(tiny_base, tmp_path):
    """frozen_blocks 1: the kept output of block 0 gives the whole model's loss; no LoRA on block 0;
    an interrupted run resumes to the same delta; the rebuilt model scores what was recorded."""


    # the loss on kept states equals the whole model's loss, batch by batch (LoRA moved off zero)
    base = load_base(str(tiny_base))
    tok = AutoTokenizer.from_pretrained(tiny_base)
    ids = add_number_tokens(tok, 25)
    rows = np.random.default_rng(0).standard_normal((25, 64)).astype(np.float32)
    tuned = FineTuneModel(base, rows, 4, 8, ("q_proj", "v_proj", "down_proj"), 0, first_block=1)
    assert tuned.lora and all(not name.startswith("0.") for name in tuned.lora)
    with torch.no_grad():
        for name, t in tuned.trainable().items():
            if name.endswith(".B"):
                t.normal_(0, 0.1)
    data = AdditionBatches(tok, select_split(build_examples("addition", 12, 0), "train"), ids)
    bottom = FrozenBottom(tuned.model, data.encoded, 1, "float32")
    for n in np.unique(bottom.lengths):
        idx = np.flatnonzero(bottom.lengths == n)[:6]
        _, i, m, p, t = next(data.batches(len(idx), idx))
        whole = answer_loss(tuned.model, i, m, p, t, "float32")
        kept = bottom.loss(tuned.model, idx, t, "float32")
        assert torch.allclose(whole, kept, atol=1e-5), (n, whole, kept)
    if len(np.unique(bottom.lengths)) > 1:
        mixed = np.array([np.flatnonzero(bottom.lengths == n)[0] for n in np.unique(bottom.lengths)[:2]])
        with pytest.raises(CoreError, match="mixes prompt lengths"):
            bottom(mixed)

    spec = {"layer": 2, "context": "The number {n}", "checkpoint_steps": 2, "rows_lr_ratio": 0.0, "frozen_blocks": 1}
    quiet = lambda *_: None  # noqa: E731
    whole_run = finetune(tiny_recipe(tiny_base, tmp_path / "whole", number_tokens=spec), log=quiet)
    tensors, meta = read_delta(whole_run.out / DELTA_FILE)
    assert meta["frozen_blocks"] == "1"
    assert (
        tensors and not any(k.startswith("lora.0.") for k in tensors) and any(k.startswith("lora.1.") for k in tensors)
    )

    again = delta_after_a_resume(tiny_recipe(tiny_base, tmp_path / "part", number_tokens=spec))
    assert set(again) == set(tensors) and all(torch.equal(again[k], tensors[k]) for k in tensors)

    # with the rows trained, the lower blocks' output cannot be kept: every step runs the whole stack, the lower
    # block keeps the base weights (no factors in the delta) and the rows still learn through it
    trained_rows = finetune(tiny_recipe(tiny_base, tmp_path / "rows", number_tokens={**spec, "rows_lr_ratio": 1.0}),
                            log=quiet)
    rows_tensors, rows_meta = read_delta(trained_rows.out / DELTA_FILE)
    assert rows_meta["frozen_blocks"] == "1" and not any(k.startswith("lora.0.") for k in rows_tensors)
    assert not torch.equal(rows_tensors["number_rows"], tensors["number_rows"])  # frozen above, trained here
    assert set(rows_tensors) == set(tensors)

    base_fields = dict(name="x", label="x", out=str(tmp_path), init_from=str(tiny_base), n_layers=3)
    for bad in (-1, 3, 1.0, True):
        with pytest.raises(CoreError, match="frozen_blocks .* must be a whole number in 0..2"):
            Recipe(**base_fields, number_tokens={"frozen_blocks": bad, "rows_lr_ratio": 0.0}).check()


def test_full_training_ships_its_change_as_exact_low_rank_factors(tiny_base, tmp_path):
    """lora.train = "full": the targeted maps are trained themselves; the delta holds each map's change
    as rank-r SVD factors. At r = the maps' full rank the rebuilt model is the trained one (up to
    float16); at a small rank the factors are the best rank-r approximation of the change."""


    recipe = tiny_recipe(
        tiny_base,
        tmp_path / "full",
        lora={"rank": 64, "alpha": 64, "targets": ["q_proj", "down_proj"], "train": "full"},
        epochs=1,
    )
    result = finetune(recipe, log=lambda *_: None)
    tensors, meta = read_delta(result.out / DELTA_FILE)
    assert meta["trained"].startswith("full") and int(meta["rank"]) == 64
    base = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
    trained = load_file(str(result.out / "checkpoint" / "trainable.safetensors"))
    names = sorted(k[len("full.") : -len(".weight")] for k in trained if k.startswith("full."))
    assert names and all(f"lora.{n}.A" in tensors and f"lora.{n}.B" in tensors for n in names)
    assert not any(k.startswith("full.") for k in tensors)

    blocks = find_parts(base).blocks
    for n in names:
        i, sub = n.split(".", 1)
        w0 = blocks[int(i)].get_submodule(sub).weight.detach()
        change = trained[f"full.{n}.weight"] - w0
        assert change.abs().max() > 0  # it was trained
        got = tensors[f"lora.{n}.B"].float() @ tensors[f"lora.{n}.A"].float()  # scale alpha / r = 1
        assert torch.allclose(got, change, atol=2e-3 * float(change.abs().max()) + 1e-6)
    # the rebuilt model is what was trained, so it scores what was recorded
    summary = json.loads((result.out / "train_summary.json").read_text())
    assert summary["rebuilt_test_accuracy_float32"] == pytest.approx(result.test_accuracy)
    # rank 1: the factors are the leading singular pair of the change
    tuned = FineTuneModel(
        AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32),
        np.zeros((25, 64), np.float32),
        1,
        1.0,
        ("q_proj",),
        seed=0,
        full=True,
    )
    name, (linear, w0) = next(iter(tuned.full.items()))
    with torch.no_grad():
        linear.weight += torch.outer(torch.arange(64.0), torch.ones(64)) + 0.01 * torch.randn(64, 64)
    factors, kept = tuned.compressed_delta()
    S = torch.linalg.svdvals((linear.weight.detach() - w0).double())
    approx = factors[f"lora.{name}.B"].double() @ factors[f"lora.{name}.A"].double()
    assert torch.linalg.matrix_norm(approx).item() == pytest.approx(S[0].item(), rel=1e-6)
    assert kept[name] == pytest.approx((S[0] ** 2 / (S**2).sum()).item(), rel=1e-9)


def test_a_second_stage_starts_from_the_first_stages_delta(tiny_base, tmp_path):
    """lora.init_delta: the LoRA factors (cut to the recipe's rank, rescaled to its alpha) and the rows
    of an earlier delta are the start, so the untrained second stage computes what the first stage's
    rebuilt model computes; a delta of too low a rank or of another base is refused."""


    stage1 = finetune(
        tiny_recipe(
            tiny_base,
            tmp_path / "s1",
            lora={"rank": 6, "alpha": 3, "targets": ["q_proj", "down_proj"], "train": "full"},
            epochs=1,
        ),
        log=lambda *_: None,
    )
    delta = stage1.out / DELTA_FILE
    tensors, meta = read_delta(delta)
    base = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
    digest = state_digest(unique_state(base))
    start = load_start_delta(str(delta), digest, 6)
    tok = AutoTokenizer.from_pretrained(tiny_base)
    add_number_tokens(tok, 25)
    tuned = FineTuneModel(base, start.tensors["number_rows"].float().numpy(), 6, 12.0, ("q_proj", "down_proj"), seed=0)
    tuned.load_factors(start)
    want, _ = merged_model(str(tiny_base), tensors, meta)
    ids = torch.tensor([tok("Put together 15 and 9. Answer:")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(tuned.model(ids).logits, want(ids).logits, atol=1e-4)
    with pytest.raises(CoreError, match="rank-6 factors"):
        load_start_delta(str(delta), digest, 7)
    with pytest.raises(CoreError, match="another base model"):
        load_start_delta(str(delta), "0" * 64, 4)
    # the recipe path: a second stage trains from it and ships its own delta
    stage2 = finetune(
        tiny_recipe(
            tiny_base,
            tmp_path / "s2",
            lora={"rank": 4, "alpha": 8, "targets": ["q_proj", "down_proj"], "init_delta": str(delta)},
            epochs=1,
        ),
        log=lambda *_: None,
    )
    assert int(read_delta(stage2.out / DELTA_FILE)[1]["rank"]) == 4

    # a later stage with frozen lower blocks keeps the earlier factors there, unchanged, and trains only
    # the top; interrupted and resumed, it writes the same delta
    spec = {"layer": 2, "context": "The number {n}", "checkpoint_steps": 2, "rows_lr_ratio": 0.0, "frozen_blocks": 1}
    later = {"rank": 6, "alpha": 12, "targets": ["q_proj", "down_proj"], "init_delta": str(delta)}
    with pytest.raises(CoreError, match="set lora.rank to its rank"):  # cut factors would change the frozen blocks
        finetune(
            tiny_recipe(tiny_base, tmp_path / "cut", lora={**later, "rank": 4}, number_tokens=spec, epochs=1),
            log=lambda *_: None,
        )
    stage3 = finetune(
        tiny_recipe(tiny_base, tmp_path / "s3", lora=later, number_tokens=spec, epochs=1), log=lambda *_: None
    )
    kept, kept_meta = read_delta(stage3.out / DELTA_FILE)
    scale = (float(meta["alpha"]) / int(meta["rank"])) * 6 / 12  # the factors of rank 6, alpha 12 give the same update
    lower = [k for k in tensors if k.startswith("lora.0.")]
    assert lower and all(k in kept for k in lower)
    assert torch.allclose(kept["lora.0.self_attn.q_proj.A"].float(), tensors["lora.0.self_attn.q_proj.A"].float())
    assert torch.allclose(
        kept["lora.0.self_attn.q_proj.B"].float(), (tensors["lora.0.self_attn.q_proj.B"].float() * scale).half().float()
    )
    assert not torch.equal(
        kept["lora.1.self_attn.q_proj.B"].float(), (tensors["lora.1.self_attn.q_proj.B"].float() * scale).half().float()
    )
    assert torch.equal(kept["number_rows"], tensors["number_rows"])

    again = delta_after_a_resume(tiny_recipe(tiny_base, tmp_path / "s3b", lora=later, number_tokens=spec, epochs=1))
    assert set(again) == set(kept) and all(torch.equal(again[k], kept[k]) for k in kept)
    assert kept_meta["rebuilt_sha256"]
    # a resume after the earlier stage was retrained (another delta at the same path) is refused

    with pytest.raises(Stop):
        finetune(tiny_recipe(tiny_base, tmp_path / "s3c", lora=later, number_tokens=spec, epochs=1), log=stop_at_step_2)
    save_delta(delta, tensors, {**meta, "rebuilt_sha256": "0" * 64})
    with pytest.raises(CoreError, match="not the delta this run started from"):
        finetune(
            tiny_recipe(tiny_base, tmp_path / "s3c", lora=later, number_tokens=spec, epochs=1), log=lambda *_: None
        )


def test_training_device_is_checked():
    assert training_device(None) == torch.device("cpu") and training_device("cpu") == torch.device("cpu")
    with pytest.raises(CoreError, match="unknown device"):
        training_device("tpu9")
    if not torch.cuda.is_available():
        with pytest.raises(CoreError, match="no CUDA GPU"):
            training_device("cuda")


def test_full_training_continues_from_an_earlier_full_stage_and_ships_a_delta_from_the_base(tiny_base, tmp_path):
    """lora.train 'full' with lora.init_delta: the trained maps start as the earlier stage's rebuilt model
    (its merged weights, bit for bit), the new delta is measured from the base model (it rebuilds alone,
    without the earlier delta), and a starting delta that changed a map this recipe leaves frozen is refused."""
    spec = {"layer": 2, "context": "The number {n}", "checkpoint_steps": 2, "rows_lr_ratio": 0.0, "frozen_blocks": 1}
    full = {"rank": 6, "alpha": 6, "targets": ["q_proj", "down_proj"], "train": "full"}
    stage1 = finetune(tiny_recipe(tiny_base, tmp_path / "s1", lora=full, number_tokens=spec, epochs=1),
                      log=lambda *_: None)
    delta = stage1.out / DELTA_FILE
    tensors, meta = read_delta(delta)
    base = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
    start = load_start_delta(str(delta), state_digest(unique_state(base)), 6)
    tuned = FineTuneModel(base, start.tensors["number_rows"].float().numpy(), 6, 6.0, ("q_proj", "down_proj"), seed=0,
                          first_block=1, full=True)
    tuned.load_change(start)
    want, _ = merged_model(str(tiny_base), tensors, meta)
    for name, (linear, original) in tuned.full.items():  # the start is the rebuilt model's maps exactly
        block, rest = name.split(".", 1)
        assert torch.equal(linear.weight, want.get_submodule(f"model.layers.{block}.{rest}").weight), name
        assert not torch.equal(linear.weight, original), name  # ... and the change is measured from the base
    stage2 = finetune(
        tiny_recipe(tiny_base, tmp_path / "s2", lora={**full, "init_delta": str(delta)}, number_tokens=spec, epochs=1),
        log=lambda *_: None,
    )
    later, later_meta = read_delta(stage2.out / DELTA_FILE)
    assert set(later) == set(tensors) and not any(k.startswith("lora.0.") for k in later)
    assert rebuild(stage2.out, str(tiny_base)).exists()  # from the base alone, its digest checked
    # a stage that changed block 0 cannot be continued by one that keeps block 0 frozen
    lora_all = {"rank": 6, "alpha": 6, "targets": ["q_proj", "down_proj"], "train": "full"}
    stage0 = finetune(tiny_recipe(tiny_base, tmp_path / "s0", lora=lora_all, number_tokens={**spec, "frozen_blocks": 0},
                                  epochs=1), log=lambda *_: None)
    with pytest.raises(CoreError, match="which this recipe does not train"):
        finetune(tiny_recipe(tiny_base, tmp_path / "s3", lora={**full, "init_delta": str(stage0.out / DELTA_FILE)},
                             number_tokens=spec, epochs=1), log=lambda *_: None)


def test_a_device_or_stage_mix_that_cannot_work_is_refused_before_any_loading(tiny_base, tmp_path, monkeypatch):
    if not torch.cuda.is_available():
        # the device is checked first: no model is loaded (a missing base folder would say so otherwise)
        with pytest.raises(CoreError, match="no CUDA GPU"):
            finetune(tiny_recipe(tmp_path / "no-base-here", tmp_path / "y", device="cuda"), log=lambda *_: None)


def test_a_balanced_recipe_trains_and_a_bad_balance_is_refused(tiny_base, tmp_path):
    spec = {"layer": 2, "context": "The number {n}", "checkpoint_steps": 2, "balance_answers": 0.5}
    run = finetune(tiny_recipe(tiny_base, tmp_path / "b", number_tokens=spec, epochs=1), log=lambda *_: None)
    assert set(run.log["split"]) == {"train", "val"}  # the test split is scored once, after training
    with pytest.raises(CoreError, match="balance_answers"):
        tiny_recipe(tiny_base, tmp_path / "c", number_tokens={**spec, "balance_answers": 2})


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_the_delta_digest_covers_exactly_the_tensors_save_pretrained_writes(model_dir, tmp_path, arch):
    """`unique_state` (the tensors a delta's base_sha256 / rebuilt_sha256 digest) is the set of names
    `save_pretrained` keeps: a change of the checkpoint de-duplication that changed it would change the
    digests recorded in shipped deltas, and this test says so first."""
    model = AutoModelForCausalLM.from_pretrained(model_dir(arch), dtype=torch.float32)
    model.save_pretrained(tmp_path / "saved")
    with safe_open(str(tmp_path / "saved" / "model.safetensors"), "pt") as fh:
        written = set(fh.keys())
    assert set(unique_state(model)) == written



def test_a_rebuilt_model_s_label_says_the_epochs_its_training_ran(tmp_path):
    label = "SmolLM2-135M fine-tuned, number tokens (real LLM, blocks 18..29 and the number rows, 7 epochs)"
    assert epochs_said(label, tmp_path) == label  # no summary: the label as the delta has it
    (tmp_path / "train_summary.json").write_text(json.dumps({"epochs_run": 6}))
    assert epochs_said(label, tmp_path).endswith("the number rows, 6 of 7 epochs)")
    (tmp_path / "train_summary.json").write_text(json.dumps({"epochs_run": 7}))
    assert epochs_said(label, tmp_path) == label
    shipped = PROJECT_ROOT / "models" / "smollm2-addition-rows-blocks-18-29"
    ran = json.loads((shipped / "train_summary.json").read_text())["epochs_run"]
    assert f"{ran} of 7 epochs" in epochs_said(label, shipped)
