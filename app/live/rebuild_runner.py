"""The process that rebuilds a fine-tuned model's weights for the dashboard: `python -m app.live.rebuild_runner FOLDER`,
started by app/live/rebuild.py's `start_rebuild` (which hands it the lock that says a rebuild runs). It does what
`python -m core rebuild FOLDER` does, and writes each stage and its end (done, or the error in one line) to the
status file every session reads."""

from __future__ import annotations

import sys
from pathlib import Path

from app.live.ablation import rebuild_weights
from app.live.rebuild import Reporter, rebuild_command, rebuild_root
from core.errors import CoreError


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("rebuild_runner: name the model folder to rebuild: python -m app.live.rebuild_runner FOLDER",
              file=sys.stderr)
        return 2
    folder = Path(args[0])
    report = Reporter(folder)
    try:
        rebuild_weights(folder, report.progress, report.log)
    except CoreError as exc:
        report.failed(str(exc))
        return 1
    except Exception as exc:  # noqa: BLE001 - whatever it was, the page says it in one line; the log has the rest
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        report.failed(f"the rebuild failed ({type(exc).__name__}: {first}); its whole output is in "
                      f"{rebuild_root() / 'job.log'}, or run `{rebuild_command(folder)}` in a terminal")
        raise
    report.done()
    return 0


if __name__ == "__main__":
    sys.exit(main())
