"""The shipped controls (docs/fine-tuning.md#controls): a model built so that attention carries the short waves and
the MLPs the long ones (recipe control-attention-short-waves; its roles-swapped twin, control-roles-swapped, is not
precomputed yet). The built-in constraint is read again from the run's own tables, and the reason Table 1 cannot
show the paper's pattern on such a model (its matched controls coincide with the band) is re-derived from the
ablation table. What steps 3, 4 and 6 read on it is in docs/fine-tuning.md#controls."""

from __future__ import annotations

import pytest

from core.analysis.fourier import band_energy_share
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs, read_table
from core.runs.reader import RunReader
from core.training.recipe import Recipe

CACHE = PROJECT_ROOT / "cache"
POSITIVE, NEGATIVE = "control-attention-short-waves", "control-roles-swapped"
TAU = 50


def control_run(recipe: str) -> RunReader:
    """The shipped test-split run of a control's model (models/<recipe>); its absence is a failure, not a skip."""
    runs = [r for r in list_runs(CACHE) if r.ok and r.manifest
            and (r.manifest.get("model") or {}).get("source") == Recipe.load(recipe).out
            and (r.manifest.get("task") or {}).get("split") == "test"]
    assert len(runs) == 1, (f"no shipped test run of {recipe}: `python -m core train --recipe {recipe}`, then "
                            f"`python -m core precompute --model models/{recipe}` (docs/fine-tuning.md#controls)")
    return RunReader(CACHE, runs[0].name)


def low_shares(name: str) -> dict[str, float]:
    """{module kind: share of its summed magnitude^2 below TAU}, every layer of the module_spectra table pooled."""
    spectra = read_table(CACHE, name, "module_spectra")
    out = {}
    for kind in ("attn", "mlp"):
        rows = spectra[spectra["module"] == kind]
        energy = rows.groupby("k")["magnitude"].apply(lambda m: float((m**2).sum())).sort_index()
        out[kind] = band_energy_share(energy.to_numpy()[None, :], TAU)[0]
    return out


@pytest.mark.parametrize("recipe, attn_band", [(POSITIVE, "high")])
def test_the_built_in_bands_show_in_the_run_tables(recipe, attn_band):
    """The constraint, read from the run's own spectra: each module's logits have (almost) nothing in the band it
    was kept out of."""
    run = control_run(recipe)
    shares = low_shares(run.name)
    attn_low, mlp_low = float(shares["attn"]), float(shares["mlp"])
    if attn_band == "high":
        assert attn_low < 0.01 and mlp_low > 0.99
    else:
        assert attn_low > 0.99 and mlp_low < 0.01


def test_table_1s_matched_controls_coincide_with_a_band_that_holds_a_whole_module_output():
    """Why Table 1 cannot show the pattern on a control (docs/fine-tuning.md#controls): a module whose output W_U
    reads lies wholly in one band loses all of it to that band's filter, and a random subspace of the band's rank
    that removes as much energy spans the same output, so every matched draw scores what the band scores; the
    unconstrained demo's draws do not."""
    ab = read_table(CACHE, control_run(POSITIVE).name, "ablations")
    at = ab[ab["tau"] == TAU]
    for module, band in (("attn", "high"), ("mlp", "low")):
        cell = float(at[(at["modules"] == module) & (at["removed"] == band)]["accuracy"].iloc[0])
        draws = at[(at["modules"] == module) & (at["removed"] == f"matched-{band}")]["accuracy"]
        assert len(draws) >= 2 and cell < 0.9 and (draws - cell).abs().max() < 1e-9


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
    ablations = claims["ablations"]
    assert ablations.reason.startswith("neither module's test has power") and "has no power" not in ablations.reason
    for run in (control_run(POSITIVE), control_run(NEGATIVE)):
        assert not any("both jobs" in c.reason for c in run_claims(run).values()), run.name
