"""The measurement pass of a run (stage 1 of `core.runs.precompute`): one streaming capture over the split
that gives the per-example results, the logit lens, the mean module spectra and their W_U-alone
baseline, the sampled module logits and final waves, and (core.runs.phase_run) the phase tables.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from core.analysis.evaluation import answer_losses
from core.analysis.fourier import BASES, fourier_basis, frequency_magnitudes, top_components
from core.models.capture import iter_capture
from core.models.names import ATTN, FINAL, MLP, RESID, STREAMS
from core.runs.phase_run import PhaseStage
from core.tasks import subsample

WAVES_KEPT = 10  # top-k waves stored per sampled example (the dashboard picks k <= this)


def measure(loaded, examples, texts, p: int, opts, running: str | None, log=print, energy=None) -> dict:
    """The capture pass: per-example results, logit-lens accuracy, module spectra, sampled logits.
    `opts`: the run's core.runs.precompute.PrecomputeOptions (n_sample, dataset_seed, batch_size, progress).
    `energy`: an accumulator with `add(batch)` (core.runs.ablation_grid.ModuleEnergy) fed every captured batch, so
    the grid's energy shares need no capture pass of their own."""
    sample_ids = _sample_ids(examples, opts.n_sample, running, opts.dataset_seed)
    sums = MeasureSums(loaded, examples, p, sample_ids)
    for cb in iter_capture(loaded, texts, opts.batch_size, progress=opts.progress, desc="measure"):
        sums.add(cb)
        if energy is not None:
            energy.add(cb)
    return sums.tables(texts, opts.dataset_seed)


