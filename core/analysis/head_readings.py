"""A run's head tables read for the pages and the claims, torch-free (the dashboard loads without torch): each
head's share of spectral energy below and above a cutoff (`head_bands`), and one period's locking grid with the
modules' lock rule (`head_locking_grid`). The tables themselves are made by core.analysis.heads."""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.analysis.fourier import band_energy_share, check_basis_name
from core.analysis.phase import locked
from core.errors import CoreError


def head_bands(head_spectra: pd.DataFrame, basis: str, tau: int) -> pd.DataFrame:
    """Per head, the share of its mean spectrum's energy (squared magnitude) below the cutoff tau (low: 1 <= k < tau)
    and at or above it (high), by `band_energy_share` as a module's bands are: layer, head, low, high."""
    check_basis_name(basis)
    sub = head_spectra[head_spectra["basis"] == basis]
    if sub.empty:
        raise CoreError(f"the head spectra hold no {basis!r} basis")
    K = int(sub["k"].max())
    if not 2 <= int(tau) <= K:
        raise CoreError(f"cutoff tau = {tau} is out of range: choose 2..{K} (low = 1 <= k < tau, high = k >= tau)")
    rows = []
    for (layer, head), g in sub.groupby(["layer", "head"], sort=True):
        low, high = band_energy_share(g.sort_values("k")["magnitude"].to_numpy(), int(tau))
        rows.append({"layer": int(layer), "head": int(head), "low": low, "high": high})
    return pd.DataFrame(rows, columns=["layer", "head", "low", "high"])


def head_locking_grid(head_locking: pd.DataFrame, period: float) -> pd.DataFrame:
    """One period's rows of `head_locking` for the heads x layers heatmap, with `above_null` (R above the family-wise
    null_95) and `locks` (`locked`: above the null, R >= MIN_LOCKING, a phase that is not constant, a wave that
    favours the answer)."""
    periods = sorted(head_locking["period"].unique())
    sub = head_locking[np.isclose(head_locking["period"], float(period))].copy()
    if sub.empty:
        have = ", ".join(f"{t:g}" for t in periods)
        raise CoreError(f"no locking at period {period:g} in the head table: choose one of its periods ({have})")
    sub["above_null"] = sub["locking"] > sub["null_95"]
    sub["locks"] = locked(sub)
    return sub.sort_values(["layer", "head"]).reset_index(drop=True)


def periods_by_locking(head_locking: pd.DataFrame, periods: list[float]) -> pd.DataFrame:
    """Per period of `periods`, how many heads lock and how many are above chance (`head_locking_grid`'s rule), with
    the period's chance threshold (null_95, the largest over its rows): period, heads, locks, above_null, null_95.
    Ranked best first: most heads that lock, then most above chance, then the longer period (10 before 2), so the
    first row is the period where most heads lock, the one a page opens at."""
    if not len(periods):
        raise CoreError("no period to rank: the head table holds none of the periods asked for")
    rows = []
    for T in periods:
        grid = head_locking_grid(head_locking, T)
        rows.append({"period": float(T), "heads": len(grid), "locks": int(grid["locks"].sum()),
                     "above_null": int(grid["above_null"].sum()), "null_95": float(grid["null_95"].max())})
    table = pd.DataFrame(rows, columns=["period", "heads", "locks", "above_null", "null_95"])
    return table.sort_values(["locks", "above_null", "period"], ascending=False).reset_index(drop=True)
