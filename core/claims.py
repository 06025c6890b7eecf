"""The paper's claims, one per step of the story, next to what a run measures, with a verdict.

Every sentence the dashboard says about a run is built here from that run's tables, so a caption
never asserts what the data beside it does not show. A claim carries:

* `paper`: the paper's finding, with its model and number (quoted from core.paper / PAPER.md);
* `measured`: this run's corresponding measurement, computed from its cached tables;
* `verdict`: "agrees", "partly", "does not" or "not tested" (where the run cannot test the claim,
  e.g. features that were planted by hand), by a rule written next to each claim;
* `reason`: one line on why, where it is known (two layers; a low-rank W_U; planted features);
* `numbers`: the figures behind `measured`, for tests and downloads.

A `run` here is anything with `.manifest` (dict) and `.table(name)` (a DataFrame): the dashboard's
Run, or `TableRun` over a cache folder. No Streamlit in this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from core.errors import CoreError
from core.origin import describe_run, run_origin
from core.paper import ACCURACY, OUTLIER_PERIODS, TABLE1_GPT2_XL, TABLE1_TAU

VERDICTS = ("agrees", "partly", "does not", "not tested")
#: How well a verdict shows a step (to pick the shipped run that shows it best).
VERDICT_SCORE = {"agrees": 3, "partly": 2, "not tested": 1, "does not": 0}
SHORT_PERIODS = (2.0, 2.5, 5.0, 10.0)


@dataclass
class Claim:
    step: str
    paper: str
    measured: str
    verdict: str
    reason: str = ""
    numbers: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise CoreError(f"internal: unknown verdict {self.verdict!r}")

    @property
    def score(self) -> int:
        return VERDICT_SCORE[self.verdict]


class TableRun:
    """A run read straight from a cache folder (for scripts and tests)."""

    def __init__(self, cache_dir, name: str):
        from core.cache import read_manifest

        self.cache_dir, self.name = str(cache_dir), name
        self.manifest = read_manifest(cache_dir, name)
        self.label = self.manifest.get("label", name)
        self._tables: dict[str, pd.DataFrame] = {}

    def table(self, name: str) -> pd.DataFrame:
        from core.cache import read_table

        if name not in self._tables:
            self._tables[name] = read_table(self.cache_dir, self.name, name)
        return self._tables[name]


# ----------------------------------------------------------------------------- helpers


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _seeds(n) -> str:
    n = int(n)
    return f"{n} seed" + ("s" if n != 1 else "")


def _periods(values) -> str:
    return ", ".join(f"{float(t):.3g}" for t in values)


def _running(run) -> pd.Series:
    """The example the Tour's charts show (core.views.running_example); its id is the Series' name."""
    from core.views import running_example

    return running_example(run.table("examples"))


def _is_short(period: float) -> bool:
    return any(abs(period - t) < 1e-6 for t in SHORT_PERIODS)


def _structural_reason(run, spectra: bool = False) -> str:
    """What about this model limits what it can show: few layers; for spectra, a low-rank unembedding."""
    m = run.manifest
    bits = []
    if isinstance(m.get("n_layers"), int) and m["n_layers"] <= 4:
        bits.append(f"only {m['n_layers']} layers, so each module has to do both jobs")
    rank = m.get("unembedding_rank")
    if spectra and isinstance(rank, int) and rank <= 32:
        bits.append(f"W_U's number rows have rank {rank}, so every spectrum read through it is sparse by construction")
    return "; ".join(bits)


# ----------------------------------------------------------------------------- the claims


def _validation_accuracy(run) -> tuple[float | None, str]:
    """(accuracy, where) on the validation split from the run's training log: the last epoch of the shipped seed."""
    if "training_log" not in (run.manifest.get("tables") or {}):
        return None, ""
    log = run.table("training_log")
    val = log[log["split"] == "val"]
    if val.empty:
        return None, ""
    if "width" in val.columns and (val["width"] == run.manifest.get("width")).any():
        val = val[val["width"] == run.manifest.get("width")]  # a seed study at other widths shares the log
    recipe = run_origin(run.manifest)["recipe"] or {}
    seed = recipe.get("seed", int(val["seed"].min()))
    mine = val[val["seed"] == seed] if (val["seed"] == seed).any() else val[val["seed"] == val["seed"].min()]
    last = mine[mine["epoch"] == mine["epoch"].max()]
    return float(last["accuracy"].mean()), f"epoch {int(last['epoch'].iloc[0])} of seed {int(last['seed'].iloc[0])}'s training log"


def selection_note(run) -> str:
    """What the reader must know about how the model was chosen: which split saw it during training."""
    origin = run_origin(run.manifest)
    recipe = origin["recipe"] or {}
    notes = []
    if (recipe.get("lora") or {}).get("init_delta"):
        notes.append("this stage was started after the earlier stage's test score was known, so its test score is not a clean "
                     "held-out figure")
    if "training_log" in (run.manifest.get("tables") or {}):
        log = run.table("training_log")
        if (log["split"] == "test").any():
            notes.append("the training log scored the test split at every epoch")
    return "; ".join(notes)


