"""The model that number-token fine-tuning trains: a pre-trained model whose embedding gets trainable
rows for the new number tokens and whose blocks' linear maps get LoRA factors (or are trained whole).

* `NumberRowsEmbedding`: the original rows (frozen) followed by the trainable new rows; with tied
  embeddings the same rows are the answer's output rows (`TiedHead`);
* `LoRALinear`: W x + (alpha / r) B A x, with W frozen and B starting at zero, so training starts
  from the pre-trained model;
* `FineTuneModel` wraps a model with both, lists what is trained, and gives the delta's tensors
  (`delta_tensors`), turning full training's change into rank-r factors by SVD;
* `StartDelta` / `load_start_delta`: an earlier stage's delta that a later stage starts from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from core.errors import CoreError
from core.models.parts import find_parts
from core.training.delta import encode_factors, merge_lora, read_delta


class NumberRowsEmbedding(torch.nn.Module):
    """The input embedding: the original rows (frozen) followed by the trainable new rows."""

    def __init__(self, base_weight, rows):
        super().__init__()
        self.register_buffer("base", base_weight.detach(), persistent=False)
        self.rows = torch.nn.Parameter(rows)
        self.n_base = base_weight.shape[0]

    def forward(self, ids):
        new = ids >= self.n_base
        old = torch.nn.functional.embedding(ids.clamp(max=self.n_base - 1), self.base)
        added = torch.nn.functional.embedding((ids - self.n_base).clamp(min=0), self.rows)
        return torch.where(new[..., None], added, old)


class TiedHead(torch.nn.Module):
    """The output layer of a tied model: logits over the original and the new rows."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding

    def forward(self, h):
        e = self.embedding
        return torch.cat([torch.nn.functional.linear(h, e.base), torch.nn.functional.linear(h, e.rows)], -1)


class LoRALinear(torch.nn.Module):
    """base(x) + scale * B A x, with the base linear map frozen and B starting at zero."""

    def __init__(self, base, rank: int, alpha: float):
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        self.A = torch.nn.Parameter(torch.empty(rank, base.in_features))
        self.B = torch.nn.Parameter(torch.zeros(base.out_features, rank))
        torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))

    def forward(self, x):
        return self.base(x) + torch.nn.functional.linear(torch.nn.functional.linear(x, self.A), self.B) * self.scale


def _lora_targets(model, targets) -> list[tuple[str, object, str]]:
    """(block-relative name, parent module, attribute) of every targeted linear map, in block order."""
    parts = find_parts(model)
    found = []
    for i, block in enumerate(parts.blocks):
        for name, module in block.named_modules():
            if isinstance(module, torch.nn.Linear) and name.split(".")[-1] in targets:
                parent = block.get_submodule(name.rsplit(".", 1)[0]) if "." in name else block
                found.append((f"{i}.{name}", parent, name.split(".")[-1]))
    if not found:
        raise CoreError(
            f"no linear maps named {', '.join(targets)} in the model's blocks: name the LoRA targets in the recipe"
        )
    return found


@dataclass
class StartDelta:
    """An earlier stage's delta tensors and the scale (alpha / rank) its factors were written with."""

    tensors: dict
    scale: float
    rank: int = 0
    digest: str = ""  # the earlier stage's rebuilt-weights digest: which delta this is
    factors: str = "float16"  # how that delta kept its factors (core.training.delta.encode_factors)


def load_start_delta(path: str, base_digest: str, rank: int) -> StartDelta:
    """The tensors of an earlier stage's delta, checked (same base model, at least `rank` factors),
    with the scale its factors were written with; `FineTuneModel.load_factors` rescales B to the recipe's."""
    tensors, meta = read_delta(Path(path))
    if meta.get("base_sha256") and meta["base_sha256"] != base_digest:
        raise CoreError(
            f"{path} was trained on another base model than this recipe's init_from: import the right one "
            "or start without lora.init_delta"
        )
    have = int(meta["rank"])
    if have < rank:
        raise CoreError(f"{path} holds rank-{have} factors; this recipe's lora.rank {rank} needs at least that many")
    return StartDelta(tensors, float(meta["alpha"]) / have, have, meta.get("rebuilt_sha256", ""),
                      meta.get("factors", "float16"))


