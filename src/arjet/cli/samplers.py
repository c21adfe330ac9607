"""`arjet samplers [NAME]`: the registered decoding algorithms, their options and what they need."""

from __future__ import annotations

import argparse

from ..limits import AUTO_LASTING, AUTO_ONE_OFF
from .options import add_command

# how every sampler's steps run, whichever it is (`arjet.session.capture.compile_mode` decides)
STEPS = (
    f"Steps run as --compile says (default auto): on a GPU captured as CUDA graphs ({AUTO_ONE_OFF}; "
    f"{AUTO_LASTING} in serve, app and other engine runs, the compile paid while they start), eager on the "
    "CPU; if capturing fails, a warning and eager steps. --compile off (compile=False) opts out."
)

DESCRIPTION = """List the samplers: each name with its options (default, type and range) and the model
capabilities it needs, one line each; with a NAME, every option of that sampler explained.

  arjet samplers
  arjet samplers sjd

A spec passes options after a colon: `sjd:window=32,init=repeat_vertical` (`--sampler` in generate and
domain-report, `--samplers` in bench and eval). Composites are method[+verifier][+rule], each option to the
part that declares it: `zipar+sjd:w=2,window=4`, `sjd+lantern:k=4`, `zipar+sjd+lantern` (`arjet samplers
sjd-pac+lantern` explains one); `lantern`, `lantern++` and `zipar+lantern` are the papers' names for some."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    description = f"{DESCRIPTION}\n\n{STEPS}"
    parser = add_command(subparsers, "samplers", "list the samplers and their options", description)
    parser.add_argument("name", nargs="?", default=None, help="one sampler to explain (default: list all)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .. import samplers

    names = samplers.available() if args.name is None else [args.name]
    if args.name is not None:
        samplers.options(args.name)  # an unknown name lists the known ones
    width = max(len(name) for name in names)
    for name in names:
        options = samplers.options(name)
        needs = samplers.requirements(samplers.get(name))
        line = ", ".join(option.short() for option in options) or "no options"
        if needs:
            line += f"; needs {', '.join(sorted(needs))}"
        print(f"{name:{width}}  {line}")
        if args.name is not None:
            for option in options:
                print(f"  {option.describe()}")
    if args.name is not None:
        print(STEPS)
    return 0
