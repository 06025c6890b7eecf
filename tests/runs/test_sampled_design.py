"""A deep model's precompute (core.runs.sampled_design): which conditions read every question, which read the
fixed sample, the phase-shift screen, and a sampled precompute end to end on a tiny model."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import core.runs.live_sample as live_sample_mod
import core.runs.sampled_design as design_mod
from core.analysis.ablations import Ablation, Condition
from core.analysis.evaluation import evaluate_conditions
from core.analysis.fourier import fourier_basis
from core.analysis.phase_shift import PERIOD_SETS, residue_modulus, shift_decomposition, shift_outcomes, wilson_interval
from core.claims.last_digit import claim_module_waves
from core.cli import main
from core.models.capture import capture
from core.models.loading import load_model
from core.runs.ablation_grid import (
    CONTROL_DRAWS,
    ablation_specs,
    build_filters,
    filter_key,
    module_second_moments,
    table1_cutoff,
)
from core.runs.cache import list_runs, read_table, verify_run
from core.runs.cached_run import options_refusal
from core.runs.live_sample import live_sample
from core.runs.precompute_arguments import DEFAULT_TAUS, reads_sample_again
from core.runs.reader import RunReader
from core.runs.sampled_design import design_for, reads_every_question, sampled_cells_note, screened_modules
from core.runs.shift_run import phase_shift_table, shift_specs
from core.runs.summaries import accuracy_by_tau
from core.tasks import build_examples, select_split


def capped_edit_of(loaded, texts, p: int, kind: str, layer: int, d: int):
    """The stage's edit of one module, rebuilt: its cap set on the module's outputs over `texts` (capture)."""
    captured = capture(loaded, texts, 8, progress=False)
    outputs = captured["resid"][:, layer] if kind == "resid" else captured[kind][:, layer - 1]
    W_U = loaded.unembedding(p).double().cpu().numpy()
    return shift_decomposition(W_U, fourier_basis(p, "paper"), PERIOD_SETS["all"], d).capped_edit(outputs)


def _answers(max_operand=260):
    return np.array([e.answer for e in select_split(build_examples("addition", max_operand), "test")])


def test_only_a_deep_model_on_a_large_split_reads_a_sample():
    answers = _answers()  # the paper's test split: 3,419 questions
    design = design_for(answers, 30, 576)
    assert design is not None and (len(design.sample), design.screen, design.n_split) == (256, 64, len(answers))
    frame = pd.DataFrame({"answer": answers})
    live = live_sample(frame).index.to_numpy()
    assert np.array_equal(design.sample, live[:256])  # the first questions the live filter reads
    # stratified: each tenth of the answers' range gives its share of the split to the sample, within a row
    span = answers.max() - answers.min() + 1
    bins = lambda a: np.minimum((a - answers.min()) * 10 // span, 9)  # noqa: E731
    share = np.bincount(bins(answers), minlength=10) / len(answers) * 256
    assert np.abs(np.bincount(bins(answers[design.sample]), minlength=10) - share).max() <= 1
    assert design_for(answers, 2, 640) is None  # a demo model reads every question
    assert design_for(answers, 30, 576, every_question=True) is None
    assert design_for(answers[:400], 30, 576) is None  # a split no larger than the live filter's sample


def test_every_question_holds_table_1s_cells_and_each_controls_first_draw():
    basis = fourier_basis(521, "paper")
    specs = ablation_specs(basis, DEFAULT_TAUS)
    t1 = table1_cutoff(DEFAULT_TAUS)
    assert t1 == 50
    full = [s for s in specs if reads_every_question(s, t1)]
    # no filter; 3 module sets x (low, high) as bands, rank-matched and energy-matched controls (draw 0)
    assert len(full) == 1 + 3 * 2 * 3
    assert {(s.removed, s.draw) for s in full if s.removed != "none"} == {
        (r, 0) for r in ("low", "high", "random-low", "random-high", "matched-low", "matched-high")}
    assert all(s.tau == 50 for s in full if s.removed != "none")
    sampled = [s for s in specs if not reads_every_question(s, t1)]
    assert any(s.removed == "keep" for s in sampled) and any(s.tau == 10 and s.removed == "low" for s in sampled)
    assert sum(s.tau == 50 and s.draw > 0 for s in sampled) == 3 * 4 * (CONTROL_DRAWS - 1)
    assert len(full) + len(sampled) == len(specs)


def test_the_screen_keeps_the_modules_whose_last_digit_moves_most():
    rows = pd.DataFrame([
        {"kind": k, "layer": l, "d": d, "residue_moved": share, "n": n}
        for k, l, share in (("attn", 1, 0.1), ("attn", 2, 0.9), ("mlp", 1, 0.5), ("mlp", 2, 0.5), ("resid", 2, 1.0))
        for d, n in ((1, 100), (2, 50))
    ])
    assert screened_modules(rows, keep=2) == [("attn", 2), ("mlp", 1)]  # the stream is kept apart; ties: first row
    rows.loc[(rows["kind"] == "attn") & (rows["layer"] == 1) & (rows["d"] == 1), "residue_moved"] = 1.0
    # pooled over d by n: (100 x 1.0 + 50 x 0.1) / 150 = 0.7 > 0.5
    assert screened_modules(rows, keep=2) == [("attn", 2), ("attn", 1)]


@pytest.mark.slow
def test_a_sampled_precompute_end_to_end(model_dir, tmp_path, monkeypatch, capsys):
    """A tiny model made to count as deep: the grid's rows say on how many questions they were read, a sampled
    row is the filter on the sample (re-evaluated here), the phase shift's dropped modules keep only their screen
    rows, and the claim says what was read; `precompute --every-question` then reads the sampled tables again over
    every question, as a fresh run of every question does, and keeps the rest."""
    monkeypatch.setattr(live_sample_mod, "SAMPLE_FROM_PARAMS", 0)
    monkeypatch.setattr(design_mod, "LIVE_SAMPLE", 40)
    monkeypatch.setattr(design_mod, "SAMPLE", 24)
    monkeypatch.setattr(design_mod, "SCREEN", 12)
    monkeypatch.setattr(design_mod, "SCREEN_KEEP", 1)
    folder = model_dir("gpt2", width=192, heads=4)
    cache = tmp_path / "cache"
    assert main(["precompute", "--model", str(folder), "--cache-dir", str(cache), "--max-operand", "95",
                 "--taus", "5,10,40", "--n-sample", "4", "--no-progress", "--limit", "120",
                 "--stages", "measure,ablations,shift"]) == 0  # the stages a design samples
    run = list_runs(cache)[0]
    assert run.ok and verify_run(run.path) == []
    m = run.manifest
    assert m["options"]["design"] == "sampled (24-question sample, 12-question screen, keep 1)"
    design = m["design"]
    assert (design["sample"], design["screen"], design["n_split"]) == (24, 12, 120)
    ab = read_table(cache, run.name, "ablations")
    examples = read_table(cache, run.name, "examples")
    full = ab["label"].isin(design["every_question"])
    assert full.sum() == 19 and (ab.loc[full, "n"] == 120).all() and (ab.loc[~full, "n"] == 24).all()
    assert set(ab.loc[full & (ab["removed"] != "none"), "tau"]) == {40}  # the grid's tau nearest the paper's 50

    # a sampled row is the filter evaluated on the sample; its change is against the unfiltered model there
    loaded = load_model(str(folder))
    loaded.select_numbers(m["p"], "test")
    sample = live_sample(examples, 40).iloc[:24]  # the first questions of the live filter's sample
    keep = ab[ab["removed"] == "keep"].iloc[0]
    spec = Ablation("both", "keep", keep_k=int(keep["keep_k"]))
    texts = list(sample["prompt"])
    flt = build_filters([spec], loaded.unembedding(m["p"]), fourier_basis(m["p"], "paper"),
                        module_second_moments(loaded, list(examples["prompt"]), 32))[filter_key(spec)]
    ev_keep, ev_none = evaluate_conditions(loaded, texts, sample["answer"].to_numpy(), m["p"],
                                           [Condition(flt, "both"), Condition(None)], "last", 32, progress=False)
    assert keep["accuracy"] == pytest.approx(ev_keep.accuracy)
    assert keep["delta_accuracy"] == pytest.approx(ev_keep.accuracy - ev_none.accuracy)
    none = ab[ab["removed"] == "none"].iloc[0]
    assert none["accuracy"] == pytest.approx(examples["correct"].mean())  # the unfiltered row reads every question

    shift = read_table(cache, run.name, "phase_shift")
    per_question = read_table(cache, run.name, "phase_shift_answers")
    for i, row in shift[shift["period_set"] == "all"].iterrows():  # each row pools its questions' outcomes
        mine = per_question[per_question["condition"] == i]
        assert len(mine) == row["n"] and mine["residue_moved"].mean() == pytest.approx(row["residue_moved"])
        assert mine["stayed"].mean() == pytest.approx(row["stayed"])
    per_module = shift.groupby(["kind", "layer"]).size()
    full_count = len(shift_specs(m["p"], m["n_layers"])) // (2 * m["n_layers"] + 1)
    kept = per_module[per_module == full_count].index.tolist()
    assert ("resid", m["n_layers"]) in kept and len(kept) == 2  # the stream and SCREEN_KEEP = 1 module
    dropped = shift[~shift.set_index(["kind", "layer"]).index.isin(kept)]
    assert len(dropped) and (dropped["period_set"] == "all").all() and not dropped["control"].any()
    assert (dropped["n"] <= 12).all() and (shift.loc[~shift.index.isin(dropped.index), "n"] <= 24).all()
    assert (shift.loc[~shift.index.isin(dropped.index), "n"] > 12).any()
    # each row is its own condition (the stage runs them sorted by layer and puts them back): re-evaluated alone
    L = m["n_layers"]
    for kind, layer, d in [(k, l, d) for k, l in kept for d in (1, 5)]:
        row = shift[(shift["kind"] == kind) & (shift["layer"] == layer) & (shift["period_set"] == "all")
                    & (shift["d"] == d) & ~shift["control"]].iloc[0]
        edit = capped_edit_of(loaded, texts, m["p"], kind, layer, d)
        assert row["kept"] == edit.kept and row["edit_size"] == pytest.approx(edit.edit_size)
        before, alone = evaluate_conditions(loaded, texts, sample["answer"].to_numpy(), m["p"],
                                            [Condition(None), Condition(edit, kind, layer)], "last", 32,
                                            progress=False)
        out = shift_outcomes(before.predictions, alone.predictions, d, m["p"], residue_modulus(PERIOD_SETS["all"]))
        assert (row["n"], row["moved"], row["stayed"], row["residue_moved"]) == pytest.approx(
            (out["n"], out["moved"], out["stayed"], out["residue_moved"])), (kind, layer, d)
        assert row["accuracy"] == pytest.approx(alone.accuracy), (kind, layer, d)
    assert ("resid", L) in kept

    # the step-3 claim says what it read, and the Ablations page's note what read the sample

    reader = RunReader(cache, run.name)
    claim = claim_module_waves(reader)
    assert "on a fixed sample of 24 of the 120 test questions" in claim.measured
    assert "a 24-question sample" in claim.headline
    note = sampled_cells_note(ab, m)
    assert "tau = 40" in note and "all 120 questions" in note and "sample of 24 questions" in note
    by_tau = accuracy_by_tau(ab)
    sampled_rows = by_tau[by_tau["tau"] != 40]
    assert (sampled_rows["n"] == 24).all()
    for r in by_tau.itertuples():
        assert (r.low, r.high) == wilson_interval(r.accuracy, r.n)
    assert (sampled_rows["high"] - sampled_rows["low"]).min() > 0.08  # 24 questions: a wide interval

    # `precompute --every-question` of the sampled run reads its grid and phase shift again over every question and
    # keeps every other table as it was: the run is then what a run of every question computes
    args = ["precompute", "--model", str(folder), "--max-operand", "95", "--taus", "5,10,40", "--n-sample", "4",
            "--no-progress", "--limit", "120", "--stages", "measure,ablations,shift", "--every-question"]
    assert main(args + ["--cache-dir", str(cache)]) == 0
    assert "reading them again over all 120 questions" in capsys.readouterr().out
    upgraded = list_runs(cache)[0]
    assert upgraded.name == run.name and verify_run(upgraded.path) == []
    up = upgraded.manifest
    assert "design" not in up and "design" not in up["options"]
    redone = {"ablations", "ablation_errors", "error_analysis", "phase_shift", "phase_shift_answers"}
    assert redone <= set(up["tables"])
    assert ({t: e["sha256"] for t, e in up["tables"].items() if t not in redone}
            == {t: e["sha256"] for t, e in m["tables"].items() if t not in redone})
    fresh = tmp_path / "fresh"
    assert main(args + ["--cache-dir", str(fresh)]) == 0
    for table in redone:
        pd.testing.assert_frame_equal(read_table(cache, run.name, table), read_table(fresh, run.name, table))
    ab = read_table(cache, run.name, "ablations")
    assert (ab["n"] == 120).all() and sampled_cells_note(ab, up) is None
    assert "fixed sample" not in claim_module_waves(RunReader(cache, run.name)).measured
    assert main(args + ["--cache-dir", str(cache)]) == 0  # asked again: nothing left to read again
    assert "nothing to do" in capsys.readouterr().out


def test_a_deep_run_cached_before_the_design_is_kept_with_every_question():
    before = {"taus": [10, 50], "n_sample": 16}
    assert options_refusal("r", before, dict(before)) is None
    refusal = options_refusal("r", before, {**before, "design": "sampled"})
    assert "already cached with other options" in refusal and "pass --every-question to keep it" in refusal
    other = options_refusal("r", before, {"taus": [7], "n_sample": 16, "design": "sampled"})
    # a run of the design at other sizes (an earlier 512-question sample) is not taken for this one
    earlier = {**before, "design": "sampled (512-question sample, 128-question screen, keep 8)"}
    now = {**before, "design": "sampled (256-question sample, 64-question screen, keep 8)"}
    resized = options_refusal("r", earlier, now)
    assert "--recompute" in resized and "--every-question" not in resized
    assert "--recompute" in other and "--every-question" not in other  # other taus: only a rebuild helps
    assert options_refusal("r", None, before) is None
    # a run of the design asked for with every question is read again (core.runs.cached_run.upgrade_design), not
    # refused; with other taus as well it is refused as any other difference is
    assert options_refusal("r", now, before) is None and reads_sample_again(now, before)
    assert "--recompute" in options_refusal("r", now, {"taus": [7], "n_sample": 16})
    assert not reads_sample_again(before, before) and not reads_sample_again(now, now)


def test_the_phase_shift_stage_puts_each_row_back_with_its_condition(loaded_model):
    """The stage runs its conditions sorted by layer (each call shares the blocks below it) and puts every result
    back in its spec's row: rows of modules whose order the sort changes equal their condition run alone."""
    loaded = loaded_model("gpt2", n_layers=3)
    p = 101
    examples = select_split(build_examples("addition", 50), "test")[:24]
    texts = [f"{e.a}+{e.b}=" for e in examples]
    answers = np.array([e.answer for e in examples])
    opts = SimpleNamespace(batch_size=8, progress=False)
    tables = phase_shift_table(loaded, texts, answers, p, opts, log=lambda _: 0)
    table, per_question = tables["phase_shift"], tables["phase_shift_answers"]
    specs = shift_specs(p, 3)
    assert len(table) == len(specs)
    assert list(zip(table["kind"], table["layer"], table["d"], table["draw"])) == [
        (s["kind"], s["layer"], s["d"], s["draw"]) for s in specs]
    outcomes = set()
    for kind, layer, d in [("attn", 3, 1), ("mlp", 1, 1), ("mlp", 2, 5), ("resid", 3, 2)]:
        at = table[(table["kind"] == kind) & (table["layer"] == layer) & (table["period_set"] == "all")
                   & (table["d"] == d) & ~table["control"]]
        row = at.iloc[0]
        edit = capped_edit_of(loaded, texts, p, kind, layer, d)
        before, alone = evaluate_conditions(loaded, texts, answers, p, [Condition(None), Condition(edit, kind, layer)],
                                            "last", 8, progress=False)
        out = shift_outcomes(before.predictions, alone.predictions, d, p, residue_modulus(PERIOD_SETS["all"]))
        assert (row["moved"], row["stayed"], row["residue_moved"]) == pytest.approx(
            (out["moved"], out["stayed"], out["residue_moved"])), (kind, layer, d)
        outcomes.add((out["moved"], out["stayed"]))
        mine = per_question[per_question["condition"] == at.index[0]]  # each question's outcome, in its row's place
        keep = before.predictions + d <= p - 1
        assert list(mine["example"]) == list(np.flatnonzero(keep))
        moved = (alone.predictions - before.predictions - d) % residue_modulus(PERIOD_SETS["all"]) == 0
        assert list(mine["residue_moved"]) == list(moved[keep]), (kind, layer, d)
    assert len(outcomes) > 1, "every condition gave the same outcome: a misplaced row could not be seen"
