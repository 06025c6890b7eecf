"""The shipped controls (docs/fine-tuning.md#controls): a model built so that attention carries the short waves and
the MLPs the long ones, with energy W_U reads that no answer needs in each module's other band (recipe
control-short-waves-faint), and its roles-swapped twin with the same spare energy (control-roles-swapped-faint).
The built-in constraint is read
again from the run's own tables, and why step 6 can say "agrees" on it, where the first control (recipe
control-attention-short-waves, no longer shipped) could not, is re-derived from the ablation table. What steps 3, 4
and 6 read on it is in docs/fine-tuning.md#controls."""

from __future__ import annotations

import pytest

from core.analysis.fourier import band_energy_share
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs, read_table
from core.runs.reader import RunReader
from core.training.recipe import Recipe

CACHE = PROJECT_ROOT / "cache"
POSITIVE, NEGATIVE = "control-short-waves-faint", "control-roles-swapped-faint"
TAU = 50


def control_run(recipe: str) -> RunReader:
    """The shipped test-split run of a control's model (models/<recipe>); its absence is a failure, not a skip."""
    runs = [r for r in list_runs(CACHE) if r.ok and r.manifest
            and (r.manifest.get("model") or {}).get("source") == Recipe.load(recipe).out
            and (r.manifest.get("task") or {}).get("split") == "test"]
    assert len(runs) == 1, (f"no shipped test run of {recipe}: `python -m core train --recipe {recipe}`, then "
                            f"`python -m core precompute --model models/{recipe}` (docs/fine-tuning.md#controls)")
    return RunReader(CACHE, runs[0].name)


def low_shares(name: str, skip=()) -> dict[str, float]:
    """{module kind: share of its summed magnitude^2 below TAU}, every layer of the module_spectra table pooled, the
    frequencies `skip` left out."""
    spectra = read_table(CACHE, name, "module_spectra")
    out = {}
    for kind in ("attn", "mlp"):
        rows = spectra[(spectra["module"] == kind) & ~spectra["k"].isin(list(skip))]
        energy = rows.groupby("k")["magnitude"].apply(lambda m: float((m**2).sum()))
        energy = energy.reindex(range(1, int(spectra["k"].max()) + 1), fill_value=0.0)
        out[kind] = band_energy_share(energy.to_numpy()[None, :], TAU)[0]
    return out


@pytest.mark.parametrize("recipe, attn_band", [(POSITIVE, "high"), (NEGATIVE, "low")])
def test_the_built_in_bands_show_in_the_run_tables(recipe, attn_band):
    """The constraint, read from the run's own spectra: each module's logits have (almost) nothing in the band it
    was kept out of, but at the faint frequencies, where W_U reads the pair and the offset at weight 0.01."""
    run = control_run(recipe)
    shares = low_shares(run.name, skip=Recipe.load(recipe).freeze.get("faint_frequencies", []))
    attn_low, mlp_low = float(shares["attn"]), float(shares["mlp"])
    if attn_band == "high":
        assert attn_low < 0.01 and mlp_low > 0.99
    else:
        assert attn_low > 0.99 and mlp_low < 0.01


def test_table_1s_matched_controls_spare_the_answer_where_the_other_band_holds_energy_no_answer_needs():
    """Why step 6 can say yes on this control, from the ablation table alone (claim_ablations' rule re-derived): each
    module's other band holds more of its energy than its paper band (the pair, the offset), yet removing it costs no
    answer; so the paper band is a small share of the module's energy, the random draws matched to its rank and that
    share remove less than rank-only draws and leave the model working, and the paper band itself falls at least
    max(10 points, 2 sd) below the draws' mean. The first control, without that energy, had its draws coincide with
    the band."""
    ab = read_table(CACHE, control_run(POSITIVE).name, "ablations")
    at = ab[ab["tau"] == TAU]
    base = float(ab[ab["removed"] == "none"]["accuracy"].iloc[0])

    def cell(module, removed):
        rows = at[(at["modules"] == module) & (at["removed"] == removed)]
        return float(rows["accuracy"].iloc[0]), float(rows["energy_removed"].iloc[0])

    for module, paper, other in (("mlp", "low", "high"), ("attn", "high", "low")):
        (acc, energy), (other_acc, other_energy) = cell(module, paper), cell(module, other)
        assert other_energy > energy  # the other band holds more of what W_U reads of this module ...
        assert other_acc >= 0.9 * base  # ... and removing it is harmless
        draws = at[(at["modules"] == module) & (at["removed"] == f"matched-{paper}")]
        assert len(draws) >= 2 and (draws["energy_removed"] - energy).abs().max() < 0.005  # matched on energy
        mean, sd = float(draws["accuracy"].mean()), float(draws["accuracy"].std(ddof=1))
        assert mean >= 0.9 * base and acc <= mean - max(0.10, 2 * sd), module  # power, and the band matters more
        # how: the spare energy makes the band a small share of the module's energy, so a draw matched to it removes
        # less than random directions of the same rank do (it leans into directions that carry nothing)
        rank_only = at[(at["modules"] == module) & (at["removed"] == f"random-{paper}")]["energy_removed"]
        assert len(rank_only) >= 2 and energy < float(rank_only.mean())


def test_the_same_spare_energy_with_the_roles_swapped_reads_does_not():
    """The "agrees" cannot come from the spare energy alone: the roles-swapped twin carries the same pair and offset
    (here in the paper's bands, attention's high and the MLPs' low, each a fifth or more of its module's energy),
    and steps 4 and 6 read "does not" on it."""
    from core.claims.registry import run_claims

    ab = read_table(CACHE, control_run(NEGATIVE).name, "ablations")
    at = ab[ab["tau"] == TAU]

    def energy(module, removed):
        return float(at[(at["modules"] == module) & (at["removed"] == removed)]["energy_removed"].iloc[0])

    assert energy("attn", "high") > 0.2 and energy("mlp", "low") > 0.2
    claims = run_claims(control_run(NEGATIVE))
    assert claims["spectra"].verdict == "does not" and claims["ablations"].verdict == "does not"


def test_the_controls_reasons_state_their_own_evidence():
    """Step 3's agreement names the attention site that computes the last digit with its share of the stream's (as
    "partly" names an MLP site); step 6 says once that neither module writes anything W_U reads outside its band; no
    reason on a control calls its modules ones that "have to do both jobs" (each does one job by construction)."""
    from core.claims.last_digit import site_name
    from core.claims.registry import run_claims

    claims = run_claims(control_run(POSITIVE))
    waves = claims["module_waves"]
    assert waves.verdict == "agrees" and "attention" in waves.reason.split(":")[0]
    sites = (waves.numbers["groups"] or []) + waves.numbers["causal"]
    computing = [r for r in sites if r["kind"] == "attn" and r["causal"]
                 and not (isinstance(r.get("group"), str) and r["first_layer"] == r["layer"])]  # one layer: its module
    assert any(waves.reason.startswith(f"{site_name(r)}: {100 * r['read']:.1f}% of the stream's") for r in computing)
    assert claims["spectra"].verdict == "agrees"
    ablations = claims["ablations"]
    assert ablations.verdict == "agrees" and "power" not in ablations.reason
    for run in (control_run(POSITIVE), control_run(NEGATIVE)):
        assert not any("both jobs" in c.reason for c in run_claims(run).values()), run.name
