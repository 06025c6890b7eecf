"""`python -m scripts.hall COMMAND [OPTIONS]`: the lecture hall's commands, each with its own options (--help).

  serve      the dashboard for a class: Streamlit workers behind HAProxy (what `bash run.sh serve` runs)
  loadtest   a class opening one shared link at once, each change timed
  faults     the faults a lecture hall meets, tried against `serve` and checked
"""

from __future__ import annotations

import importlib
import sys

#: Each command is the `main(argv)` of the module of the same name in this package, imported when it runs.
COMMANDS = ("serve", "loadtest", "faults")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        asked_for_help = bool(argv) and argv[0] in ("-h", "--help")
        print(__doc__.strip(), file=sys.stdout if asked_for_help else sys.stderr)
        return 0 if asked_for_help else 2
    command, options = argv[0], argv[1:]
    sys.argv[0] = f"python -m scripts.hall {command}"  # argparse's usage line then names the command as typed
    return importlib.import_module(f"scripts.hall.{command}").main(options)


if __name__ == "__main__":
    sys.exit(main())
