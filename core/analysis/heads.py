"""Attention read head by head: each head's spectrum over the numbers and its phase locking, over every example.

Head h of attention l adds Head(l, h) = z(l, h) W_O^h to the stream at the answer position, and the heads' results
plus W_O's bias are Attn(l) (core.models.names; `ModelParts.head_weights`). A head is read exactly as a module is
(core.runs.measure, core.analysis.phase): its number logits are `Unembed.read(Head(l, h))` = scale * W_U Head(l, h)
(no final norm, no bias), so the heads' logits plus the bias's add up to the layer's attention logits, and

* its spectrum (`head_spectra`) is, per basis, the mean over examples of the per-frequency magnitudes of those logits
  (`frequency_magnitudes`), as `module_spectra` is a module's. Magnitudes do not add: the heads' spectra do not sum
  to the layer's, their logits do.
* its phase locking (`head_locking`) is `locking_table`'s over the heads, at the periods of `PHASE_PERIODS` that the
  number line has: locking R, offset, constant phase, energy share; the null is the same shuffle null (the same seed
  and shuffles give the same permutations of the answers as the run's `phase_locking`), its family the heads: null_95
  is, per period, the 1 - 0.05 / J quantile of the largest R over every head of the model under shuffled answers.
  `locked` (core.analysis.phase) reads the table as it reads the modules'.

`head_bands` splits each head's mean spectrum at a cutoff tau (`band_energy_share`, as `energy_by_band` splits a
module's), `head_locking_grid` gives one period's locking per head with whether it passes the null: the heads x layers
heatmaps' data.

Memory: one batch holds (batch, layers, heads, p) logits; across batches only the spectra's sums (layers x heads x K
per basis) and the phase coefficients (examples x heads x periods) are kept, never examples x heads x p.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from core.analysis.fourier import BASES, fourier_basis, frequency_magnitudes
from core.analysis.phase import NULL_SHUFFLES, PHASE_PERIODS, PhaseAccumulator
from core.errors import CoreError
from core.models.capture import iter_capture
from core.models.names import ATTN
from core.models.parts import RESIDUAL_TOLERANCE, worst_layer_gap

#: Columns of the `head_spectra` table.
HEAD_SPECTRA_COLUMNS = ("basis", "layer", "head", "k", "period", "magnitude")
#: Columns of the `head_locking` table (`locking_table`'s, with layer and head for kind and layer).
HEAD_LOCKING_COLUMNS = ("layer", "head", "period", "k", "locking", "offset", "constant_phase", "energy_share",
                        "null_95", "n", "shuffles")


def head_order(n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    """The (layer, head) order of the heads: layer 1..L (the project's count), head 0..H-1 (TransformerLens')."""
    return [(layer, head) for layer in range(1, int(n_layers) + 1) for head in range(int(n_heads))]


class HeadSums:
    """What the head tables need, added up batch by batch: the spectra's sums and the phase coefficients."""

    def __init__(self, p: int, n_examples: int, n_layers: int, n_heads: int, periods=PHASE_PERIODS):
        self.p, self.n_layers, self.n_heads = int(p), int(n_layers), int(n_heads)
        self.bases = {b: fourier_basis(self.p, b) for b in BASES}
        self.spectra = {b: np.zeros((self.n_layers, self.n_heads, basis.n_freq)) for b, basis in self.bases.items()}
        self.count = 0
        self.phase = PhaseAccumulator(self.p, n_examples, head_order(n_layers, n_heads), periods)

    def add(self, indices, logits: np.ndarray) -> None:
        """logits: (batch, layers, heads, p) number logits of the heads of the examples `indices`."""
        logits = np.asarray(logits, dtype=np.float64)
        want = (len(indices), self.n_layers, self.n_heads, self.p)
        if logits.shape != want:
            raise CoreError(f"internal: expected head logits of shape {want}, got {logits.shape}")
        for b, basis in self.bases.items():
            self.spectra[b] += frequency_magnitudes(basis, logits).sum(0)
        self.phase.add(indices, logits.reshape(len(indices), self.n_layers * self.n_heads, self.p))
        self.count += len(indices)

    def spectra_table(self) -> pd.DataFrame:
        """The `head_spectra` table: mean magnitude per basis, layer, head and frequency k."""
        if self.count == 0:
            raise CoreError("internal: no examples were added to the head spectra")
        frames = []
        for b, total in self.spectra.items():
            basis = self.bases[b]
            ks = basis.frequencies
            L, H, K = total.shape
            frames.append(pd.DataFrame({
                "basis": b,
                "layer": np.repeat(np.arange(1, L + 1), H * K),
                "head": np.tile(np.repeat(np.arange(H), K), L),
                "k": np.tile(ks, L * H),
                "period": np.tile(basis.period(ks), L * H),
                "magnitude": (total / self.count).reshape(-1),
            }))
        return pd.concat(frames, ignore_index=True)[list(HEAD_SPECTRA_COLUMNS)]

    def locking_table(self, answers, seed: int = 0, shuffles: int = NULL_SHUFFLES) -> pd.DataFrame:
        """The `head_locking` table: `locking_table`'s rows, its (kind, layer) the heads' (layer, head)."""
        table = self.phase.table(np.asarray(answers), seed=seed, shuffles=shuffles)
        table = table.rename(columns={"kind": "layer", "layer": "head"}).astype({"layer": np.int64, "head": np.int64})
        return table[list(HEAD_LOCKING_COLUMNS)]


