"""A recipe (recipes/NAME.json): everything one training run needs, typed and checked.

`Recipe` holds the fields as the JSON writes them (so a model folder's recipe.json, a checkpoint's
resume key and a run's recorded recipe say exactly what the file said). Its parts that are objects
in the JSON are read through typed configs that hold every default once and check every value:

* `Freeze` (`freeze`): which number-token embedding rows of a demo model are frozen, and to what;
* `Pretrain` (`pretrain`): the optional next-token pre-training on the number corpus;
* `NumberTokens` (`number_tokens`): one new token per number added to a pre-trained model, fine-tuned;
* `LoRA` (`lora`): what of that model's blocks is trained, and how it ships in the delta;
* `ModuleBands` (`module_bands`): which Fourier band each module's output may carry (the controls' constraint).

JSON and the standard library only: the dashboard reads recipes without loading torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from core.errors import CoreError, choices
from core.files import PROJECT_ROOT

RECIPE_DIR = PROJECT_ROOT / "recipes"
#: fourier: synthetic sinusoids; transplant: another model's number-embedding rows (same width);
#: representation: another model's hidden states of the numbers at a layer, mapped by an isometry.
FREEZE_KINDS = ("fourier", "transplant", "representation")
#: the linear maps of a Llama-style block that LoRA (or full training) changes unless the recipe names others
#: which epoch's weights a demo run ships: the last one (the runs trained before selection existed), or the one
#: with the best validation accuracy (ties: the lower validation loss), whose test split is then scored once
SELECT_RULES = ("last", "val")
FACTOR_PRECISIONS = ("float16", "int8")  # how a delta may keep its LoRA factors (core.training.delta.FACTOR_FORMATS)
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: the bands a module's output may be held to by `module_bands`: "low" (1 <= k < tau), "high" (k >= tau), or "any"
MODULE_BANDS = ("low", "high", "any")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _known_keys(cls, spec: dict, where: str) -> None:
    unknown = sorted(set(spec) - {f.name for f in fields(cls)})
    if unknown:
        known = ", ".join(f.name for f in fields(cls))
        raise CoreError(f"{where}: unknown keys {unknown} (known: {known})")


@dataclass(frozen=True)
class Freeze:
    """The `freeze` part: number rows of a demo model kept fixed during training."""

    kind: str
    periods: tuple[float, ...] = ()  # fourier: the periods T of the sinusoids
    frequencies: tuple[int, ...] = ()  # fourier: frequencies k of the paper's basis on p numbers (T = (p - 1) / k)
    scale: float = 1.0  # fourier: every row's norm
    faint_frequencies: tuple[int, ...] = ()  # fourier: frequencies W_U also reads, weighted `faint_scale`
    faint_scale: float = 0.01  # fourier: the weight of a faint frequency's sinusoids beside the others' 1
    norm_blind_frequency: int | None = None  # fourier: a faint frequency whose sine lies along (1, ..., 1)
    source: str | None = None  # transplant, representation: the donor model's folder
    layer: int | None = None  # representation: the donor's layer
    context: str | None = None  # representation: the text the numbers are read in
    isometry_seed: int = 0  # representation: the seed of the map into the recipe's width

    @classmethod
    def parse(cls, spec: dict, name: str = "") -> "Freeze":
        where = f"recipe {name}" if name else "freeze"
        if spec.get("kind") not in FREEZE_KINDS:
            raise CoreError(f"{where}: freeze.kind must be one of {choices(FREEZE_KINDS)}")
        _known_keys(cls, spec, f"{where}: freeze")
        if spec["kind"] == "representation":
            missing = [k for k in ("source", "layer") if k not in spec]
            if missing:
                raise CoreError(f"{where}: a 'representation' freeze needs {missing} (source model folder, layer)")
        if spec["kind"] == "transplant" and "source" not in spec:
            raise CoreError(f"{where}: a 'transplant' freeze needs its source (the donor model's folder)")
        if spec["kind"] == "fourier" and not (spec.get("periods") or spec.get("frequencies")):
            raise CoreError(f"{where}: a 'fourier' freeze needs its periods (a list of periods T, e.g. [2, 5, 10]) or "
                            "its frequencies (whole numbers k >= 1, period (p - 1) / k)")
        ks = spec.get("frequencies", ())
        if not isinstance(ks, list | tuple) or not all(_is_whole(k) and k >= 1 for k in ks):
            raise CoreError(f"{where}: freeze.frequencies must be a list of whole numbers k >= 1, got {ks!r}")
        faint = spec.get("faint_frequencies", ())
        if not isinstance(faint, list | tuple) or not all(_is_whole(k) and k >= 1 for k in faint):
            raise CoreError(f"{where}: freeze.faint_frequencies must be a list of whole numbers k >= 1, got {faint!r}")
        if set(faint) & set(ks):
            raise CoreError(f"{where}: freeze.faint_frequencies and freeze.frequencies share "
                            f"{sorted(set(faint) & set(ks))}: a frequency is read at full weight or faintly, not both")
        faint_scale = spec.get("faint_scale", cls.faint_scale)
        if not isinstance(faint_scale, (int, float)) or isinstance(faint_scale, bool) or not 0 < faint_scale <= 1:
            raise CoreError(f"{where}: freeze.faint_scale (a faint frequency's weight) must lie in (0, 1], "
                            f"got {faint_scale!r}")
        blind = spec.get("norm_blind_frequency")
        if blind is not None and blind not in faint:
            raise CoreError(f"{where}: freeze.norm_blind_frequency must be one of freeze.faint_frequencies, got "
                            f"{blind!r}")
        return cls(
            kind=spec["kind"],
            periods=tuple(float(t) for t in spec.get("periods", ())),
            norm_blind_frequency=None if blind is None else int(blind),
            frequencies=tuple(int(k) for k in spec.get("frequencies", ())),
            scale=float(spec.get("scale", 1.0)),
            faint_frequencies=tuple(int(k) for k in faint),
            faint_scale=float(faint_scale),
            source=spec.get("source"),
            layer=None if spec.get("layer") is None else int(spec["layer"]),
            context=spec.get("context"),
            isometry_seed=int(spec.get("isometry_seed", 0)),
        )


@dataclass(frozen=True)
class Pretrain:
    """The `pretrain` part: next-token pre-training on the number corpus before the addition training.
    A learning rate or batch size left out is the recipe's own."""

    epochs: int = 3
    n_sequences: int = 60000
    lr: float | None = None
    batch_size: int | None = None

    @classmethod
    def parse(cls, spec: dict, name: str = "") -> "Pretrain":
        _known_keys(cls, spec, f"recipe {name}: pretrain")
        for key in ("epochs", "n_sequences", "batch_size"):
            if key in spec and (not _is_whole(spec[key]) or spec[key] < 1):
                raise CoreError(f"recipe {name}: pretrain.{key} must be a whole number >= 1, got {spec[key]!r}")
        if "lr" in spec and (not _is_number(spec["lr"]) or not spec["lr"] > 0):
            raise CoreError(f"recipe {name}: pretrain.lr must be a positive number, got {spec['lr']!r}")
        return cls(**{k: float(v) if k == "lr" else v for k, v in spec.items()})


