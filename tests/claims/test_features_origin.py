"""Whose number rows a run has (core.claims.features.rows_origin): one rule for a fine-tuning's rows and a transplant's,
re-derived on every shipped run from its recipe and its `number_rows_origin` table."""

from __future__ import annotations

import pandas as pd
import pytest

from core.claims.features import counted_periods, digit_derived, digit_verdict, rows_origin, separated_moduli
from core.claims.registry import run_claims
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs
from core.runs.origin import rows_trained, run_origin
from core.runs.reader import RunReader, Table

CACHE = PROJECT_ROOT / "cache"
SHIPPED = [RunReader(CACHE, r.name) for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []


def expected_moved(run) -> tuple[bool, float | None]:
    """(inherited, median moved) from the recipe and the table alone."""
    origin = run_origin(run.manifest)
    recipe = origin["recipe"] or {}
    if origin["kind"] == "transplanted":
        return True, 0.0
    if origin["kind"] != "fine-tuned" or not recipe.get("number_tokens"):
        return False, None
    if not rows_trained(recipe):
        return True, 0.0
    if not run.has(Table.NUMBER_ROWS_ORIGIN):
        return True, None
    return True, float(run.table(Table.NUMBER_ROWS_ORIGIN)["moved"].median())


@pytest.mark.skipif(not SHIPPED, reason="no shipped runs in cache/")
@pytest.mark.parametrize("run", SHIPPED, ids=[r.name[:24] for r in SHIPPED])
def test_inherited_rows_say_whose_they_are_and_how_far_they_moved(run):
    inherited, moved = expected_moved(run)
    o = rows_origin(run)
    assert o["inherited"] == inherited
    assert o["moved"] == (pytest.approx(moved) if moved is not None else None)
    claims = run_claims(run)
    for step in ("numbers", "embeddings"):
        claim = claims[step]
        if claim.verdict in ("not tested", "does not apply") and not inherited:
            continue
        said = "inherited from pre-training's representation" in claim.reason
        assert said == inherited or claim.reason.startswith("a stage was left out"), (step, claim.reason)
        if inherited and moved == 0.0 and said:
            assert "moved 0%" in claim.reason
        elif inherited and moved is not None and said:
            assert f"moved them by a median {moved:.0%} of their norm" in claim.reason


def test_the_default_and_smollm2_frozen_are_judged_by_one_rule():
    """Both runs' rows are SmolLM2's representation after block 5, read at the last digit's token: their features
    verdicts come from the same rule, and it says "can't tell" (not tested) with why, since a vector holding the last
    digit has the periods and perfect mod 2, 5, 10 probes by construction (issue 67 item 4)."""
    smol = [r for r in SHIPPED if r.split == "test" and rows_origin(r)["inherited"]
            and "number_spectrum" not in (r.manifest.get("not_computed") or {})]
    if len({run_origin(r.manifest)["kind"] for r in smol}) < 2:
        pytest.skip("needs a shipped fine-tuning and a shipped transplant of SmolLM2's rows")
    for r in smol:
        claim = run_claims(r)["numbers"]
        assert claim.verdict == "not tested", (r.name, claim.verdict)
        assert "digit by digit" in claim.reason and "could not have failed" in claim.reason, (r.name, claim.reason)
        assert claim.reason.startswith("linear probes read n mod 2, 5, 10 at Cohen's kappa")  # measured clause first


def test_the_digit_clause_leaves_does_not_and_turns_agrees_into_cannot_tell():
    """The rule can still fail on a digit-splitting model ("does not" stays), and a model whose rows are not
    digit-derived keeps its verdict."""
    from_digits = [r for r in SHIPPED if digit_derived(r)]
    if not from_digits:
        pytest.skip("no digit-derived run shipped")
    r = from_digits[0]
    assert digit_verdict(r, "does not", "")[0] == "does not"
    assert digit_verdict(r, "agrees", "", {2: 1.0, 5: 1.0, 10: 1.0})[0] == "not tested"
    assert digit_verdict(r, "partly", "")[0] == "not tested"
    plain = [r for r in SHIPPED if not digit_derived(r)]
    if plain:
        assert digit_verdict(plain[0], "agrees", "") == ("agrees", "")


def probes_table(kappas: dict[int, tuple[float, float]], layer: int = 0):
    """A number_probes table of one layer: modulus -> (kappa mean, kappa sd); 3 and 7 are the controls."""
    return pd.DataFrame([{"layer": layer, "modulus": m, "role": "control" if m in (3, 7) else "target",
                          "kappa_mean": k, "kappa_sd": sd, "n_splits": 5} for m, (k, sd) in kappas.items()])


def test_a_spike_counts_only_where_its_probe_separates_the_numbers():
    """Periods 2.5 and 5 are read by the mod-5 probe; a spike whose probe sits inside the controls' band is not
    counted, and neither is one whose interval only touches it."""
    probes = probes_table({2: (0.95, 0.02), 5: (0.10, 0.05), 10: (0.40, 0.30), 3: (0.05, 0.05), 7: (0.0, 0.02)})
    # mod 2: 0.95 - 2 * 0.02 / sqrt 5 far above the controls' ceiling 0.05 + 2 * 0.05 / sqrt 5 = 0.095
    # mod 5: 0.10 - 0.045 = 0.055 < 0.095: inside; mod 10: 0.40 - 2 * 0.30 / sqrt 5 = 0.132 > 0.095: separates
    assert separated_moduli(probes, 0) == {2, 10}
    assert counted_periods([2.0, 2.5, 5.0, 10.0], probes, 0) == [2.0, 10.0]
    assert counted_periods([2.5, 5.0], probes, 0) == []  # spikes without separability count for nothing
    assert separated_moduli(probes, 1) == set()  # no probe at that layer
    assert separated_moduli(probes_table({2: (0.9, 0.0)}), 0) == set()  # no control to beat: nothing is shown
