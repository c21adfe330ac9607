"""`arjet train vq|ar|clip|sjd2|drafter`: reproducible training of the built-in model's parts.

Each stage's options are the fields of its config (`arjet.train.configs`), one to one, typed and bounded
by the field's own bounds, so `--batch-size 0` or `--max-minutes -1` ends as `arjet train STAGE: error:
argument --batch-size: ...` before anything is built.
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import MISSING, Field, fields
from functools import partial
from pathlib import Path
from typing import Any

from ..train.configs import STAGES
from ..train.scaffold import check_outputs
from . import types
from .options import add_command

DESCRIPTION = """Train a part of the built-in model; every stage has a seed, a wall-clock budget and a
JSON-lines log, and runs on CPU (the default) or a GPU (--device cuda).

  arjet train vq --out runs/vq
  arjet train ar --vq runs/vq --out runs/ar --max-minutes 60
  arjet train clip --out runs/clip
  arjet train sjd2 --base runs/ar/pipeline --out runs/sjd2
  arjet train drafter --base shapes --out runs/drafter
  accelerate launch -m arjet train sjd2 --base /models/Janus-Pro-1B --data pairs.jsonl --lora-rank 16

`arjet train STAGE --help` lists a stage's options."""

SUMMARIES = {  # stage: (its line in `arjet train --help`, what it saves)
    "vq": ("the built-in model's VQ image tokenizer", "the VQ tokenizer"),
    "ar": ("the built-in Janus text-to-image model", "the AR pipeline"),
    "clip": ("the domain CLIP (offline CLIP score and FID features)", "the domain CLIP"),
    "sjd2": ("fine-tune any checkpoint for the sjd2 sampler (noisy-embedding inputs)", "the SJD2 pipeline"),
    "drafter": (
        "train a drafter for eagle / lantern / lantern++ on any checkpoint",
        "the pipeline with its drafter",
    ),
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "train", "train a part of the built-in model", DESCRIPTION)
    stages = parser.add_subparsers(
        dest="stage", required=True, metavar="STAGE", title="stages", help="the part to train"
    )
    for name, config_class in STAGES.items():
        summary, _ = SUMMARIES[name]
        stage = stages.add_parser(name, help=summary, description=config_class.__doc__)
        for item in fields(config_class):
            if item.metadata.get("command_line", True):
                _add_field(stage, item)
        stage.set_defaults(func=partial(run, name))


def _add_field(parser: argparse.ArgumentParser, item: Field) -> None:
    default = item.default if item.default is not MISSING else None
    shown = "none" if default in ("", None) else default
    parser.add_argument(
        "--" + item.name.replace("_", "-"),
        type=option_type(item, default),
        default=default,
        metavar=_metavar(default),
        help=f"{item.metadata['help']} (default {shown})",
    )


def _metavar(default: Any) -> str:
    if isinstance(default, bool):
        return "BOOL"
    return "N" if isinstance(default, int) else "X" if isinstance(default, float) else "TEXT"


def option_type(item: Field, default: Any):
    """The argparse `type=` of a config field: its kind and bounds (see `arjet.train.configs.option`)."""
    if item.name == "device":
        return types.device_type()
    if isinstance(default, bool):
        return types.bool_type()
    if item.metadata.get("integers"):
        return types.integers_type()
    bounds = item.metadata
    if isinstance(default, int):
        return types.int_type(bounds["minimum"], bounds["maximum"])
    if isinstance(default, float):
        return types.float_type(
            bounds["minimum"], bounds["maximum"], exclusive_minimum=bounds["exclusive_minimum"]
        )
    return type(default)


def run(stage: str, args: argparse.Namespace) -> int:
    """Build the stage's config from the command line, check where it writes, train, and say where the
    result was saved. A run refused after it made its folders (a bad input folder, weights that do not fit)
    removes those it made while they are still empty."""
    config_class = STAGES[stage]
    config = config_class(
        **{item.name: getattr(args, item.name) for item in fields(config_class) if hasattr(args, item.name)}
    )
    made = check_outputs(config)
    try:
        saved = _trainer(stage)(config)
    except BaseException:
        for folder in made:
            with contextlib.suppress(OSError):  # not empty: the run wrote something worth keeping
                folder.rmdir()
        raise
    print(f"arjet train: saved {SUMMARIES[stage][1]} to {Path(saved).resolve()}")
    return 0


def _trainer(stage: str):
    if stage == "vq":
        from ..train import vq

        return vq.train_vq
    if stage == "ar":
        from ..train import ar

        return ar.train_ar
    if stage == "clip":
        from ..train import clip

        return clip.train_clip
    if stage == "drafter":
        from ..train import drafter

        return drafter.train_drafter
    from ..train import sjd2

    return sjd2.train_sjd2
