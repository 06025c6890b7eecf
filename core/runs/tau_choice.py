"""What moving the cutoff tau does to a run's spectra: the range of cutoffs that split its attention and MLP
logits into the same low and high bands (core.analysis.fourier.same_split_taus), and the sentence a page shows
when that range is wide, so that a student who moves tau and sees nothing change is told why."""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.fourier import same_split_taus

#: a share of the energy this small moved across the cut changes nothing a page shows
SAME_SPLIT_FLOOR = 0.001
#: a range narrower than this many cutoffs is not worth a sentence
WIDE = 8


def same_split_range(module_spectra: pd.DataFrame, basis: str, tau: int) -> tuple[int, int, float]:
    """(lowest tau, highest tau, share of the energy between them) over every attention and MLP layer."""
    sub = module_spectra[(module_spectra["basis"] == basis) & module_spectra["module"].isin(["attn", "mlp"])]
    energy = (sub["magnitude"] ** 2).groupby(sub["k"]).sum().sort_index()  # summed over modules and layers
    return same_split_taus(np.sqrt(energy.to_numpy()), tau, SAME_SPLIT_FLOOR)  # it squares them back


def same_split_sentence(module_spectra: pd.DataFrame, basis: str, tau: int) -> str:
    """Why moving tau within a range changes nothing here ("" when the range is narrow)."""
    low, high, share = same_split_range(module_spectra, basis, tau)
    if high - low + 1 < WIDE:
        return ""
    return (f"Any cutoff from tau = {low} to {high} puts the same frequencies in each band, to within "
            f"{SAME_SPLIT_FLOOR:.1%} of this run's attention and MLP energy (k = {low} to {high - 1} carry "
            f"{share:.2%}): moving tau in that range barely changes this page.")