@dataclass(frozen=True)
class NumberTokens:
    """The `number_tokens` part: one new token per number, added to a pre-trained model and fine-tuned
    (core.training.finetune)."""

    layer: int = 5  # the new rows start as the model's representation of n after this block
    context: str = "The number {n}"  # ... read at the last digit of this text
    centre: bool = False  # centre those rows over the numbers first
    checkpoint_steps: int = 50  # a checkpoint every this many steps
    rows_lr_ratio: float = 1.0  # the new rows' learning rate over the recipe's lr (0: frozen)
    stop_at_val_accuracy: float | None = None  # stop after the epoch whose validation accuracy reaches this
    balance_answers: float = 0.0  # 0: plain epochs; 1: every answer drawn equally often
    frozen_blocks: int = 0  # how many lower blocks stay frozen (their output computed once if the rows are frozen)

    @classmethod
    def parse(cls, spec: dict, name: str, n_layers: int) -> "NumberTokens":
        where = f"recipe {name}: number_tokens"
        _known_keys(cls, spec, where)
        every = spec.get("checkpoint_steps", cls.checkpoint_steps)
        if not isinstance(every, int) or every < 1:
            raise CoreError(f"{where}.checkpoint_steps must be a whole number >= 1, got {every!r}")
        ratio = spec.get("rows_lr_ratio", cls.rows_lr_ratio)
        if not _is_number(ratio) or not 0 <= ratio <= 10:
            raise CoreError(f"{where}.rows_lr_ratio (the new rows' learning rate over lr) must be a number in 0..10, "
                            f"got {ratio!r}")
        stop = spec.get("stop_at_val_accuracy")
        if stop is not None and (not _is_number(stop) or not 0 < stop <= 1):
            raise CoreError(f"{where}.stop_at_val_accuracy must be a fraction in (0, 1], such as 0.99, got {stop!r}")
        balance = spec.get("balance_answers", cls.balance_answers)
        if not _is_number(balance) or not 0 <= balance <= 1:
            raise CoreError(f"{where}.balance_answers (0: plain epochs; 1: every answer drawn equally often) must be "
                            f"a number in 0..1, got {balance!r}")
        frozen = spec.get("frozen_blocks", cls.frozen_blocks)
        if not _is_whole(frozen) or not 0 <= frozen < n_layers:
            raise CoreError(f"{where}.frozen_blocks (how many lower blocks stay frozen) must be a whole number in "
                            f"0..{n_layers - 1}, got {frozen!r}")
        layer = spec.get("layer", cls.layer)
        if not _is_whole(layer) or layer < 0:
            raise CoreError(f"{where}.layer (the block whose output starts the new rows) must be a whole number "
                            f">= 0, got {layer!r}")
        context = spec.get("context", cls.context)
        if not isinstance(context, str):
            raise CoreError(f"{where}.context must be text such as 'The number {{n}}', got {context!r}")
        return cls(layer=layer, context=context, centre=bool(spec.get("centre", cls.centre)), checkpoint_steps=every,
                   rows_lr_ratio=float(ratio), stop_at_val_accuracy=stop, balance_answers=float(balance),
                   frozen_blocks=frozen)


