"""The Spectra page's sentence on the cutoffs that split a run's spectra alike, on a shipped run: its range is
what the band energies say (the same split at both ends within the floor, a different one just outside)."""

import pytest

from core.files import PROJECT_ROOT
from core.runs import summaries
from core.runs.reader import RunReader, Table
from core.runs.tau_choice import SAME_SPLIT_FLOOR, same_split_range, same_split_sentence

RUN = "fourier-frozen-tied-demo-trained-here-addition-test-05d0125721"


@pytest.mark.skipif(not (PROJECT_ROOT / "cache" / RUN).is_dir(), reason="the shipped cache")
def test_the_range_is_where_the_band_energies_stay():
    spectra = RunReader(PROJECT_ROOT / "cache", RUN).table(Table.MODULE_SPECTRA)
    low, high, share = same_split_range(spectra, "paper", 50)
    assert low < 50 < high and share <= SAME_SPLIT_FLOOR
    sentence = same_split_sentence(spectra, "paper", 50)
    assert f"from tau = {low} to {high}" in sentence

    def low_energy(tau):  # the low band's share of every attention and MLP layer's energy, all together
        e = summaries.energy_by_band(spectra, "paper", tau)
        return e[e["module"].isin(["attn", "mlp"])]["low"].to_numpy()

    assert abs(low_energy(low) - low_energy(high)).max() < 0.05  # per layer: the same split, near enough
    assert same_split_sentence(spectra, "paper", 2) == ""  # at the slowest waves every cutoff moves energy
