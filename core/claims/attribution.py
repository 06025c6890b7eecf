"""How far attribution patching (the table `attribution`, core.analysis.attribution) agrees with the exact patching it
approximates (the table `patching`, core.analysis.patching), in words computed from the two tables.

The paper patches nothing; this is a check of a cheap method against the expensive one on this run, not a finding.
The rule (`agreement`, then `agreement_sentence`):

* **sites compared**: those both tables hold (the same kind, layer and head) with a finite share in both;
* **rank correlation** (Spearman's rho): the Pearson correlation of the two shares' ranks (ties share their mean rank)
  over the stream sites, the attention and MLP outputs, the heads, the modules and heads together ("inner"), and all
  of them; none where fewer than
  `MIN_SITES` sites or either share does not vary;
* **top sites**: each table's `TOP` attention, MLP or head sites by share (the stream is left out: its top layer
  restores everything by construction, in both);
* **where they disagree most**: the `TOP` sites whose two shares differ most, each with its rank in each table (1:
  restores most), named only where the shares differ by at least `MIN_GAP` (the ranks of sites that restore next
  to nothing shuffle with noise, so a difference of rank alone is not named);
* **the words** follow rho over the attention, MLP and head sites ("inner"; the stream is left out: its sites are
  ordered alike in both tables by construction, 0 before layer 1 and near 1 after the last, which would lift rho): at
  least `CLOSE` "orders the attention, MLP and head sites almost as exact patching does", at least `BROAD` "...
  broadly as ...", below that "... differently from ..."; the top sites are
  "both" where the first site is the same; the stream after a layer of the first quarter of the model (layer 1 to
  L / 4, L its last layer; the stream before layer 1 is the same token in both prompts, 0 in both tables) among the
  disagreements is called "the stream near the embeddings", where attribution is known to fail (its change passes
  through every norm of the model: Syed et al. 2023).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from core.analysis.patch_table import DENOISE, GROUP
from core.claims.base import pct
from core.claims.patching import SITE_NAMES, reading, site_name
from core.models.names import ATTN, HEAD, MLP, RESID
from core.runs.reader import RunReader, Table

#: The groups of sites a correlation is read over, by name, and the kinds each holds (None: every kind).
GROUPS = {"stream": (RESID,), "modules": (ATTN, MLP), "heads": (HEAD,), "inner": (ATTN, MLP, HEAD), "all": None}
#: Fewer sites than this: no correlation.
MIN_SITES = 3
#: rho over the attention, MLP and head sites from which attribution orders them "almost as" exact patching does, and
#: "broadly".
CLOSE = 0.9
BROAD = 0.5
#: How many top sites and disagreements a sentence names.
TOP = 3
#: The stream after a layer up to this share of the model's layers is "the stream near the embeddings".
NEAR_EMBEDDINGS = 0.25
#: Shares that differ by less than this are not named as a disagreement.
MIN_GAP = 0.05
KEYS = ["kind", "layer", "head"]


@dataclass
class Agreement:
    """The two tables side by side (`sites`: one row per compared site, with `recovered`, `attributed`, their ranks
    and `site`, its name) and what the rule reads from them."""

    sites: pd.DataFrame
    rho: dict = field(default_factory=dict)  # group -> Spearman's rho (NaN where none)
    counts: dict = field(default_factory=dict)  # group -> sites compared
    top_exact: pd.DataFrame | None = None
    top_attributed: pd.DataFrame | None = None
    disagreements: pd.DataFrame | None = None
    pairs_attributed: int = 0


def side_by_side(patching: pd.DataFrame, attribution: pd.DataFrame) -> pd.DataFrame:
    """One row per site both tables hold with a finite share in both (exact patching's denoising at contrast 1, the
    reading attribution estimates; no group): kind, layer, head, `recovered` (exact),
    `attributed`, the pairs each read (`n_exact`, `n_attributed`), the site's name and `where` (Stream, Attention,
    MLP, Head)."""
    exact = reading(patching, DENOISE, 1)  # attribution estimates denoising at contrast 1, site by site
    exact = exact[exact["kind"] != GROUP][KEYS + ["recovered", "n"]].rename(columns={"n": "n_exact"})
    estimate = attribution[KEYS + ["attributed", "n"]].rename(columns={"n": "n_attributed"})
    both = exact.merge(estimate, on=KEYS, how="inner")
    both = both[np.isfinite(both["recovered"]) & np.isfinite(both["attributed"])].reset_index(drop=True)
    both["site"] = [site_name(k, int(layer), int(h)) for k, layer, h in zip(both["kind"], both["layer"], both["head"])]
    both["where"] = both["kind"].map(SITE_NAMES)
    return both


def spearman(x, y) -> float:
    """Spearman's rho: the Pearson correlation of the ranks (ties share their mean rank); NaN with fewer than
    `MIN_SITES` values or where either does not vary."""
    x, y = pd.Series(np.asarray(x, float)), pd.Series(np.asarray(y, float))
    if len(x) < MIN_SITES or x.nunique() < 2 or y.nunique() < 2:
        return float("nan")
    return float(np.corrcoef(x.rank(), y.rank())[0, 1])


def agreement(patching: pd.DataFrame, attribution: pd.DataFrame) -> Agreement:
    """What the rule (module docstring) reads from the two tables."""
    sites = side_by_side(patching, attribution)
    sites["rank_exact"] = sites["recovered"].rank(ascending=False, method="min").astype(int)
    sites["rank_attributed"] = sites["attributed"].rank(ascending=False, method="min").astype(int)
    rho, counts = {}, {}
    for group, kinds in GROUPS.items():
        rows = sites if kinds is None else sites[sites["kind"].isin(kinds)]
        rho[group], counts[group] = spearman(rows["recovered"], rows["attributed"]), len(rows)
    inner = sites[sites["kind"] != RESID]
    moved = sites.assign(share_gap=(sites["recovered"] - sites["attributed"]).abs())
    moved = moved[moved["share_gap"] >= MIN_GAP].sort_values("share_gap", ascending=False, kind="stable").head(TOP)
    return Agreement(sites, rho, counts,
                     inner.sort_values("recovered", ascending=False).head(TOP),
                     inner.sort_values("attributed", ascending=False).head(TOP), moved,
                     int(attribution["n"].max()) if len(attribution) else 0)


def ordering_words(rho: float) -> str:
    """How attribution orders the attention, MLP and head sites, by their rho (module docstring)."""
    if not np.isfinite(rho):
        return "cannot be ranked against exact patching (too few sites, or shares that do not vary)"
    if rho >= CLOSE:
        return "orders the attention, MLP and head sites almost as exact patching does"
    if rho >= BROAD:
        return "orders the attention, MLP and head sites broadly as exact patching does"
    return "orders the attention, MLP and head sites differently from exact patching"


def share(x: float) -> str:
    """A share in whole percent, never "-0%"."""
    return pct(x, 0).replace("-0%", "0%")


def both_shares(row) -> str:
    return f"{row.site} ({share(row.recovered)} exact, {share(row.attributed)} estimated)"


def agreement_sentence(found: Agreement) -> str:
    """The agreement in a few sentences, every number and word from `found` by the rule (module docstring)."""
    if not len(found.sites):
        return "Attribution and exact patching share no site with a share in both: nothing to compare."
    rho, counts = found.rho, found.counts
    groups = [f"{g} {rho[g]:+.2f} over {counts[g]}" for g in ("modules", "heads", "stream", "all")
              if counts[g] and np.isfinite(rho[g])]
    words = [f"Attribution patching (one forward and backward pass per pair, over {found.pairs_attributed:,} pairs) "
             f"{ordering_words(rho['inner'])}: Spearman's rho "
             + (f"{rho['inner']:+.2f}" if np.isfinite(rho["inner"]) else "not defined")
             + f" over the {counts['inner']} of them both measured"
             + (f" (by group: {'; '.join(groups).replace('all ', 'every site ')})" if groups else "") + "."]
    if found.top_exact is not None and len(found.top_exact):
        first_exact, first_estimate = found.top_exact.iloc[0], found.top_attributed.iloc[0]
        if first_exact["site"] == first_estimate["site"]:
            words.append(f"Both put {both_shares(first_exact)} first.")
        else:
            words.append(f"Exact patching's top single site is {first_exact['site']} "
                         f"({share(first_exact['recovered'])}), attribution's {first_estimate['site']} "
                         f"({share(first_estimate['attributed'])}).")
    moved = found.disagreements
    if moved is not None and len(moved):
        last = int(found.sites["layer"].max())
        near = moved[(moved["kind"] == RESID) & (moved["layer"] >= 1) & (moved["layer"] <= NEAR_EMBEDDINGS * last)]
        words.append("They differ most at " + "; ".join(
            f"{both_shares(r)}, ranked {r.rank_exact} by exact patching and {r.rank_attributed} by attribution"
            for r in moved.itertuples()) + "."
            + (" The stream near the embeddings is among them: its change passes through every norm of the model, "
               "where a first-order estimate is known to fail." if len(near) else ""))
    else:
        words.append(f"No site's estimate is {share(MIN_GAP)} or more from its exact share.")
    words.append(pairs_read(found))
    return " ".join(w for w in words if w)


def pairs_read(found: Agreement) -> str:
    """Over how many pairs exact patching read the sites compared, where that is not attribution's every pair (the
    heads over a sample: core.runs.patch_run.HEAD_PAIRS); empty where it read the same pairs."""
    sites = found.sites
    heads = sorted(set(sites.loc[sites["kind"] == HEAD, "n_exact"].astype(int)))
    others = sorted(set(sites.loc[sites["kind"] != HEAD, "n_exact"].astype(int)))
    if set(heads + others) <= {found.pairs_attributed}:
        return ""
    said = [f"the heads over {', '.join(f'{n:,}' for n in heads)} of the pairs" if heads else "",
            f"the other sites over {', '.join(f'{n:,}' for n in others)}" if others else ""]
    return f"Exact patching read {' and '.join(x for x in said if x)}."


def attribution_agreement(run: RunReader) -> Agreement:
    """The run's two tables read by the rule (module docstring); both must be there (`RunReader.has`)."""
    return agreement(run.table(Table.PATCHING), run.table(Table.ATTRIBUTION))


def attribution_summary(run: RunReader) -> str:
    """This run's agreement in words (`agreement_sentence`)."""
    return agreement_sentence(attribution_agreement(run))