def claim_accuracy(run) -> Claim:
    """Step 1. Paper: fine-tuned GPT-2-XL answers 99.74% of test prompts.
    Judged on the validation split (models are chosen on it): the last epoch of the shipped seed in the
    run's training log. A model not trained here (no training log) was not selected on any split of
    ours, so its own split's accuracy is used, and the sentence says which split.
    Verdict: agrees at >= 99%, partly at >= 90%, else does not."""
    ex = run.table("examples")
    test_acc = float(ex["correct"].mean())
    split = (run.manifest.get("task") or {}).get("split", "test")
    val, where = _validation_accuracy(run)
    judged = val if val is not None else test_acc
    r = _running(run)
    verdict = "agrees" if judged >= 0.99 else "partly" if judged >= 0.90 else "does not"
    origin = run_origin(run.manifest)
    reason = ""
    if verdict != "agrees" and origin["kind"] == "scratch":
        reason = (
            "trained from scratch without Fourier features for a few CPU epochs; the paper's from-scratch "
            f"GPT-2-small also stays low ({ACCURACY['GPT-2-small from scratch']}%)"
        )
    elif verdict != "agrees" and origin["kind"] == "self-pretrained":
        reason = (
            "pre-trained here on a small synthetic corpus, then fine-tuned for a few CPU epochs: no Fourier features "
            "appeared in its embeddings (step 7)"
        )
    elif verdict != "agrees" and origin["kind"] == "planted" and not run.manifest.get("model", {}).get("tied_embeddings", True):
        reason = "the sinusoids are on the input side only; the output rows were learned from scratch"
    note = selection_note(run)
    if note:
        reason = f"{reason}; {note}" if reason else note
    said = f"{int(r['prediction'])}" + (" (right)" if bool(r["correct"]) else f" (wrong; the answer is {int(r['answer'])})")
    judged_text = (f"On the validation split it answers {_pct(val)} right ({where}); " if val is not None else
                   f"No model was selected on our splits; ")
    measured = (f"{judged_text}on the {split} split, scored once for this run, {_pct(test_acc)} of {len(ex)} prompts. "
                f"To {r.name.replace('+', ' + ')} it says {said}.")
    return Claim(
        "accuracy",
        f"Fine-tuned GPT-2-XL answers {ACCURACY['GPT-2-XL fine-tuned']}% of the test prompts right.",
        measured,
        verdict,
        reason,
        {"accuracy": test_acc, "validation_accuracy": val, "judged_on": "val" if val is not None else split, "n": len(ex),
         "prediction": int(r["prediction"]), "answer": int(r["answer"])},
    )


#: The approximate-before-exact gap must open by this fraction of the depth (GPT-2-XL: layers 20-30 of 48).
LENS_DEPTH = 0.75


def claim_logit_lens(run, final_norm: bool = False) -> Claim:
    """Step 2. Paper: in GPT-2-XL (48 layers) layers 20-30 are rarely exact but usually within 10.
    Measured: per layer, within ±10 minus exact (the gap), over the layers before the last.
    Verdict: agrees when some layer l <= 0.75 L (LENS_DEPTH) is within ±10 for at least half the
    prompts and exact for at least 25 points fewer; partly when the largest gap before the last layer
    is at least 10 points (at any depth); else does not."""
    table = run.table("layer_accuracy")
    acc = table[table["final_norm"] == final_norm].sort_values("layer")
    other = table[(table["final_norm"] != final_norm) & (table["layer"] == acc["layer"].max())]
    L = int(acc["layer"].max())
    inner = acc[acc["layer"] < L]
    gap = (inner["within_10"] - inner["exact"]) if len(inner) else pd.Series([0.0])
    best = inner.loc[gap.idxmax()] if len(inner) else acc.iloc[-1]
    g = float(gap.max()) if len(inner) else 0.0
    early = inner[(inner["layer"] <= LENS_DEPTH * L) & (inner["within_10"] >= 0.5) & (inner["within_10"] - inner["exact"] >= 0.25)]
    if len(early):
        verdict = "agrees"
        best = early.loc[(early["within_10"] - early["exact"]).idxmax()]
        g = float(best["within_10"] - best["exact"])
    elif g >= 0.10:
        verdict = "partly"
    else:
        verdict = "does not"
    last = acc.iloc[-1]
    measured = (
        f"Largest gap before the last layer: at layer {int(best['layer'])} of {L}, {_pct(best['within_10'])} within ±10 but "
        f"{_pct(best['exact'])} exact; at the last layer, {_pct(last['exact'])} exact"
    )
    if len(other):  # the same layer read the other way, so the lens's last layer is not mistaken for the model's answer
        how = ("W_U applied directly, as the paper does; through the final norm, as the model reads it:" if not final_norm
               else "through the final norm; W_U applied directly, as the paper does:")
        measured += f" ({how} {_pct(other['exact'].iloc[0])})"
    measured += "."
    reason = ""
    if verdict == "does not":
        reason = f"with {L} layers there is no middle: the answer is either not there yet or already exact"
    elif verdict == "partly" and g >= 0.25 and float(best["within_10"]) >= 0.5:
        reason = (f"the gap opens only at layer {int(best['layer'])} of {L}, after {LENS_DEPTH:.0%} of the depth; in GPT-2-XL "
                  "it is there from layer 20 of 48")
    elif verdict == "partly":
        reason = "the answer is approximated before it is exact, but not for most prompts"
    return Claim(
        "logit_lens",
        "In fine-tuned GPT-2-XL (48 layers), layers 20 to 30 are rarely exactly right but usually within ±10: the "
        "answer is approximated first and made exact only in the last layers.",
        measured,
        verdict,
        reason,
        {"layer": int(best["layer"]), "gap": g, "within_10": float(best["within_10"]), "exact": float(best["exact"]),
         "depth": LENS_DEPTH},
    )


