"""End to end: `python -m core precompute` on tiny models of several architectures, then the tables."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest

import core.analysis.evaluation as evaluation_mod
import core.runs.precompute as pre
from core import SCHEMA_VERSION
from core.claims.registry import run_claims
from core.cli import main
from core.errors import CoreError
from core.files import sha256_file
from core.models.random_models import save_random_model
from core.models.vocab import digit_tokenizer
from core.runs.ablation_grid import CONTROL_DRAWS
from core.runs.cache import list_runs, read_manifest, read_table, resolve_run, verify_run
from core.runs.reader import RunReader
from core.runs.shift_run import SHIFT_VERSION
from core.runs.tables import REQUIRED_TABLES

# operands 0..93 (15 + 93 in range, p = 187, K = 93); the e2e models are 192 wide, so no filter erases
FAST = ["--max-operand", "93", "--taus", "5,10", "--n-sample", "4", "--no-progress"]
WIDE = dict(width=192, heads=4)


def run_cli(*args):
    return main(["precompute", *args])


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "llama", "phi", "gptj"])
def test_precompute_end_to_end(model_dir, cache, arch):
    folder = model_dir(arch, **WIDE)
    assert run_cli("--model", str(folder), "--cache-dir", str(cache), "--limit", "40", *FAST) == 0
    run = next(
        r
        for r in list_runs(cache)
        if r.manifest and r.manifest["model"]["architecture"].lower().startswith(arch.replace("_", "")[:4])
    )
    assert run.ok and verify_run(run.path) == []
    m = run.manifest
    L, p = m["n_layers"], m["p"]
    assert (L, p, m["width"]) == (2, 187, 192)
    assert set(REQUIRED_TABLES) <= set(m["tables"])

    ns = read_table(cache, run.name, "number_spectrum")
    assert sorted(ns["layer"].unique()) == list(range(L + 1)) and set(ns["basis"]) == {"paper", "dft"}
    assert len(ns) == (L + 1) * 2 * 93 and (ns["null_threshold"] > 0).all()
    probes = read_table(cache, run.name, "number_probes")
    assert set(probes["modulus"]) == {2, 3, 5, 7, 10}  # 100 needs N >= 200 numbers; p = 187
    assert len(probes) == (L + 1) * 5 and probes["kappa_mean"].between(-1, 1).all()
    assert m["number_representations"]["n_numbers"] == p and m["number_representations"]["single_token"]

    ex = read_table(cache, run.name, "examples")
    assert len(ex) == 40 and "15+93" in set(ex["id"])
    assert (ex["answer"] == ex["a"] + ex["b"]).all() and (ex["split"] == "test").all()
    assert (ex["correct"] == (ex["prediction"] == ex["answer"])).all()
    assert ex["prediction"].between(0, p - 1).all() and (ex["loss"] > 0).all()

    acc = read_table(cache, run.name, "layer_accuracy")
    assert sorted(acc["layer"].unique()) == list(range(L + 1)) and set(acc["final_norm"]) == {True, False}
    assert (acc["exact"] <= acc["within_2"]).all() and (acc["within_2"] <= acc["within_10"]).all()
    last = acc[(acc["layer"] == L) & acc["final_norm"]].iloc[0]
    assert np.isclose(last["exact"], ex["correct"].mean())  # logit lens at the top is the model itself

    spec = read_table(cache, run.name, "module_spectra")
    assert set(spec["module"]) == {"attn", "mlp", "resid"} and set(spec["basis"]) == {"paper", "dft"}
    one = spec[(spec["module"] == "mlp") & (spec["basis"] == "paper")]
    assert len(one) == L * 93 and one["k"].min() == 1 and (one["magnitude"] > 0).all()
    assert np.allclose(one["period"], 186 / one["k"])

    logits = read_table(cache, run.name, "module_logits")
    assert "15+93" in set(logits["example_id"].astype(str))
    ours = logits[(logits["example_id"] == "15+93") & (logits["module"] == "final")]
    assert len(ours) == p
    pred = ex.set_index("id").loc["15+93", "prediction"]
    assert ours.sort_values("number")["logit"].to_numpy().argmax() == pred

    waves = read_table(cache, run.name, "final_waves")
    w = waves[(waves["example_id"] == "15+93") & (waves["basis"] == "dft")]
    assert sorted(w["rank"].unique()) == list(range(1, 11))
    mags = w.groupby("rank")["magnitude"].first()
    assert (np.diff(mags.to_numpy()) <= 1e-6).all()

    base = read_table(cache, run.name, "module_spectra_baseline")
    keys = ["basis", "module", "layer", "k"]
    assert (
        base[keys].sort_values(keys).reset_index(drop=True).equals(spec[keys].sort_values(keys).reset_index(drop=True))
    )
    assert (base["magnitude"] > 0).all() and (base["rms_norm"] > 0).all()

    ab = read_table(cache, run.name, "ablations")
    # none, band filters, their random controls, keep-one, the controls' further draws at the Table 1 tau, and there
    # the controls matched to the band's rank and energy
    assert len(ab) == 1 + 2 * 3 * 2 + 2 * 3 * 2 + 2 + (CONTROL_DRAWS - 1) * 3 * 2 + CONTROL_DRAWS * 3 * 2
    band_rows = ab[ab["removed"].isin(["low", "high"])].set_index(["modules", "removed", "tau"])
    controls = ab[ab["removed"].str.startswith(("random-", "matched-"))]
    for _, row in controls.iterrows():  # each control removes a subspace of its band filter's rank
        band = band_rows.loc[(row["modules"], row["removed"].split("-")[1], row["tau"])]
        assert row["rank"] == band["rank"]
        if row["removed"].startswith("matched-"):  # ... and as much of the outputs' energy, where it can
            assert row["tau"] == 10 and abs(row["energy_removed"] - band["energy_removed"]) <= 0.005
    assert ab.loc[ab["removed"] != "none", "energy_removed"].between(0, 1).all()
    none = ab[ab["removed"] == "none"].iloc[0]
    assert np.isclose(none["accuracy"], ex["correct"].mean()) and np.isclose(none["loss"], ex["loss"].mean(), rtol=1e-4)
    assert set(ab.loc[ab["removed"] == "keep", "keep_k"]) == {1, 93}
    assert not ab["erased"].any()  # width 192 > 2 * 93 rows
    errs = read_table(cache, run.name, "ablation_errors")
    for _, row in ab.iterrows():
        mask = (errs["modules"] == row["modules"]) & (errs["removed"] == row["removed"])
        mask &= errs["tau"].fillna(-1) == (row["tau"] if pd.notna(row["tau"]) else -1)
        mask &= errs["keep_k"].fillna(-1) == (row["keep_k"] if pd.notna(row["keep_k"]) else -1)
        mask &= errs["draw"] == row["draw"]
        assert errs.loc[mask, "count"].sum() == round((1 - row["accuracy"]) * row["n"])

    shift = read_table(cache, run.name, "phase_shift")  # every module and the stream (on 187 numbers: parity only)
    assert {"attn", "mlp", "resid"} <= set(shift["kind"]) and set(shift["period_set"]) == {"2"}
    assert shift[["moved", "stayed", "elsewhere"]].sum(axis=1).round(9).eq(1.0).all()

    emb = read_table(cache, run.name, "embedding_spectrum")
    assert set(emb["matrix"]) == {"input", "output"} and len(emb) == 2 * 2 * 93
    clusters = read_table(cache, run.name, "embedding_clusters")
    assert len(clusters) == 2 * p
    ea = read_table(cache, run.name, "error_analysis")
    assert ea.iloc[0]["source"] == "model" and ea.iloc[0]["n"] == 40


@pytest.mark.slow
def test_narrow_model_full_range_flags_erasure(model_dir, tmp_path):
    folder = model_dir("gpt2")
    assert (
        run_cli(
            "--model",
            str(folder),
            "--cache-dir",
            str(tmp_path),
            "--limit",
            "12",
            "--taus",
            "50",
            "--n-sample",
            "2",
            "--no-progress",
            "--stages",
            "measure,ablations",  # what it checks: the grid's erasure (the 521 numbers' probes take seconds)
        )
        == 0
    )
    (run,) = list_runs(tmp_path)
    m = run.manifest
    assert m["p"] == 521 and m["task"]["running_example_id"] == "15+93"
    ab = read_table(tmp_path, run.name, "ablations")
    high = ab[(ab["removed"] == "high") & (ab["tau"] == 50)]
    assert high["erased"].all() and (high["rank"] == 64).all()
    assert any("erase the whole module output" in n for n in m["notes"])


@pytest.mark.slow
def test_interrupted_run_leaves_nothing_and_resumes(model_dir, tmp_path, monkeypatch):
    folder = str(model_dir("llama"))
    stages = ["--stages", "measure,ablations,shift"]  # the stages it interrupts and counts
    args = ["--model", folder, "--cache-dir", str(tmp_path), "--limit", "20", "--batch-size", "4", *FAST, *stages]
    # an existing run of another configuration must survive untouched
    assert run_cli("--model", folder, "--cache-dir", str(tmp_path), "--limit", "10", *FAST, *stages) == 0
    (before,) = list_runs(tmp_path)
    before_hash = (before.path / "manifest.json").read_bytes()

    # interrupt the ablation grid in its third batch of prompts (batches of 4: 5 batches in all)

    calls = {"n": 0}
    real_passes = evaluation_mod.answer_position_passes

    def failing_passes(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_passes(*a, **kw)

    monkeypatch.setattr(evaluation_mod, "answer_position_passes", failing_passes)
    assert run_cli(*args) == 130
    names = [r.name for r in list_runs(tmp_path)]
    assert names == [before.name]  # no half-written run is visible
    assert (before.path / "manifest.json").read_bytes() == before_hash
    staging = [p for p in tmp_path.iterdir() if p.name.startswith(".staging-")]
    assert len(staging) == 1 and (staging[0] / "examples.parquet").exists()
    assert (staging[0] / "ablations.progress.npz").exists()

    # resume: measurements are not recomputed, the two finished batches of the grid are not re-run
    monkeypatch.setattr(pre, "measure", lambda *a, **kw: pytest.fail("measurements recomputed on resume"))
    calls["n"] = -100
    assert run_cli(*args) == 0
    assert calls["n"] == -100 + (5 - 2) + 5  # the grid's 3 unfinished batches, then the phase-shift stage's 5
    assert len(list_runs(tmp_path)) == 2 and not any(p.name.startswith(".staging-") for p in tmp_path.iterdir())
    (fresh,) = [r for r in list_runs(tmp_path) if r.name != before.name]
    assert not any(f.suffix == ".npz" or "progress" in f.name for f in fresh.path.iterdir())
    # the resumed grid equals one computed in one go
    whole = tmp_path.parent / f"{tmp_path.name}-whole"
    monkeypatch.undo()
    assert run_cli(*[a if a != str(tmp_path) else str(whole) for a in args]) == 0
    (one_go,) = list_runs(whole)
    pd.testing.assert_frame_equal(
        pd.read_parquet(fresh.path / "ablations.parquet"), pd.read_parquet(one_go.path / "ablations.parquet")
    )
    monkeypatch.setattr(evaluation_mod, "answer_position_passes", failing_passes)
    monkeypatch.setattr(pre, "measure", lambda *a, **kw: pytest.fail("measurements recomputed on resume"))

    # an existing run is not recomputed unless asked, and other options are not silently ignored
    assert run_cli(*args) == 0
    assert calls["n"] == -100 + (5 - 2) + 5  # nothing more ran
    other_taus = [a if a != "5,10" else "7" for a in args]
    assert run_cli(*other_taus) == 2
    monkeypatch.undo()
    assert run_cli(*other_taus, "--recompute") == 0
    rebuilt = [r for r in list_runs(tmp_path) if r.name != before.name]
    assert len(rebuilt) == 1 and rebuilt[0].manifest["taus"] == [7] and rebuilt[0].ok
    assert (before.path / "manifest.json").read_bytes() == before_hash
    assert len(list_runs(tmp_path)) == 2


@pytest.mark.slow
def test_verify_and_list_catch_tampering(model_dir, tmp_path, capsys):
    assert run_cli("--model", str(model_dir("gpt2")), "--cache-dir", str(tmp_path), "--limit", "10", *FAST,
                   "--stages", "measure") == 0
    (run,) = list_runs(tmp_path)
    assert main(["verify", run.name, "--cache-dir", str(tmp_path)]) == 0
    table = run.path / "layer_accuracy.parquet"
    frame = pd.read_parquet(table)
    frame.loc[0, "exact"] = 0.99
    frame.to_parquet(table)
    assert main(["verify", run.name, "--cache-dir", str(tmp_path)]) == 1
    assert "sha256 differs" in capsys.readouterr().out
    (run.path / "examples.parquet").unlink()
    broken = list_runs(tmp_path)[0]
    assert not broken.ok and "examples" in " ".join(broken.problems)
    main(["list", "--cache-dir", str(tmp_path)])
    assert "BROKEN" in capsys.readouterr().out
    assert main(["list", "--json", "--cache-dir", str(tmp_path)]) == 0  # the same, for a program
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["name"] == run.name and listed["ok"] is False and any("examples" in p for p in listed["problems"])
    assert listed["layers"] == run.manifest["n_layers"] and listed["questions"] == 10


def test_cache_reads_stay_inside_the_cache(tmp_path):
    (tmp_path / "cache").mkdir()
    for bad in ("../etc", "/etc", ".staging-x", "a/b", ""):
        with pytest.raises(CoreError):
            resolve_run(tmp_path / "cache", bad)
    with pytest.raises(CoreError, match="no run"):
        read_manifest(tmp_path / "cache", "nothing-here")


@pytest.mark.slow
def test_cli_errors_are_one_clear_line(tmp_path, capsys):
    folder = save_random_model(tmp_path / "digits", "gpt2", tokenizer=digit_tokenizer())
    capsys.readouterr()
    # a model whose numbers are digits: no number logits, but the representations and k-shot behaviour
    assert run_cli("--model", str(folder), "--cache-dir", str(tmp_path / "c"), "--limit", "12", "--no-progress") == 0
    (run,) = list_runs(tmp_path / "c")
    assert verify_run(run.path) == []
    m = run.manifest
    assert set(m["not_applicable"]) >= {"examples", "layer_accuracy", "ablations", "embedding_spectrum"}
    assert all("writes numbers as several tokens" in why for why in m["not_applicable"].values())
    assert set(m["tables"]) == {"number_spectrum", "number_probes", "generations", "error_analysis"}
    gen = read_table(tmp_path / "c", run.name, "generations")
    assert sorted(gen["shots"].unique()) == [0, 4] and len(gen) == 24
    assert (gen["correct"] == ((gen["prediction"] == gen["answer"]) & gen["is_number"])).all()
    four = gen[gen["shots"] == 4]["prompt"].iloc[0]
    assert four.count("Answer:") == 5 and four.endswith("Answer:")
    errs = read_table(tmp_path / "c", run.name, "error_analysis")
    assert list(errs["source"]) == ["0-shot", "4-shot"]
    assert np.isclose(m["accuracy_by_shots"]["4"], gen[gen["shots"] == 4]["correct"].mean())
    # with the task shrunk to the single-token range it is an ordinary run
    assert (
        run_cli(
            "--model",
            str(folder),
            "--cache-dir",
            str(tmp_path / "c"),
            "--max-operand",
            "4",
            "--taus",
            "2",
            "--no-progress",
        )
        == 0
    )
    assert run_cli("--model", "nobody/none", "--cache-dir", str(tmp_path / "c")) == 2
    assert "hub id 'nobody/none'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["precompute", "--model", "x", "--taus", "a,b"])
    assert (
        run_cli("--model", str(folder), "--max-operand", "4", "--taus", "99", "--cache-dir", str(tmp_path / "c")) == 2
    )
    assert "tau = 99 is out of range" in capsys.readouterr().err


def test_list_and_verify_on_empty_cache(tmp_path, capsys):
    assert main(["list", "--cache-dir", str(tmp_path)]) == 0
    assert "no runs" in capsys.readouterr().out
    assert main(["list", "--json", "--cache-dir", str(tmp_path)]) == 0 and json.loads(capsys.readouterr().out) == []
    assert main(["verify", "--cache-dir", str(tmp_path)]) == 0


@pytest.fixture(scope="module")
def fresh_run(model_dir, tmp_path_factory):
    """(model folder, cache): one run of the wide tiny GPT-2 over 20 questions, made once for the tests that play an
    older schema's run on it (each on its own copy: `copy_of`)."""
    folder, cache = model_dir("gpt2", **WIDE), tmp_path_factory.mktemp("fresh")
    assert run_cli("--model", str(folder), "--cache-dir", str(cache), "--limit", "20", *FAST) == 0
    return folder, cache


