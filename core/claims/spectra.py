"""Step 4, the claims about the module spectra: read layer by layer (each module's own spectrum in each layer against
the bar of what W_U alone gives random vectors of the same energy), with the mean spectrum as a second line; the
multiplication spectra. Each rule is written in its function's docstring and re-derived from the raw tables by
tests/claims/test_layerwise_spectra.py."""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.fourier import BASELINE_RATIO, band_energy_share, ratio_bar, reachable_ratio
from core.claims.base import (
    LOW_RANK,
    Claim,
    findings_of,
    is_short,
    judged,
    pct,
    periods,
    same_period,
    structural_reason,
)
from core.paper import TABLE1_TAU
from core.runs.origin import built_control, run_origin
from core.runs.reader import Table
from core.runs.summaries import top_periods_by_module


def spectra_reading(run, tau: int = TABLE1_TAU, last_layers: int = 15) -> dict:
    """What step 4 reads of a run's module spectra (paper basis, mean over its last min(15, L) layers): `shares`
    (each module's energy share below tau), `tops` (each module's raw top-5 periods), `above` (per module, the
    periods at which its mean magnitude reaches the bar times what W_U alone gives random vectors of the same energy:
    BASELINE_RATIO, or sqrt of the most a module could reach there where that is lower, core.analysis.fourier.ratio_bar;
    {} without the `module_spectra_baseline` table), `bars` (per module, the bar at each period), `layers` and
    `k_max`."""
    spec = run.table(Table.MODULE_SPECTRA)
    spec = spec[spec["basis"] == "paper"]
    L = int(run.manifest["n_layers"])
    keep = list(range(max(1, L - last_layers + 1), L + 1))
    shares, tops = {}, {}
    for m in ("mlp", "attn"):  # the same mean spectra as the Tour's bar chart (summaries.top_periods_by_module)
        mean = top_periods_by_module(spec, "paper", m, last_layers=len(keep), top=int(spec["k"].max()))
        shares[m] = band_energy_share(mean.sort_values("k")["magnitude"].to_numpy(), tau)[0]
        tops[m] = [float(t) for t in mean["period"].head(5)]
    above, bars = {}, {}
    if Table.MODULE_SPECTRA_BASELINE in (run.manifest.get("tables") or {}):
        base = run.table(Table.MODULE_SPECTRA_BASELINE)
        base = base[(base["basis"] == "paper") & base["layer"].isin(keep)]
        merged = spec[spec["layer"].isin(keep)].merge(
            base[["module", "layer", "k", "magnitude"]].rename(columns={"magnitude": "baseline"}),
            on=["module", "layer", "k"],
        )
        period_of = spec.drop_duplicates("k").set_index("k")["period"]
        for m in ("mlp", "attn"):
            mean = merged[merged["module"] == m].groupby("k")[["magnitude", "baseline"]].mean()
            bar = ratio_bar(reachable_ratio(mean["baseline"]))
            above[m] = [float(t) for t in period_of.loc[mean.index[mean["magnitude"] >= bar * mean["baseline"]]]]
            bars[m] = pd.Series(bar, index=period_of.loc[mean.index].to_numpy())
    return {"shares": shares, "tops": tops, "above": above, "bars": bars, "layers": keep,
            "k_max": int(spec["k"].max())}


#: Step 4 read layer by layer: in a layer the MLP "carries the low band" when its share of energy below tau is at
#: least LAYER_SHARE_MARGIN above the same layer's attention's; that must hold in at least MLP_LOW_LAYERS of the layers
#: read (and in more layers than the reverse). Attention "carries the last digit" when at least ATTN_SHORT_LAYERS of
#: its layers (rounded up, at least one) carry period 2, 2.5, 5 or 10 above the W_U bar.
LAYER_SHARE_MARGIN, MLP_LOW_LAYERS, ATTN_SHORT_LAYERS = 0.10, 0.5, 0.10