def module_top_periods(run, example_id: str | None = None, basis: str = "paper") -> pd.DataFrame:
    """For one sampled example, the dominant period of each attention / MLP output's logits.

    Columns: module, layer, k, period, share (of the module's Fourier energy, constant excluded).
    """
    from core.fourier import fourier_basis, frequency_magnitudes

    logits = run.table("module_logits")
    example_id = example_id or str(_running(run).name)
    sub = logits[(logits["example_id"] == example_id) & logits["module"].isin(["attn", "mlp"])]
    if sub.empty:
        raise CoreError(f"no cached module logits for example {example_id}")
    p = int(run.manifest["p"])
    b = fourier_basis(p, basis)
    rows = []
    for (module, layer), g in sub.groupby(["module", "layer"], observed=True):
        v = g.sort_values("number")["logit"].to_numpy(dtype=float)
        if len(v) != p:
            continue
        mags = frequency_magnitudes(b, v)
        k = int(np.argmax(mags)) + 1
        rows.append({"module": str(module), "layer": int(layer), "k": k, "period": float(b.period(k)),
                     "share": float(mags[k - 1] ** 2 / max((mags**2).sum(), 1e-30))})
    return pd.DataFrame(rows).sort_values(["layer", "module"]).reset_index(drop=True)


_NAMES = {"attn": "attention", "mlp": "MLP", "resid": "the residual stream after layer", "final": "the final logits"}
_MOD = {2.0: "parity (mod 2)", 2.5: "mod 2.5", 5.0: "mod 5", 10.0: "mod 10", 104.0: "mod 104", 520.0: "mod 520"}


def module_locks(run) -> pd.DataFrame:
    """The attention and MLP rows of `phase_locking` that lock (core.phase.locked) at a short period, strongest first."""
    from core.phase import locked

    t = run.table("phase_locking")
    t = t[t["kind"].isin(["attn", "mlp"]) & t["period"].map(_is_short)]
    return t[locked(t)].sort_values("locking", ascending=False).reset_index(drop=True)


def _who(row) -> str:
    return f"{_NAMES[row['kind']]} {int(row['layer'])}"


def claim_module_waves(run) -> Claim:
    """Step 3. Paper: for 15 + 93 in GPT-2-XL, MLP 33 favours even numbers (period 2) and attention 40
    the numbers congruent to 108 mod 5 and 10. One example cannot tell a computation from a bias, so the
    measurement is phase locking over every example of the split (`phase_locking`, core.phase): a module
    *locks* to period T when its wave's peak follows the answer mod T (R above the family-wise shuffle
    threshold) and at least 5% of its non-constant energy is at T.
    Verdict: agrees when some MLP locks to T = 2 and some attention to T = 5 or 10; partly when any
    attention or MLP output locks to 2, 2.5, 5 or 10; else does not. When the table rests only on the
    run's cached sample (its model's weights are not here), "does not" becomes "not tested": a few
    examples can show a lock but not its absence."""
    table = run.table("phase_locking")
    locks = module_locks(run)
    n = int(table["n"].iloc[0])
    whole = bool((run.manifest.get("phase_locking") or {}).get("whole_split", True))
    mlp2 = locks[(locks["kind"] == "mlp") & np.isclose(locks["period"], 2.0)]
    attn510 = locks[(locks["kind"] == "attn") & (np.isclose(locks["period"], 5.0) | np.isclose(locks["period"], 10.0))]
    if len(mlp2) and len(attn510):
        verdict = "agrees"
    elif len(locks):
        verdict = "partly"
    else:
        verdict = "does not" if whole else "not tested"
    said = []
    for kind in ("mlp", "attn"):
        mine = locks[locks["kind"] == kind]
        for layer in list(dict.fromkeys(mine["layer"]))[:2]:  # the two strongest modules of each kind
            rows = mine[mine["layer"] == layer].sort_values("period", ascending=False)
            what = ", ".join(f"{_MOD[float(r.period)]} (R = {r.locking:.2f})" for r in rows.itertuples())
            said.append(f"{_NAMES[kind]} {int(layer)} tracks the answer {what}")
    for kind, periods, what in (("attn", (5.0, 10.0), "mod 5 or 10"), ("mlp", (2.0,), "parity")):
        if not locks[(locks["kind"] == kind) & locks["period"].isin(periods)].shape[0]:
            said.append(f"no {_NAMES[kind]} layer tracks {what}")
    final = table[(table["kind"] == "final") & table["period"].map(_is_short)].sort_values("locking", ascending=False)
    examples = f"all {n} {run.manifest.get('task', {}).get('split', 'test')} examples" if whole else f"only the {n} cached examples"
    measured = f"Over {examples}: " + "; ".join(said) + "."
    if len(final):
        f = final.iloc[0]
        measured += f" The final logits track the answer {_MOD[float(f['period'])]} at R = {f['locking']:.2f}."
    reason = ""
    mlp_short = locks[(locks["kind"] == "mlp") & locks["period"].isin([5.0, 10.0])]
    attn_two = locks[(locks["kind"] == "attn") & np.isclose(locks["period"], 2.0)]
    if verdict == "partly" and len(mlp_short) and not len(attn510):
        reason = f"reversed: {_who(mlp_short.iloc[0])} tracks {_MOD[float(mlp_short.iloc[0]['period'])]}, no attention layer does"
        if len(attn_two) and not len(mlp2):
            reason += f", and parity is carried by {_who(attn_two.iloc[0])}, not an MLP"
    elif verdict == "partly":
        reason = "short waves follow the answer, but not split between the modules as in GPT-2-XL"
    elif verdict == "does not":
        reason = "no attention or MLP wave of period 2, 2.5, 5 or 10 follows the answer beyond chance"
    if not whole:
        reason = (reason + "; " if reason else "") + (
            f"only {n} examples could be read (the model's weights are not here), so the chance threshold is high "
            f"(R > {table['null_95'].min():.2f})")
    consts = table[table["kind"].isin(["attn", "mlp"]) & table["period"].map(_is_short) & (table["energy_share"] >= 0.05)
                   & (table["constant_phase"] > 0.9) & (table["locking"] <= table["null_95"])]
    return Claim(
        "module_waves",
        "For 15 + 93, GPT-2-XL's MLP 33 favours every even number (period 2) and its attention 40 the numbers that end "
        "like 108 (periods 5 and 10).",
        measured,
        verdict,
        reason,
        {"locks": locks.to_dict("records"), "n": n, "whole_split": whole,
         "constant_waves": consts[["kind", "layer", "period", "constant_phase", "energy_share"]].to_dict("records")},
    )


