"""The training loop on a tiny model: answer-token loss, frozen rows, transplant, resume."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

import core.runs.precompute as pre
import core.training.train as tr
from core.cli import main
from core.errors import CoreError
from core.models.random_models import save_random_model
from core.models.vocab import number_tokenizer
from core.runs import training_summaries
from core.runs.cache import list_runs, read_table
from core.tasks import build_examples, select_split
from core.training.answers import AdditionBatches, answer_loss
from core.training.checkpoint import load_checkpoint, save_checkpoint, unique_tensors
from core.training.number_rows import fourier_embedding, number_token_ids
from core.training.pretraining import PRETRAIN_WORDS, pretraining_corpus
from core.training.recipe import DEFAULT_TARGETS, LoRA, NumberTokens, Recipe
from core.training.train import build_model, train, train_from_recipe


def tiny(tmp_path, **kw):
    base = dict(
        name="tiny",
        label="tiny",
        out=str(tmp_path / "out"),
        width=32,
        heads=4,
        max_operand=20,
        epochs=2,
        batch_size=32,
        lr=3e-3,
        warmup_steps=2,
        eval_train_subset=50,
        precision="float32",
    )
    base.update(kw)
    r = Recipe(**base)
    r.check()
    return r


def load_weights(folder):
    return AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True).float()


def test_loss_is_the_answer_token_only(tmp_path):
    r = tiny(tmp_path)
    tok = number_tokenizer(40, extra_words=PRETRAIN_WORDS)
    ids = number_token_ids(tok, 41)
    model = build_model(r, tok).eval()
    ex = select_split(build_examples("addition", 20), "train")[:6]
    data = AdditionBatches(tok, ex, ids)
    ((_, x, mask, pos, target),) = list(data.batches(6))
    assert (mask == 0).any()  # the batch mixes prompt lengths
    loss = answer_loss(model, x, mask, pos, target)
    manual = []
    for e in ex:  # each prompt alone, full logits, read at its last position
        enc = torch.tensor([tok(e.prompt)["input_ids"]])
        logits = model(input_ids=enc).logits[0, -1]
        manual.append(torch.nn.functional.cross_entropy(logits[None], torch.tensor([ids[e.answer]])))
    assert torch.allclose(loss, torch.stack(manual).mean(), atol=1e-5)
    # changing any earlier token's target would not matter: only the answer token enters the loss
    assert target.tolist() == [ids[e.answer] for e in ex]


@pytest.mark.parametrize("tied", [True, False])
def test_frozen_number_rows_stay_fixed(tmp_path, tied):
    r = tiny(tmp_path, tied=tied, weight_decay=0.5, freeze={"kind": "fourier", "periods": [2, 5, 10]})
    before = (
        build_model(r, number_tokenizer(40, extra_words=PRETRAIN_WORDS)).get_input_embeddings().weight.detach().clone()
    )
    result = train(r, log=lambda *_: None)
    model = load_weights(result.out)
    tok = number_tokenizer(40, extra_words=PRETRAIN_WORDS)
    ids = number_token_ids(tok, 41)
    emb = model.get_input_embeddings().weight.detach()
    planted = torch.as_tensor(fourier_embedding(41, 32, [2, 5, 10], 1.0, r.seed))
    assert torch.allclose(emb[ids], planted.half().float(), atol=1e-3)  # shipped in float16
    others = [i for i in range(len(tok)) if i not in set(ids.tolist())]
    assert (emb[others] - before[others].half().float()).abs().max() > 1e-2  # the rest did learn
    out_rows = model.get_output_embeddings().weight.detach()[ids]
    if tied:
        assert torch.equal(out_rows, emb[ids])
    else:
        assert (out_rows - planted).abs().max() > 1e-2
    log = result.log
    assert set(log["split"]) == {"train", "val", "test"} and sorted(log["epoch"].unique()) == [1, 2]


def test_frozen_rows_equal_in_float32_checkpoint(tmp_path):
    r = tiny(tmp_path, weight_decay=1.0, epochs=1, freeze={"kind": "fourier", "periods": [2, 10]})
    result = train(r, log=lambda *_: None)
    weights = load_file(str(result.out / "checkpoint" / "model.safetensors"))
    tok = number_tokenizer(40, extra_words=PRETRAIN_WORDS)
    ids = number_token_ids(tok, 41)
    planted = torch.as_tensor(fourier_embedding(41, 32, [2, 10], 1.0, r.seed))
    assert torch.equal(weights["transformer.wte.weight"][ids], planted)


def test_transplant_copies_rows_by_number(tmp_path):
    # the donor's vocabulary puts numbers at other ids: rows must be matched by number, not by id
    donor_tok = number_tokenizer(60, extra_words=["zebra", "yak"])
    donor_dir = save_random_model(tmp_path / "donor", "gpt2", width=32, tokenizer=donor_tok, seed=3)
    donor = load_weights(donor_dir)
    r = tiny(tmp_path, epochs=1, freeze={"kind": "transplant", "source": str(donor_dir)})
    result = train(r, log=lambda *_: None)
    ours = load_weights(result.out).get_input_embeddings().weight.detach()
    tok = number_tokenizer(40, extra_words=PRETRAIN_WORDS)
    for n in (0, 7, 40):
        donor_row = donor.get_input_embeddings().weight.detach()[donor_tok.convert_tokens_to_ids(str(n))]
        assert torch.allclose(ours[tok.convert_tokens_to_ids(str(n))], donor_row.half().float(), atol=1e-3)
    with pytest.raises(CoreError, match="set width to 32"):
        train(tiny(tmp_path, width=64, freeze={"kind": "transplant", "source": str(donor_dir)}), log=lambda *_: None)


def test_resume_continues_where_it_stopped(tmp_path, monkeypatch):
    straight = train(tiny(tmp_path / "a", epochs=2), log=lambda *_: None)
    real_save = tr.save_checkpoint

    def save_then_stop(*args, **kwargs):
        real_save(*args, **kwargs)
        raise KeyboardInterrupt  # the machine stops right after the first epoch's checkpoint

    monkeypatch.setattr(tr, "save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train(tiny(tmp_path / "b", epochs=2), log=lambda *_: None)
    monkeypatch.setattr(tr, "save_checkpoint", real_save)
    lines = []
    resumed = train(tiny(tmp_path / "b", epochs=2), log=lines.append)
    assert any("resuming" in line for line in lines)
    assert sorted(resumed.log["epoch"].unique()) == [1, 2]
    a = load_weights(straight.out).state_dict()
    b = load_weights(resumed.out).state_dict()
    assert set(a) == set(b)
    for k in a:  # the very weights of a run that was never interrupted (the resumed step uses the scheduled rate)
        assert torch.equal(a[k], b[k]), k
    assert np.array_equal(straight.log["accuracy"], resumed.log["accuracy"])


def test_pretraining_corpus_has_no_addition():
    texts = pretraining_corpus(520, 3000, seed=0)
    assert any(t.startswith("count :") for t in texts)
    assert any(t.startswith("digits of") for t in texts)
    assert any(" is less than " in t or " is more than " in t for t in texts)
    assert not any("+" in t or "sum" in t or "Answer" in t or "together" in t for t in texts)
    t = next(t for t in texts if t.startswith("digits of"))
    n = t.split()[2]
    assert t.split(":")[1].split() == list(n)


def test_pretrain_then_finetune_runs(tmp_path):
    r = tiny(tmp_path, epochs=1, pretrain={"epochs": 1, "n_sequences": 200, "batch_size": 32})
    result = train(r, log=lambda *_: None)
    assert (result.out / "recipe.json").exists() and json.loads((result.out / "recipe.json").read_text())["pretrain"]
    assert (result.out / "pretrained.safetensors").exists()
    lines = []
    train(r, restart=True, log=lines.append)  # a restarted fine-tune reuses the finished pre-training
    assert any("using the pre-trained weights" in line for line in lines)


@pytest.mark.parametrize("tied", [True, False])
def test_the_pretrained_weights_keep_an_untied_head_and_a_tied_one_once(tmp_path, tied):
    """A restart after pre-training starts from what pre-training ended with: an untied model's trained
    lm_head is kept (it was dropped before the checkpoint fix, so a restart began from a random head),
    a tied head is the embedding and is written once."""
    r = tiny(tmp_path, epochs=1, tied=tied, pretrain={"epochs": 1, "n_sequences": 100, "batch_size": 32})
    result = train(r, log=lambda *_: None)
    kept = load_file(str(result.out / "pretrained.safetensors"))
    assert ("lm_head.weight" in kept) == (not tied)
    assert any(k.endswith("wte.weight") or k.endswith("embed_tokens.weight") for k in kept)


def test_recipe_errors(tmp_path):
    with pytest.raises(CoreError, match="no recipe"):
        Recipe.load("no-such-recipe")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "label": "x", "out": "x", "colour": "red"}))
    with pytest.raises(CoreError, match="unknown fields"):
        Recipe.load(str(bad))
    with pytest.raises(CoreError, match="divisible"):
        tiny(tmp_path, width=30)


def test_shipped_recipes_load():
    for name in ("scratch", "fourier-frozen", "fourier-frozen-untied", "pretrained-mini"):
        r = Recipe.load(name)
        assert r.width >= 640 and r.n_layers == 2


@pytest.mark.slow
def test_extra_seeds_reach_the_cached_run_without_recomputing(tmp_path, monkeypatch):
    recipe_file = tmp_path / "tiny.json"
    recipe = tiny(tmp_path, epochs=1).as_dict()
    recipe_file.write_text(json.dumps(recipe))
    out = tmp_path / "out"
    train_from_recipe(str(recipe_file), log=lambda *_: None)
    args = [
        "precompute",
        "--model",
        str(out),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--max-operand",
        "20",
        "--taus",
        "5",
        "--no-progress",
    ]
    assert main(args) == 0
    (run,) = list_runs(tmp_path / "cache")
    before = {t: e["sha256"] for t, e in run.manifest["tables"].items()}
    assert set(read_table(tmp_path / "cache", run.name, "training_log")["seed"]) == {0}

    train_from_recipe(str(recipe_file), seed=1, log=lambda *_: None)
    assert (out / "seeds" / "s1" / "training_log.parquet").exists()
    monkeypatch.setattr(pre, "measure", lambda *a, **k: pytest.fail("recomputed"))
    monkeypatch.setattr(pre, "ablation_grid", lambda *a, **k: pytest.fail("recomputed"))
    assert main(args) == 0
    (run,) = list_runs(tmp_path / "cache", deep=True)
    assert run.ok
    log = read_table(tmp_path / "cache", run.name, "training_log")
    assert set(log["seed"]) == {0, 1}
    after = {t: e["sha256"] for t, e in run.manifest["tables"].items()}
    assert {t for t in after if after[t] != before.get(t)} == {"training_log"}


def test_fine_tuning_stages_are_laid_end_to_end(tmp_path):
    """A stage that starts from an earlier stage's delta is counted on from that stage's last epoch;
    a first stage (or one whose earlier stage is not among the runs) starts at epoch 1."""



    def run(name, epochs, start=None, device=None):
        folder = tmp_path / name
        folder.mkdir()
        recipe = {
            "name": name,
            "number_tokens": {"layer": 5},
            "lora": {"rank": 4, **({"init_delta": str(tmp_path / start / "delta.safetensors")} if start else {})},
            "device": device,
        }
        (folder / "recipe.json").write_text(json.dumps(recipe))
        log = pd.DataFrame(
            [
                {"epoch": e, "split": s, "accuracy": e / 100 + (0.001 if s == "val" else 0), "loss": 1.0 / e, "seed": 0}
                for e in range(1, epochs + 1)
                for s in ("train", "val")
            ]
        )
        return name, {"model": {"source": str(folder)}}, log

    runs = [
        run("third", 4, start="second"),
        run("first", 9, device="cuda"),
        run("second", 1, start="first"),
        run("alone", 2, start="missing"),
    ]
    stages = training_summaries.fine_tuning_stages(runs, "val")
    by = {r: g for r, g in stages.groupby("run")}
    assert (
        by["first"]["epoch"].tolist() == list(range(1, 10))
        and set(by["first"]["stage"]) == {1}
        and set(by["first"]["device"]) == {"GPU"}
    )
    assert (
        by["second"]["epoch"].tolist() == [10]
        and set(by["second"]["stage"]) == {2}
        and set(by["second"]["starts_from"]) == {"first"}
    )
    assert by["third"]["epoch"].tolist() == [11, 12, 13, 14] and by["third"]["stage_epoch"].tolist() == [1, 2, 3, 4]
    assert set(by["third"]["stage"]) == {3} and set(by["third"]["device"]) == {"CPU"}
    assert by["alone"]["epoch"].tolist() == [1, 2] and set(by["alone"]["stage"]) == {1}
    assert np.allclose(by["third"]["accuracy"], [0.011, 0.021, 0.031, 0.041])  # the val rows, not the train rows
    assert stages["cached"].all()
    # an earlier stage with no cached run is read from its folder (recipe.json, training_log.parquet)
    name, _, log = run("zero", 3)
    log.to_parquet(tmp_path / "zero" / "training_log.parquet")
    first = next(r for r in runs if r[0] == "first")
    recipe = json.loads((tmp_path / "first" / "recipe.json").read_text())
    recipe["lora"]["init_delta"] = str(tmp_path / "zero" / "delta.safetensors")
    (tmp_path / "first" / "recipe.json").write_text(json.dumps(recipe))
    chained = training_summaries.fine_tuning_stages([first], "val")
    assert chained.groupby("run")["epoch"].max().to_dict() == {"zero (its training log; no cached run)": 3, "first": 12}
    assert not chained[chained["stage"] == 1]["cached"].any() and chained[chained["stage"] == 2]["cached"].all()
    table = training_summaries.stages_table(stages, "val").set_index("model")  # separate first stages: a row each
    assert table.loc["alone", ["stage", "epochs", "trained on", "val accuracy, last epoch"]].tolist() == [
        1, "1-2", "CPU", "2.1%"]
    assert table.loc["first", ["stage", "epochs", "trained on"]].tolist() == [1, "1-9", "GPU"]
    assert table.loc["third", ["stage", "epochs", "val accuracy, last epoch"]].tolist() == [3, "11-14", "4.1%"]
    assert set(table["is"]) == {"the cached run"}
    chained_table = training_summaries.stages_table(chained, "val").set_index("model")
    assert chained_table.loc["zero", "is"] == "an earlier stage (log only)"  # the note moves into its own column
    assert chained_table.loc["first", "is"] == "the cached run"
    replaced = chained.assign(run="SmolLM2 tuned (real LLM, blocks 18..29) (history: its training log; no cached run)",
                              model="SmolLM2 tuned (real LLM, blocks 18..29)", history=True, cached=False)
    short = training_summaries.stages_table(replaced, "val")
    assert short["is"].unique().tolist() == ["history (log only)"] and set(short["model"]) == {"blocks 18..29"}


def test_checkpoint_keeps_every_view_of_a_shared_storage_and_a_tied_weight_once(tmp_path):
    """The checkpoint's de-duplication (core.training.checkpoint.unique_tensors) drops only a tensor
    that is the same tensor under another name (tied weights). Keyed on the storage alone, it dropped
    the second of two different views of one storage (a fused weight split into q and k); keyed
    without the strides, a matrix and its transpose."""

    fused = torch.arange(12.0).reshape(6, 2)
    square = torch.arange(4.0).reshape(2, 2) + 100
    tied = torch.randn(4, 2)
    state = {"q": fused[:3], "k": fused[3:], "emb": tied, "head": tied, "w": square, "w_t": square.t()}
    assert list(unique_tensors(state)) == ["q", "k", "emb", "w", "w_t"]

    param = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.AdamW([param], lr=0.1)
    param.grad = torch.ones(2)
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    save_checkpoint(tmp_path / "ckpt", "model.safetensors", state, opt, sched, {"epoch": 1})
    saved, progress = load_checkpoint(tmp_path / "ckpt", "model.safetensors")
    assert set(saved) == {"q", "k", "emb", "w", "w_t"} and progress["epoch"] == 1
    for name, t in saved.items():
        assert torch.equal(t, state[name]), name


def test_recipe_parts_are_typed_with_their_defaults_and_refuse_unknown_keys(tmp_path):
    base = dict(name="x", label="x", out=str(tmp_path), arch="llama", n_layers=4, init_from=str(tmp_path))
    r = Recipe(**base, number_tokens={"layer": 2}, lora={"rank": 4})
    assert r.number_token_config() == NumberTokens(layer=2)
    assert r.lora_config() == LoRA(rank=4) and r.lora_config().targets == DEFAULT_TARGETS
    assert r.as_dict()["number_tokens"] == {"layer": 2}  # as the file says it: recipe.json is unchanged
    with pytest.raises(CoreError, match=r"number_tokens: unknown keys \['frozen_block'\]"):
        Recipe(**base, number_tokens={"frozen_block": 1}).check()
    with pytest.raises(CoreError, match="lora.alpha must be a positive number"):
        Recipe(**base, number_tokens={}, lora={"alpha": "16"}).check()
    with pytest.raises(CoreError, match=r"pretrain: unknown keys \['epoch'\]"):
        tiny(tmp_path, pretrain={"epoch": 1})


def test_earlier_fine_tunings_are_found_and_shown_as_history(tmp_path):
    """Model folders of number-token fine-tunings that no cached run was computed from (a recipe with
    number_tokens and a training log) are history: found, chained stage after stage, labelled so; a
    folder of a cached run, one without a log and a demo recipe are not."""

    def folder(name, epochs, start=None, number_tokens=True, with_log=True):
        where = tmp_path / name
        where.mkdir()
        recipe = {"name": name, "label": f"{name} label", "lora": {"rank": 4}}
        if number_tokens:
            recipe["number_tokens"] = {"layer": 5}
        if start:
            recipe["lora"]["init_delta"] = str(tmp_path / start / "delta.safetensors")
        (where / "recipe.json").write_text(json.dumps(recipe))
        log = pd.DataFrame([{"epoch": e, "split": "val", "accuracy": e / 10, "loss": 1.0, "seed": 0}
                            for e in range(1, epochs + 1)])
        if with_log:
            log.to_parquet(where / "training_log.parquet")
        return name, {"model": {"source": str(where)}}, log

    current = folder("current", 4)
    folder("old1", 2)
    folder("old2", 3, start="old1")
    folder("nolog", 2, with_log=False)
    folder("demo", 2, number_tokens=False)
    earlier = training_summaries.earlier_fine_tunings(tmp_path, [current])
    assert [f.name for f in earlier] == ["old1", "old2"]
    stages = training_summaries.fine_tuning_stages([current], "val", earlier=earlier)
    last = stages.groupby("run")["epoch"].max().to_dict()
    history = " (history: its training log; no cached run)"
    assert last == {"current": 4, "old1 label" + history: 2, "old2 label" + history: 5}
    assert stages[stages["run"] == "current"]["cached"].all() and not stages[stages["run"] != "current"]["cached"].any()
    assert set(stages[stages["run"] == "old2 label" + history]["stage"]) == {2}
    # a log that never read the test split: its one test score comes from the training summary
    assert training_summaries.scored_once([current]) == ""
    (tmp_path / "current" / "train_summary.json").write_text(json.dumps({"rebuilt_test_accuracy_float32": 0.98765}))
    assert "current: 98.77%" in training_summaries.scored_once([current])
    with_test = (current[0], current[1], pd.concat([current[2], current[2].assign(split="test")]))
    assert training_summaries.scored_once([with_test]) == ""  # scored at every epoch: not a one-time score
    # a cached run's own earlier stage (no cached run of its own) is part of the current model, not history
    folder("first", 3)
    second = folder("second", 2, start="first")
    earlier = training_summaries.earlier_fine_tunings(tmp_path, [second])
    assert "first" in [f.name for f in earlier]  # found among the folders no run was computed from ...
    stages = training_summaries.fine_tuning_stages([second], "val", earlier=earlier)
    assert set(stages[stages["stage"] == 1]["run"]) >= {"first label (its training log; no cached run)"}
    assert "first label" + history not in set(stages["run"])  # ... but labelled as the stage it is


def test_precision_override_reaches_the_trainer_and_leaves_the_recipe_file(tmp_path):
    """`train --precision float32` trains the recipe at that precision (a CPU without native bfloat16)
    while the recipe file keeps its own; anything else is refused by the command line."""
    recipe_file = tmp_path / "tiny.json"
    recipe_file.write_text(json.dumps({**tiny(tmp_path, epochs=1).as_dict(), "precision": "bfloat16"}))
    seen = []
    train_from_recipe(str(recipe_file), precision="float32", run=lambda r, out, *a: seen.append((r.precision, out)),
                      log=lambda *_: None)
    train_from_recipe(str(recipe_file), run=lambda r, out, *a: seen.append((r.precision, out)))
    out = tmp_path / "out"  # the recipe's own folder (tiny's): the float32 model goes beside it, never over it
    assert seen == [("float32", out.with_name("out-float32")), ("bfloat16", out)]
    assert json.loads(recipe_file.read_text())["precision"] == "bfloat16"
    with pytest.raises(SystemExit):
        main(["train", "--recipe", str(recipe_file), "--precision", "float16"])