def spectra_by_layer(run, tau: int = TABLE1_TAU, last_layers: int = 15) -> pd.DataFrame:
    """Each module's own spectrum in each of the run's last min(15, L) layers (paper basis): `low_share` (its energy
    share below tau), `norm` (sqrt of its energy), and `short`: the periods 2, 2.5, 5, 10 it carries, as (period,
    ratio, bar) where its magnitude reaches the bar (core.analysis.fourier.ratio_bar) times what W_U alone gives random
    vectors of the same energy in that layer (`module_spectra_baseline`); without that table, the ones among the
    layer's raw top-5 periods, ratio and bar NaN. `short_over_bar`: the largest ratio / bar over those four periods
    (1 or more: above the bar), at `short_best_period` (NaN without the baseline)."""
    spec = run.table(Table.MODULE_SPECTRA)
    spec = spec[spec["basis"] == "paper"]
    L = int(run.manifest["n_layers"])
    keep = list(range(max(1, L - last_layers + 1), L + 1))
    base = None
    if Table.MODULE_SPECTRA_BASELINE in (run.manifest.get("tables") or {}):
        base = run.table(Table.MODULE_SPECTRA_BASELINE)
        base = base[base["basis"] == "paper"]
    rows = []
    # each module and layer's rows found once (a filter of the whole table per layer cost 0.1 s a page run)
    read = spec[spec["layer"].isin(keep)]
    if base is not None:  # each frequency's baseline beside its magnitude
        read = read.merge(base[["module", "layer", "k", "magnitude"]].rename(columns={"magnitude": "baseline"}),
                          on=["module", "layer", "k"], how="left")
    own_of = dict(tuple(read.sort_values("k").groupby(["module", "layer"])))
    for m in ("mlp", "attn"):
        for layer in keep:
            own = own_of.get((m, layer), read.iloc[:0])
            mag, per = own["magnitude"].to_numpy(dtype=float), own["period"].to_numpy(dtype=float)
            if base is not None:
                b = own["baseline"].to_numpy(dtype=float)
                bar = ratio_bar(reachable_ratio(b))
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = mag / b
                at = [i for i, t in enumerate(per) if t < 10 + 1e-6 and is_short(t)]  # periods 2, 2.5, 5, 10 only
                short = [(float(per[i]), float(ratio[i]), float(bar[i])) for i in at if ratio[i] >= bar[i]]
                over = [(float(ratio[i] / bar[i]), float(per[i])) for i in at]
                best = max(over) if over else (float("nan"), float("nan"))
            else:
                top5 = per[np.argsort(-mag)[:5]]
                short = [(float(t), float("nan"), float("nan")) for t in top5 if is_short(t)]
                best = (float("nan"), float("nan"))
            rows.append({"module": m, "layer": layer, "low_share": band_energy_share(mag, tau)[0],
                         "norm": float(np.sqrt((mag**2).sum())), "short": sorted(short, reverse=True),
                         "short_over_bar": best[0], "short_best_period": best[1]})
    return pd.DataFrame(rows)


def layer_counts(by_layer: pd.DataFrame) -> dict:
    """What step 4 counts over the layers of `spectra_by_layer`: `n` layers read; `mlp_low` and `attn_low` (the layers
    whose MLP's low share is LAYER_SHARE_MARGIN above its attention's, and the reverse); `attn_short` and `mlp_short`
    (layer -> the (period, ratio, bar) each carries)."""
    mlp = by_layer[by_layer["module"] == "mlp"].set_index("layer")
    attn = by_layer[by_layer["module"] == "attn"].set_index("layer")
    gap = mlp["low_share"] - attn["low_share"]
    return {
        "n": len(mlp),
        "mlp_low": [int(x) for x in gap.index[gap >= LAYER_SHARE_MARGIN]],
        "attn_low": [int(x) for x in gap.index[gap <= -LAYER_SHARE_MARGIN]],
        "attn_short": {int(layer): s for layer, s in attn["short"].items() if s},
        "mlp_short": {int(layer): s for layer, s in mlp["short"].items() if s},
        "baseline": bool(by_layer["short_over_bar"].notna().any()),
    }


def layer_tests(counts: dict) -> tuple[bool, bool]:
    """The two tests of step 4's rule (`claim_spectra`) on `layer_counts`: (MLPs carry the low band, attention the
    short periods)."""
    n = counts["n"]
    mlp_low = len(counts["mlp_low"]) >= np.ceil(MLP_LOW_LAYERS * n) and len(counts["mlp_low"]) > len(counts["attn_low"])
    attn_short = len(counts["attn_short"]) >= max(1, int(np.ceil(ATTN_SHORT_LAYERS * n)))
    return bool(mlp_low), bool(attn_short)