def claim_spectra(run, tau: int = TABLE1_TAU, last_layers: int = 15) -> Claim:
    """Step 4. Paper: the module logits of GPT-2-XL's last 15 layers have outliers at T = 2, 2.5, 5, 10;
    MLPs carry strong low frequencies, attention does not.
    Measured (paper basis, last min(15, L) layers): the share of energy below tau for MLP and attention,
    and the frequencies above the W_U-alone baseline. Verdict: agrees when the MLP's low share exceeds
    attention's by 10 points or more and attention's top periods include 2, 2.5, 5 or 10; partly when
    one of the two holds; else does not."""
    from core.fourier import band_energy_share
    from core.views import top_periods_by_module

    spec = run.table("module_spectra")
    spec = spec[spec["basis"] == "paper"]
    L = int(run.manifest["n_layers"])
    keep = list(range(max(1, L - last_layers + 1), L + 1))
    shares, tops = {}, {}
    for m in ("mlp", "attn"):  # the same mean spectra as the Tour's bar chart (core.views.top_periods_by_module)
        mean = top_periods_by_module(spec, "paper", m, last_layers=len(keep), top=int(spec["k"].max()))
        shares[m] = band_energy_share(mean.sort_values("k")["magnitude"].to_numpy(), tau)[0]
        tops[m] = [float(t) for t in mean["period"].head(5)]
    above = {}
    if "module_spectra_baseline" in (run.manifest.get("tables") or {}):
        from core.views import BASELINE_RATIO

        base = run.table("module_spectra_baseline")
        base = base[(base["basis"] == "paper") & base["layer"].isin(keep)]
        merged = spec[spec["layer"].isin(keep)].merge(
            base[["module", "layer", "k", "magnitude"]].rename(columns={"magnitude": "baseline"}), on=["module", "layer", "k"]
        )
        for m in ("mlp", "attn"):
            mm = merged[merged["module"] == m]
            mean = mm.groupby("k")[["magnitude", "baseline"]].mean()
            above[m] = [float(t) for t in spec.drop_duplicates("k").set_index("k").loc[
                mean.index[mean["magnitude"] >= BASELINE_RATIO * mean["baseline"]], "period"]]
    mlp_low = shares["mlp"] >= shares["attn"] + 0.10
    attn_short = any(_is_short(t) for t in tops["attn"])
    verdict = "agrees" if (mlp_low and attn_short) else "partly" if (mlp_low or attn_short) else "does not"
    layers = f"layer {keep[0]}" if len(keep) == 1 else f"layers {keep[0]}-{keep[-1]}"
    measured = (
        f"Over {layers}: {_pct(shares['mlp'])} of the MLP's energy and {_pct(shares['attn'])} of attention's lies below "
        f"tau = {tau}; top periods MLP {_periods(tops['mlp'])}, attention {_periods(tops['attn'])}."
    )
    if above:
        def listed(ts):
            return f"{len(ts)}" + (f" (periods {_periods(sorted(ts, reverse=True)[:6])}{' …' if len(ts) > 6 else ''})" if ts else "")

        measured += (
            f" Frequencies with at least twice what W_U alone gives random vectors of the same energy: MLP "
            f"{listed(above['mlp'])}, attention {listed(above['attn'])}, of {spec['k'].max()}."
        )
    return Claim(
        "spectra",
        "In GPT-2-XL's last 15 layers the module logits have outliers at periods 2, 2.5, 5 and 10; MLPs also carry "
        "strong low frequencies (size), attention does not (last digit).",
        measured,
        verdict,
        _structural_reason(run, spectra=True) if verdict != "agrees" else "",
        {"low_share": shares, "top_periods": tops, "above_baseline": above, "layers": keep},
    )


def wilson_upper(share: float, n: int, z: float = 1.96) -> float:
    """Upper end of the 95% Wilson score interval of a share observed on n examples."""
    if n <= 0:
        return 1.0
    centre = share + z * z / (2 * n)
    spread = z * np.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return float(min(1.0, (centre + spread) / (1 + z * z / n)))


#: Share of examples whose top-5 (top-10) sum must peak at the answer for "agrees" ("partly").
WAVES_AGREE, WAVES_PARTLY = 0.75, 0.75