def copy_of(fresh_run, tmp_path):
    """A copy of the fresh run's cache in this test's folder, and the model folder it was made from."""
    folder, cache = fresh_run
    shutil.copytree(cache, tmp_path / "c")
    return folder, tmp_path / "c"


@pytest.mark.slow
def test_a_schema_2_run_gets_the_number_tables_and_the_capped_phase_shift_and_keeps_the_rest(fresh_run, tmp_path):
    """Written by schema 2 with a phase shift of version 1 (uncapped, no per-question outcomes): one precompute
    brings both up to date and leaves every other table byte for byte."""
    folder, cache = copy_of(fresh_run, tmp_path)
    (run,) = list_runs(cache)
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["phase_shift"] == {"version": SHIFT_VERSION} and "phase_shift_answers" in manifest["tables"]
    redone = ("number_spectrum", "number_probes", "phase_shift", "phase_shift_answers")
    kept = {t: e["sha256"] for t, e in manifest["tables"].items() if t not in redone}
    for t in ("number_spectrum", "number_probes", "phase_shift_answers"):  # as a schema-2 run was written
        (run.path / manifest["tables"].pop(t)["file"]).unlink()
    del manifest["phase_shift"]  # and its phase shift by version 1
    manifest["schema_version"] = 2
    (run.path / "manifest.json").write_text(json.dumps(manifest))
    assert any("run the same precompute again" in p for p in verify_run(run.path))
    assert run_cli("--model", str(folder), "--cache-dir", str(cache), "--limit", "20", *FAST) == 0
    (again,) = list_runs(cache)
    assert again.name == run.name and verify_run(again.path) == []
    after = again.manifest
    assert after["schema_version"] == SCHEMA_VERSION and {"number_spectrum", "number_probes"} <= set(after["tables"])
    assert after["phase_shift"] == {"version": SHIFT_VERSION} and "phase_shift_answers" in after["tables"]
    assert after["timings"]["phase_shift_s"] >= 0
    assert {t: after["tables"][t]["sha256"] for t in kept} == kept  # nothing else recomputed
    assert after["timings"]["numbers_s"] >= 0 and after["accuracy"] == manifest["accuracy"]