@dataclass(frozen=True)
class LoRA:
    """The `lora` part of a number-token recipe: which linear maps of the blocks change, and how."""

    rank: int = 8  # the rank of the factors B (out x r) and A (r x in)
    alpha: float = 16.0  # the update is (alpha / rank) B A
    targets: tuple[str, ...] = DEFAULT_TARGETS  # the maps' names inside a block
    train: str = "lora"  # "lora": train the factors; "full": train the maps, ship rank-r SVD factors of the change
    # an earlier stage's delta whose rows and factors are the start; with "full", its change is merged into the maps
    init_delta: str | None = None
    factors: str = "float16"  # how the delta keeps the factors: "float16", or "int8" with a scale per rank component

    @classmethod
    def parse(cls, spec: dict, name: str) -> "LoRA":
        where = f"recipe {name}: lora"
        _known_keys(cls, spec, where)
        mode = spec.get("train", cls.train)
        if mode not in ("lora", "full"):
            raise CoreError(f"{where}.train must be 'lora' (train LoRA factors) or 'full' (train the maps, ship rank-r "
                            f"SVD factors of the change), got {mode!r}")
        rank = spec.get("rank", cls.rank)
        if not isinstance(rank, int) or rank < 1:
            raise CoreError(f"{where}.rank must be a whole number >= 1, got {rank!r}")
        alpha = spec.get("alpha", cls.alpha)
        if not _is_number(alpha) or not alpha > 0:
            raise CoreError(f"{where}.alpha must be a positive number, got {alpha!r}")
        targets = spec.get("targets", cls.targets)
        if isinstance(targets, str) or not targets or not all(isinstance(t, str) for t in targets):
            raise CoreError(f"{where}.targets must be a list of linear maps' names such as ['q_proj'], got {targets!r}")
        factors = spec.get("factors", cls.factors)
        if factors not in FACTOR_PRECISIONS:
            raise CoreError(f"{where}.factors must be 'float16' or 'int8' (8 bits with a scale per rank component: "
                            f"about half the delta's size), got {factors!r}")
        return cls(rank=rank, alpha=float(alpha), targets=tuple(targets), train=mode, init_delta=spec.get("init_delta"),
                   factors=factors)

    @property
    def full(self) -> bool:
        return self.train == "full"


