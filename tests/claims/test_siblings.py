"""One pre-trained model fine-tuned two ways: which runs are siblings, what each trained, and the figure steps 3, 4
and 6 compare them in (core.runs.origin, core.claims.siblings, app.tour.steps.beside_siblings)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.tour.steps import STEPS, StepInputs
from core.claims.base import VERDICT_LABELS, Claim
from core.claims.registry import run_claims
from core.claims.siblings import recipe_bars, recipe_sentence, training_siblings
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs
from core.runs.origin import base_model_of, fine_tuning_siblings, trained_part, trained_short
from core.runs.reader import RunReader


def model_folder(root: Path, name: str, frozen: int | None = None, rows_ratio: float = 1.0,
                 number_tokens: bool = True) -> str:
    folder = root / name
    folder.mkdir(parents=True)
    spec = {"layer": 5, "rows_lr_ratio": rows_ratio, **({"frozen_blocks": frozen} if frozen is not None else {})}
    recipe = {"name": name, "n_layers": 30, "lora": {"train": "full", "rank": 8}}
    if number_tokens:
        recipe["number_tokens"] = spec
    (folder / "recipe.json").write_text(json.dumps(recipe))
    return str(folder)


def manifest(source: str, base: str = "sha-of-smollm2", split: str = "test", task: str = "addition") -> dict:
    return {
        "n_layers": 30,
        "model": {"source": source, "provenance": {"base_provenance": {"source_sha256": base}}},
        "task": {"task": task, "split": split},
    }


def test_trained_part_says_what_a_fine_tuning_trained(tmp_path):
    top = manifest(model_folder(tmp_path, "top", frozen=18))
    frozen_rows = manifest(model_folder(tmp_path, "frozen-rows", frozen=18, rows_ratio=0.0))
    whole = manifest(model_folder(tmp_path, "whole"))
    toy = manifest(model_folder(tmp_path, "toy", number_tokens=False))
    assert trained_part(top) == "the top 12 of 30 blocks, and the number rows"
    assert trained_part(frozen_rows) == "the top 12 of 30 blocks"
    assert trained_part(whole) == "the whole model"
    assert trained_part(toy) == "" and base_model_of(toy) == ""
    assert base_model_of(whole) == "sha-of-smollm2"


def test_siblings_are_the_same_base_model_trained_another_way_on_the_same_task_and_split(tmp_path):
    top, whole = model_folder(tmp_path, "top", frozen=18), model_folder(tmp_path, "whole")
    seed = tmp_path / "whole" / "seeds" / "s1"
    seed.mkdir(parents=True)
    (seed / "recipe.json").write_text((tmp_path / "whole" / "recipe.json").read_text())
    others = [
        manifest(whole),                       # 0: the sibling
        manifest(top),                         # 1: the same recipe (another run of it): not a sibling
        manifest(whole, split="val"),          # 2: another split
        manifest(str(seed)),                   # 3: a seed of the sibling's recipe
        manifest(whole, base="another-model"),  # 4: another pre-trained model
        manifest(whole, task="multiplication"),  # 5: another task
    ]
    assert fine_tuning_siblings(manifest(top), others) == [0]
    assert fine_tuning_siblings(manifest(whole), [manifest(top)]) == [0]


@dataclass
class FakeRun:
    name: str
    manifest: dict
    split: str = "test"
    label: str = ""


def group(kind: str, name: str, read: float, control: float, first: int = 19) -> dict:
    return {"group": name, "kind": kind, "first_layer": first, "layer": 30, "read": read, "read_control": control}


def fake_claims(run) -> dict:
    """Each run's claims as the registry gives them, with the numbers the comparison reads (made up per run)."""
    top = run.name == "top"
    groups = ([group("attn", "trained", 0.12, 0.02), group("mlp", "trained", 0.63, 0.01)] if top else []) + [
        group("attn", "every layer", 0.30 if top else 0.01, 0.05, 1), group("mlp", "every layer", 0.5 if top else 0.71,
                                                                            0.1, 1),
        group("resid", "stream", 1.0, 0.0, 30)]
    waves = Claim("module_waves", "p", "m", "partly" if top else "does not", numbers={"groups": groups})
    spectra = Claim("spectra", "p", "m", "partly" if top else "does not", numbers={
        "layers": list(range(16, 31)), "mlp_low_layers": [18, 20] if top else [17, 20, 26],
        "attn_low_layers": [25, 26], "attn_short_layers": [24, 27] if top else []})
    ablations = Claim("ablations", "p", "m", "does not", numbers={
        "accuracy": {"mlp-low": 0.425 if top else 0.248, "attn-high": 0.073},
        "control": {"mlp-low": 0.528, "attn-high": 0.110}})
    return {"module_waves": waves, "spectra": spectra, "ablations": ablations}


def fake_narrow(run) -> Claim:
    return Claim("periods", "p", "m", "does not", numbers={"summary": [
        {"modules": "mlp", "slice": "periods", "reading": "W_U", "accuracy": 0.694, "control_mean": 0.995},
        {"modules": "mlp", "slice": "periods", "reading": "W_U through the final norm's gain", "accuracy": 0.1,
         "control_mean": 0.2},
        {"modules": "attn", "slice": "low slice", "reading": "W_U", "accuracy": 0.3, "control_mean": 0.4}]})


