"""Rebuilding a fine-tuned model's weights from its shipped delta, started from the dashboard (the Ablations page's
"Rebuild the weights here" button): `python -m core rebuild FOLDER` without a terminal.

One rebuild runs at a time on the machine (for one models folder), in a process of its own
(app/live/rebuild_runner.py), so the page that starts it goes on, and a crash or the memory of a 135M-parameter
merge never touches a student's session. Every session that looks at the page follows the same rebuild; a second
press while one runs joins it instead of starting another. Its files, in a folder of the system's temporary
directory named after the models folder (`rebuild_root`):

    job.lock      flock()ed for as long as a rebuild runs: the process that starts one takes the lock, and the
                  rebuilding process inherits it (the same open file), so the lock ends with that process, however
                  it ends
    status.json   the folder being rebuilt, its stage (core.training.delta.REBUILD_STAGES), how far it is, and at
                  the end "done" or the one-line error
    job.log       the rebuilding process's output

What the rebuild writes, it writes whole or not at all (core.training.delta.write_model_folder). No Streamlit and no
torch here: the page's side is in app/live/ablation.py, the rebuild itself in the runner.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from app.live.job_files import job_root, lock_held, read_json_status, write_json_status
from core.files import PROJECT_ROOT, models_root
from core.models.source import project_path
from core.training.stages import DELTA_FILE, delta_metadata

#: The share of a rebuild's time each stage takes (the default run's rebuild on a two-core CPU: about 40% importing
#: SmolLM2-135M, 56% loading it and merging the delta, a second each to check and write; the import happens only when
#: the base model is not here yet, and the shares of the stages that happen are scaled to fill the bar).
STAGE_SHARES = {"importing the base model": 40.0, "merging": 56.0, "checking the digest": 2.0, "writing": 2.0}
#: The first stage, before the rebuilding process has loaded its libraries.
STARTING = "starting"
#: How far the base model's import is when its log says this (core.models.importer's steps), as a fraction of it.
IMPORT_STEPS = {"downloading": 0.05, "checked": 0.45, "reading": 0.5, "saved": 1.0}
#: Times `start_rebuild` tries the lock while another process only looks at it (a few milliseconds each).
LOCK_TRIES = 20


@dataclass
class RebuildStatus:
    """Where the machine's rebuild stands. state: idle (none yet), running, done or failed."""

    state: str = "idle"
    #: the model folder rebuilt (absolute)
    folder: str = ""
    stage: str = ""
    #: the last line the rebuild logged (what it is doing within its stage)
    detail: str = ""
    #: how far the whole rebuild is, 0..1
    fraction: float = 0.0
    started: float = 0.0
    finished: float = 0.0
    #: failed: what went wrong and what to do, in one line
    message: str = ""

    @property
    def running(self) -> bool:
        return self.state == "running"

    def elapsed_s(self) -> float:
        return (self.finished or time.time()) - self.started if self.started else 0.0

    def is_for(self, folder) -> bool:
        return bool(self.folder) and Path(self.folder) == Path(folder).resolve()


def rebuild_root(create: bool = False) -> Path:
    """The rebuild's files: one folder per user and models folder on this machine (every dashboard process that
    loads models from the same folder shares it); made by the first rebuild (`create`), not by a page that looks."""
    return job_root("rebuild", str(models_root()), create)


def write_status(root: Path, status: RebuildStatus) -> None:
    """status.json, whole or not at all (a reader never sees half a file)."""
    write_json_status(root, status)


def read_status(root: Path) -> RebuildStatus:
    return read_json_status(root, RebuildStatus)


def lock_is_held(root: Path) -> bool:
    """Whether a rebuild holds job.lock now."""
    return lock_held(root / "job.lock")


def rebuild_status() -> RebuildStatus:
    """The machine's rebuild: the one running, or the last one; a rebuild whose process ended without saying how
    (killed, out of memory) is failed."""
    root = rebuild_root()
    status = read_status(root)
    if status.running and not lock_is_held(root):
        status = read_status(root)  # it may have finished in between
        if status.running:
            status.state, status.finished = "failed", time.time()
            status.message = (
                "the rebuild stopped before it finished (its process ended without a word, perhaps out of memory); "
                f"press the button to try again, or run `{rebuild_command(Path(status.folder))}` in a terminal"
            )
    return status