@pytest.mark.slow
def test_a_run_upgraded_without_its_model_gets_every_example_once_the_model_is_here(fresh_run, tmp_path):
    """`python -m core upgrade` (model not here) reads the phase tables off the cached sample and says
    so; the same precompute with the model replaces them by the tables over every example, and keeps
    every other table byte for byte."""
    folder, cache = copy_of(fresh_run, tmp_path)
    (run,) = list_runs(cache)
    full = read_table(cache, run.name, "phase_locking")
    assert (full["n"] == 20).all() and run.manifest["phase_locking"]["whole_split"] is True
    manifest = json.loads((run.path / "manifest.json").read_text())
    kept = {t: e["sha256"] for t, e in manifest["tables"].items() if t not in ("phase_locking", "wave_peaks")}
    for t in ("phase_locking", "wave_peaks"):  # as a schema-3 run was written
        (run.path / manifest["tables"].pop(t)["file"]).unlink()
    manifest["schema_version"] = 3
    manifest.pop("phase_locking")
    (run.path / "manifest.json").write_text(json.dumps(manifest))
    assert main(["upgrade", run.name, "--cache-dir", str(cache)]) == 2  # the model is here: read every example instead
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for f in folder.glob("model*.safetensors"):
        shutil.move(f, hidden / f.name)
    try:
        assert main(["upgrade", "--cache-dir", str(cache)]) == 0
    finally:  # the model folder is the whole session's
        for f in hidden.iterdir():
            shutil.move(f, folder / f.name)
    (sampled,) = list_runs(cache)
    assert verify_run(sampled.path) == [] and sampled.manifest["phase_locking"]["whole_split"] is False
    assert (read_table(cache, run.name, "phase_locking")["n"] == 4).all()  # the 4 cached sample examples
    assert run_cli("--model", str(folder), "--cache-dir", str(cache), "--limit", "20", *FAST) == 0
    (again,) = list_runs(cache)
    assert verify_run(again.path) == [] and again.manifest["phase_locking"]["whole_split"] is True
    pd.testing.assert_frame_equal(read_table(cache, run.name, "phase_locking"), full)
    assert {t: again.manifest["tables"][t]["sha256"] for t in kept} == kept


