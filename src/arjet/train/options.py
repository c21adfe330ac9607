"""Training configs are dataclasses; their fields become command-line options one to one.

Every option is typed and bounded at parse time (`arjet.checks`), so `--batch-size 0` or `--max-minutes -1`
ends as `arjet train STAGE: error: argument --batch-size: ...` before anything is built: counts (steps
included) are integers >= 0, sizes and batches >= 1, rates and time budgets > 0, shares in [0, 1], the
device one that exists here. A config class can override a field's bounds with a `cli_bounds` class attribute.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

from .. import checks

Config = TypeVar("Config")

# integer fields that must be >= 1, and number fields that must be > 0
POSITIVE = {
    "batch_size", "threads", "train_images", "heldout_images", "images", "eval_images",
    "image_size", "base_channels", "num_res_blocks", "latent_channels", "embed_dim", "codebook_size",
    "hidden_size", "layers", "heads", "kv_heads", "intermediate_size", "levels", "min_segment",
    "max_segment", "log_every", "restart_every", "eval_every", "vision_width", "patch_size", "text_width",
    "text_layers", "context_length", "lr", "noise_lr", "max_minutes",
}  # fmt: skip
FRACTIONS = {"condition_dropout", "clean_share"}


def option_type(config_class: type, name: str, default: Any):
    """The argparse `type=` of field `name` (see the module docstring for the bounds)."""
    bounds = getattr(config_class, "cli_bounds", {}).get(name)
    if name == "device":
        return checks.device_type()
    if isinstance(default, bool):
        return checks.bool_type()
    if isinstance(default, int):
        low, high = bounds or ((1 if name in POSITIVE else 0), None)
        return checks.int_type(low, high)
    if isinstance(default, float):
        if bounds is not None:
            return checks.float_type(*bounds)
        if name in FRACTIONS:
            return checks.float_type(0.0, 1.0)
        return checks.float_type(0.0, exclusive_minimum=name in POSITIVE)
    return type(default)


def add_config_arguments(
    parser: argparse.ArgumentParser, config_class: type, skip: tuple[str, ...] = ()
) -> None:
    defaults = config_class()
    for item in fields(config_class):
        if item.name in skip:
            continue
        value = getattr(defaults, item.name)
        parser.add_argument(
            "--" + item.name.replace("_", "-"),
            type=option_type(config_class, item.name, value),
            default=value,
            help=f"default: {value}",
        )


def config_from_arguments(config_class: type[Config], args: argparse.Namespace) -> Config:
    return config_class(
        **{item.name: getattr(args, item.name) for item in fields(config_class) if hasattr(args, item.name)}
    )


def run_stage(train, config_class: type, args: argparse.Namespace, what: str) -> int:
    """Build the config from the command line, train, and say where the result was saved."""
    saved = train(config_from_arguments(config_class, args))
    print(f"arjet train: saved {what} to {Path(saved).resolve()}")
    return 0


def require_folder(option: str, value: str, hint: str) -> Path:
    """A local folder the stage reads (never a hub lookup); FileNotFoundError naming the path otherwise."""
    path = Path(value).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"{option} {value!r}: no such folder ({path.resolve()}); {hint}")
    return path


def append_jsonl(path, record: dict[str, Any]) -> None:
    """Append one JSON line to a training log (opened per write: a killed run loses nothing written)."""
    import json

    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
