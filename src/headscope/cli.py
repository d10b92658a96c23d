"""The ``headscope`` command line.

Each subcommand lives in ``headscope/commands/<name>.py`` and exposes
``add_arguments(parser)`` and ``run(args) -> int``; :data:`COMMANDS` lists them.
Bad input becomes one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys

from ._errors import HeadscopeError
from ._input import DEFAULT_MAX_INPUT_MB, input_limit
from ._version import __version__

#: subcommand name → (module under headscope.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "info": ("info", "sizes, processing and file hash of a checkpoint"),
    "plant": ("plant", "write a GPT-2 checkpoint with planted, documented mechanisms"),
    "kernels": ("kernels", "layer-0 positional kernels, categories and key-split TV distance"),
    "denominators": ("denominators", "stability of layer-0 softmax denominators across texts vs i.i.d. bounds"),
    "calibrate": ("calibrate", "sample layer-0 softmax denominators on a calibration text"),
    "neurons": ("neurons", "find contextual MLP0 neurons through the calibrated contextual circuit"),
    "neuron": ("neuron", "one MLP0 neuron on texts: true pre-activation vs circuit prediction"),
    "survey": ("survey", "rank heads as semantic heads (category prompts, seed 002)"),
    "head": ("head", "QK bilinear form, eigenvalues and token clusters of one head"),
    "steer": ("steer", "scale a head's QK eigenvalues and write the steered checkpoint"),
    "atlas": ("atlas", "every head from its weights: QK symmetry, self score, OV copying, positional share"),
    "composition": ("composition", "Q-, K-, V-composition scores of every pair of heads, strongest edges"),
    "reproduce": ("reproduce", "measure the seed studies' claims on a model: published vs measured, pass/fail"),
    "report": ("report", "write a self-contained HTML report of a model (every analysis)"),
    "sweep": ("sweep", "every analysis over models × training revisions, on Dask (local by default, or a cluster)"),
}


_WRITE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EPIPE}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own convention)
        self.exit(2, f"headscope: error: {message}\n")


def common_options() -> argparse.ArgumentParser:
    """Options every subcommand takes."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:1, mps); default cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"],
                   help="dtype of the weights and activations; default float32")
    p.add_argument("--revision", default=None, metavar="REV",
                   help="hub branch, tag or commit of MODEL (e.g. a training checkpoint); hub ids only, default main")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--max-input-mb", type=float, default=DEFAULT_MAX_INPUT_MB, metavar="MB",
                   help=f"size limit of each input text, corpus or config file, in MiB; default {DEFAULT_MAX_INPUT_MB}")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="headscope", description="Weight-based interpretability of GPT-2-family models.")
    parser.add_argument("--version", action="version", version=f"headscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    common = common_options()
    for name, (module, help_) in COMMANDS.items():
        mod = importlib.import_module(f"headscope.commands.{module}")
        p = sub.add_parser(name, help=help_, description=(mod.__doc__ or help_).strip(), parents=[common],
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        with input_limit(args.max_input_mb):
            return int(args._run(args) or 0)
    except HeadscopeError as e:
        print(f"headscope: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("headscope: interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        # disk full, file-size limit, quota, read-only file system: the output rule kept the earlier output
        # whole (temporary + rename); report it in one line
        if e.errno not in _WRITE_ERRNOS:
            raise
        where = f" {e.filename}" if e.filename else ""
        print(f"headscope: error: cannot write{where}: {e.strerror} (an earlier output, if any, is unchanged)",
              file=sys.stderr)
        return 2
    except BaseException as e:
        # a panic inside a Rust extension (tokenizers: a tokenizer.json whose pre-tokenizer regex backtracks
        # catastrophically fails with Onig's retry limit) arrives as pyo3's PanicException, a BaseException
        if type(e).__name__ != "PanicException":
            raise
        msg = (str(e).splitlines() or ["no message"])[0]
        print(f"headscope: error: the tokenizer failed on this text (a panic in a Rust extension: {msg}); a "
              "tokenizer.json whose pre-tokenizer regex backtracks catastrophically does this — fix or replace "
              "that regex", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