def claim_spectra(run, tau: int = TABLE1_TAU, last_layers: int = 15) -> Claim:
    """Step 4. Paper (addition; reverse-Polish runs read the same): the module logits of GPT-2-XL's last 15 layers
    have outliers at T = 2, 2.5, 5, 10; MLPs carry strong low frequencies, attention does not.
    Measured layer by layer (paper basis, last min(15, L) layers, `spectra_by_layer`): in each layer, each module's
    own share of energy below tau, and the periods 2, 2.5, 5, 10 at which its own magnitude reaches the bar times what
    W_U alone gives random vectors of the same energy in that layer (`module_spectra_baseline`: a raw top period may
    be W_U's own shape, not the module's choice). The bar is BASELINE_RATIO (2x), or sqrt(r) where a module could reach
    at most r times the baseline at that period (all its energy there, core.analysis.fourier.ratio_bar).
    Verdict: agrees when (a) in at least half the layers read (MLP_LOW_LAYERS), and in more layers than the reverse,
    the MLP's low share is 10 points or more (LAYER_SHARE_MARGIN) above the same layer's attention's, and (b) at least
    a tenth of the attention layers read (ATTN_SHORT_LAYERS, rounded up, at least one) carry period 2, 2.5, 5 or 10
    above the bar; partly when one of the two holds; else does not. Each layer counts once, whatever its size: the
    mean spectrum (which the largest layers dominate) is kept as a second line and decides nothing. A run without the
    baseline table reads each attention layer's raw top-5 periods instead, and says so. A multiplication run is
    judged by the paper's multiplication spectra instead (`claim_multiplication_spectra`)."""
    if findings_of(run).task == "multiplication":
        return claim_multiplication_spectra(run, tau, last_layers)
    read = spectra_reading(run, tau, last_layers)
    counts = layer_counts(spectra_by_layer(run, tau, last_layers))
    mlp_low, attn_short = layer_tests(counts)
    verdict = "agrees" if (mlp_low and attn_short) else "partly" if (mlp_low or attn_short) else "does not"
    measured = layer_sentences(counts, read, tau)
    n = counts["n"]
    return judged(Claim(
        "spectra",
        "In GPT-2-XL's last 15 layers the module logits have outliers at periods 2, 2.5, 5 and 10; MLPs also carry "
        "strong low frequencies (size), attention does not (last digit).",
        measured,
        verdict,
        spectra_rule_reason(mlp_low, attn_short, counts, verdict, run),
        {"low_share": read["shares"], "top_periods": read["tops"], "above_baseline": read["above"],
         "layers": read["layers"], "mlp_low_layers": counts["mlp_low"], "attn_low_layers": counts["attn_low"],
         "attn_short_layers": sorted(counts["attn_short"]), "mlp_short_layers": sorted(counts["mlp_short"]),
         "mlp_low_holds": mlp_low, "attn_short_holds": attn_short},
        headline=(f"Layer by layer, the MLP leads attention below tau = {tau} in "
                  f"{len(counts['mlp_low'])} of "
                  f"{n} layers; attention carries period 2, 2.5, 5 or 10 above the W_U bar in "
                  f"{len(counts['attn_short'])} of {n}."),
    ), run)


def spectra_rule_reason(mlp_low: bool, attn_short: bool, counts: dict, verdict: str, run=None) -> str:
    """Which of the rule's two tests failed (`claim_spectra`), in words, measured clause first; "" when both pass. A
    model of few layers or a low-rank W_U gets a closing note on what that limits (the bar is read through the same
    W_U, so a low rank does not turn the reading into "can't tell")."""
    if verdict == "agrees":
        return ""
    n, said = counts["n"], []
    if not mlp_low:
        need = int(np.ceil(MLP_LOW_LAYERS * n))
        said.append(f"the MLP leads its layer's attention by 10 points in the low band in {len(counts['mlp_low'])} of "
                    f"{n} layers (the rule asks {need}; attention leads in {len(counts['attn_low'])})")
    if not attn_short:
        said.append(("no attention layer carries period 2, 2.5, 5 or 10 above the W_U bar drawn"
                     if counts.get("baseline", True) else
                     "no attention layer has period 2, 2.5, 5 or 10 among its top 5 (no W_U baseline cached)")
                    if not counts["attn_short"] else
                    f"only {len(counts['attn_short'])} attention layer(s) of {n} carry period 2, 2.5, 5 or 10 above "
                    "that bar")
    notes = []
    m = run.manifest if run is not None else {}
    if isinstance(m.get("n_layers"), int) and m["n_layers"] <= 4 and not built_control(m):
        notes.append(f"with {m['n_layers']} layers each module may do both jobs")
    rank = m.get("unembedding_rank")
    if isinstance(rank, int) and rank <= LOW_RANK:
        notes.append(f"W_U's rank {rank} limits every spectrum, the bar's too")
    return "; ".join(said) + (f". Note: {'; '.join(notes)}." if notes and said else "")


