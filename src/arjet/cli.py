"""`arjet` command line: generate | bench | eval | domain-report | app | train | convert-vqgan.

Each command lives in its own module and exposes `register_cli(subparsers)`, which adds its parser and
sets `func` to the function that runs it; this file only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# module path of each command group; imported only when its parser is built
_COMMANDS = (
    "arjet.commands.generate",
    "arjet.commands.bench",
    "arjet.eval.cli",
    "arjet.eval.domain",
    "arjet.app.cli",
    "arjet.train.cli",
    "arjet.tokenizers.convert",
)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with arjet's one error format: `arjet CMD: error: MESSAGE` first, then where to find the
    usage; exit status 2 (argparse's own convention for a bad command line)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n(see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="arjet", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name and error.name.startswith("arjet"):
                continue  # command not built yet
            raise
        module.register_cli(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. A user error (a bad value, a missing or unwritable file; `ValueError` / `OSError`)
    ends as one line `arjet CMD: error: ...` with exit status 2, never a traceback; Ctrl-C exits 130."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # argparse: --help (0) or a bad command line (2), already printed
        return stop.code if isinstance(stop.code, int) else 2
    command = " ".join(filter(None, (args.command, getattr(args, "stage", None))))  # `train STAGE`
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as error:
        print(f"arjet {command}: error: {_message(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"arjet {command}: interrupted", file=sys.stderr)
        return 130


def _message(error: BaseException) -> str:
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"{error.strerror}: {error.filename}"
    return str(error) or type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