@dataclass(frozen=True)
class ModuleBands:
    """The `module_bands` part: the band of frequencies each module's output keeps, at every layer and position.

    After every optimiser step (and once before the first) the output map of every attention (and of every MLP)
    is projected so that what W_U reads off its output has nothing in the other band: W <- W P, b <- b P with P the
    project's own band filter (core.analysis.filters.low_pass / high_pass at `tau`, on the `basis`), so the
    filter that removes that band from the trained model (the ablation of step 6) removes nothing. "any": the
    module is left free. W_U must stay fixed while training (tied number rows, frozen): the filters are built
    from it once."""

    attn: str = "any"  # the band attention's outputs keep: "low", "high" or "any"
    mlp: str = "any"  # the band the MLPs' outputs keep
    tau: int = 50  # the cutoff between the bands (the paper's Table 1)
    basis: str = "paper"  # the Fourier basis the bands are read on (core.analysis.fourier)
    pairs: tuple["CancellingPair", ...] = ()  # fixed vectors in a module's other band that cancel over two layers
    plain_final_norm: bool = False  # the final norm's gain one number (learnt), its bias 0: W_U reads the stream
    clear_pair_frequencies: bool = False  # no module writes a pair's frequency but the pair itself
    offsets: tuple["FaintOffset", ...] = ()  # fixed vectors on a module's last layer, at a faint frequency

    @classmethod
    def parse(cls, spec: dict, name: str = "") -> "ModuleBands":
        where = f"recipe {name}: module_bands" if name else "module_bands"
        _known_keys(cls, spec, where)
        for key in ("attn", "mlp"):
            if spec.get(key, "any") not in MODULE_BANDS:
                raise CoreError(f"{where}.{key} (the band its outputs keep) must be one of {choices(MODULE_BANDS)}, "
                                f"got {spec[key]!r}")
        tau = spec.get("tau", cls.tau)
        if not _is_whole(tau) or tau < 2:
            raise CoreError(f"{where}.tau (the cutoff frequency) must be a whole number >= 2, got {tau!r}")
        basis = spec.get("basis", cls.basis)
        if not isinstance(basis, str):
            raise CoreError(f"{where}.basis must be a basis name such as 'paper', got {basis!r}")
        bands = cls(attn=spec.get("attn", cls.attn), mlp=spec.get("mlp", cls.mlp), tau=tau, basis=basis)
        fixed = {}  # the fixed vectors: cancelling pairs and offsets, each in the band its module does not keep
        for key, kind, what in (("pairs", CancellingPair, "cancelling pairs"), ("offsets", FaintOffset, "offsets")):
            listed = spec.get(key, [])
            if not isinstance(listed, list):
                raise CoreError(f"{where}.{key} must be a list of {what}, got {listed!r}")
            fixed[key] = tuple(kind.parse(x, f"{where}.{key}[{i}]") for i, x in enumerate(listed))
            for i, vector in enumerate(fixed[key]):
                band = bands.removed(vector.module)
                if band is None or (vector.k < tau) != (band == "low"):
                    raise CoreError(f"{where}.{key}[{i}]: k = {vector.k} must lie in the band {vector.module} does "
                                    f"not keep ({band or 'none: that module keeps every band'}), so that removing "
                                    "that band removes it whole")
        plain = spec.get("plain_final_norm", cls.plain_final_norm)
        if not isinstance(plain, bool):
            raise CoreError(f"{where}.plain_final_norm must be true or false, got {plain!r}")
        clear = spec.get("clear_pair_frequencies", cls.clear_pair_frequencies)
        if not isinstance(clear, bool):
            raise CoreError(f"{where}.clear_pair_frequencies must be true or false, got {clear!r}")
        return cls(attn=bands.attn, mlp=bands.mlp, tau=tau, basis=basis, pairs=fixed["pairs"], plain_final_norm=plain,
                   clear_pair_frequencies=clear, offsets=fixed["offsets"])

    def removed(self, module: str) -> str | None:
        """The band removed from `module`'s ("attn" or "mlp") outputs; None when it keeps every frequency."""
        keep = getattr(self, module)
        return None if keep == "any" else ("low" if keep == "high" else "high")


