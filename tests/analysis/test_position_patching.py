"""Position x layer patching: the embedding of the one token that differs restores everything, the last layer's
stream restores everything at the answer position only, and pairs of different token lengths are refused."""

import json

import numpy as np
import pytest

from core.analysis.position_patching import position_patch, position_table
from core.errors import CoreError

CLEAN, CORRUPT = "Put together 15 and 93. Answer:", "Put together 15 and 94. Answer:"


def test_the_differing_token_at_the_embeddings_and_the_answer_position_at_the_top_restore_all(loaded_model):
    lm = loaded_model("gpt2")
    table = position_table(position_patch(lm, [CLEAN], [CORRUPT], [108], [109], 600))
    cell = table.set_index(["role", "layer"])["recovered"]
    top = lm.n_layers
    assert cell[("b", 0)].max() == pytest.approx(1.0, abs=1e-4)  # the corrupted run made the clean one
    assert cell[("answer", top)] == pytest.approx(1.0, abs=1e-4)
    others = table[(table["layer"] == top) & (table["role"] != "answer")]["recovered"]
    assert np.allclose(others, 0, atol=1e-5)  # the logits read the answer position only
    assert set(table["layer"]) == set(range(top + 1)) and (table["role"] == "a").any()


def test_prompts_of_different_lengths_are_refused_saying_how(loaded_model):
    lm = loaded_model("gpt2")
    with pytest.raises(CoreError, match="as many tokens"):
        position_patch(lm, [CLEAN], ["Put together 15 and 94 and 5. Answer:"], [108], [109], 600)


def test_the_command_prints_cells_and_refuses_positions_without_a_pair(model_dir, capsys):
    from core.cli import main

    folder = str(model_dir("llama"))
    assert main(["patch", folder, "--positions"]) == 2
    assert "--positions patches one pair" in capsys.readouterr().err
    assert main(["patch", folder, "--clean", "15 + 93", "--corrupt", "15 + 94", "--positions", "--json",
                 "--threads", "1", "--no-progress"]) == 0
    printed = json.loads(capsys.readouterr().out)
    cells = printed["cells"]
    assert printed["split"] == "given" and "(answer 108)" in printed["lines"][0] and "cached" in printed
    assert {"position", "token", "layer", "recovered"} <= set(cells[0])
    assert len({c["layer"] for c in cells}) == 3
