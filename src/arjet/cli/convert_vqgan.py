"""`arjet convert-vqgan CKPT OUT [--config YAML]`: Meta's Chameleon VQGAN for Lumina-mGPT."""

from __future__ import annotations

import argparse

from .. import checks
from .options import add_command

DESCRIPTION = """Convert Meta's Chameleon `vqgan.ckpt` (the image tokenizer of Lumina-mGPT, which transformers
does not ship) into a ChameleonVQGAN folder: config.json + safetensors weights.

  arjet convert-vqgan vqgan.ckpt lumina-vqgan --config vqgan.yaml

The checkpoint is read as tensors only (`torch.load(weights_only=True)`): a file holding arbitrary pickled
Python objects is refused instead of executed."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "convert-vqgan", "convert Meta's Chameleon vqgan.ckpt for Lumina-mGPT", DESCRIPTION
    )
    parser.add_argument("ckpt", help="Meta's vqgan.ckpt (Lightning checkpoint or bare state dict)")
    parser.add_argument(
        "out", help="output folder, new or empty (config.json + diffusion_pytorch_model.safetensors)"
    )
    parser.add_argument(
        "--config", default=None, metavar="YAML", help="the matching vqgan.yaml (default: Chameleon's values)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    checks.output_dir("OUT", args.out, empty=True)  # before torch is imported or the checkpoint read
    from ..vq.convert import convert_chameleon_vqgan

    out = convert_chameleon_vqgan(args.ckpt, args.out, args.config)
    print(f"wrote ChameleonVQGAN to {out}")
    return 0