def layer_sentences(counts: dict, read: dict, tau: int) -> str:
    """Step 4's measured sentence: the layer-by-layer counts first, the mean spectrum second."""
    n, keep = counts["n"], read["layers"]
    layers = f"layer {keep[0]}" if len(keep) == 1 else f"layers {keep[0]}-{keep[-1]}"

    def where(short: dict) -> str:
        if not short:
            return ""
        bits = []
        for layer, carried in list(short.items())[:4]:
            t = carried[0]
            ratio = f" at {t[1]:.2f}x against {t[2]:.2f}x" if t[1] == t[1] else ""  # NaN without a baseline
            bits.append(f"{layer}: period {t[0]:.3g}{ratio}")
        return " (" + "; ".join(bits) + ("; …" if len(short) > 4 else "") + ")"

    bar = "above the bar" if read["above"] else "among its top 5 periods (no W_U baseline cached: raw periods read)"
    return (
        f"Layer by layer over {layers}: the MLP holds at least 10 points more of its energy below tau = {tau} than "
        f"the same layer's attention in {len(counts['mlp_low'])} of {n} layers, attention more than the MLP in "
        f"{len(counts['attn_low'])}. Attention carries period 2, 2.5, 5 or 10 {bar} in {len(counts['attn_short'])} "
        f"of {n} layers{where(counts['attn_short'])}, the MLP in {len(counts['mlp_short'])}. Second reading, the mean "
        f"spectrum (the largest layers weigh most): {pct(read['shares']['mlp'])} of the MLPs' energy and "
        f"{pct(read['shares']['attn'])} of attention's below tau = {tau}."
    )


def _spectra_sentences(read: dict, tau: int) -> str:
    shares, tops, above, keep = read["shares"], read["tops"], read["above"], read["layers"]
    layers = f"layer {keep[0]}" if len(keep) == 1 else f"layers {keep[0]}-{keep[-1]}"
    measured = (
        f"Over {layers}: {pct(shares['mlp'])} of the MLP's energy and {pct(shares['attn'])} of attention's lies below "
        f"tau = {tau}; top periods MLP {periods(tops['mlp'])}, attention {periods(tops['attn'])}."
    )
    if not above:
        return measured + " (No W_U baseline is cached for this run: the raw top periods are read instead.)"

    def listed(ts):
        return f"{len(ts)}" + (
            f" (periods {periods(sorted(ts, reverse=True)[:6])}{' …' if len(ts) > 6 else ''})" if ts else ""
        )

    low_bars = [float(v) for b in read.get("bars", {}).values() for v in b if v < BASELINE_RATIO]
    bar = ("at least twice" if not low_bars else
           f"at least twice (or, where W_U leaves less room, the square root of the most a module could reach: "
           f"{min(low_bars):.2f}x to {max(low_bars):.2f}x here)")
    return measured + (
        f" Frequencies with {bar} what W_U alone gives random vectors of the same energy: MLP "
        f"{listed(above['mlp'])}, attention {listed(above['attn'])}, of {read['k_max']}."
    )


def carried_periods(read: dict, wanted) -> list[float]:
    """Which of the periods `wanted` either module carries (above the W_U baseline; its raw top 5 without one)."""
    pool = (read["above"]["mlp"] + read["above"]["attn"]) if read["above"] else read["tops"]["mlp"] + read["tops"][
        "attn"]
    return [t for t in wanted if any(same_period(t, x) for x in pool)]


#: Multiplication agrees with at least this many of the paper's five periods, 3.33 among them.
MULTIPLICATION_PERIODS_AGREE = 4


