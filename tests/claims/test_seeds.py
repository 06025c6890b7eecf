"""Verdicts over the seeds of one recipe (core.claims.seeds): which runs are seeds of one recipe, and the rule
(holds when every seed gives the same verdict, else flips, with the count of each) re-derived by hand."""

from types import SimpleNamespace

from core.claims.base import Claim
from core.claims.seeds import seed_siblings, verdict_spread
from core.runs.origin import seed_of_manifest


def fake_run(name, source, width=640, split="test", n=3419):
    manifest = {
        "model": {"source": source},
        "width": width,
        "task": {"task": "addition", "split": split, "n_examples": n, "shots": 0},
    }
    return SimpleNamespace(name=name, manifest=manifest)


RUNS = [
    fake_run("s2", "models/fourier-frozen/seeds/s2"),
    fake_run("shipped", "models/fourier-frozen"),
    fake_run("s1", "models/fourier-frozen/seeds/s1"),
    fake_run("narrow", "models/fourier-frozen/seeds/w256-s1", width=256),  # another width: not a sibling
    fake_run("val", "models/fourier-frozen/seeds/s3", split="val"),  # another split: not a sibling
    fake_run("other", "models/smollm2-frozen"),
]


def claims(verdicts):
    return lambda run: {"ablations": Claim("ablations", "p", "m", verdicts[run.name])}


def test_seeds_of_one_recipe_are_found_by_their_model_folder():
    seed_of = lambda run: seed_of_manifest(run.manifest)  # noqa: E731
    assert seed_of(RUNS[0]) == 2 and seed_of(RUNS[1]) is None and seed_of(RUNS[3]) == 1
    shipped = RUNS[1]
    assert [r.name for r in seed_siblings(shipped, RUNS)] == ["shipped", "s1", "s2"]
    assert [r.name for r in seed_siblings(RUNS[0], RUNS)] == ["shipped", "s1", "s2"]
    assert seed_siblings(RUNS[5], RUNS) == []  # one seed is not a spread
    assert seed_siblings(RUNS[3], RUNS) == []


def test_a_verdict_holds_only_when_every_seed_gives_it():
    siblings = seed_siblings(RUNS[1], RUNS)
    same = verdict_spread("ablations", siblings, claims({"shipped": "agrees", "s1": "agrees", "s2": "agrees"}))
    assert same.holds and same.counts == {"agrees": 3}
    assert "in all 3" in same.line and "holds" in same.line
    flip = verdict_spread("ablations", siblings, claims({"shipped": "agrees", "s1": "partly", "s2": "agrees"}))
    assert not flip.holds and flip.counts == {"agrees": 2, "partly": 1}
    assert "flips" in flip.line and "“Partly agrees” in 1 (seed 1)" in flip.line
    assert "“Agrees” in 2 (shipped model, seed 2)" in flip.line
    assert verdict_spread("ablations", siblings[:1], claims({"shipped": "agrees"})) is None
