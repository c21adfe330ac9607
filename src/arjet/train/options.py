"""Training configs are dataclasses; their fields become command-line options one to one."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any, TypeVar

Config = TypeVar("Config")


def _boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("1", "0", "true", "false", "yes", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return lowered in ("1", "true", "yes")


def add_config_arguments(
    parser: argparse.ArgumentParser, config_class: type, skip: tuple[str, ...] = ()
) -> None:
    defaults = config_class()
    for item in fields(config_class):
        if item.name in skip:
            continue
        value = getattr(defaults, item.name)
        kind: Any = _boolean if isinstance(value, bool) else type(value)
        parser.add_argument(
            "--" + item.name.replace("_", "-"), type=kind, default=value, help=f"default: {value}"
        )


def config_from_arguments(config_class: type[Config], args: argparse.Namespace) -> Config:
    return config_class(
        **{item.name: getattr(args, item.name) for item in fields(config_class) if hasattr(args, item.name)}
    )


def append_jsonl(path, record: dict[str, Any]) -> None:
    """Append one JSON line to a training log (opened per write: a killed run loses nothing written)."""
    import json

    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