class MeasureSums:
    """What the capture pass adds up, batch by batch, and the tables it makes of the sums at the end."""

    def __init__(self, loaded, examples, p: int, sample_ids: set[str]):
        self.examples, self.p, self.L = examples, p, loaded.n_layers
        L = self.L
        self.unembed = loaded.unembed(p)  # final norm, W_U number rows, bias, scale, soft-cap
        self.device = self.unembed.weight.device  # W_U: (p, D) float32 on the unembedding's device
        self.number_ids = torch.as_tensor(loaded.numbers.ids_for(p), device=self.device)
        self.bases = {b: fourier_basis(p, b) for b in BASES}
        K = {b: self.bases[b].n_freq for b in BASES}
        self.spectra = {(m, b): np.zeros((L + 1 if m == RESID else L, K[b])) for m in STREAMS for b in BASES}
        self.sq_norms = {m: np.zeros(L + 1 if m == RESID else L) for m in STREAMS}  # sum ||x||^2
        self.layer_hits = {fn: np.zeros((L + 1, 3)) for fn in (False, True)}  # exact, within 2, within 10
        self.answers = np.array([e.answer for e in examples])
        n = len(examples)
        self.predictions = np.zeros(n, dtype=np.int64)
        self.losses = np.zeros(n)
        self.top_is_number = np.zeros(n, dtype=bool)
        self.sample_rows = {i for i, e in enumerate(examples) if e.id in sample_ids}
        self.logit_rows, self.wave_rows = [], []
        self.phase = PhaseStage(p, n, L)

    def add(self, cb) -> None:
        """One captured batch: logit-lens hits, module spectra, the phase sums, predictions and losses."""
        idx, unembed = cb.indices, self.unembed
        ans = torch.as_tensor(self.answers[idx], device=self.device)
        lens = {False: unembed.logits(cb.resid, final_norm=False)}
        lens[True] = unembed.logits(cb.resid, final_norm=True) if unembed.norm is not None else lens[False]
        for fn, logits in lens.items():
            pred = logits.argmax(-1)  # (B, L+1)
            err = (pred - ans[:, None]).abs()
            hits = torch.stack([(err == 0).sum(0), (err <= 2).sum(0), (err <= 10).sum(0)], -1)
            self.layer_hits[fn] += hits.cpu().numpy()
        module_logits = {m: unembed.read(getattr(cb, m)) for m in STREAMS}
        for m in self.sq_norms:
            self.sq_norms[m] += (getattr(cb, m).float() ** 2).sum(-1).sum(0).cpu().numpy()
        arrays = {m: logits.double().cpu().numpy() for m, logits in module_logits.items()}  # once, for every use
        for m, arr in arrays.items():
            for b in BASES:
                self.spectra[(m, b)] += frequency_magnitudes(self.bases[b], arr).sum(0)
        final = cb.logits.float()
        number_logits = final[:, self.number_ids]
        self.phase.add(idx, arrays[RESID], arrays[ATTN], arrays[MLP], number_logits.double().cpu().numpy())
        self.predictions[idx] = number_logits.argmax(-1).cpu().numpy()
        self.losses[idx] = answer_losses(final, self.number_ids[ans]).cpu().numpy()
        self.top_is_number[idx] = torch.isin(final.argmax(-1), self.number_ids).cpu().numpy()
        for row_in_batch, i in enumerate(idx):
            if i in self.sample_rows:
                self._add_sample(self.examples[i].id, row_in_batch, arrays, number_logits)

    def _add_sample(self, eid: str, row_in_batch: int, arrays: dict, number_logits) -> None:
        """A sampled example keeps its module logits at every layer and its final logits' top waves."""
        for m, arr in arrays.items():
            vals = arr[row_in_batch]  # (layers, p)
            first = 0 if m == RESID else 1
            for l in range(vals.shape[0]):
                self.logit_rows.append((eid, m, l + first, vals[l]))
        fin = number_logits[row_in_batch].cpu().numpy()
        self.logit_rows.append((eid, FINAL, self.L, fin))
        for b in BASES:
            for rank, wave in enumerate(top_components(self.bases[b], fin, WAVES_KEPT), start=1):
                self.wave_rows.append((eid, b, rank, wave.k, wave.period, wave.magnitude, wave.values))

    def tables(self, texts, seed: int) -> dict:
        """Every table of the pass (with the phase stage's), from the sums."""
        n, examples = len(self.examples), self.examples
        baseline = module_spectra_baseline(
            self.unembed,
            self.bases,
            {key: total / n for key, total in self.spectra.items()},
            {m: np.sqrt(v / n) for m, v in self.sq_norms.items()},
            seed=seed,
        )
        return {
            **self.phase.tables(self.answers, [e.id for e in examples], seed),
            "examples": self.examples_table(texts),
            "layer_accuracy": self.layer_accuracy_table(),
            "module_spectra": self.module_spectra_table(),
            "module_spectra_baseline": baseline,
            **self.sampled_tables(),
        }

    def examples_table(self, texts) -> pd.DataFrame:
        examples = self.examples
        return pd.DataFrame(
            {
                "id": [e.id for e in examples],
                "split": [e.split for e in examples],
                "a": [e.a for e in examples],
                "b": [e.b for e in examples],
                "answer": self.answers,
                "phrasing": [e.phrasing for e in examples],
                "prompt": list(texts),
                "prediction": self.predictions,
                "correct": self.predictions == self.answers,
                "loss": self.losses,
                "top_token_is_number": self.top_is_number,
                "in_sample": [i in self.sample_rows for i in range(len(examples))],
            }
        )

    def layer_accuracy_table(self) -> pd.DataFrame:
        n = len(self.examples)
        rows = []
        for fn, hits in self.layer_hits.items():
            for l in range(self.L + 1):
                rows.append(
                    {
                        "layer": l,
                        "final_norm": fn,
                        "exact": hits[l, 0] / n,
                        "within_2": hits[l, 1] / n,
                        "within_10": hits[l, 2] / n,
                        "n": n,
                    }
                )
        return pd.DataFrame(rows)

    def module_spectra_table(self) -> pd.DataFrame:
        n = len(self.examples)
        frames = []
        for (m, b), total in self.spectra.items():
            ks = self.bases[b].frequencies
            first = 0 if m == RESID else 1
            for l in range(total.shape[0]):
                frames.append(
                    pd.DataFrame(
                        {
                            "basis": b,
                            "module": m,
                            "layer": l + first,
                            "k": ks,
                            "period": self.bases[b].period(ks),
                            "magnitude": total[l] / n,
                        }
                    )
                )
        return pd.concat(frames, ignore_index=True)

    def sampled_tables(self) -> dict:
        """module_logits and final_waves of the sampled examples (values at float16 precision)."""
        numbers = np.arange(self.p)
        logits_frame = pd.concat(
            [
                pd.DataFrame({"example_id": eid, "module": m, "layer": l, "number": numbers, "logit": _half(v)})
                for eid, m, l, v in self.logit_rows
            ],
            ignore_index=True,
        )
        waves_frame = pd.concat(
            [
                pd.DataFrame(
                    {
                        "example_id": eid,
                        "basis": b,
                        "rank": rank,
                        "k": k,
                        "period": period,
                        "magnitude": mag,
                        "number": numbers,
                        "value": _half(values),
                    }
                )
                for eid, b, rank, k, period, mag, values in self.wave_rows
            ],
            ignore_index=True,
        )
        for col in ("module", "example_id"):
            logits_frame[col] = logits_frame[col].astype("category")
        return {"module_logits": logits_frame, "final_waves": waves_frame}