class FineTuneModel:
    """A base model with trainable number rows and LoRA factors (`trainable()` lists them).

    With `full`, the targeted linear maps themselves are trained instead of LoRA factors (every
    weight of theirs); `compressed_delta()` then turns each map's change into rank-`rank` factors
    by SVD, in the same delta format, so what ships and how it is rebuilt do not change."""

    def __init__(
        self,
        model,
        rows: np.ndarray,
        rank: int,
        alpha: float,
        targets,
        seed: int,
        first_block: int = 0,
        full: bool = False,
        keep_lower: bool = False,
    ):
        if not getattr(model.config, "tie_word_embeddings", False):
            raise CoreError(
                "number-token fine-tuning supports models with tied input and output embeddings (such as SmolLM2) only"
            )
        for param in model.parameters():
            param.requires_grad_(False)
        self.model = model
        rows = torch.as_tensor(rows, dtype=torch.float32)
        self.embedding = NumberRowsEmbedding(model.get_input_embeddings().weight, rows)
        model.set_input_embeddings(self.embedding)
        model.lm_head = TiedHead(self.embedding)
        torch.manual_seed(seed)
        self.lora, self.full, self.fixed, self.rank, self.alpha = {}, {}, {}, rank, alpha
        for name, parent, attr in _lora_targets(model, targets):
            if int(name.split(".", 1)[0]) < first_block:  # a frozen lower block: no trained LoRA there
                if keep_lower:  # but an earlier stage's factors stay in it, frozen (`load_factors` fills them)
                    wrapped = LoRALinear(getattr(parent, attr), rank, alpha)
                    wrapped.A.requires_grad_(False)
                    wrapped.B.requires_grad_(False)
                    setattr(parent, attr, wrapped)
                    self.fixed[name] = wrapped
                continue
            if full:
                linear = getattr(parent, attr)
                linear.weight.requires_grad_(True)
                self.full[name] = (linear, linear.weight.detach().to("cpu", copy=True))
                continue
            wrapped = LoRALinear(getattr(parent, attr), rank, alpha)
            setattr(parent, attr, wrapped)
            self.lora[name] = wrapped

    def load_factors(self, start: StartDelta) -> None:
        """Start the LoRA factors from an earlier stage's delta (`load_start_delta`): its first `rank`
        factors, B scaled so that the update equals the delta's (its scale over this model's)."""
        tensors = start.tensors
        if self.fixed and start.rank and start.rank != self.rank:
            raise CoreError(
                f"frozen lower blocks keep the starting delta's factors as they are: set lora.rank to its "
                f"rank ({start.rank}), not {self.rank} (its first {self.rank} trained factors alone would "
                "change those blocks)"
            )
        ratio = start.scale * self.rank / self.alpha
        factors = {**self.fixed, **self.lora}
        missing = [n for n in factors if f"lora.{n}.A" not in tensors]
        if missing:
            raise CoreError(
                f"the starting delta has no factors for {missing[0]} (and {len(missing) - 1} more maps): "
                "its targets differ from the recipe's"
            )
        with torch.no_grad():
            for name, m in factors.items():
                m.A.copy_(tensors[f"lora.{name}.A"][: self.rank].float())
                m.B.copy_(tensors[f"lora.{name}.B"][:, : self.rank].float() * ratio)

    def load_change(self, start: StartDelta) -> None:
        """Full training only: start each trained map from an earlier stage's weights, W0 + scale B A with
        the starting delta's own factors and scale (all of them). The change that ships is still measured
        from the base weights W0, so the new delta rebuilds from the base model alone. The starting delta
        must not have changed a frozen lower block (those keep the base weights here)."""
        tensors = start.tensors
        changed = {k[len("lora."):-len(".A")] for k in tensors if k.startswith("lora.") and k.endswith(".A")}
        untrained = sorted(changed - set(self.full), key=lambda n: int(n.split(".", 1)[0]))
        if untrained:
            raise CoreError(
                f"the starting delta changed {untrained[0]}, which this recipe does not train: full training from "
                "a delta needs the same targets and the same frozen blocks (number_tokens.frozen_blocks)"
            )
        missing = [n for n in self.full if n not in changed]
        if missing:
            raise CoreError(
                f"the starting delta has no factors for {missing[0]} (and {len(missing) - 1} more maps): "
                "its targets differ from the recipe's"
            )
        with torch.no_grad():  # merged as `rebuild` merges: the start is the earlier stage's rebuilt model, bit for bit
            for name, (linear, _) in self.full.items():
                merged = merge_lora(linear.weight, tensors[f"lora.{name}.A"], tensors[f"lora.{name}.B"], start.scale)
                linear.weight.copy_(merged)

    def trainable(self) -> dict:
        out = {"number_rows": self.embedding.rows}
        for name, m in self.lora.items():
            out[f"lora.{name}.A"] = m.A
            out[f"lora.{name}.B"] = m.B
        for name, (linear, _) in self.full.items():
            out[f"full.{name}.weight"] = linear.weight
        return out

    def delta_state(self) -> dict:
        """What the delta keeps: the trainable tensors and the frozen lower blocks' earlier-stage factors."""
        out = self.trainable()
        for name, m in self.fixed.items():
            out[f"lora.{name}.A"] = m.A
            out[f"lora.{name}.B"] = m.B
        return out

    def compressed_delta(self) -> tuple[dict, dict]:
        """Full training only: (tensors, report). Each trained map's change W - W0 as its best
        rank-`rank` approximation (SVD), written as LoRA factors B (out x r) and A (r x in) with
        W0 + (alpha / r) B A; the report gives the share of the change's energy each map keeps."""
        out = {"number_rows": self.embedding.rows.detach().cpu().float()}
        kept = {}
        scale = self.alpha / self.rank
        for name, (linear, original) in self.full.items():
            change = linear.weight.detach().double().cpu() - original.double()
            U, S, Vh = torch.linalg.svd(change, full_matrices=False)
            r = min(self.rank, S.numel())
            out[f"lora.{name}.B"] = (U[:, :r] * (S[:r] / scale)).float()
            out[f"lora.{name}.A"] = Vh[:r].float()
            total = float((S**2).sum())
            kept[name] = float((S[:r] ** 2).sum()) / total if total > 0 else 1.0
        return out, kept


def delta_tensors(tuned: FineTuneModel, log=print, factors: str = "float16") -> dict:
    """The delta's tensors: the trained rows and LoRA factors, or, after full training, the rank-r factors of each
    map's change (`FineTuneModel.compressed_delta`); the rows in float16, the factors as `factors` keeps them
    (core.training.delta.encode_factors: "float16", or "int8" with a scale per rank component)."""
    tensors = tuned.delta_state()
    if tuned.full:
        tensors, kept = tuned.compressed_delta()
        shares = np.array(list(kept.values()))
        log(
            f"full training compressed to rank {tuned.rank}: the factors keep {shares.mean():.1%} of the change's "
            f"energy on average (least {shares.min():.1%}, {min(kept, key=kept.get)})"
        )
    return encode_factors(tensors, factors)