@pytest.mark.slow
def test_a_control_an_older_draw_left_unmatched_is_drawn_again_and_nothing_else_changes(model_dir, tmp_path):
    """A run cached at draw version 1 with a matched control that missed its band's energy (made so here, as
    the old draw left a 2-layer Llama's high-band controls) gets that control drawn again by the current
    `energy_matched_filter`, evaluated on its questions and recorded; the other ablation rows and tables stay.
    Written by schema 2 as well, it gets its number tables in the same command (two amendments in a row)."""
    folder = model_dir("llama", **WIDE)
    cache = tmp_path / "c"
    assert run_cli("--model", str(folder), "--cache-dir", str(cache), "--limit", "20", *FAST) == 0
    (run,) = list_runs(cache)
    assert run.manifest["matched_draw_version"] == 2
    manifest = json.loads((run.path / "manifest.json").read_text())
    ab = read_table(cache, run.name, "ablations")
    target = (ab["removed"] == "matched-high") & (ab["modules"] == "mlp") & (ab["draw"] == 1)
    assert target.sum() == 1
    fresh = ab[target].iloc[0]
    spoiled = ab.copy()
    spoiled.loc[target, ["energy_removed", "accuracy"]] = [fresh["energy_removed"] + 0.2, -1.0]
    spoiled.to_parquet(run.path / manifest["tables"]["ablations"]["file"], index=False)
    manifest["tables"]["ablations"]["sha256"] = sha256_file(run.path / manifest["tables"]["ablations"]["file"])
    manifest["matched_draw_version"] = 1
    kept = {t: e["sha256"] for t, e in manifest["tables"].items()
            if t not in ("ablations", "ablation_errors", "error_analysis") and not t.startswith("number_")}
    for t in ("number_spectrum", "number_probes"):  # and written by schema 2: both upgrades in one command
        (run.path / manifest["tables"].pop(t)["file"]).unlink()
    manifest["schema_version"] = 2
    (run.path / "manifest.json").write_text(json.dumps(manifest))
    assert run_cli("--model", str(folder), "--cache-dir", str(cache), "--limit", "20", *FAST) == 0
    (again,) = list_runs(cache)
    assert verify_run(again.path) == [] and again.manifest["matched_draw_version"] == 2
    assert again.manifest["schema_version"] == SCHEMA_VERSION and "number_probes" in again.manifest["tables"]
    after = read_table(cache, run.name, "ablations")
    redrawn = after[target].iloc[0]
    assert redrawn["energy_removed"] == pytest.approx(fresh["energy_removed"], abs=1e-6)  # the same draw as a new run
    assert redrawn["accuracy"] == pytest.approx(fresh["accuracy"])
    pd.testing.assert_frame_equal(after[~target].reset_index(drop=True), ab[~target].reset_index(drop=True))
    assert {t: again.manifest["tables"][t]["sha256"] for t in kept} == kept
    errors = read_table(cache, run.name, "ablation_errors")
    one = errors[(errors["removed"] == "matched-high") & (errors["modules"] == "mlp") & (errors["draw"] == 1)]
    assert one["count"].sum() == round((1 - fresh["accuracy"]) * fresh["n"])
    # at the current version nothing is drawn again
    assert run_cli("--model", str(folder), "--cache-dir", str(cache), "--limit", "20", *FAST) == 0
    assert list_runs(cache)[0].manifest["tables"] == again.manifest["tables"]