def rebuild_command(folder: Path) -> str:
    """The command line that does the same rebuild."""
    where = Path(folder).resolve()
    shown = where.relative_to(PROJECT_ROOT).as_posix() if PROJECT_ROOT in where.parents else str(where)
    return f"python -m core rebuild {shown}"


def start_rebuild(folder: Path) -> RebuildStatus:
    """Start rebuilding `folder`'s weights from its delta in a process of its own, unless a rebuild runs already
    (then that one's status: a press from another session joins it). Returns at once."""
    root = rebuild_root(create=True)
    folder = Path(folder).resolve()
    for _ in range(LOCK_TRIES):
        fh = open(root / "job.lock", "a")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            status = rebuild_status()
            if status.running:
                return status
            time.sleep(0.01)  # a reader held it for a moment
            continue
        try:
            return spawn(root, folder, fh)
        finally:
            fh.close()  # the rebuilding process holds the lock now (it inherited this open file)
    return rebuild_status()


def spawn(root: Path, folder: Path, lock) -> RebuildStatus:
    """With job.lock held through `lock`: the rebuilding process, which inherits the lock."""
    status = RebuildStatus("running", str(folder), STARTING, "loading the libraries", 0.0, time.time())
    write_status(root, status)
    try:
        with open(root / "job.log", "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "app.live.rebuild_runner", str(folder)],
                cwd=PROJECT_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(lock.fileno(),),
                start_new_session=True,  # a Ctrl-C of the dashboard leaves it to finish its write
            )
    except OSError as exc:
        status.state, status.finished = "failed", time.time()
        status.message = f"could not start the rebuild ({exc}); run `{rebuild_command(folder)}` in a terminal"
        write_status(root, status)
        return status
    threading.Thread(target=proc.wait, daemon=True).start()  # collects its exit, whenever it comes
    return status


class Reporter:
    """The rebuilding process's side: its progress and its end, written to status.json as they come."""

    def __init__(self, folder: Path, root: Path | None = None):
        self.root = root or rebuild_root(create=True)
        self.status = read_status(self.root)
        if not self.status.is_for(folder):  # run by hand: a status of its own
            self.status = RebuildStatus("running", str(Path(folder).resolve()), STARTING, "", 0.0, time.time())
        base = delta_metadata(Path(folder) / DELTA_FILE).get("base", "")
        stages = list(STAGE_SHARES)
        if not base or project_path(base).is_dir():  # the base model is here: no import
            stages.remove("importing the base model")
        self.stages = stages
        self.total = sum(STAGE_SHARES[s] for s in stages)

    def progress(self, stage: str, done: int, total: int) -> None:
        """core.training.delta.rebuild's `progress`."""
        if stage not in self.stages:  # imported all the same: count it
            self.stages.insert(0, stage)
            self.total += STAGE_SHARES.get(stage, 0.0)
        before = sum(STAGE_SHARES.get(s, 0.0) for s in self.stages[: self.stages.index(stage)])
        within = STAGE_SHARES.get(stage, 0.0) * (done / total if total else 0.0)
        if stage == "merging":  # what it does within the stage (the other stages say it in their log lines)
            self.status.detail = (f"{done} of {total} weight matrices merged" if done else
                                  "loading the base model and adding the number tokens")
        elif stage != self.status.stage:
            self.status.detail = ""
        self.status.stage = stage
        self.status.fraction = min(1.0, max(self.status.fraction, (before + within) / self.total))
        write_status(self.root, self.status)

    def log(self, line: str) -> None:
        """core.training.delta.rebuild's `log`: the detail under the bar; the import's steps move the bar."""
        print(line, flush=True)
        self.status.detail = str(line).splitlines()[0][:160] if str(line).strip() else ""
        step = next((f for word, f in IMPORT_STEPS.items() if str(line).startswith(word)), None)
        if step is not None and self.status.stage == "importing the base model":
            self.progress(self.status.stage, int(100 * step), 100)
        else:
            write_status(self.root, self.status)

    def done(self) -> None:
        self.status.state, self.status.stage, self.status.fraction = "done", "done", 1.0
        self.status.finished = time.time()
        write_status(self.root, self.status)

    def failed(self, message: str) -> None:
        self.status.state, self.status.finished = "failed", time.time()
        self.status.message = " ".join(str(message).split())  # one line, whatever the error's text held
        write_status(self.root, self.status)
