"""`python -m core neurons RUN`'s flags and their parsing: the neuron-level test (core.runs.neuron_run) on a run's
model, written into the run. Its handler (`core.cli.cmd_neurons`) checks the run and the device before the model
loads and imports torch only when the command runs."""

from __future__ import annotations

from core.errors import CoreError


def add_neurons_parser(sub, positive, threads) -> None:
    """The `neurons` subcommand's flags (`positive`, `threads`: the parser's own argument types)."""
    cmd = sub.add_parser("neurons", help="fit each MLP neuron by a helix of a+b and by operand-digit heuristics, then "
                         "mean-ablate the best of each kind against random neurons; writes the run's neuron tables")
    cmd.add_argument("target", metavar="RUN", help="a run of the cache (python -m core list) whose model is here")
    cmd.add_argument("--layers", default=None, metavar="A-B",
                     help="the MLPs read, counted from 1 (default: the last 30%% of the depth, 22-30 of 30)")
    cmd.add_argument("--limit", type=positive, help="fit on a seeded sample of N questions of the split (default all)")
    cmd.add_argument("--ablate", type=positive, default=None, help="questions the ablations read (default 1000)")
    cmd.add_argument("--ks", default="50,200", help="how many neurons each ablated set holds, e.g. 50,200")
    cmd.add_argument("--draws", type=positive, default=None,
                     help="random sets per k for each top set, drawn in its layers (default 5)")
    cmd.add_argument("--batch-size", type=positive, default=16)
    cmd.add_argument("--threads", type=threads, default="auto", help="CPU threads for torch: a number or 'auto'")
    cmd.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    cmd.add_argument("--cache-dir", default="cache")
    cmd.add_argument("--model", default=None, metavar="FOLDER", help="where the run's model is now, if it moved")


def parse_span(text: str | None) -> tuple[int, ...] | None:
    """--layers "22-30" -> (22, ..., 30); "27" -> (27,); None -> None."""
    if text is None:
        return None
    first, dash, last = text.partition("-")
    try:
        ends = (int(first), int(last)) if dash else (int(text),) * 2
    except ValueError:
        raise CoreError(f"--layers {text!r}: give MLP layers as A-B or one layer, counted from 1 (e.g. 22-30)")
    if ends[0] < 1 or ends[0] > ends[1]:
        raise CoreError(f"--layers {text!r}: a range goes up from 1 or more (e.g. 22-30)")
    return tuple(range(ends[0], ends[1] + 1))


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        ks = ()
    if not ks or min(ks) < 1:
        raise CoreError(f"--ks {text!r}: give whole numbers of neurons separated by commas, e.g. 50,200")
    return ks