def claim_multiplication_spectra(run, tau: int = TABLE1_TAU, last_layers: int = 15) -> Claim:
    """Step 4 for multiplication. Paper (appendix): fine-tuned GPT-2-XL's module logits on multiplication have
    outliers at T = 2, 2.5, 3.33, 5 and 10 (3.33 is new: addition's have none there); which module carries which is
    not reported. Measured as for addition (`spectra_reading`): which of the five periods the MLPs or attention carry
    at >= 2x the W_U baseline (their raw top-5 periods without one). Verdict: agrees with at least 4 of the five,
    3.33 among them; partly with at least one; does not with none; not tested when the run's unembedding cannot
    write 3.33 (number rows tied and frozen to sinusoids without that period: every logit is a sum of those
    sinusoids, so 3.33 can be neither found nor missed)."""
    findings = findings_of(run)
    read = spectra_reading(run, tau, last_layers)
    wanted = findings.module_periods
    found = carried_periods(read, wanted)
    new = findings.new_periods
    blind = unwritable_periods(run, new)
    if blind:
        verdict = "not tested"
    elif len(found) >= MULTIPLICATION_PERIODS_AGREE and all(t in found for t in new):
        verdict = "agrees"
    else:
        verdict = "partly" if found else "does not"
    said = ", ".join(f"{t:.3g}" for t in found) or "none"
    measured = _spectra_sentences(read, tau) + f" Of the paper's periods {periods(wanted)}: {said}."
    reason = ""
    if blind:
        reason = (f"its number rows are tied and frozen to sinusoids of other periods, so every logit is a sum of "
                  f"those and period {periods(blind)} cannot appear in its logits")
    elif verdict != "agrees":
        missing = [t for t in wanted if t not in found]
        reason = f"periods {periods(missing)} are not carried above the W_U baseline"
        if structural_reason(run, spectra=True):
            reason += f"; {structural_reason(run, spectra=True)}"
    return judged(Claim(
        "spectra",
        f"Fine-tuned GPT-2-XL's module logits on multiplication have outliers at periods {periods(wanted)} (3.33 is "
        "new: addition's have none there); the paper does not say which module carries which.",
        measured,
        verdict,
        reason,
        {"low_share": read["shares"], "top_periods": read["tops"], "above_baseline": read["above"],
         "layers": read["layers"], "paper_periods": list(wanted), "found": found},
        headline=f"Of the paper's multiplication periods {periods(wanted)}, the modules carry {said} above the W_U "
        "baseline.",
    ), run)


def unwritable_periods(run, wanted) -> list[float]:
    """The periods of `wanted` that no logit of the run can contain: its number rows are tied (W_U = W_E) and frozen
    to sinusoids of other periods (core.runs.origin "planted"), so W_U's columns, and every logit, are sums of those."""
    origin = run_origin(run.manifest)
    if origin["kind"] != "planted" or not (run.manifest.get("model") or {}).get("tied_embeddings"):
        return []
    planted = [float(t) for t in ((origin["recipe"] or {}).get("freeze") or {}).get("periods", [])]
    return [t for t in wanted if not any(same_period(t, x) for x in planted)]


def mean_bar_levels(run, basis: str = "paper", last_layers: int = 15) -> pd.DataFrame:
    """The bar of step 4's second reading as a magnitude: per module and frequency k, what W_U alone gives random
    vectors of the same energy (the `module_spectra_baseline` table, mean over the last min(15, L) layers) times its
    bar (`ratio_bar`): a module's mean magnitude must reach it to count as its own there. Columns module, k, level;
    empty without the baseline table."""
    if Table.MODULE_SPECTRA_BASELINE not in (run.manifest.get("tables") or {}):
        return pd.DataFrame(columns=["module", "k", "level"])
    base = run.table(Table.MODULE_SPECTRA_BASELINE)
    L = int(run.manifest["n_layers"])
    base = base[(base["basis"] == basis) & (base["layer"] >= max(1, L - last_layers + 1))]
    frames = []
    for m in ("mlp", "attn"):
        mean = base[base["module"] == m].groupby("k")["magnitude"].mean()
        frames.append(pd.DataFrame({"module": m, "k": mean.index.astype(int),
                                    "level": mean.to_numpy() * ratio_bar(reachable_ratio(mean.to_numpy()))}))
    return pd.concat(frames, ignore_index=True)
