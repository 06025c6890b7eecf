"""Table 1 with power at any width: filters that remove only the paper's periods, and slices of the same size.

At the paper's cutoff tau = 50 a filter removes most of what W_U reads on a narrow model (the high band of 521
numbers is rank 421 of SmolLM2's 576), and its random controls of the same rank already break the model, so the
table cannot tell which directions matter. These filters are narrow instead (docs/method.md#periods-only):

- "periods": the directions W_U reads at the paper's periods T = 2, 2.5, 5 and 10 only (frequencies k = (p-1)/T:
  52, 104, 208 and 260 on 521 numbers; rank 7, since the sine at period 2 is zero on the integers);
- "low slice": as many of the lowest frequencies (k = 1..4), the long waves that place the answer's size;
- "high slice": as many high frequencies next to the paper's (k + 1, or k - 1 at the top), the same band without
  the paper's periods.

Each is built from W_U as the paper builds its filters (core.analysis.filters.projection_filter), or from W_U
read through the final norm's gain (W_U diag(g): the directions the logits read off the stream after the norm
scales each coordinate), and each gets energy-matched random controls of its own rank
(core.analysis.filters.energy_matched_filter). Numpy only.
"""

from __future__ import annotations

import numpy as np

from core.analysis.fourier import as_array
from core.analysis.phase import period_frequencies
from core.errors import CoreError

#: The paper's periods (its Figure 2 and 3: the last digit's waves).
PAPER_PERIODS = (2.0, 2.5, 5.0, 10.0)
#: The slices, in the order a table shows them.
SLICES = ("periods", "low slice", "high slice")
#: How W_U is read: as it is (the paper), or through the final norm's gain.
READINGS = ("W_U", "W_U through the final norm's gain")


def parse_periods(text: str) -> tuple[float, ...]:
    """--remove periods:2,2.5,5,10 -> (2.0, 2.5, 5.0, 10.0); "periods" alone is the paper's four."""
    if text == "periods":
        return PAPER_PERIODS
    head, _, tail = text.partition(":")
    if head != "periods" or not tail:
        raise CoreError(f"--remove {text!r}: write periods, or periods:T1,T2,... (e.g. periods:2,2.5,5,10)")
    try:
        periods = tuple(sorted({float(t) for t in tail.split(",") if t.strip()}))
    except ValueError:
        raise CoreError(f"--remove {text!r}: the periods must be numbers, e.g. periods:2,2.5,5,10") from None
    if not periods or min(periods) < 2:
        raise CoreError(f"--remove {text!r}: a period is at least 2 numbers (the shortest wave on the integers)")
    return periods


def slice_frequencies(p: int, periods=PAPER_PERIODS) -> dict[str, tuple[int, ...]]:
    """{slice name: its frequencies} on the number line 0..p-1 (module docstring). A period that is not a whole
    frequency of the paper's basis on p numbers is a clear error."""
    found = period_frequencies(p, periods)
    missing = [t for t in periods if float(t) not in found]
    if missing:
        raise CoreError(f"period {', '.join(f'{t:g}' for t in missing)} is not a frequency of {p} numbers "
                        f"((p - 1) / T must be a whole number; here p - 1 = {p - 1})")
    ks = sorted(found.values())
    top = (p - 1) // 2
    high = []
    for k in ks:
        near = k + 1 if k + 1 <= top and k + 1 not in ks else k - 1
        if near in ks or near in high or near < 1:
            raise CoreError(f"no free neighbour for frequency {k}: the periods {periods} leave no high slice")
        high.append(near)
    low = tuple(range(1, len(ks) + 1))
    if set(low) & set(ks):
        raise CoreError(f"the low slice k = {', '.join(map(str, low))} holds one of the periods' frequencies on {p} "
                        "numbers: the number line is too short for a low slice apart from the periods")
    return {"periods": tuple(ks), "low slice": low, "high slice": tuple(sorted(high))}


def gain_weighted(unembedding, gain) -> np.ndarray:
    """W_U diag(g): the number rows of W_U with each coordinate scaled by the final norm's gain g (D,), what the
    logits read off the stream once the norm has scaled it (its division by the stream's size changes no direction)."""
    W_U = as_array(unembedding)
    g = as_array(gain).reshape(-1)
    if g.shape[0] != W_U.shape[1]:
        raise CoreError(f"the final norm's gain has {g.shape[0]} entries, W_U is {W_U.shape[1]} wide")
    return W_U * g[None, :]
