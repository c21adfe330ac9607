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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arjet", description=__doc__.splitlines()[0])
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
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as error:
        print(f"arjet {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
