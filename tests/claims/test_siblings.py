"""One pre-trained model fine-tuned two ways: which runs are siblings, what each trained, and the table steps 3, 4
and 6 put them in (core.runs.origin, core.claims.siblings, app.tour.steps.beside_siblings)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.tour.steps import STEPS, StepInputs
from core.claims.base import VERDICT_LABELS, Claim
from core.claims.registry import run_claims
from core.claims.siblings import sibling_caption, sibling_table, training_siblings
from core.files import PROJECT_ROOT
from core.runs.cache import list_runs
from core.runs.origin import base_model_of, fine_tuning_siblings, trained_part
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


def test_the_table_lines_up_each_runs_own_claim(tmp_path):
    top = FakeRun("top", manifest(model_folder(tmp_path, "top", frozen=18)))
    whole = FakeRun("whole", manifest(model_folder(tmp_path, "whole")))
    verdicts = {"top": "partly", "whole": "agrees"}

    def claims_of(run):
        step = Claim("module_waves", "paper", f"{run.name} measured. More.", verdicts[run.name],
                     headline=f"{run.name} headline.")
        return {"module_waves": step, "accuracy": Claim("accuracy", "p", "m", "agrees",
                                                        numbers={"accuracy": 0.9953 if run.name == "top" else 1.0})}

    assert training_siblings(top, [top, whole]) == [whole]
    table = sibling_table("module_waves", top, [whole], claims_of)
    assert table["trained"].tolist() == ["top 12 of 30 blocks + rows", "whole model"]
    assert list(table.columns)[:2] == ["trained", "verdict"]  # on a projector the narrow table shows these first
    assert table["accuracy % (test)"].tolist() == [99.53, 100.0]
    assert table["verdict"].tolist() == [VERDICT_LABELS["partly"], VERDICT_LABELS["agrees"]]
    assert table["what it shows"].tolist() == ["top headline.", "whole headline."]
    assert "fine-tuned two ways" in sibling_caption(top, [whole])


CACHE = PROJECT_ROOT / "cache"
SHIPPED = [RunReader(CACHE, r.name) for r in list_runs(CACHE, deep=False) if r.ok] if CACHE.is_dir() else []
TUNED = [r for r in SHIPPED if r.split == "test" and trained_part(r.manifest)]


@pytest.mark.skipif(len(TUNED) < 2, reason="needs two shipped fine-tunings of one model")
def test_steps_3_4_and_6_show_the_shipped_fine_tunings_side_by_side():
    """On the shipped test split, each fine-tuned SmolLM2 run's steps 3, 4 and 6 end with both runs' verdicts in
    one folded table (each row equal to that run's own claim) and the other run's figure, folded too."""
    runs = [r for r in SHIPPED if r.split == "test"]
    for run in TUNED:
        others = training_siblings(run, runs)
        assert others, run.name
        for step in [s for s in STEPS if s.key in ("module_waves", "spectra", "ablations")]:
            panels = step.panels(run, StepInputs("paper", run_claims(run), runs, run_claims))
            at = next(i for i, p in enumerate(panels) if p.key == f"tour-{step.key}-siblings")
            table = panels[at]
            assert table.folded == f"Trained another way: {trained_part(others[0].manifest)}"
            for row, r in zip(table.data.to_dict("records"), [run, *others]):
                claim = run_claims(r)[step.key]
                assert (row["verdict"], row["what it shows"]) == (VERDICT_LABELS[claim.verdict], claim.short)
            figure = panels[at + 1]
            assert figure.chart is not None and figure.folded == table.folded  # one click opens both
            assert others[0].label in figure.evidence.run  # the other run's figure names that run
