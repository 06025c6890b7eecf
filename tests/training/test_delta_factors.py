"""A delta's factors kept in 8 bits (a recipe's lora.factors = "int8"; core.training.delta.encode_factors): each rank
component within half a step of its own scale, the float16 format unchanged, and a full fine-tune whose int8 delta
rebuilds, bit for bit, the model it recorded and scored, at about half the float16 delta's size."""

import json

import pytest
import torch
from safetensors import safe_open

from core.errors import CoreError
from core.models.loading import load_model
from core.training.delta import (
    DELTA_FILE,
    DELTA_FORMAT,
    DELTA_FORMAT_INT8,
    SCALE_PREFIX,
    decode_factors,
    encode_factors,
    merged_model,
    read_delta,
    rebuild,
    save_delta,
    state_digest,
    unique_state,
)
from core.training.finetune import finetune
from core.training.lora import load_start_delta
from core.training.recipe import Recipe

QUIET = lambda *_: None  # noqa: E731


def full_recipe(base, out, factors: str, lora: dict | None = None, frozen_blocks: int = 0) -> Recipe:
    recipe = Recipe(
        name=f"tiny-full-{factors}", label="tiny full fine-tune", out=str(out), arch="llama", n_layers=3, width=64,
        heads=4, task="addition", max_operand=12, dataset_seed=0, init_from=str(base),
        number_tokens={"layer": 2, "context": "The number {n}", "checkpoint_steps": 100,
                       "frozen_blocks": frozen_blocks},
        lora=lora or {"rank": 16, "alpha": 16, "targets": ["q_proj", "down_proj"], "train": "full", "factors": factors},
        epochs=1, batch_size=16, lr=3e-3, weight_decay=0.0, warmup_steps=2, precision="float32", seed=0,
        eval_train_subset=40, threads=1,
    )
    recipe.check()
    return recipe


def svd_like_factors(seed=0, out_dim=48, in_dim=40, rank=6) -> dict:
    """Factors shaped as a full fine-tune's: A's rows unit vectors, B's columns carrying singular values from 10 down
    to 0.001 (a component 10,000 times smaller than the first must still be kept)."""
    g = torch.Generator().manual_seed(seed)
    U, _ = torch.linalg.qr(torch.randn(out_dim, rank, generator=g))
    V, _ = torch.linalg.qr(torch.randn(in_dim, rank, generator=g))
    S = torch.logspace(1, -3, rank)
    return {"lora.0.mlp.down_proj.A": V.T.contiguous(), "lora.0.mlp.down_proj.B": (U * S).contiguous(),
            "number_rows": torch.randn(5, in_dim, generator=g)}


def test_int8_keeps_each_rank_component_within_half_a_step_of_its_own_scale():
    tensors = svd_like_factors()
    encoded = encode_factors(tensors, "int8")
    A, B = "lora.0.mlp.down_proj.A", "lora.0.mlp.down_proj.B"
    assert encoded[A].dtype == torch.int8 and encoded[B].dtype == torch.int8
    assert encoded["number_rows"].dtype == torch.float16 and SCALE_PREFIX + "number_rows" not in encoded
    assert encoded[SCALE_PREFIX + A].shape == (6,) and encoded[SCALE_PREFIX + B].shape == (6,)  # one per component
    decoded = decode_factors(encoded)
    assert set(decoded) == set(tensors) and decoded[A].dtype == torch.float32
    step_a = tensors[A].abs().amax(dim=1, keepdim=True) / 127
    step_b = tensors[B].abs().amax(dim=0, keepdim=True) / 127
    assert ((decoded[A] - tensors[A]).abs() <= step_a / 2 * (1 + 1e-5)).all()
    assert ((decoded[B] - tensors[B]).abs() <= step_b / 2 * (1 + 1e-5)).all()
    # per component, the smallest singular direction keeps its relative precision: a scale per row of B would not
    last = (decoded[B][:, -1] - tensors[B][:, -1]).norm() / tensors[B][:, -1].norm()
    assert last < 0.02
    per_row = tensors[B].abs().amax(dim=1, keepdim=True) / 127
    rounded_per_row = torch.round(tensors[B] / per_row) * per_row
    assert (rounded_per_row[:, -1] - tensors[B][:, -1]).norm() / tensors[B][:, -1].norm() > 0.5  # rounded away
    # float16 is what the deltas always held: rounding alone, no scales
    plain = encode_factors(tensors, "float16")
    assert all(v.dtype == torch.float16 for v in plain.values()) and set(plain) == set(tensors)
    assert all(torch.equal(decode_factors(plain)[k], plain[k]) for k in plain)
    with pytest.raises(CoreError, match="unknown factor precision 'int4'.*float16, int8"):
        encode_factors(tensors, "int4")