BASELINE_DRAWS = 2000


def module_spectra_baseline(
    unembed, bases: dict, module_means: dict, rms_norms: dict, draws: int = BASELINE_DRAWS, seed: int = 0
) -> pd.DataFrame:
    """The spectrum W_U alone gives: random vectors read through the unembedding, per module and layer.

    x is drawn isotropic (N(0, I/D)); what W_U reads of it is uniform over W_U's row space, so
    F W_U x has the spectral shape that W_U itself imposes on anything read through it. When W_U
    has low rank (tied frozen number rows) that shape is itself sparse: a module spectrum shows a
    preference of the module's own only where it rises above it.

    The baseline is scaled per module and layer to the same total energy as the module's mean
    spectrum (`module_means[(module, basis)]`, (layers, K)): sum_k baseline_k^2 = sum_k
    magnitude_k^2 (match = "energy"). So `magnitude / baseline` says how much more (or less) of its
    W_U-visible energy a module puts at k than W_U's shape would. magnitude_p95: the 95th
    percentile of single random vectors at k, scaled the same way; rms_norm: the module outputs'
    root-mean-square norm (for reference).
    """

    D = unembed.width
    gen = torch.Generator(device="cpu").manual_seed(int(seed) + 7919)
    x = torch.randn(draws, D, generator=gen, dtype=torch.float32) / np.sqrt(D)  # E||x||^2 = 1
    unit_logits = unembed.read(x).double().cpu().numpy()  # (draws, p)
    frames = []
    for b, basis in bases.items():
        mags = frequency_magnitudes(basis, unit_logits)  # (draws, K)
        mean, p95 = mags.mean(0), np.percentile(mags, 95, axis=0)
        unit_energy = float((mean**2).sum())
        ks = basis.frequencies
        for m, rms in rms_norms.items():
            first = 0 if m == RESID else 1
            means = module_means[(m, b)]
            for l, r in enumerate(rms):
                scale = float(np.sqrt((means[l] ** 2).sum() / unit_energy)) if unit_energy > 0 else 0.0
                frames.append(
                    pd.DataFrame(
                        {
                            "basis": b,
                            "module": m,
                            "layer": l + first,
                            "k": ks,
                            "period": basis.period(ks),
                            "magnitude": scale * mean,
                            "magnitude_p95": scale * p95,
                            "rms_norm": float(r),
                            "match": "energy",
                            "draws": draws,
                        }
                    )
                )
    return pd.concat(frames, ignore_index=True)


def _half(values: np.ndarray) -> np.ndarray:
    """float16 precision (nothing a chart shows is lost), stored as float32 so every reader copes."""
    return np.asarray(values, dtype=np.float16).astype(np.float32)


def _sample_ids(examples, n_sample: int, running: str | None, seed: int) -> set[str]:
    picked = subsample(examples, n_sample, seed + 1, [running] if running else [])
    return {e.id for e in picked}