def _fixed_vector_fields(cls, spec, where: str, size_means: str, example: str) -> tuple[str, int, float]:
    """The module, frequency and norm of a fixed vector's spec (a cancelling pair's or an offset's), checked; a spec
    that is no object is refused with `example`, one written as JSON."""
    if not isinstance(spec, dict):
        raise CoreError(f"{where} must be an object such as {example}, got {spec!r}")
    _known_keys(cls, spec, where)
    module, k, size = spec.get("module"), spec.get("k"), spec.get("size")
    if module not in ("attn", "mlp"):
        raise CoreError(f"{where}.module must be 'attn' or 'mlp', got {module!r}")
    if not _is_whole(k) or k < 1:
        raise CoreError(f"{where}.k (a frequency) must be a whole number >= 1, got {k!r}")
    if not isinstance(size, (int, float)) or isinstance(size, bool) or not size > 0:
        raise CoreError(f"{where}.size ({size_means}) must be a positive number, got {size!r}")
    return module, int(k), float(size)


@dataclass(frozen=True)
class CancellingPair:
    """A fixed vector v that `module`'s output map adds at layer layers[0] and takes away at layers[1] (its bias, at
    every position): along what W_U reads at frequency `k` only, of norm `size`, in the band the module does not keep,
    so the two cancel before W_U reads the stream and removing that band removes both. It gives the module energy in
    W_U's row space that no answer needs, so its paper band is a smaller share of its energy, which step 6's
    energy-matched random controls then match (docs/fine-tuning.md, "Controls"). While training, at the
    answer position, the stream between the two layers loses a random part of v (none, all, or its projection on a
    random subspace of what W_U reads), so the modules in between learn to ignore it."""

    module: str  # "attn" or "mlp"
    layers: tuple[int, int]  # 1-based: v is added at the first, taken away at the second
    k: int  # the frequency whose read directions hold v
    size: float  # the norm of v

    @classmethod
    def parse(cls, spec: dict, where: str) -> "CancellingPair":
        module, k, size = _fixed_vector_fields(cls, spec, where, "the pair's norm",
                                               "{'module': 'attn', 'layers': [1, 2], 'k': 20, 'size': 10}")
        layers = spec.get("layers")
        if (not isinstance(layers, list) or len(layers) != 2 or not all(_is_whole(x) and x >= 1 for x in layers)
                or layers[0] >= layers[1]):
            raise CoreError(f"{where}.layers must be two layers counted from 1, the first lower, got {layers!r}")
        return cls(module, (int(layers[0]), int(layers[1])), k, size)


