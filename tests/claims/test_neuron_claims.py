"""The neuron sentence (core.claims.neurons) on tables built to a known answer: each top set is read beside the random
draws made in its own layers (version 2), or, in a table of version 1, beside the one control drawn over every layer
read; the shift is given as a share and as a count of the questions."""

import pandas as pd

from core.claims.neurons import control_rows, neuron_headline, neuron_summary
from core.runs.reader import Table

N = 2000


def fits() -> pd.DataFrame:
    return pd.DataFrame({"layer": [20, 20, 28, 28], "neuron": [0, 1, 0, 1], "helix_r2": [0.1, 0.0, 0.9, 0.8],
                         "heuristic_r2": [0.7, 0.6, 0.1, 0.0], "n_fit": 1000, "n_scored": 1000})


def ablations(matched: bool = True) -> pd.DataFrame:
    rows = [dict(selection="none", k=0, draw=0, matches="", accuracy=0.99, last_digit_shift=0.0),
            dict(selection="helix", k=2, draw=0, matches="", accuracy=0.90, last_digit_shift=0.05),
            dict(selection="heuristic", k=2, draw=0, matches="", accuracy=0.98, last_digit_shift=0.003)]
    if matched:
        rows += [dict(selection="random", k=2, draw=d, matches="helix", accuracy=a, last_digit_shift=0.01)
                 for d, a in enumerate((0.97, 0.95))]
        rows += [dict(selection="random", k=2, draw=d, matches="heuristic", accuracy=0.99, last_digit_shift=0.0)
                 for d in range(2)]
    else:
        rows += [dict(selection="random", k=2, draw=d, matches="", accuracy=a, last_digit_shift=0.0)
                 for d, a in enumerate((0.985, 0.995))]
    frame = pd.DataFrame(rows).assign(n=N, helix_r2_mean=0.5, heuristic_r2_mean=0.3, overlap=1)
    return frame if matched else frame.drop(columns=["matches"])


class FakeRun:
    split, n_examples, manifest = "test", N, {"neurons": {"split": "test"}}

    def __init__(self, tables):
        self.tables = tables

    def has(self, name):
        return name in self.tables

    def table(self, name):
        return self.tables[name]


def test_each_top_set_is_read_beside_the_draws_in_its_own_layers():
    table = ablations()
    helix = control_rows(table, 2, "helix")
    assert helix["draws"] == 2 and helix["in_layers"] and abs(helix["accuracy"] - 0.96) < 1e-12
    assert control_rows(table, 2, "heuristic")["accuracy"] == 0.99
    text = neuron_summary(FakeRun({Table.NEURON_FITS: fits(), Table.NEURONS: table}))
    assert ("The 2 the helix fits best leave 90.00% correct, the last digit changed for 5.00% (100), against 96.00% "
            "correct (sd 1.41%) and 1.00% changed for 2 random neurons in its layers, as many in each "
            "(2 draws)") in text
    assert ("the 2 the digit patterns fit best leave 98.00% correct, the last digit changed for 0.30% (6), against "
            "99.00% correct (sd 0.00%) and 0.00% changed for 2 random neurons in its layers") in text
    assert "(1 neuron in both top sets)" in text and "over 2,000 test questions (99.00% correct unedited)" in text


def test_a_version_1_table_reads_its_one_control_over_the_layers_read():
    table = ablations(matched=False)
    for selection in ("helix", "heuristic"):
        r = control_rows(table, 2, selection)
        assert not r["in_layers"] and r["draws"] == 2 and abs(r["accuracy"] - 0.99) < 1e-12
    text = neuron_summary(FakeRun({Table.NEURON_FITS: fits(), Table.NEURONS: table}))
    assert "changed for 2 random neurons of the layers read (2 draws)" in text and "in its layers" not in text
    assert neuron_summary(FakeRun({Table.NEURON_FITS: fits()})) == ""


def test_the_headline_names_the_fit_that_wins_and_the_set_that_moves_most_beside_its_control():
    more_digits = fits().assign(heuristic_r2=[0.7, 0.6, 0.95, 0.0])  # three of four fit the digit patterns better
    text = neuron_headline(FakeRun({Table.NEURON_FITS: more_digits, Table.NEURONS: ablations()}))
    assert text.startswith("Digit patterns fit 3 of the 4 neurons better than a helix of a+b does.")
    # the helix's set moves most (5% of 2,000 = 100), against its own control's 1% (20.0)
    assert "at most 100 of the 2,000 answers (the 2 the helix fits best), against 20.0 on average for 2 random " \
           "neurons in the same layers." in text
    more_helix = fits().assign(helix_r2=[0.9, 0.8, 0.9, 0.8])
    assert neuron_headline(FakeRun({Table.NEURON_FITS: more_helix, Table.NEURONS: ablations(matched=False)})) \
        .startswith("A helix of a+b fits 4 of the 4 neurons better than digit patterns do.")
    assert "random neurons of the layers read" in neuron_headline(
        FakeRun({Table.NEURON_FITS: fits(), Table.NEURONS: ablations(matched=False)}))
    assert neuron_headline(FakeRun({Table.NEURON_FITS: fits()})) == ""