def test_stages_leave_their_tables_out_and_every_reader_says_so(model_dir, tmp_path, capsys):
    """`--stages measure,ablations`: the run holds the measurements and the grid only, its manifest names each table
    left out with the reason, verify passes, the claims that need a missing table are "not tested" saying why, a
    second precompute with the same stages adds nothing (no upgrade fills in a stage left out on purpose), and
    asking for every stage on the same run is refused until --recompute."""
    cache = tmp_path / "c"
    common = ["--model", str(model_dir("gpt2")), "--cache-dir", str(cache), "--max-operand", "20", "--limit", "30",
              "--taus", "5", "--n-sample", "2", "--no-progress"]
    assert main(["precompute", *common, "--stages", "ablations,measure"]) == 0
    (run,) = list_runs(cache)
    left = run.manifest["not_computed"]
    left_out = [s for s in pre.STAGES if s not in ("measure", "ablations")]  # every other stage
    expected = {t for s in left_out for t in pre.STAGE_TABLES[s]}
    assert set(left) == expected and not expected & set(run.manifest["tables"])
    assert {"examples", "phase_locking", "ablations", "error_analysis"} <= set(run.manifest["tables"])
    assert all("--stages measure,ablations" in why for why in left.values())
    assert run.manifest["options"]["stages"] == ["measure", "ablations"]
    assert verify_run(run.path) == []
    claims = run_claims(RunReader(cache, run.name))
    assert claims["numbers"].verdict == "not tested" and "Not measured on this run" in claims["numbers"].measured
    assert "--stages" in claims["numbers"].measured
    assert "left out of this run" in claims["module_waves"].reason
    assert claims["accuracy"].verdict != "not tested"
    capsys.readouterr()
    assert main(["precompute", *common, "--stages", "measure,ablations", "--json"]) == 0
    said = capsys.readouterr()
    assert "nothing to do" in said.err  # --json: the log on stderr, the run alone on stdout
    assert json.loads(said.out)["name"] == run.name and json.loads(said.out)["ok"] is True
    assert read_manifest(cache, run.name)["tables"] == run.manifest["tables"]
    assert main(["precompute", *common]) == 2
    assert "stages" in capsys.readouterr().err
    assert pre.check_stages("shift, measure") == pre.check_stages(("shift", "measure")) == ("measure", "shift")
    assert main(["precompute", *common, "--stages", "measure,waves"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no stage named 'waves'" in err and "\n" not in err
