"""What the Training page and the Tour's last step show of training logs (no Streamlit here): the small
models' accuracy curves over seeds, and a fine-tuning's stages laid end to end. Part of
core.runs.summaries, which re-exports these names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from core.models.source import project_path
from core.runs.origin import run_origin, summary_of
from core.training.stages import earlier_stage


def training_curves(logs: dict[str, pd.DataFrame], split: str = "val") -> pd.DataFrame:
    """Mean, min and max accuracy over seeds by epoch, per run label and model width.

    Columns: run, width, epoch, mean, low, high, seeds. A run whose log holds seed studies at
    another width gets one curve per width ("scratch, 256 wide").
    """
    frames = []
    for label, log in logs.items():
        sub = log[log["split"] == split]
        widths = sorted(sub["width"].unique()) if "width" in sub.columns else [None]
        for width in widths:
            part = sub if width is None else sub[sub["width"] == width]
            g = part.groupby("epoch")["accuracy"].agg(["mean", "min", "max", "nunique"]).reset_index()
            g["seeds"] = part.groupby("epoch")["seed"].nunique().to_numpy()
            g = g.drop(columns="nunique")
            g.columns = ["epoch", "mean", "low", "high", "seeds"]
            name = label if width is None or len(widths) == 1 else f"{label}, {int(width)} wide"
            g.insert(0, "width", width)
            g.insert(0, "run", f"{name} ({int(g['seeds'].max())} seed{'s' if g['seeds'].max() > 1 else ''})")
            frames.append(g)
    cols = ["run", "width", "epoch", "mean", "low", "high", "seeds"]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def final_accuracies(curves: pd.DataFrame) -> pd.DataFrame:
    """The last epoch of each curve of `training_curves`: run, epoch, mean, low, high, seeds."""
    return curves.sort_values("epoch").groupby("run").tail(1)[["run", "epoch", "mean", "low", "high", "seeds"]]


def earlier_fine_tunings(models_dir: Path, runs: list[tuple[str, dict, pd.DataFrame]]) -> list[Path]:
    """Model folders under `models_dir` of number-token fine-tunings (a recipe.json with `number_tokens`
    and a training_log.parquet) that no run of `runs` was computed from: attempts not adopted, whose logs are
    kept as history (the SmolLM2 stages the current default model replaced, a continuation that did not
    beat it by more than noise), sorted by name."""
    cached = {project_path((manifest.get("model") or {}).get("source", "")) for _, manifest, _ in runs}
    found = []
    for recipe_file in sorted(Path(models_dir).glob("*/recipe.json")):
        folder = recipe_file.parent.resolve()
        if folder in cached or not (folder / "training_log.parquet").is_file():
            continue
        try:
            recipe = json.loads(recipe_file.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(recipe, dict) and recipe.get("number_tokens") is not None:
            found.append(folder)
    return found


def fine_tuning_stages(runs: list[tuple[str, dict, pd.DataFrame]], split: str = "val",
                       earlier: list[Path] = ()) -> pd.DataFrame:
    """The training logs of fine-tuned runs laid end to end, stage after stage.

    `runs`: (label, manifest, training log) of each fine-tuned run. A run whose recipe starts from
    an earlier delta (`lora.init_delta`) is a later stage of the model whose folder holds that delta:
    its epochs are counted on from the earlier stage's last epoch, so the x axis is epochs since the
    pre-trained model. An earlier stage with no cached run of its own is read from its model folder
    (its recipe.json and training_log.parquet, shipped with it) and labelled so. Columns: run, stage
    (1, 2, ...), epoch (counted over all stages), stage_epoch (the epoch within its own stage),
    accuracy, loss, device, starts_from (the earlier stage's label, or None), model (its recipe's label, without
    the note), history (a model or variant the cached ones replaced), cached (whether the
    stage has a cached run). `earlier`: model folders of earlier models and variants not adopted, with no
    cached run (see `earlier_fine_tunings`), read the same way and labelled as history.
    """
    cols = ["run", "stage", "epoch", "stage_epoch", "accuracy", "loss", "device", "starts_from", "cached", "model",
            "history"]

    def entry(label, recipe, log, cached, model=None, history=False):
        return {
            "label": label,
            "model": model or label,
            "history": history,
            "log": log,
            "start": earlier_stage(recipe),
            "device": recipe.get("device") or "cpu",
            "cached": cached,
        }

    info = {}  # model folder -> its stage
    for label, manifest, log in runs:
        info[project_path((manifest.get("model") or {}).get("source", ""))] = entry(
            label, run_origin(manifest)["recipe"] or {}, log, True
        )

    def add_earlier_stages(todo):
        """The stages the folders in `todo` start from that have no cached run: from their folders."""
        while todo:
            folder = info[todo.pop()]["start"]
            if folder is None or folder in info:
                continue
            if (folder / "recipe.json").is_file() and (folder / "training_log.parquet").is_file():
                recipe = json.loads((folder / "recipe.json").read_text())
                label = f"{recipe.get('label', folder.name)} (its training log; no cached run)"
                info[folder] = entry(label, recipe, pd.read_parquet(folder / "training_log.parquet"), False,
                                     recipe.get("label", folder.name))
                todo.append(folder)

    add_earlier_stages(list(info))  # first the stages the cached runs are made of: they were adopted
    attempts = []
    for folder in earlier:
        folder = Path(folder).resolve()
        if folder not in info and (folder / "recipe.json").is_file() and (folder / "training_log.parquet").is_file():
            recipe = json.loads((folder / "recipe.json").read_text())
            label = f"{recipe.get('label', folder.name)} (history: its training log; no cached run)"
            info[folder] = entry(label, recipe, pd.read_parquet(folder / "training_log.parquet"), False,
                                 recipe.get("label", folder.name), history=True)
            attempts.append(folder)
    add_earlier_stages(attempts)

    def chain(folder, seen=()):
        """(stage number, epochs before this stage, earlier label) of the stage in `folder`."""
        earlier = info[folder]["start"]
        if earlier is None or earlier not in info or earlier in seen:
            return 1, 0, None
        stage, offset, _ = chain(earlier, (*seen, folder))
        return stage + 1, offset + int(info[earlier]["log"]["epoch"].max()), info[earlier]["label"]

    frames = []
    for folder, item in info.items():
        stage, offset, earlier = chain(folder)
        sub = item["log"][item["log"]["split"] == split]
        g = sub.groupby("epoch").agg(accuracy=("accuracy", "mean"), loss=("loss", "mean")).reset_index()
        frames.append(
            pd.DataFrame(
                {
                    "run": item["label"],
                    "stage": stage,
                    "epoch": g["epoch"] + offset,
                    "stage_epoch": g["epoch"],
                    "accuracy": g["accuracy"],
                    "loss": g["loss"],
                    "device": "GPU" if str(item["device"]).startswith("cuda") else "CPU",
                    "starts_from": earlier,
                    "cached": item["cached"],
                    "model": item["model"],
                    "history": item["history"],
                }
            )
        )
    if not frames:
        return pd.DataFrame(columns=cols)
    return pd.concat(frames, ignore_index=True)[cols].sort_values(["stage", "epoch"]).reset_index(drop=True)


def scored_once(runs: list[tuple[str, dict, pd.DataFrame]]) -> str:
    """A sentence on the fine-tunings whose logs never read the test split: the one test score of the model
    rebuilt from each delta, from its training summary ("" when there is none)."""
    parts = []
    for label, manifest, log in runs:
        score = summary_of(manifest.get("model") or {}).get("rebuilt_test_accuracy_float32")
        if score is not None and not (log["split"] == "test").any():
            parts.append(f"{label}: {score:.2%}")
    if not parts:
        return ""
    return ("Scored once on the test split, after training, on the model rebuilt from its delta (the log never read "
            "it): " + "; ".join(parts) + ".")


#: What tells one fine-tuned model from the next in a label such as "SmolLM2-135M fine-tuned, number tokens (real
#: LLM, blocks 18..29, 12 epochs)": its last parenthesis, without "real LLM, ".
LABEL_DETAIL = re.compile(r"\((?:real LLM, )?([^()]*)\)$")


def stages_table(stages: pd.DataFrame, split: str) -> pd.DataFrame:
    """One row per stage of the frame of `fine_tuning_stages`, for the page beside its chart (a table, not a
    paragraph): the model's label (its recipe's), what it is now (the cached run; an earlier stage of it; history,
    a model or variant it replaced), its stage, its epochs (counted over all stages), where it trained and its
    accuracy on `split` at its last epoch. Runs of separate chains that share a stage number each get their row.
    A label that ends in a parenthesis is shortened to it (the chart's legend beside it has the whole label)."""
    accuracy = f"{split} accuracy, last epoch"
    rows = []
    for (stage, run), g in stages.sort_values(["stage", "epoch"]).groupby(["stage", "run"], sort=False):
        first, last = int(g["epoch"].min()), int(g["epoch"].max())
        label = g["model"].iloc[0]
        detail = LABEL_DETAIL.search(label)
        rows.append({
            "model": detail.group(1) if detail else label,
            "is": "the cached run" if bool(g["cached"].iloc[0]) else
            "history (log only)" if bool(g["history"].iloc[0]) else "an earlier stage (log only)",
            "stage": int(stage),
            "epochs": str(first) if first == last else f"{first}-{last}",
            "trained on": g["device"].iloc[0],
            accuracy: f"{g['accuracy'].iloc[-1]:.1%}",
        })
    return pd.DataFrame(rows, columns=["model", "is", "stage", "epochs", "trained on", accuracy])


#: What each line of `fine_tuning_stages` is, as the Training page's chart colours it (`fine_tuning_roles`).
ROLE_DEFAULT, ROLE_SHIPPED = "the default run", "another shipped run"
ROLE_REPLACED, ROLE_EARLIER = "replaced (history)", "an earlier stage (log only)"


def short_name(label: str) -> str:
    """A fine-tuning's label shortened to what tells it from the others (`LABEL_DETAIL`): "rows + blocks 18..29
    trained" for "SmolLM2-135M fine-tuned, number tokens (real LLM, rows + blocks 18..29 trained)"."""
    detail = LABEL_DETAIL.search(label)
    return detail.group(1) if detail else label


def fine_tuning_roles(stages: pd.DataFrame, default: str | None) -> pd.DataFrame:
    """The frame of `fine_tuning_stages` with two columns more: `short`, each line's `short_name` (its model's,
    numbered "(2)", "(3)" where lines share one), and `role`: ROLE_DEFAULT for the cached run labelled
    `default` (the run the dashboard opens with), ROLE_SHIPPED for another cached run, ROLE_REPLACED for history (a
    model or variant a shipped one replaced), ROLE_EARLIER for an earlier stage of a shipped model."""
    out = stages.copy()
    role = {}
    for run, g in out.groupby("run", sort=False):
        cached, history = bool(g["cached"].iloc[0]), bool(g["history"].iloc[0])
        role[run] = (ROLE_DEFAULT if cached and run == default else ROLE_SHIPPED if cached else
                     ROLE_REPLACED if history else ROLE_EARLIER)
    short, seen = {}, {}
    for run, g in out.groupby("run", sort=False):
        name = short_name(g["model"].iloc[0])
        seen[name] = seen.get(name, 0) + 1
        short[run] = name if seen[name] == 1 else f"{name} ({seen[name]})"
    out["short"] = out["run"].map(short)
    out["role"] = out["run"].map(role)
    return out


def fine_tuning_finals(roles: pd.DataFrame, runs: list[tuple[str, dict, pd.DataFrame]],
                       default: str | None = None) -> pd.DataFrame:
    """One row per line of `fine_tuning_roles` (each model or stage): short, role, stage, last_epoch (counted over
    all stages), accuracy (at its last epoch, on the split the frame was made for) and test_once: a shipped run's one
    test score, taken after training on the model rebuilt from its delta (its training summary, as `scored_once`
    reads it; NaN for the others and for a run whose log read the test split every epoch). A shipped run whose log
    has no row of the split (its log never read the test split) still gets its row, with its test score and no
    accuracy (NaN), its role from `default` as `fine_tuning_roles` gives it. Best first (accuracy, else test score)."""
    once = {}
    for label, manifest, log in runs:
        score = summary_of(manifest.get("model") or {}).get("rebuilt_test_accuracy_float32")
        if score is not None and not (log["split"] == "test").any():
            once[label] = float(score)
    rows = []
    for run, g in roles.sort_values("epoch").groupby("run", sort=False):
        last = g.iloc[-1]
        rows.append({"short": last["short"], "role": last["role"], "stage": int(last["stage"]),
                     "last_epoch": int(last["epoch"]), "accuracy": float(last["accuracy"]),
                     "test_once": once.get(run, float("nan"))})
    drawn = set(roles["run"])
    for label, _, log in runs:
        if label not in drawn and label in once:
            rows.append({"short": short_name(label), "role": ROLE_DEFAULT if label == default else ROLE_SHIPPED,
                         "stage": 1, "last_epoch": int(log["epoch"].max()) if len(log) else 0,
                         "accuracy": float("nan"), "test_once": once[label]})
    cols = ["short", "role", "stage", "last_epoch", "accuracy", "test_once"]
    table = pd.DataFrame(rows, columns=cols)
    best = table["accuracy"].fillna(table["test_once"])
    return table.iloc[best.sort_values(ascending=False, kind="stable").index].reset_index(drop=True)