def test_the_bars_are_each_runs_own_claim_numbers(tmp_path):
    top = FakeRun("top", manifest(model_folder(tmp_path, "top", frozen=18)))
    whole = FakeRun("whole", manifest(model_folder(tmp_path, "whole")))
    assert training_siblings(top, [top, whole]) == [whole]

    def bars(step):
        t = recipe_bars(step, [top, whole], fake_claims, fake_narrow)
        return {(r["recipe"], r["bar"]): (r["value"], None if r["reference"] != r["reference"] else r["reference"])
                for r in t.to_dict("records")}, t

    # step 3: the trained layers' groups where the fine-tuning left some frozen, every layer otherwise, in %
    waves, table = bars("module_waves")
    assert waves == {("top 12 of 30 blocks + rows", "attention"): (12.0, 2.0),
                     ("top 12 of 30 blocks + rows", "MLP"): (63.0, 1.0),
                     ("whole model", "attention"): (1.0, 5.0), ("whole model", "MLP"): (71.0, 10.0)}
    assert table.drop_duplicates("recipe")["verdict"].tolist() == [VERDICT_LABELS["partly"], VERDICT_LABELS["does not"]]
    # step 4: layers counted; the rule asks half of the 15 layers (8) and a tenth of them (2), rounded up
    spectra, _ = bars("spectra")
    assert spectra[("top 12 of 30 blocks + rows", "MLP low band")] == (2.0, 8.0)
    assert spectra[("whole model", "attention periods")] == (0.0, 2.0)
    assert spectra[("whole model", "attention low band")] == (2.0, None)
    # step 6: Table 1's bands the claim holds and the narrow test's periods read through W_U, beside their controls
    ablations, _ = bars("ablations")
    assert ablations[("top 12 of 30 blocks + rows", "MLP low")] == (42.5, 52.8)
    assert ablations[("whole model", "MLP periods")] == (69.4, 99.5)
    assert {b for _, b in ablations} == {"MLP low", "attention high", "MLP periods"}


def test_the_sentence_names_each_verdict_and_the_bar_where_the_runs_differ_most(tmp_path):
    top = FakeRun("top", manifest(model_folder(tmp_path, "top", frozen=18)))
    whole = FakeRun("whole", manifest(model_folder(tmp_path, "whole")))
    waves = recipe_bars("module_waves", [top, whole], fake_claims)
    said = recipe_sentence("module_waves", waves)
    assert said.startswith("Top 12 of 30 blocks + rows: Partly agrees; whole model: Does not agree")
    assert "differ most in shifting attention's short waves: 12.0% against 1.0% (test split)" in said  # 11 > 8 points
    lower = FakeRun("top", manifest(model_folder(tmp_path, "lower", frozen=16)))  # another recipe, the same numbers
    same = recipe_bars("ablations", [top, lower], fake_claims, fake_narrow)
    assert recipe_sentence("ablations", same) == "Both recipes: Does not agree, and the same on every bar."
    assert recipe_sentence("ablations", same[same["recipe"] == "nothing"]) == ""


CACHE = PROJECT_ROOT / "cache"
SHIPPED = [RunReader(CACHE, r.name) for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []
TUNED = [r for r in SHIPPED if r.split == "test" and trained_part(r.manifest)]


@pytest.mark.skipif(len(TUNED) < 2, reason="needs two shipped fine-tunings of one model")
def test_steps_3_4_and_6_compare_the_shipped_fine_tunings_in_one_figure():
    """On the shipped test split, each fine-tuned SmolLM2 run's steps 3, 4 and 6 end with one folded figure of both
    runs: its bars are each run's own claim's numbers, each panel under that run's verdict, its caption opens with
    the sentence on where they differ."""
    runs = [r for r in SHIPPED if r.split == "test"]
    for run in TUNED:
        others = training_siblings(run, runs)
        assert others, run.name
        for step in [s for s in STEPS if s.key in ("module_waves", "spectra", "ablations")]:
            panels = step.panels(run, StepInputs("paper", run_claims(run), runs, run_claims))
            at = [i for i, p in enumerate(panels) if p.key == f"tour-{step.key}-siblings"]
            assert at == [len(panels) - 1], (run.name, step.key)  # one figure, the last
            figure = panels[-1]
            assert figure.chart is not None
            assert figure.folded == f"Trained another way: {trained_part(others[0].manifest)}"
            expected = recipe_bars(step.key, [run, *others], run_claims)
            assert figure.data[expected.columns].equals(expected)
            for r in [run, *others]:
                verdicts = set(figure.data[figure.data["recipe"] == trained_short(r.manifest)]["verdict"])
                assert verdicts == {VERDICT_LABELS[run_claims(r)[step.key].verdict]}
            assert figure.caption.startswith(recipe_sentence(step.key, expected))
            spec = figure.chart.to_dict()
            assert spec["facet"]["row"]["field"] == "header"  # one panel a run, headed by its verdict
