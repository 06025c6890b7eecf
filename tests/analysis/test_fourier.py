import numpy as np
import pytest

from core.analysis.fourier import (
    band_energy_share,
    band_frequencies,
    fourier_basis,
    frequency_magnitudes,
    inverse,
    magnitudes_from_coefficients,
    same_split_taus,
    sparsity,
    top_components,
    transform,
)
from core.errors import CoreError


def test_paper_basis_rows_match_definition():
    p = 521
    F = fourier_basis(p, "paper").matrix
    x = np.arange(p)
    assert F.shape == (p, p)
    assert np.allclose(F[0], np.sqrt(1 / 520))
    for k in (1, 3, 52, 259):
        w = 2 * np.pi * k / 520
        assert np.allclose(F[2 * k - 1], np.sqrt(2 / 520) * np.sin(w * x))
        assert np.allclose(F[2 * k], np.sqrt(2 / 520) * np.cos(w * x))
    # sin(pi x) vanishes on the integers: the paper's basis has a zero row
    assert np.abs(F[2 * 260 - 1]).max() < 1e-10


def test_paper_periods_are_520_over_k():
    b = fourier_basis(521, "paper")
    assert b.period(1) == 520
    assert [float(b.period(k)) for k in (52, 104, 208, 260)] == [10.0, 5.0, 2.5, 2.0]
    assert b.frequency_of_period(2) == 260 and b.frequency_of_period(520) == 1


@pytest.mark.parametrize("p", [521, 41, 40])
def test_dft_is_orthonormal_and_round_trips(p):
    b = fourier_basis(p, "dft")
    F = b.matrix
    assert F.shape == (p, p)
    assert np.allclose(F @ F.T, np.eye(p), atol=1e-10)
    u = np.random.default_rng(0).normal(size=(3, p))
    assert np.allclose(inverse(b, transform(b, u)), u, atol=1e-10)


def test_paper_basis_is_only_an_approximate_inverse():
    b = fourier_basis(521, "paper")
    u = np.random.default_rng(1).normal(size=521)
    err = np.abs(inverse(b, transform(b, u)) - u).max()
    assert 1e-6 < err < 2.0  # close but not exact, as docs/method.md#fourier-basis warns


@pytest.mark.parametrize("name", ["paper", "dft"])
def test_planted_wave_peaks_at_its_frequency(name):
    p = 521
    b = fourier_basis(p, name)
    span = p - 1 if name == "paper" else p
    x = np.arange(p)
    u = 3 * np.cos(2 * np.pi * 52 * x / span + 0.4) + 0.5 * np.sin(2 * np.pi * 5 * x / span) + 7.0
    mags = frequency_magnitudes(b, u)
    assert mags.shape == (260,)
    assert np.argmax(mags) + 1 == 52
    assert np.argsort(mags)[-2] + 1 == 5
    if name == "dft":
        assert np.isclose(mags[51], 3 * np.sqrt(p / 2))


def test_bands_partition_the_frequencies():
    b = fourier_basis(521, "paper")
    for tau in (2, 10, 50, 260):
        low, high = band_frequencies(b, "low", tau), band_frequencies(b, "high", tau)
        assert np.all(low < tau) and np.all(low >= 1) and np.all(high >= tau)
        assert sorted(np.concatenate([low, high]).tolist()) == list(range(1, 261))
    assert len(band_frequencies(b, "low", 50)) == 49
    assert len(b.rows_of(band_frequencies(b, "high", 50))) == 2 * (260 - 50 + 1)
    for bad in (0, 1, 261):
        with pytest.raises(CoreError, match="tau"):
            band_frequencies(b, "low", bad)
    with pytest.raises(CoreError, match="band"):
        band_frequencies(b, "middle", 10)


def test_top_components_rebuild_the_vector():
    b = fourier_basis(101, "dft")
    x = np.arange(101)
    u = 2 * np.cos(2 * np.pi * 10 * x / 101) + np.sin(2 * np.pi * 3 * x / 101)
    waves = top_components(b, u, top=2)
    assert [w.k for w in waves] == [10, 3]
    assert np.allclose(waves[0].values + waves[1].values, u, atol=1e-9)
    assert waves[0].magnitude > waves[1].magnitude
    allwaves = top_components(b, u + 5.0, top=50)
    rebuilt = sum(w.values for w in allwaves) + (u + 5.0).mean()
    assert np.allclose(rebuilt, u + 5.0, atol=1e-9)


def test_energy_share_and_sparsity():
    mags = np.zeros(260)
    mags[[0, 99]] = [3.0, 4.0]
    low, high = band_energy_share(mags, 50)
    assert np.isclose(low, 9 / 25) and np.isclose(high, 16 / 25)
    assert sparsity(mags, 2) == 1.0 and np.isclose(sparsity(mags, 1), 16 / 25)


def test_bad_basis_and_shapes():
    with pytest.raises(CoreError, match="basis"):
        fourier_basis(11, "wavelet")
    with pytest.raises(CoreError, match="numbers"):
        transform(fourier_basis(11), np.zeros(12))


@pytest.mark.parametrize("name", ["paper", "dft"])
@pytest.mark.parametrize("p", [521, 520, 8, 7])
def test_magnitudes_add_each_frequencys_sin_and_cos_rows(name, p):
    """Per frequency, sqrt(sin^2 + cos^2) of its own rows, bit for bit (and the lone last row of an even DFT)."""
    basis = fourier_basis(p, name)
    c = np.random.default_rng(p).normal(size=(4, 3, len(basis.freq))) * 1e3
    got = magnitudes_from_coefficients(basis, c)
    assert got.shape == (4, 3, basis.n_freq)
    for k in basis.frequencies:
        rows = basis.rows_of([k])
        want = np.sqrt(sum(c[..., r] ** 2 for r in rows)) if len(rows) == 2 else np.sqrt(c[..., rows[0]] ** 2)
        assert np.array_equal(got[..., k - 1], want), k


def test_the_cutoffs_that_split_a_spectrum_alike_are_the_quiet_stretch_around_tau():
    """Energy at k = 1..5, 52 and 104 only: every cutoff from 6 to 52 puts k = 1..5 below and the rest above, so
    they split alike; 5 does not (it moves k = 5 up); the share between is the quiet stretch's own, and a floor
    that allows one loud frequency widens the range by it (checked against band_energy_share directly)."""
    m = np.zeros((3, 260))
    m[:, :5], m[:, 51], m[:, 103] = 1.0, 1.0, 1.0
    assert same_split_taus(m, 30) == (6, 52, 0.0)
    assert same_split_taus(m, 5)[:2] == (5, 5)
    for tau in range(6, 53):
        assert band_energy_share(m, tau) == band_energy_share(m, 30)
    assert band_energy_share(m, 53) != band_energy_share(m, 30)
    low, high, share = same_split_taus(m, 30, floor=0.2)  # one of seven equal frequencies is 1/7 of the energy
    assert (low, high) == (5, 52) and share == pytest.approx(1 / 7)