def claim_waves(run, top: int = 5) -> Claim:
    """Step 5. Paper: the top-5 Fourier components of the final logits for 15 + 93: long waves put a
    bump near 108, short ones (periods 2, 5, 10) pick the exact number; their sum peaks at 108.
    Measured over every example of the split (`wave_peaks`): the share whose top-5 sum (paper basis)
    peaks at the answer, and the same for the top 10; the running example's periods are shown too.
    Verdict: agrees when the top-5 sum peaks at the answer for at least 75% of the examples; partly
    when the top-10 sum does for at least 75%, or the top-5 for at least 25%; else does not. When the
    table rests on the run's cached sample only, "does not" becomes "not tested" if the 95% Wilson
    interval of either share reaches its "partly" threshold (too few examples to rule it out)."""
    peaks = run.table("wave_peaks")
    share = {int(t): float(g["at_answer"].mean()) for t, g in peaks.groupby("top")}
    n = int((peaks["top"] == top).sum())
    s5, s10 = share.get(top, 0.0), share.get(10, 0.0)
    verdict = "agrees" if s5 >= WAVES_AGREE else "partly" if (s10 >= WAVES_PARTLY or s5 >= 0.25) else "does not"
    acc = float(run.table("examples")["correct"].mean())
    whole = n == len(run.table("examples"))
    hi5, hi10 = wilson_upper(s5, n), wilson_upper(share.get(10, 0.0), n)
    if verdict == "does not" and not whole and (hi10 >= WAVES_PARTLY or hi5 >= 0.25):
        verdict = "not tested"
    waves = run.table("final_waves")
    r = _running(run)
    sub = waves[(waves["example_id"] == r.name) & (waves["basis"] == "paper") & (waves["rank"] <= top)]
    periods = [float(t) for t in sub.groupby("rank")["period"].first().sort_index()] if len(sub) else []
    measured = (
        f"Over {'all ' if whole else 'only the '}{n} examples, the sum of the top {top} components peaks at the answer for "
        f"{_pct(s5)} and of the top 10 for {_pct(s10)} (the model itself is right on {_pct(acc)})."
    )
    if periods:
        measured += f" For {r.name.replace('+', ' + ')} the top {top} periods are {_periods(periods)}."
    reason = ""
    if verdict != "agrees":
        reason = (f"five waves are not enough to place the answer for most questions; ten are for {_pct(s10)}"
                  if s10 > s5 else "the final logits need more than a few waves to place the answer")
    if not whole:
        reason += (f"; only {n} examples could be read (the model's weights are not here): the shares could be as high as "
                   f"{_pct(hi5)} and {_pct(hi10)} (95% interval)")
    return Claim(
        "waves",
        "For 15 + 93, the top 5 Fourier components of GPT-2-XL's final logits: long waves put a bump near 108, short "
        "waves (periods 2, 5, 10) pick 108 out of it; their sum peaks at 108.",
        measured,
        verdict,
        reason,
        {"share_top5": s5, "share_top10": s10, "n": n, "periods": periods, "accuracy": acc},
    )


#: Opposite-band cells must keep this share of the unfiltered accuracy; the paper's cells must fall
#: this far (accuracy, absolute) below both their opposite cell and their random control.
KEEP_SHARE, DROP = 0.90, 0.10


def ablation_pattern(cells: dict, base: float) -> dict:
    """Per module, whether it shows the paper's division of labour (see `claim_ablations`).

    cells: {(module, band): (accuracy, random-control accuracy)}, band = the band removed.
    """
    out = {}
    for module, paper_band, other_band in (("mlp", "low", "high"), ("attn", "high", "low")):
        acc, ctrl = cells.get((module, paper_band), (np.nan, np.nan))
        other = cells.get((module, other_band), (np.nan, np.nan))[0]
        out[module] = bool(other >= KEEP_SHARE * base and acc <= other - DROP and acc <= ctrl - DROP)
    return out


def claim_ablations(run, tau: int = TABLE1_TAU) -> Claim:
    """Step 6. Paper (Table 1, tau = 50): removing the MLPs' low frequencies leaves GPT-2-XL 35.89% and
    attention's high ones 78.36%, while the opposite bands cost almost nothing (attention low 99.12%,
    MLP high 98.10%); MLP-low errors are multiples of 10, attention-high errors below 6.
    Measured at the cached tau nearest 50, each cell next to its random-subspace control (the same
    number of random directions W_U reads, removed from the same modules).
    A module shows the paper's pattern when its opposite-band cell keeps at least 90% of the
    unfiltered accuracy and its paper cell (MLP: low removed; attention: high removed) falls at least
    10 points below both that opposite cell and its own random control.
    Verdict: agrees when both modules show it, partly when one does, else does not. The error shapes
    (multiples of 10 under MLP-low, below 6 under attention-high) are reported beside it."""
    from core.views import error_distribution, nearest_tau, table1

    ab = run.table("ablations")
    t = nearest_tau(ab, tau)
    t1 = table1(ab, t).set_index(["modules", "removed"])  # the numbers the Table 1 chart shows
    base = float(t1.loc[("none", "none"), "accuracy %"]) / 100
    cells = {}
    for m in ("attn", "mlp"):
        for r in ("low", "high"):
            row = t1.loc[(m, r)] if (m, r) in t1.index else None
            cells[(m, r)] = ((float(row["accuracy %"]) / 100, float(row["random control accuracy %"]) / 100)
                             if row is not None else (np.nan, np.nan))
    pattern = ablation_pattern(cells, base)
    verdict = "agrees" if all(pattern.values()) else "partly" if any(pattern.values()) else "does not"
    errors = run.table("ablation_errors")
    shape = {}
    for key, (m, r) in {"mlp_low_mult10": ("mlp", "low"), "attn_high_below6": ("attn", "high")}.items():
        d = error_distribution(errors, m, r, t)
        total = d["count"].sum()
        if total:
            hit = d.loc[d["multiple of 10"], "count"].sum() if key == "mlp_low_mult10" else d.loc[d["error"].abs() < 6, "count"].sum()
            shape[key] = float(hit / total)

    def cell(m, r):
        acc, ctrl = cells[(m, r)]
        return f"{_pct(acc)} (random control {_pct(ctrl)})"

    measured = (
        f"At tau = {t}, unfiltered {_pct(base)}: MLP low removed {cell('mlp', 'low')}, MLP high removed {cell('mlp', 'high')}; "
        f"attention high removed {cell('attn', 'high')}, attention low removed {cell('attn', 'low')}."
    )
    if "mlp_low_mult10" in shape:
        measured += f" Without the MLPs' low band, {_pct(shape['mlp_low_mult10'])} of the errors are multiples of 10"
        measured += f"; without attention's high band, {_pct(shape['attn_high_below6'])} are below 6." if "attn_high_below6" in shape else "."
    paper = TABLE1_GPT2_XL
    bits = []
    for m, other in (("mlp", "high"), ("attn", "low")):
        if pattern[m]:
            continue
        acc_other = cells[(m, other)][0]
        name = "the MLPs'" if m == "mlp" else "attention's"
        if not acc_other >= KEEP_SHARE * base:
            bits.append(f"removing {name} {other} band is not harmless ({_pct(acc_other)})")
        else:
            bits.append(f"{name} {'low' if m == 'mlp' else 'high'} band costs no more than the opposite band or random directions")
    reason = "; ".join(bits) if bits else ""
    if verdict != "agrees" and _structural_reason(run):
        reason = f"{reason}; {_structural_reason(run)}" if reason else _structural_reason(run)
    return Claim(
        "ablations",
        f"In GPT-2-XL (tau = 50) removing the MLPs' low frequencies leaves {paper[('mlp', 'low')][1]}% and attention's "
        f"high ones {paper[('attn', 'high')][1]}%, while the opposite bands cost almost nothing "
        f"({paper[('attn', 'low')][1]}%, {paper[('mlp', 'high')][1]}%): MLPs approximate, attention classifies.",
        measured,
        verdict,
        reason,
        {"tau": t, "base": base, "accuracy": {f"{m}-{r}": v[0] for (m, r), v in cells.items()},
         "control": {f"{m}-{r}": v[1] for (m, r), v in cells.items()}, "pattern": pattern, "error_shape": shape},
    )


