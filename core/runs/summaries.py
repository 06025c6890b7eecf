"""What each dashboard view shows, computed from a run's cached tables (no Streamlit here).

Pages call these with frames read from the cache and draw what comes back; every number on the
screen comes from here or straight from a table. Long-format frames throughout, so Altair can
plot them as they are.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.behaviour import error_histogram, error_summary
from core.analysis.fourier import band_energy_share, ratio_bar, reachable_ratio
from core.analysis.phase import locked
from core.analysis.phase_shift import wilson_interval
from core.errors import CoreError
from core.paper import TABLE1_GPT2_XL, TABLE1_TAU

MODULE_NAMES = {"attn": "Attention", "mlp": "MLP", "resid": "Residual stream (logit lens)", "final": "Final logits"}
ABLATION_MODULES = {"both": "Attn + MLP", "attn": "Attn", "mlp": "MLP"}
BAND_NAMES = {"low": "low (k < tau)", "high": "high (k ≥ tau)"}  # as a picker says (short: a column's width)


# ----------------------------------------------------------------------------- logit lens


def accuracy_by_layer(layer_accuracy: pd.DataFrame, final_norm: bool) -> pd.DataFrame:
    """Long frame: layer, measure ("exact", "within 2", "within 10"), accuracy (0..1)."""
    sub = layer_accuracy[layer_accuracy["final_norm"] == final_norm]
    long = sub.melt(
        id_vars=["layer"], value_vars=["exact", "within_2", "within_10"], var_name="measure", value_name="accuracy"
    )
    long["measure"] = long["measure"].map({"exact": "exact", "within_2": "within ±2", "within_10": "within ±10"})
    return long.sort_values(["measure", "layer"]).reset_index(drop=True)


def sampled_examples(examples: pd.DataFrame) -> pd.DataFrame:
    """The examples whose full logits are cached: the running example 15 + 93 first (its addition or reverse-Polish
    form), then those whose smaller operand is 2 or more (a product with 0 or 1 shows little), by operands."""
    sub = examples[examples["in_sample"]].copy()
    sub["running"] = (sub["a"] == 15) & (sub["b"] == 93)
    sub["trivial"] = sub[["a", "b"]].min(axis=1) < 2
    # by operands as numbers (as text "100+2" would come before "15+93")
    return (
        sub.sort_values(["running", "trivial", "a", "b"], ascending=[False, True, True, True])
        .drop(columns=["running", "trivial"])
        .reset_index(drop=True)
    )


def running_example(examples: pd.DataFrame) -> pd.Series:
    """The example the story follows (indexed by its id): 15 + 93, else the first sampled example (a multiplication
    run's first with both operands 2 or more). The Tour's charts and the claims' sentences both use it, so they speak
    of the same prompt."""
    sub = sampled_examples(examples)
    if sub.empty:
        raise CoreError("this run has no sampled example (no per-example logits are cached)")
    return sub.set_index("id").iloc[0]


def logits_around_answer(module_logits: pd.DataFrame, example_id: str, answer: int, window: int = 12) -> pd.DataFrame:
    """Per-module logits for numbers answer-window .. answer+window, centred per row.

    Each (module, layer) row has its mean over all numbers subtracted (a constant shift changes no
    prediction), so colour shows which numbers that module pushes up or down.
    Columns: module, layer, row (label), number, offset, logit, centred.
    """
    sub = module_logits[
        (module_logits["example_id"] == example_id) & module_logits["module"].isin(["attn", "mlp"])
    ].copy()
    if sub.empty:
        raise CoreError(f"no cached logits for example {example_id}")
    sub["module"] = sub["module"].astype(str)
    sub["centred"] = sub["logit"] - sub.groupby(["module", "layer"], observed=True)["logit"].transform("mean")
    sub = sub[(sub["number"] >= answer - window) & (sub["number"] <= answer + window)]
    sub["offset"] = sub["number"] - answer
    sub["row"] = sub["module"].map({"attn": "Attn", "mlp": "MLP"}) + " " + sub["layer"].astype(str)
    return sub.sort_values(["layer", "module", "number"]).reset_index(drop=True)


def strongest_rows(around: pd.DataFrame, top: int) -> tuple[pd.DataFrame, int]:
    """The `top` (module, layer) rows of `logits_around_answer` that move the logits near the answer
    most (largest max - min of the centred logit), in layer order; and how many rows there were."""
    spread = around.groupby("row")["centred"].agg(lambda v: v.max() - v.min())
    keep = set(spread.sort_values(ascending=False).index[:top])
    return around[around["row"].isin(keep)].reset_index(drop=True), int(len(spread))


def robust_reach(values: pd.Series, quantile: float = 0.98) -> float:
    """A colour scale's half-range that a few extreme cells cannot set: the `quantile` of |values|."""
    reach = float(values.abs().quantile(quantile))
    return reach if reach > 0 else float(values.abs().max()) or 1.0


def logit_wave(module_logits: pd.DataFrame, example_id: str, module: str, layer: int) -> pd.DataFrame:
    """One module's logits over the whole number line: number, logit, centred."""
    sub = module_logits[
        (module_logits["example_id"] == example_id)
        & (module_logits["module"] == module)
        & (module_logits["layer"] == layer)
    ][["number", "logit"]].copy()
    if sub.empty:
        raise CoreError(f"no cached {module} logits at layer {layer} for example {example_id}")
    sub["centred"] = sub["logit"] - sub["logit"].mean()
    return sub.sort_values("number").reset_index(drop=True)


# ----------------------------------------------------------------------------- spectra


def spectrum_heatmap(module_spectra: pd.DataFrame, basis: str, module: str) -> pd.DataFrame:
    """Mean |Fourier| of one module's logits: layer, k, period, magnitude."""
    sub = module_spectra[(module_spectra["basis"] == basis) & (module_spectra["module"] == module)]
    out = sub[["layer", "k", "period", "magnitude"]].reset_index(drop=True)
    positive = out["magnitude"][out["magnitude"] > 0]
    floor = float(positive.quantile(0.01)) if len(positive) else 1e-12
    out["shown"] = out["magnitude"].clip(lower=floor)  # a log colour scale needs > 0: the lowest 1% share one colour
    return out


def layer_spectrum(
    module_spectra: pd.DataFrame,
    basis: str,
    module: str,
    layer: int,
    tau: int,
    top: int = 5,
    baseline: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One layer's spectrum with band (low/high by tau) and the top outliers labelled by period.

    With the run's `module_spectra_baseline`, adds `baseline` (what W_U's shape alone gives random
    vectors with the module's total energy), `ratio`, `bar` and `above_baseline` (ratio >= bar: `ratio_bar`).
    """
    sub = spectrum_heatmap(module_spectra, basis, module)
    sub = sub[sub["layer"] == layer].sort_values("k").reset_index(drop=True)
    if sub.empty:
        raise CoreError(f"no {module} spectrum at layer {layer}")
    if baseline is not None:
        sub = spectrum_excess(module_spectra, baseline, basis, module, layer)[
            ["k", "period", "magnitude", "baseline", "ratio", "bar", "above"]
        ]
        sub = sub.rename(columns={"above": "above_baseline"})
        sub.insert(0, "layer", layer)
    sub["band"] = np.where(sub["k"] < tau, "low (k < tau)", "high (k ≥ tau)")
    order = sub["magnitude"].rank(ascending=False, method="first")
    sub["label"] = np.where(order <= top, sub["period"].map(period_label), "")
    return sub


def period_label(period: float) -> str:
    """T = 10, T = 2.5, T = 3.33."""
    return f"T={period:.3g}"


def module_layers(module_spectra: pd.DataFrame, module: str) -> list[int]:
    """The layers a module has spectra at, in order."""
    return sorted(module_spectra.loc[module_spectra["module"] == module, "layer"].unique().tolist())


def periods_above_baseline(layer_spectrum: pd.DataFrame) -> pd.DataFrame:
    """The rows of `layer_spectrum`'s figure data whose ratio to the baseline reaches its bar (column
    `above_baseline`), strongest first."""
    above = layer_spectrum[layer_spectrum["above_baseline"]]
    return above.sort_values("magnitude", ascending=False)


def band_energy_at(energy: pd.DataFrame, module: str, layer: int) -> pd.Series:
    """One module and layer's row of `energy_by_band` (columns low, high)."""
    return energy[(energy["module"] == module) & (energy["layer"] == layer)].iloc[0]


def energy_by_band(module_spectra: pd.DataFrame, basis: str, tau: int) -> pd.DataFrame:
    """Share of squared mean magnitude below / at-or-above tau, per module and layer."""
    rows = []
    sub = module_spectra[module_spectra["basis"] == basis]
    for (module, layer), g in sub.groupby(["module", "layer"]):
        low, high = band_energy_share(g.sort_values("k")["magnitude"].to_numpy(), tau)
        rows.append({"module": module, "layer": int(layer), "low": low, "high": high})
    return pd.DataFrame(rows)


def top_periods_by_module(
    module_spectra: pd.DataFrame, basis: str, module: str, last_layers: int, top: int = 5
) -> pd.DataFrame:
    """The periods with the largest mean magnitude, averaged over the last `last_layers` layers."""
    sub = module_spectra[(module_spectra["basis"] == basis) & (module_spectra["module"] == module)]
    keep = sorted(sub["layer"].unique())[-last_layers:]
    mean = sub[sub["layer"].isin(keep)].groupby(["k", "period"], as_index=False)["magnitude"].mean()
    return mean.sort_values("magnitude", ascending=False).head(top).reset_index(drop=True)


def strongest_periods(
    module_spectra: pd.DataFrame, basis: str, last_layers: int, k_max: int, top: int = 6, also=()
) -> tuple[pd.DataFrame, list[str]]:
    """MLP and attention at the periods either carries most (its `top`, mean over the last layers) and at the periods
    `also` (the paper's for the run's task), side by side: (frame k, period, magnitude, module, "period T" label;
    period labels long to short)."""
    tops = {
        m: top_periods_by_module(module_spectra, basis, m, last_layers=last_layers, top=k_max) for m in ("mlp", "attn")
    }
    line = tops["mlp"].set_index("k")["period"]
    wanted = [int((line - t).abs().idxmin()) for t in also]
    ks = list(dict.fromkeys([*tops["mlp"]["k"].head(top), *tops["attn"]["k"].head(top), *wanted]))
    frames = []
    for m, t in tops.items():
        sub = t.set_index("k").loc[ks].reset_index()
        sub["module"] = MODULE_NAMES[m]
        frames.append(sub)
    data = pd.concat(frames, ignore_index=True)
    data["period T"] = data["period"].map(lambda x: f"{x:.3g}")
    order = [f"{p:.3g}" for p in sorted(data.drop_duplicates("k")["period"], reverse=True)]
    return data, order


# ----------------------------------------------------------------------------- waves


def waves_for(final_waves: pd.DataFrame, example_id: str, basis: str, top: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The top-`top` waves of the final logits (number, value, component) and their sum."""
    sub = final_waves[
        (final_waves["example_id"] == example_id) & (final_waves["basis"] == basis) & (final_waves["rank"] <= top)
    ]
    if sub.empty:
        raise CoreError(f"no cached waves for example {example_id}")
    sub = sub.copy()
    sub["component"] = (
        sub["rank"].astype(str) + ": " + sub["period"].map(period_label) + " (k=" + sub["k"].astype(str) + ")"
    )
    total = sub.groupby("number", as_index=False)["value"].sum()
    return sub.reset_index(drop=True), total


def final_logits(module_logits: pd.DataFrame, example_id: str) -> pd.DataFrame:
    sub = module_logits[(module_logits["example_id"] == example_id) & (module_logits["module"] == "final")][
        ["number", "logit"]
    ]
    return sub.sort_values("number").reset_index(drop=True)


def centred_final_logits(module_logits: pd.DataFrame, example_id: str) -> pd.DataFrame:
    """`final_logits` with `centred`: each logit minus their mean over the number line."""
    data = final_logits(module_logits, example_id)
    data["centred"] = data["logit"] - data["logit"].mean()
    return data


def number_window(answer: int, window: int | None, p: int) -> tuple[int, int]:
    """The numbers answer ± window, inside the number line 0..p-1 (all of it for no window)."""
    if window is None:
        return 0, p - 1
    return max(0, int(answer) - window), min(p - 1, int(answer) + window)


# ----------------------------------------------------------------------------- ablations


def cached_taus(ablations: pd.DataFrame) -> list[int]:
    return sorted(int(t) for t in ablations["tau"].dropna().unique())


def nearest_tau(ablations: pd.DataFrame, tau: int) -> int:
    taus = cached_taus(ablations)
    if not taus:
        raise CoreError("this run has no band ablations cached")
    return min(taus, key=lambda t: (abs(t - tau), t))


def table1(ablations: pd.DataFrame, tau: int) -> pd.DataFrame:
    """The paper's Table 1 for one tau: modules x band removed, ours next to GPT-2-XL's.

    Each band filter also carries its random-subspace control: `random control accuracy %` (the mean over
    the control's draws; NaN where the run has no control), `random control sd` (points, across draws; NaN
    for one draw), `random control draws` and `control matched on`: "rank and energy" where the run has
    controls matched to the band's rank and to the share of the module outputs' energy it removes
    (`core.analysis.filters.energy_matched_filter`), else "rank" (random directions W_U reads, as many as
    the band's rank). `energy removed %` and `control energy removed %` give those shares (NaN for runs cached
    before they were measured); `rank-only control accuracy %` keeps the rank-matched control beside it.
    """
    base = ablations[ablations["removed"] == "none"].iloc[0]
    rows = [_table1_row(base, "none", "none")]
    sub = ablations[(ablations["tau"] == tau) & ablations["removed"].isin(
        ["low", "high", "random-low", "random-high", "matched-low", "matched-high"])]
    if sub[sub["removed"].isin(["low", "high"])].empty:
        raise CoreError(f"no ablations cached for tau = {tau}")
    for removed in ("low", "high"):
        for modules in ("both", "attn", "mlp"):
            hit = sub[(sub["modules"] == modules) & (sub["removed"] == removed)]
            rank_only = sub[(sub["modules"] == modules) & (sub["removed"] == f"random-{removed}")]
            matched = sub[(sub["modules"] == modules) & (sub["removed"] == f"matched-{removed}")]
            if len(hit):
                rows.append(_table1_row(hit.iloc[0], modules, removed, matched if len(matched) else rank_only,
                                        "rank and energy" if len(matched) else "rank", rank_only))
    return pd.DataFrame(rows)


def _energy(frame) -> float:
    """Mean `energy_removed` of some ablation rows, in percent (NaN where the run did not measure it)."""
    if frame is None or "energy_removed" not in frame or not len(frame):
        return np.nan
    return 100 * float(pd.to_numeric(frame["energy_removed"]).mean())


def _table1_row(r, modules: str, removed: str, control: pd.DataFrame | None = None, matched_on: str = "",
                rank_only: pd.DataFrame | None = None) -> dict:
    """One row of `table1`; `control`: the ablation rows of the band's control draws (None or empty: no
    control), `rank_only`: those of its rank-matched control."""
    paper = TABLE1_GPT2_XL.get((modules, removed))
    draws = 0 if control is None else len(control)
    acc = None if control is None else control["accuracy"]
    return {
        "filter": "none" if removed == "none" else f"{ABLATION_MODULES[modules]}: {removed} removed",
        "modules": modules,
        "removed": removed,
        "accuracy %": 100 * r["accuracy"],
        "loss": r["loss"],
        "Δ accuracy (points)": 100 * r["delta_accuracy"],
        "within ±10 %": 100 * r.get("within_10", np.nan),
        "erased": bool(r["erased"]),
        "rank": int(r["rank"]) if removed != "none" and pd.notna(r.get("rank")) else np.nan,
        "energy removed %": 100 * float(r["energy_removed"]) if removed != "none" and pd.notna(
            r.get("energy_removed", np.nan)) else np.nan,
        "random control accuracy %": 100 * float(acc.mean()) if draws else np.nan,
        "random control sd": 100 * float(acc.std(ddof=1)) if draws > 1 else np.nan,
        "random control draws": draws,
        "control matched on": matched_on if draws else "",
        "control energy removed %": _energy(control) if draws else np.nan,
        "rank-only control accuracy %": 100 * float(rank_only["accuracy"].mean())
        if rank_only is not None and len(rank_only) else np.nan,
        "paper GPT-2-XL accuracy %": paper[1] if paper else np.nan,
        "paper GPT-2-XL loss": paper[0] if paper else np.nan,
    }


def error_distribution(
    ablation_errors: pd.DataFrame, modules: str, removed: str, tau: int | None, keep_k: int | None = None
) -> pd.DataFrame:
    """Histogram of signed errors (prediction - answer) under one ablation: error, count, multiple_of_10."""
    m = (ablation_errors["modules"] == modules) & (ablation_errors["removed"] == removed)
    m &= ablation_errors["tau"].isna() if tau is None else ablation_errors["tau"] == tau
    m &= ablation_errors["keep_k"].isna() if keep_k is None else ablation_errors["keep_k"] == keep_k
    if "draw" in ablation_errors.columns:  # a random control's first draw (the one every cutoff has)
        m &= ablation_errors["draw"] == 0
    sub = ablation_errors[m][["error", "count"]].copy()
    sub["multiple of 10"] = sub["error"] % 10 == 0
    return sub.reset_index(drop=True)


#: An error this small or smaller counts as "close" (the paper: with attention's high band removed, every
#: error is below 6).
CLOSE_ERROR = 6
#: A band filter "matters" when it costs at least this many accuracy points more than its random control.
COSTLY_MARGIN = 5.0


def error_shares(distribution: pd.DataFrame) -> dict:
    """Of the wrong answers in an `error_distribution`: the share that are multiples of 10 (the paper's
    MLP-low finding) and the share smaller than 6 (its attention-high finding)."""
    total = distribution["count"].sum()
    return {
        "multiple_of_10": distribution.loc[distribution["multiple of 10"], "count"].sum() / total,
        "below_6": distribution.loc[distribution["error"].abs() < CLOSE_ERROR, "count"].sum() / total,
    }


def costly_filters(t1: pd.DataFrame, margin: float = COSTLY_MARGIN) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(filters of `table1` with a random control, those that cost at least `margin` points more than it)."""
    ctrl = t1.dropna(subset=["random control accuracy %"])
    return ctrl, ctrl[ctrl["accuracy %"] < ctrl["random control accuracy %"] - margin]


def table1_long(t1: pd.DataFrame, tau: int) -> pd.DataFrame:
    """`table1` as bars: filter (short name), source ("this run", "random control", "GPT-2-XL"), accuracy
    (0..1), and for a random control of several draws its spread (the sd across draws, in points); the paper's
    figure only at its own cutoff (TABLE1_TAU)."""
    rows = []
    for r in t1.itertuples():
        name = r.filter.replace(" removed", "").replace("Attn + MLP", "both")
        rows.append({"filter": name, "source": "this run", "accuracy": t1.loc[r.Index, "accuracy %"] / 100})
        control = t1.loc[r.Index, "random control accuracy %"]
        if pd.notna(control):
            spread = t1.loc[r.Index, "random control sd"] if "random control sd" in t1.columns else np.nan
            rows.append({"filter": name, "source": "random control", "accuracy": control / 100, "spread": spread})
        paper = t1.loc[r.Index, "paper GPT-2-XL accuracy %"]
        if pd.notna(paper) and tau == TABLE1_TAU:
            rows.append({"filter": name, "source": "GPT-2-XL", "accuracy": paper / 100})
    return pd.DataFrame(rows)


def unfiltered(ablations: pd.DataFrame) -> pd.Series:
    """The row of the model with no filter."""
    return ablations[ablations["removed"] == "none"].iloc[0]


def keep_one_results(ablations: pd.DataFrame) -> pd.DataFrame:
    sub = ablations[ablations["removed"] == "keep"].copy()
    cols = ["keep_k", "keep_period", "accuracy", "within_10", "parity_match", "loss", "erased"]
    return sub[cols].sort_values("keep_k", ascending=False).reset_index(drop=True)


def accuracy_by_tau(ablations: pd.DataFrame) -> pd.DataFrame:
    """Accuracy of every band ablation by tau: tau, filter, accuracy, loss, erased, `n` (questions read) and the
    accuracy's 95% Wilson interval `low`, `high` (what a row read on a sample is shown with)."""
    sub = ablations[ablations["removed"].isin(["low", "high"])].copy()
    sub["filter"] = sub["modules"].map(ABLATION_MODULES) + ": " + sub["removed"] + " removed"
    sub[["low", "high"]] = pd.DataFrame([wilson_interval(float(a), int(n)) for a, n in zip(sub["accuracy"], sub["n"])],
                                        index=sub.index, columns=["low", "high"])
    columns = ["tau", "filter", "modules", "removed", "accuracy", "loss", "erased", "n", "low", "high"]
    return sub[columns].sort_values(["filter", "tau"]).reset_index(drop=True)


# ----------------------------------------------------------------------------- embeddings


def embedding_outliers(spectrum: pd.DataFrame, basis: str, matrix: str, top: int = 4) -> pd.DataFrame:
    return _label_outliers(spectrum[(spectrum["basis"] == basis) & (spectrum["matrix"] == matrix)], top)


def embedding_rows(spectrum: pd.DataFrame, basis: str, matrix: str) -> pd.DataFrame:
    """The `embedding_spectrum` rows of one basis and one matrix ("input" W_E or "output" W_U)."""
    return spectrum[(spectrum["basis"] == basis) & (spectrum["matrix"] == matrix)]


def _label_outliers(sub: pd.DataFrame, top: int) -> pd.DataFrame:
    """Sorted by k, with the period written beside the `top` largest outliers, strongest first, skipping
    one that would sit within a twelfth of the axis of a stronger label (labels must not overlap).
    `edge`: "left" / "right" for a label near that end of the axis, drawn aligned to it so it is not cut."""
    sub = sub.sort_values("k").reset_index(drop=True)
    K = float(sub["k"].max()) if len(sub) else 1.0
    chosen: list[float] = []
    for i in sub[sub["outlier"]].sort_values("magnitude", ascending=False).index:
        if len(chosen) == top:
            break
        if all(abs(sub.at[i, "k"] - k) > K / 12 for k in chosen):
            chosen.append(float(sub.at[i, "k"]))
    sub["label"] = np.where(sub["k"].isin(chosen), sub["period"].map(period_label), "")
    sub["edge"] = np.where(sub["k"] > 0.9 * K, "right", np.where(sub["k"] < 0.1 * K, "left", ""))
    return sub


# ----------------------------------------------------------------------------- number representations


def number_spectrum_at(number_spectrum: pd.DataFrame, layer: int, basis: str, top: int = 4) -> pd.DataFrame:
    """One layer's spectrum of the number representations, outliers labelled with their period."""
    return _label_outliers(
        number_spectrum[(number_spectrum["layer"] == layer) & (number_spectrum["basis"] == basis)], top
    )


def probe_curves(number_probes: pd.DataFrame) -> pd.DataFrame:
    """Kappa by layer, one series per modulus ('n mod 10'; controls marked), with the band mean +- sd."""
    d = number_probes.sort_values(["modulus", "layer"]).reset_index(drop=True).copy()
    d["series"] = [f"n mod {t}" + (" (control)" if r == "control" else "") for t, r in zip(d["modulus"], d["role"])]
    d["kind"] = np.where(d["role"] == "control", "control", "paper period")
    d["low"] = d["kappa_mean"] - d["kappa_sd"]
    d["high"] = d["kappa_mean"] + d["kappa_sd"]
    return d


def best_probe_layer(number_probes: pd.DataFrame) -> int:
    """The layer where the probes read the paper's moduli best (highest mean kappa over them; earliest on ties)."""
    sub = number_probes[number_probes["role"] != "control"]
    mean = sub.groupby("layer")["kappa_mean"].mean()
    return int(mean.idxmax())


def number_summary(number_spectrum: pd.DataFrame, number_probes: pd.DataFrame, layer: int, basis: str,
                   periods=(2.0, 2.5, 5.0, 10.0)) -> dict:
    """What one layer shows: outlier periods (largest first), which of `periods` (2, 2.5, 5, 10; the paper's for a
    task) are among them, kappas."""
    spec = number_spectrum_at(number_spectrum, layer, basis)
    outl = spec[spec["outlier"]].sort_values("magnitude", ascending=False)
    short = [t for t in periods if np.isclose(outl["period"], t, atol=0.05).any()]
    probes = number_probes[number_probes["layer"] == layer].set_index("modulus")
    return {
        "layer": layer,
        "n_outliers": int(len(outl)),
        "n_frequencies": int(len(spec)),
        "outlier_periods": [float(t) for t in outl["period"]],
        "short_periods": short,
        "kappa": {int(t): float(k) for t, k in probes["kappa_mean"].items()},
        "kappa_sd": {int(t): float(k) for t, k in probes["kappa_sd"].items()},
        "controls": [int(t) for t in probes.index[probes["role"] == "control"]],
    }


def generation_summary(generations: pd.DataFrame, shots: int) -> tuple[dict, pd.DataFrame]:
    """Error summary and histogram of one shot count's answers that are numbers; the summary's
    accuracy and counts are over every prompt (an answer that is not a number is wrong)."""
    g = generations[generations["shots"] == shots]
    numbers = g[g["is_number"]]
    summary, hist = behaviour(numbers["answer"], numbers["prediction"])
    summary.update(
        n=int(len(g)),
        accuracy=float(g["correct"].mean()),
        n_wrong=int((~g["correct"]).sum()),
        n_not_a_number=int((~g["is_number"]).sum()),
    )
    return summary, hist


# ----------------------------------------------------------------------------- behaviour


def accuracy_by_answer(examples: pd.DataFrame, bin_width: int = 20) -> pd.DataFrame:
    """Accuracy of the model's answers grouped by the size of the true answer.

    Columns: answer_from (first answer of the bin), answer_to, accuracy, within_10, n.
    """
    err = (examples["prediction"] - examples["answer"]).abs()
    start = (examples["answer"] // bin_width) * bin_width
    g = pd.DataFrame({"answer_from": start, "exact": err == 0, "near": err <= 10}).groupby("answer_from")
    out = g.agg(accuracy=("exact", "mean"), within_10=("near", "mean"), n=("exact", "size")).reset_index()
    out.insert(1, "answer_to", out["answer_from"] + bin_width - 1)
    return out


def behaviour(answers, predictions) -> tuple[dict, pd.DataFrame]:
    """Error summary (as a dict) and the histogram of signed errors, for any model's answers."""
    summary = error_summary(answers, predictions).as_row()
    hist = error_histogram(answers, predictions)
    hist["multiple of 10"] = hist["error"] % 10 == 0
    return summary, hist


# ----------------------------------------------------------------------------- null models (baselines, controls)


def spectrum_excess(
    module_spectra: pd.DataFrame, baseline: pd.DataFrame, basis: str, module: str, layer: int
) -> pd.DataFrame:
    """One layer's module spectrum next to what W_U alone gives random vectors (same total energy).

    Columns: k, period, magnitude (the module's), baseline (mean over random vectors), baseline_p95,
    excess (magnitude - baseline), ratio (magnitude / baseline), reachable (`reachable_ratio`), bar (`ratio_bar`),
    above (ratio >= bar), above_p95 (magnitude > baseline_p95).
    """

    def at_layer(f: pd.DataFrame) -> pd.DataFrame:
        return f[(f["basis"] == basis) & (f["module"] == module) & (f["layer"] == layer)]

    obs = at_layer(module_spectra)[["k", "period", "magnitude"]]
    base = at_layer(baseline)[["k", "magnitude", "magnitude_p95"]].rename(
        columns={"magnitude": "baseline", "magnitude_p95": "baseline_p95"}
    )
    if obs.empty or base.empty:
        raise CoreError(f"no spectrum or baseline for {module} layer {layer} ({basis} basis) in this run")
    out = obs.merge(base, on="k", how="inner").sort_values("k").reset_index(drop=True)
    out["excess"] = out["magnitude"] - out["baseline"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["ratio"] = np.where(out["baseline"] > 0, out["magnitude"] / out["baseline"], np.inf)
    out["reachable"] = reachable_ratio(out["baseline"])
    out["bar"] = ratio_bar(out["reachable"])
    out["above"] = out["ratio"] >= out["bar"]
    out["above_p95"] = out["magnitude"] > out["baseline_p95"]
    return out


def control_comparison(ablations: pd.DataFrame) -> pd.DataFrame:
    """Each band filter next to its random-subspace control of the same rank.

    Columns: tau, modules, band, rank, accuracy (band removed), control_accuracy (random subspace, the
    mean over its draws), loss, control_loss. Empty when the run has no controls (computed before they existed).
    """
    bands = ablations[ablations["removed"].isin(["low", "high"])]
    ctrl = ablations[ablations["removed"].isin(["random-low", "random-high"])].copy()
    if ctrl.empty:
        return pd.DataFrame(
            columns=["tau", "modules", "band", "rank", "accuracy", "control_accuracy", "loss", "control_loss"]
        )
    ctrl["band"] = ctrl["removed"].str.removeprefix("random-")
    b = bands.rename(columns={"removed": "band"})[["tau", "modules", "band", "rank", "accuracy", "loss"]]
    c = (
        ctrl.groupby(["tau", "modules", "band"], as_index=False)[["accuracy", "loss"]]
        .mean()
        .rename(columns={"accuracy": "control_accuracy", "loss": "control_loss"})
    )
    return (
        b.merge(c, on=["tau", "modules", "band"], how="inner")
        .sort_values(["modules", "band", "tau"])
        .reset_index(drop=True)
    )


def locking_grid(phase_locking: pd.DataFrame) -> pd.DataFrame:
    """The attention and MLP rows of `phase_locking` for the layer-by-period figure: module (Attention /
    MLP), layer, period label, locking R, energy share, the chance threshold and whether it locks
    (core.analysis.phase.locked)."""
    t = phase_locking[phase_locking["kind"].isin(["attn", "mlp"])].copy()
    t["module"] = t["kind"].map({"attn": "Attention", "mlp": "MLP"})
    t["T"] = t["period"].map(lambda x: f"{x:g}")
    t["locks"] = locked(t)
    return t[
        ["module", "layer", "period", "T", "locking", "offset", "energy_share", "null_95", "locks", "n", "shuffles"]
    ].reset_index(drop=True)
