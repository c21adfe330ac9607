"""`arjet convert-drafter SOURCE OUT`: a drafter LANTERN released, as an arjet drafter folder."""

from __future__ import annotations

import argparse

from .. import checks
from .options import add_command

DESCRIPTION = """Convert a drafter released with LANTERN / LANTERN++ (the official repository's layout: config.json
with pytorch_model.bin or model.safetensors, e.g. the folder of `sihwanpark/LANTERN-Lumina-mGPT-7B-768`)
into an arjet drafter folder: config.json + safetensors weights.

  arjet convert-drafter LANTERN-Lumina-mGPT-7B-768 lumina-drafter

Then give it to a pipeline of the same base model and save that pipeline (a folder with its drafter):

  pipe.register_modules(drafter=arjet.Drafter.from_pretrained("lumina-drafter"))
  pipe.save_pretrained("lumina-mgpt-with-drafter")

Torch files are read as tensors only (`torch.load(weights_only=True)`): a file holding arbitrary pickled
Python objects is refused instead of executed."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "convert-drafter", "convert a drafter LANTERN released into an arjet drafter", DESCRIPTION
    )
    parser.add_argument("source", help="the official drafter's folder (config.json and weights)")
    parser.add_argument(
        "out", help="output folder, new or empty (config.json + diffusion_pytorch_model.safetensors)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    checks.output_dir("OUT", args.out, empty=True)  # before torch is imported or the checkpoint read
    checks.check_checkpoint_files("SOURCE", args.source)  # config.json and the weights' headers
    from ..addons.lantern_drafter import convert_lantern_drafter

    out = convert_lantern_drafter(args.source, args.out)
    print(f"wrote the drafter to {out}")
    return 0