def _feature_verdict(origin: str, n_short: int) -> tuple[str, str]:
    """(verdict, reason) from how many of periods 2, 2.5, 5, 10 are outliers: planted or transplanted -> not tested;
    from scratch -> agrees with none; otherwise agrees with 3 or 4, partly with 1 or 2, does not with none."""
    if origin == "planted":
        return "not tested", "these periods were planted by hand, so finding them proves nothing about pre-training"
    if origin == "transplanted":
        return "not tested", (
            "these number rows were copied, frozen, from another model, so what they show is what that model learned "
            "in pre-training, not this one"
        )
    if origin == "scratch":
        return ("agrees" if n_short == 0 else "does not"), ""
    return ("agrees" if n_short >= 3 else "partly" if n_short >= 1 else "does not"), ""


def digit_derived(run) -> str:
    """Why the number vectors carry period 10 by construction, if they do: rows started from (or read
    at) the hidden state of a model that splits numbers into digits. "" when not."""
    origin = run_origin(run.manifest)
    spec = (origin["recipe"] or {}).get("number_tokens")
    if origin["kind"] == "fine-tuned" and spec:
        return (f"its number rows started as the base model's hidden state at the last digit token of {spec.get('context', '?')!r}; "
                "that model reads numbers digit by digit, so period 10 (and 5, 2.5, 2) is partly built in by the tokenizer")
    if (run.manifest.get("number_representations") or {}).get("single_token") is False:
        return ("its tokenizer writes numbers as digits, so the vector at a number's last token depends on its last digit "
                "by construction")
    return ""


def _cap_digits(run, verdict: str, reason: str) -> tuple[str, str]:
    why = digit_derived(run)
    if not why:
        return verdict, reason
    return ("partly" if verdict == "agrees" else verdict), (f"{reason}; {why}" if reason else why)


def claim_embeddings(run, basis: str = "paper") -> Claim:
    """Step 7. Paper: number embeddings of pre-trained GPT-2-XL, Phi-2, RoBERTa have outliers at
    periods 2, 2.5, 5, 10; trained from scratch, none.
    Measured: which of 2, 2.5, 5, 10 are outliers (family-wise null) of the input number rows.
    Verdict by origin: planted features -> not tested (we put them there); from scratch -> agrees
    when none of the four is an outlier; pre-trained -> agrees with 3 or 4 of them, partly with 1
    or 2, does not with none."""
    spec = run.table("embedding_spectrum")
    spec = spec[(spec["basis"] == basis) & (spec["matrix"] == "input")]
    outl = spec[spec["outlier"]]
    found = sorted({t for t in OUTLIER_PERIODS if (np.isclose(outl["period"], t, atol=0.05)).any()})
    top = [float(t) for t in outl.sort_values("magnitude", ascending=False)["period"].head(6)]
    origin = run_origin(run.manifest)["kind"]
    verdict, reason = _feature_verdict(origin, len(found))
    if origin == "self-pretrained" and verdict != "agrees":
        reason = "pre-training a 2-layer model on a small synthetic corpus did not produce them"
    verdict, reason = _cap_digits(run, verdict, reason)
    measured = (
        f"{len(outl)} of {len(spec)} frequencies of the input number rows stand above the shuffled-numbers threshold"
        + (f" (top periods {_periods(top)})" if top else "")
        + f"; of 2, 2.5, 5 and 10: {', '.join(f'{t:g}' for t in found) if found else 'none'}."
    )
    return Claim(
        "embeddings",
        "The number embeddings of pre-trained GPT-2-XL, Phi-2 and RoBERTa have outliers at periods 2, 2.5, 5 and 10; "
        "the same model trained from scratch has none.",
        measured,
        verdict,
        reason,
        {"outliers": int(len(outl)), "short_found": found, "origin": origin},
    )