def head_logits(unembed, z, weights):
    """The heads' number logits, read as a module's (`Unembed.read`): z (batch, layers, heads, head_dim) and the
    layers' W_O head by head `weights` (layers, heads, head_dim, width) give (batch, layers, heads, p) float32."""
    results = torch.einsum("blhd,lhdw->blhw", z.to(weights.device).float(), weights)
    return unembed.read(results)


def check_head_sum(z, weights, bias, attn, tolerance: float) -> None:
    """Fail clearly unless the heads' results plus W_O's bias are the hooked attention output at every layer (to
    `tolerance` of its norm): a layout whose output projection is not the last step of its attention module."""
    results = torch.einsum("blhd,lhdw->blw", z.to(weights.device).float(), weights) + bias
    attn = attn.to(weights.device).float()
    worst, share = worst_layer_gap(results - attn, attn)
    if share > tolerance:
        raise CoreError(
            f"the heads' results plus the output projection's bias differ from attention {worst + 1}'s output by "
            f"{share:.1%} of it (allowed {tolerance:.1%}): this model's attention does something after "
            "its output projection, so its heads cannot be read one by one"
        )


def read_heads(loaded, texts, answers, p: int, batch_size: int = 32, seed: int = 0, shuffles: int = NULL_SHUFFLES,
               progress=None) -> dict[str, pd.DataFrame]:
    """{"head_spectra", "head_locking"} over every one of `texts` (the prompts as the model reads them, answers the
    true sums), in one streaming capture pass (module docstring). `seed` and `shuffles`: those of the run's
    `phase_locking`, so the heads' null shuffles the answers as the modules' does. Refused for a model whose heads
    cannot be read (`ModelParts.require_heads`)."""
    parts = loaded.parts
    parts.require_heads("reading attention head by head")
    answers = np.asarray(answers)
    if len(answers) != len(texts):
        raise CoreError(f"{len(texts)} prompts but {len(answers)} answers: give one answer per prompt")
    unembed = loaded.unembed(p)
    device = unembed.weight.device
    L = parts.n_layers
    weights = torch.stack([parts.head_weights(layer) for layer in range(1, L + 1)]).to(device)
    bias = torch.stack([b if (b := parts.head_bias(layer)) is not None else torch.zeros(weights.shape[-1])
                        for layer in range(1, L + 1)]).to(device)
    half = loaded.model.get_output_embeddings().weight.dtype in (torch.float16, torch.bfloat16)
    tolerance = RESIDUAL_TOLERANCE["half" if half else "float32"]
    sums = HeadSums(p, len(texts), L, parts.n_heads)
    with torch.no_grad():
        for cb in iter_capture(loaded, list(texts), batch_size, streams=(ATTN,), progress=progress, desc="heads",
                               heads=True):
            check_head_sum(cb.z, weights, bias, cb.attn, tolerance)
            sums.add(cb.indices, head_logits(unembed, cb.z, weights).double().cpu().numpy())
    return {"head_spectra": sums.spectra_table(), "head_locking": sums.locking_table(answers, seed, shuffles)}
