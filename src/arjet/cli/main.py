"""`arjet`: the command line. One module of this package per command, each with `add_parser(subparsers)`
(its options and help) and `run(args)`; this module wires them together, and `options` holds what they
share. Every module imports its heavy parts (torch, diffusers, transformers) inside `run`, so `--help`
answers at once.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import warnings

from .. import __version__
from . import (
    app,
    bench,
    convert_drafter,
    convert_vqgan,
    domain_report,
    frontier,
    generate,
    models,
    samplers,
    serve,
    threads,
    train,
)
from . import eval as eval_command
from .options import ArgumentParser

# in the order `arjet --help` lists them
COMMANDS = (
    generate,
    bench,
    eval_command,
    frontier,
    domain_report,
    app,
    serve,
    train,
    convert_vqgan,
    convert_drafter,
    samplers,
    models,
)
DESCRIPTION = """Fast, correct parallel decoding for autoregressive text-to-image models.

  arjet generate "a red circle left of a blue square" --sampler sjd --out circle.png
  arjet samplers                     # the decoding algorithms and their options
  arjet eval --samplers ar,sjd,zipar --out runs/shapes

`arjet COMMAND --help` describes a command and its options."""


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="arjet", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"arjet {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for module in COMMANDS:
        module.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. A user error (a bad value, a missing or unwritable file; `ValueError` / `OSError`)
    or a failure the user can act on (a Ray cluster out of reach, a Ray worker lost: `ConnectionError`, an
    `OSError`) ends as one line `arjet CMD: error: ...` with exit status 2, never a traceback; warnings
    print as one line `arjet CMD: warning: ...`; Ctrl-C exits 130."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # argparse: --help / --version (0) or a bad command line (2), already printed
        return stop.code if isinstance(stop.code, int) else 2
    command = " ".join(filter(None, (args.command, getattr(args, "stage", None))))  # `train STAGE`
    threads.mark_start()
    with warnings.catch_warnings():
        warnings.showwarning = _one_line_warnings(command)
        try:
            return int(args.func(args) or 0)
        except (ValueError, OSError) as error:
            print(f"arjet {command}: error: {_message(error)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"arjet {command}: interrupted", file=sys.stderr)
            return 130


def entry() -> None:
    """The process's entry point (`arjet`, `python -m arjet`): `main()` with the process-wide settings only a
    whole process may make. OpenMP's idle threads sleep instead of spinning unless OMP_WAIT_POLICY says
    otherwise (read once, when torch loads: so before any import of it), and the process exits without the
    interpreter's last garbage collection over every object torch and transformers made (about 0.7 s)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    code = main()
    sys.stdout.flush()
    gc.freeze()
    sys.exit(code)


def _one_line_warnings(command: str):
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = " ".join(str(message).split())
        print(f"arjet {command}: warning: {text}", file=file or sys.stderr)

    return show


def _message(error: BaseException) -> str:
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"{error.strerror}: {error.filename}"
    return str(error) or type(error).__name__


if __name__ == "__main__":
    entry()