def claim_numbers(run, basis: str = "paper") -> Claim:
    """Numbers step. Paper: pre-trained models' number embeddings have outliers at periods 2, 2.5,
    5, 10 (GPT-2-XL, Phi-2, RoBERTa...); from scratch none. The paper looks at the embedding only;
    the run's tables hold every layer's representation of the numbers (core.numbers).
    Measured: at the layer where probes read n mod 2, 5, 10, 100 best, which of 2, 2.5, 5, 10 are
    spectrum outliers (family-wise null), and the probes' kappas there (controls mod 3, 7).
    Verdict by origin, as for the embeddings: planted -> not tested; from scratch -> agrees when none
    of the four is an outlier at layer 0; otherwise agrees with 3 or 4 of them at the best layer,
    partly with 1 or 2, does not with none."""
    from core.views import best_probe_layer, number_summary

    spectrum, probes = run.table("number_spectrum"), run.table("number_probes")
    origin = run_origin(run.manifest)["kind"]
    layer = 0 if origin == "scratch" else best_probe_layer(probes)
    s = number_summary(spectrum, probes, layer, basis)
    verdict, reason = _feature_verdict(origin, len(s["short_periods"]))
    verdict, reason = _cap_digits(run, verdict, reason)
    kap = s["kappa"]
    reads = ", ".join(f"mod {t} {kap[t]:.2f}" for t in sorted(kap) if t not in s["controls"])
    ctl = ", ".join(f"mod {t} {kap[t]:.2f}" for t in s["controls"])
    info = run.manifest.get("number_representations") or {}
    where = "the embedding" if layer == 0 else f"layer {layer}"
    measured = (
        f"At {where}{' (where the probes read best)' if origin != 'scratch' else ''}: {s['n_outliers']} of "
        f"{s['n_frequencies']} frequencies above the shuffled-numbers threshold; of 2, 2.5, 5 and 10: "
        f"{', '.join(f'{t:g}' for t in s['short_periods']) or 'none'}. Probe kappa {reads} (controls {ctl})"
        + (f", numbers read in {info['context']!r}." if info.get("context") else ".")
    )
    return Claim(
        "numbers",
        "The number embeddings of pre-trained GPT-2-XL, Phi-2 and RoBERTa have outliers at periods 2, 2.5, 5 and 10; "
        "the same model trained from scratch has none.",
        measured, verdict, reason,
        {"layer": layer, "short_found": s["short_periods"], "outliers": s["n_outliers"], "kappa": kap, "origin": origin},
    )


def claim_training(runs) -> Claim:
    """Step 8 (over every run with a training log). Paper: GPT-2-small reaches 53.95% from scratch
    and 100% with frozen pre-trained number embeddings (5 seeds).
    Measured: final validation accuracy, mean over seeds at each width, of runs with planted or
    transplanted frozen rows against runs from scratch. Verdict: agrees when a frozen-feature run
    reaches >= 95% and beats the scratch run of the same width by >= 20 points, with features
    transplanted from a pre-trained model; partly when the same holds with planted sinusoids (the
    rescue, but not by pre-trained features); does not when no frozen run beats scratch so."""
    rows = []
    for r in runs:
        if "training_log" not in (r.manifest.get("tables") or {}):
            continue
        origin = run_origin(r.manifest)
        log = r.table("training_log")
        log = log[log["split"] == "val"]
        if log.empty:
            continue
        widths = log["width"] if "width" in log.columns else pd.Series(r.manifest.get("width"), index=log.index)
        for w, g in log.groupby(widths):
            final = g[g["epoch"] == g["epoch"].max()]
            rows.append({"label": r.manifest.get("label", "?"), "kind": origin["kind"],
                         "tied": (r.manifest.get("model") or {}).get("tied_embeddings"), "width": int(w),
                         "accuracy": float(final["accuracy"].mean()), "seeds": int(final["seed"].nunique()),
                         "epochs": int(g["epoch"].max())})
    table = pd.DataFrame(rows)
    paper = (
        f"GPT-2-small trained on addition reaches {ACCURACY['GPT-2-small from scratch']}% from scratch and "
        f"{ACCURACY['GPT-2-small, frozen pre-trained embeddings']:.0f}% with GPT-2's pre-trained number embeddings frozen in (5 seeds)."
    )
    if table.empty or not (table["kind"] == "scratch").any():
        return Claim("training", paper, "No run with a training log from scratch to compare with.", "not tested",
                     "needs training logs of the demo models", {"table": rows})
    best = None
    for kind in ("transplanted", "planted"):
        frozen = table[(table["kind"] == kind) & (table["tied"] != False)]  # noqa: E712 (None: unknown, counts as tied)
        for fr in frozen.itertuples():
            sc = table[(table["kind"] == "scratch") & (table["width"] == fr.width)]
            if sc.empty:
                continue
            s = sc.iloc[0]
            gap = fr.accuracy - s["accuracy"]
            if best is None or (fr.accuracy >= 0.95 and gap >= 0.2 and not best[3]):
                best = (fr, s, kind, fr.accuracy >= 0.95 and gap >= 0.2)
        if best is not None and best[3]:
            break
    if best is None:
        return Claim("training", paper, "No frozen-feature run shares a width with a run from scratch.", "not tested", "", {"table": rows})
    fr, s, kind, rescued = best
    verdict = ("agrees" if kind == "transplanted" else "partly") if rescued else "does not"
    measured = (
        f"After {fr.epochs} epochs at width {fr.width}: {fr.label} {_pct(fr.accuracy)} ({_seeds(fr.seeds)}) "
        f"against {s['label']} {_pct(s['accuracy'])} ({_seeds(s['seeds'])}) on validation."
    )
    reason = ""
    if verdict == "partly":
        reason = "the same rescue, but by sinusoids planted by hand, not by features a model learned in pre-training"
    return Claim("training", paper, measured, verdict, reason, {"table": rows, "kind": kind})


#: Errors needed for a behaviour verdict, and the one-sided binomial level against the 10% base rate.
MIN_ERRORS, BEHAVIOUR_ALPHA, BASE_RATE = 20, 0.01, 0.10