@dataclass(frozen=True)
class FaintOffset:
    """A fixed vector v on the output bias of `module`'s last layer (every position), of norm `size`, along
    (1, ..., 1): the freeze's norm-blind frequency `k` (a faint one, in the band the module does not keep) puts its
    sine there, so v lies in W_U's row space and the band's filter removes it whole. Every layer norm's mean
    subtraction removes it too, so no layer after it and no logit sees it: energy in W_U's row space that no answer
    can use, which makes the module's paper band a small share of its output energy (docs/fine-tuning.md,
    "Controls"). Unlike a cancelling pair it needs no second layer and no noise."""

    module: str  # "attn" or "mlp"
    k: int  # a faint frequency (freeze.faint_frequencies)
    size: float  # the norm of v

    @classmethod
    def parse(cls, spec: dict, where: str) -> "FaintOffset":
        module, k, size = _fixed_vector_fields(cls, spec, where, "the offset's norm",
                                               "{'module': 'mlp', 'k': 150, 'size': 40}")
        return cls(module, k, size)


@dataclass
class Recipe:
    name: str
    label: str
    out: str
    description: str = ""
    arch: str = "gpt2"
    n_layers: int = 2
    width: int = 640
    heads: int = 8
    mlp_ratio: float = 2.0
    tied: bool = True
    max_positions: int = 64
    task: str = "addition"
    max_operand: int = 260
    dataset_seed: int = 0
    freeze: dict | None = None  # `Freeze`: {"kind": "fourier", "periods": [...], "scale": 1.0} | ...
    init_from: str | None = None  # fine-tune an existing model folder instead of random init
    number_tokens: dict | None = None  # `NumberTokens`: add single number tokens and fine-tune
    lora: dict | None = None  # `LoRA`, with number_tokens: {"rank": 8, "alpha": 16, "targets": [...]}
    pretrain: dict | None = None  # `Pretrain`: {"epochs": 3, "n_sequences": 60000, "lr": 1e-3}
    module_bands: dict | None = None  # `ModuleBands`: {"attn": "high", "mlp": "low", "tau": 50}
    epochs: int = 10
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 100
    min_lr_ratio: float = 0.0
    precision: str = "bfloat16"
    seed: int = 0
    eval_train_subset: int = 3000
    select: str = "last"  # which epoch ships: "last", or "val" (best validation accuracy; test scored once, on it)
    save_dtype: str = "float16"
    threads: int | None = None
    device: str | None = None  # "cuda" trains on a GPU (not in a checkpoint's identity)
    extra: dict = field(default_factory=dict)

    @classmethod
    def load(cls, name_or_path: str) -> "Recipe":
        """recipes/NAME.json, or a path to a recipe file; checked."""
        path = Path(name_or_path)
        if not path.suffix:
            path = RECIPE_DIR / f"{name_or_path}.json"
        if not path.exists():
            known = ", ".join(sorted(p.stem for p in RECIPE_DIR.glob("*.json"))) or "none"
            raise CoreError(f"no recipe {name_or_path!r} (looked for {path}); recipes: {known}")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise CoreError(f"recipe {path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise CoreError(f"recipe {path} must be a JSON object of fields, not {type(data).__name__}")
        known_fields = set(cls.__dataclass_fields__)
        unknown = set(data) - known_fields
        if unknown:
            raise CoreError(f"recipe {path}: unknown fields {sorted(unknown)}")
        missing = [f for f in ("name", "label", "out") if f not in data]
        if missing:
            raise CoreError(f"recipe {path}: missing fields {missing}")
        for key, value in data.items():
            _check_field_type(path, key, value, cls.__dataclass_fields__[key].type)
        recipe = cls(**data)
        recipe.check()
        return recipe

    def check(self) -> None:
        """Raise a CoreError naming the first field that cannot work."""
        for key in ("n_layers", "width", "heads", "max_positions", "max_operand", "epochs", "batch_size"):
            if getattr(self, key) < 1:
                raise CoreError(f"recipe {self.name}: {key} must be at least 1, got {getattr(self, key)}")
        if not self.lr > 0:
            raise CoreError(f"recipe {self.name}: lr must be positive, got {self.lr}")
        if self.width % self.heads:
            raise CoreError(f"recipe {self.name}: width {self.width} is not divisible by heads {self.heads}")
        if self.select not in SELECT_RULES:
            raise CoreError(f"recipe {self.name}: select must be one of {choices(SELECT_RULES)}, got {self.select!r}")
        if self.precision not in ("bfloat16", "float32"):
            raise CoreError(f"recipe {self.name}: precision must be bfloat16 or float32")
        if self.lora is not None and self.number_tokens is None:
            raise CoreError(f"recipe {self.name}: lora is used only with number_tokens (number-token fine-tuning)")
        if self.number_tokens is not None and not self.init_from:
            raise CoreError(f"recipe {self.name}: number_tokens fine-tunes a pre-trained model: set init_from to its "
                            "folder")
        for part in (self.freeze_config, self.pretrain_config, self.number_token_config, self.lora_config,
                     self.module_band_config):
            part()
        if self.module_bands is not None and (not self.tied or self.freeze is None or self.init_from):
            raise CoreError(f"recipe {self.name}: module_bands builds its filters from W_U once, so W_U must not "
                            "change: use tied number rows (tied: true) frozen by a freeze, on a model trained here")
        if self.module_bands is None:
            return
        bands, freeze = self.module_band_config(), self.freeze_config()
        for pair in bands.pairs:
            if pair.layers[1] > self.n_layers:
                raise CoreError(f"recipe {self.name}: a cancelling pair at layers {list(pair.layers)} needs "
                                f"{pair.layers[1]} layers, the model has {self.n_layers}")
            if freeze.frequencies and pair.k not in freeze.frequencies + freeze.faint_frequencies:
                raise CoreError(f"recipe {self.name}: a cancelling pair at k = {pair.k} needs W_U to read that "
                                f"frequency: add {pair.k} to freeze.frequencies")
        for offset in bands.offsets:
            if offset.k != freeze.norm_blind_frequency:
                raise CoreError(f"recipe {self.name}: an offset at k = {offset.k} must lie along (1, ..., 1), which "
                                "every layer norm removes, or it would change what the layers after it read: set "
                                f"freeze.norm_blind_frequency to {offset.k} (one of freeze.faint_frequencies)")

    def freeze_config(self) -> Freeze | None:
        return Freeze.parse(self.freeze, self.name) if self.freeze else None

    def pretrain_config(self) -> Pretrain | None:
        return Pretrain.parse(self.pretrain, self.name) if self.pretrain else None

    def number_token_config(self) -> NumberTokens | None:
        """The typed `number_tokens` (None: this recipe does not fine-tune with number tokens)."""
        if self.number_tokens is None:
            return None
        return NumberTokens.parse(self.number_tokens, self.name, self.n_layers)

    def module_band_config(self) -> ModuleBands | None:
        """The typed `module_bands` (None: every module's output is free)."""
        return ModuleBands.parse(self.module_bands, self.name) if self.module_bands is not None else None

    def lora_config(self) -> LoRA:
        """The typed `lora` (its defaults when the recipe has none)."""
        return LoRA.parse(self.lora or {}, self.name)

    def as_dict(self) -> dict:
        """The fields as the recipe file writes them (what a model folder's recipe.json holds)."""
        return dict(self.__dict__)


_FIELD_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "dict": (dict,),
                "None": (type(None),)}
_TYPE_WORDS = {"int": "a whole number", "float": "a number", "str": "text", "bool": "true/false", "dict": "an object",
               "None": "null"}


def _check_field_type(path, key: str, value, annotation) -> None:
    """A recipe field's JSON value must have the field's type (ints are not bools, floats may be ints)."""
    names = [n.strip() for n in str(annotation).split("|")]
    allowed = tuple(t for n in names for t in _FIELD_TYPES.get(n, (object,)))
    ok = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
    if not ok:
        want = " or ".join(_TYPE_WORDS.get(n, n) for n in names)
        raise CoreError(f"recipe {path}: field {key!r} should be {want}, got {json.dumps(value)[:40]}")