def test_a_damaged_int8_delta_and_an_unknown_precision_are_refused(tmp_path):
    encoded = encode_factors(svd_like_factors(), "int8")
    del encoded[SCALE_PREFIX + "lora.0.mlp.down_proj.B"]
    save_delta(tmp_path / DELTA_FILE, encoded, {"format": DELTA_FORMAT_INT8})
    with pytest.raises(CoreError, match="int8 but has no scale .*damaged"):
        read_delta(tmp_path / DELTA_FILE)
    save_delta(tmp_path / DELTA_FILE, encoded, {"format": "number-rows+lora-int4/1"})
    with pytest.raises(CoreError, match="not a fine-tuning delta of this version.*number-rows\\+lora/1"):
        read_delta(tmp_path / DELTA_FILE)
    with pytest.raises(CoreError, match="lora.factors must be 'float16' or 'int8'"):
        full_recipe(tmp_path, tmp_path / "x", "int4")


def test_an_int8_full_fine_tune_rebuilds_the_model_it_scored_at_about_half_the_size(tiny_base, tmp_path):
    half = finetune(full_recipe(tiny_base, tmp_path / "f16", "float16"), log=QUIET)
    eight = finetune(full_recipe(tiny_base, tmp_path / "i8", "int8"), log=QUIET)
    with safe_open(str(eight.out / DELTA_FILE), framework="pt") as f:
        meta = f.metadata()
        stored = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert meta["format"] == DELTA_FORMAT_INT8 and meta["factors"] == "int8"
    assert {d for k, d in stored.items() if k.startswith("lora.")} == {"I8"}
    assert {d for k, d in stored.items() if k.startswith(SCALE_PREFIX)} == {"F32"}
    with safe_open(str(half.out / DELTA_FILE), framework="pt") as f:
        assert f.metadata()["format"] == DELTA_FORMAT
    f16_bytes, i8_bytes = ((r.out / DELTA_FILE).stat().st_size for r in (half, eight))
    assert i8_bytes < 0.75 * f16_bytes
    # the same seeded training on the CPU: both deltas cut the same change, so each map's B A agrees within 8 bits
    a, _ = read_delta(half.out / DELTA_FILE)
    b, _ = read_delta(eight.out / DELTA_FILE)
    maps = sorted(k[: -len(".A")] for k in a if k.startswith("lora.") and k.endswith(".A"))
    assert maps
    for m in maps:
        want = a[f"{m}.B"].float() @ a[f"{m}.A"].float()
        got = b[f"{m}.B"] @ b[f"{m}.A"]
        assert torch.allclose(want, got, atol=0.02 * float(want.abs().max()) + 1e-6), m
    # the model that counts is rebuilt from the int8 delta: in a fresh folder, to the digest recorded and scored
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / DELTA_FILE).write_bytes((eight.out / DELTA_FILE).read_bytes())
    rebuild(fresh, log=QUIET)
    lm = load_model(str(fresh))
    assert state_digest(unique_state(lm.model)) == meta["rebuilt_sha256"]
    summary = json.loads((eight.out / "train_summary.json").read_text())
    assert summary["delta_bytes"] == i8_bytes and summary["rebuilt_test_accuracy_float32"] == eight.test_accuracy


def test_a_later_stage_starts_from_an_int8_delta_and_keeps_its_precision(tiny_base, tmp_path):
    """lora.init_delta of an int8 delta: read decoded (its merge gives the digest it recorded), and a LoRA stage that
    keeps the lower blocks' earlier factors frozen must keep them in int8 too (encoded again in float16 they would
    change); in int8 it trains and rebuilds."""
    lora = {"rank": 6, "alpha": 6, "targets": ["q_proj", "down_proj"], "train": "lora", "factors": "int8"}
    first = finetune(full_recipe(tiny_base, tmp_path / "s1", "int8", lora=lora), log=QUIET)
    delta = first.out / DELTA_FILE
    tensors, meta = read_delta(delta)
    assert all(v.dtype == torch.float32 for k, v in tensors.items() if k.startswith("lora."))
    start = load_start_delta(str(delta), meta["base_sha256"], 6)
    assert start.factors == "int8"
    rebuilt, _ = merged_model(str(tiny_base), start.tensors, meta)
    assert state_digest(unique_state(rebuilt)) == meta["rebuilt_sha256"]
    later = {**lora, "init_delta": str(delta)}
    with pytest.raises(CoreError, match="frozen lower blocks keep .* kept in int8; set lora.factors to 'int8' too"):
        finetune(full_recipe(tiny_base, tmp_path / "s2", "float16", lora={**later, "factors": "float16"},
                             frozen_blocks=1), log=QUIET)
    second = finetune(full_recipe(tiny_base, tmp_path / "s3", "int8", lora=later, frozen_blocks=1), log=QUIET)
    kept, _ = read_delta(second.out / DELTA_FILE)
    lower = [k for k in tensors if k.startswith("lora.0.")]
    assert lower and all(torch.equal(kept[k], tensors[k]) for k in lower)  # block 0's factors, exactly as they were
    assert rebuild(second.out, str(tiny_base), log=QUIET).exists()  # its digest checked