def claim_behaviour(run) -> Claim:
    """Behaviour. Paper: the errors of prompted LLMs are mostly multiples of 10 (4-shot GPT-J 93%,
    Phi-2 73%; 0-shot GPT-3.5 and GPT-4 100%): the last digit is right, the size is off.
    Measured: of the run's wrong numeric answers (the model unfiltered; for a k-shot run, the most
    shots), the share whose error is a multiple of 10. The null: an error with no last-digit
    structure is a multiple of 10 one time in 10. Verdict: not tested with fewer than 20 wrong
    answers; agrees when the share is at least 50% and above 10% by a one-sided binomial test at
    p < 0.01; partly when only the test passes; else does not."""
    from scipy.stats import binomtest

    ea = run.table("error_analysis")
    if "model" in set(ea["source"]):
        row, what = ea[ea["source"] == "model"].iloc[0], "unfiltered"
    else:
        shots = ea[ea["source"].str.endswith("-shot")]
        row = shots.loc[shots["source"].str.removesuffix("-shot").astype(int).idxmax()]
        what = row["source"]
    wrong = int(row.get("n_wrong_numbers", row["n_wrong"]))
    share = float(row["share_multiple_of_10"]) if wrong else float("nan")
    paper = ("The errors of prompted LLMs are mostly multiples of 10: 4-shot GPT-J 93%, Phi-2 73%; GPT-3.5 and GPT-4 "
             "100%. The last digit is right and the size is off.")
    if wrong < MIN_ERRORS:
        return Claim("behaviour", paper, f"The model ({what}) makes {wrong} wrong numeric answers of {int(row['n'])}: too few to judge.",
                     "not tested", f"fewer than {MIN_ERRORS} errors", {"n_wrong": wrong})
    hits = int(round(share * wrong))
    p_value = float(binomtest(hits, wrong, BASE_RATE, alternative="greater").pvalue)
    significant = p_value < BEHAVIOUR_ALPHA
    verdict = "agrees" if significant and share >= 0.5 else "partly" if significant else "does not"
    within2 = row.get("share_within_2")
    measured = (f"Of {wrong} wrong answers ({what}), {_pct(share)} are off by a multiple of 10 (chance: 10%; one-sided "
                f"binomial p = {p_value:.2g})" + (f"; {_pct(within2)} are off by at most 2." if pd.notna(within2) else "."))
    reason = ""
    if verdict == "does not" and pd.notna(within2) and within2 >= 0.5:
        reason = "its errors are off-by-one or two: the size is right and the last digit is off, the opposite of the paper's"
    return Claim("behaviour", paper, measured, verdict, reason,
                 {"n_wrong": wrong, "share_multiple_of_10": share, "p_value": p_value, "source": what})


#: Tour steps that are claims about one run, in order (step 8 is over all runs).
RUN_CLAIMS = {
    "accuracy": claim_accuracy,
    "logit_lens": claim_logit_lens,
    "module_waves": claim_module_waves,
    "spectra": claim_spectra,
    "waves": claim_waves,
    "ablations": claim_ablations,
    "embeddings": claim_embeddings,
    "numbers": claim_numbers,
    "behaviour": claim_behaviour,
}


def run_claims(run) -> dict[str, Claim]:
    """Every per-run claim of the story for one run. A claim the run's tables cannot answer (no
    sampled example, no band ablations, ...) is "not tested", saying what is missing."""
    out = {}
    for name, f in RUN_CLAIMS.items():
        try:
            out[name] = f(run)
        except (CoreError, KeyError, IndexError, ValueError) as exc:
            missing = (getattr(run, "manifest", None) or {}).get("not_applicable") or {}
            why = next(iter(missing.values()), None) if missing else None
            measured = f"Does not apply to this model: {why}." if why else f"This run's tables cannot answer it ({exc})."
            out[name] = Claim(name, _PAPER_SHORT[name], measured, "not tested", numbers={"not_applicable": bool(why)})
    return out


#: The paper's finding of each claim in a few words, for runs that cannot test it.
_PAPER_SHORT = {
    "accuracy": f"Fine-tuned GPT-2-XL answers {ACCURACY['GPT-2-XL fine-tuned']}% of the test prompts right.",
    "logit_lens": "GPT-2-XL approximates the answer in its middle layers and makes it exact only late.",
    "module_waves": "GPT-2-XL's modules write waves of period 2 (MLP) and 5 or 10 (attention) for 15 + 93.",
    "spectra": "GPT-2-XL's module logits have outliers at periods 2, 2.5, 5, 10; MLPs carry the low frequencies.",
    "waves": "Long waves place the bump, short waves pick 108; their sum peaks at 108.",
    "ablations": "Removing the MLPs' low or attention's high frequencies hurts GPT-2-XL most.",
    "embeddings": "Pre-trained number embeddings have outliers at periods 2, 2.5, 5, 10; from scratch none.",
    "numbers": "Pre-trained models represent numbers with outliers at periods 2, 2.5, 5, 10; from scratch none.",
    "behaviour": "Prompted LLMs' errors are mostly multiples of 10 (GPT-J 4-shot 93%).",
}


def best_run(claims_by_run: dict[str, Claim], preferred: str | None = None, order: list[str] | None = None) -> str:
    """The run (key of `claims_by_run`) whose verdict shows a step best; ties go to `preferred`, then `order`."""
    if not claims_by_run:
        raise CoreError("no runs to choose from")
    order = order or list(claims_by_run)
    rank = {name: i for i, name in enumerate(order)}
    return max(claims_by_run, key=lambda n: (claims_by_run[n].score, n == preferred, -rank.get(n, len(rank))))
