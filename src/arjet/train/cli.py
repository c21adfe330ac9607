"""`arjet train vq|ar|clip|sjd2`: reproducible training of the built-in model's parts."""

from __future__ import annotations

import argparse
import importlib

_STAGES = ("arjet.train.vq", "arjet.train.ar", "arjet.train.clip", "arjet.train.sjd2")


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train", help="train a part of the built-in model")
    stages = parser.add_subparsers(dest="stage", required=True, metavar="STAGE")
    for name in _STAGES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name == name:
                continue  # stage not built yet
            raise
        module.register_cli(stages)
