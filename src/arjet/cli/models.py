"""`arjet models`: the built-in models and the real-size architectures `arjet bench --arch` builds."""

from __future__ import annotations

import argparse

from .. import checks
from .options import add_command

DESCRIPTION = """List the models arjet has at hand, one line each: the built-in models (`--model NAME`;
any local checkpoint folder or cached hub id works too) and the released architectures that
`arjet bench --arch NAME --random-weights` builds with random weights.

  arjet models"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "models", "list the built-in models and benchmark architectures", DESCRIPTION
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..builtin import DEFAULT_MODEL, available_models, model_path
    from ..presets import PRESETS

    print("built-in models (--model NAME):")
    names = available_models()
    width = max([len(name) for name in names] + [len(name) for name in PRESETS])
    for name in names:
        index = checks.read_json(model_path(name) / "model_index.json")
        traits = [index.get("_class_name", "?")]
        if (index.get("noise_conditioning") or [None])[0] is not None:
            traits.append("noise_conditioning (for sjd2)")
        if (index.get("drafter") or [None])[0] is not None:
            traits.append("drafter (for eagle, lantern / lantern++ with drafter=true)")
        if name == DEFAULT_MODEL:
            traits.append("the default")
        print(f"  {name:{width}}  {', '.join(traits)}")
    print("architectures with random weights (bench --arch NAME --random-weights):")
    for name, preset in sorted(PRESETS.items()):
        decoder, (rows, columns) = preset.decoder, preset.default_grid
        print(
            f"  {name:{width}}  {preset.checkpoint}: {decoder.layers} x {decoder.hidden} decoder, "
            f"{rows}x{columns} codes at {preset.default_size} px"
        )
    return 0
