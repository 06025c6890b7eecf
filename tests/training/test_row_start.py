"""How far training moved a number row from its start (core.training.row_start.rows_moved), by its definition."""

import numpy as np
import pytest

from core.errors import CoreError
from core.training.row_start import rows_moved, start_rows


def test_rows_moved_is_the_change_over_the_start_s_norm_and_the_cosine():
    rng = np.random.default_rng(0)
    start = rng.normal(size=(6, 5))
    orthogonal = np.stack([np.cross(np.r_[r[:3]], rng.normal(size=3)) for r in start])  # 3-d rows at right angles
    table = rows_moved(np.c_[orthogonal, np.zeros((6, 2))] * np.linalg.norm(start[:, :3], axis=1, keepdims=True)
                       / np.linalg.norm(orthogonal, axis=1, keepdims=True), np.c_[start[:, :3], np.zeros((6, 2))])
    np.testing.assert_allclose(table["moved"], np.sqrt(2))  # same norm, at right angles
    np.testing.assert_allclose(table["cosine"], 0, atol=1e-12)
    same = rows_moved(start, start)
    assert (same["moved"] == 0).all() and np.allclose(same["cosine"], 1)
    doubled = rows_moved(2 * start, start)
    np.testing.assert_allclose(doubled["moved"], 1.0)
    np.testing.assert_allclose(doubled["start_norm"], np.linalg.norm(start, axis=1))
    assert doubled["number"].tolist() == list(range(6))
    with pytest.raises(CoreError, match="not the same numbers"):
        rows_moved(start[:5], start)


def test_a_recipe_without_a_base_model_or_number_rows_has_no_start(tmp_path):
    with pytest.raises(CoreError, match="does not start number rows"):
        start_rows({"name": "toy", "freeze": {"kind": "fourier"}})
    with pytest.raises(CoreError, match="is not here: import it"):
        start_rows({"name": "ft", "n_layers": 30, "init_from": str(tmp_path / "absent"), "number_tokens": {"layer": 5}})
