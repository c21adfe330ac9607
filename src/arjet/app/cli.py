"""`arjet app`: serve the web demo (loopback by default)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("app", help="serve the web demo")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument(
        "--model",
        action="append",
        default=None,
        help="built-in name or local checkpoint folder offered in the page; repeat for several "
        "(default: every built-in model)",
    )
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--max-queue", type=int, default=16, help="requests waiting beyond this are refused")
    parser.set_defaults(func=run)


def model_choices(values: list[str] | None) -> dict[str, str] | None:
    """{label: source} for `--model` values; a folder is labelled by its name."""
    if not values:
        return None
    from ..builtin import available_models

    choices = {}
    for value in values:
        if value not in available_models() and not Path(value).is_dir():
            raise FileNotFoundError(
                f"--model {value!r} is neither a built-in model ({', '.join(available_models())}) nor a local folder"
            )
        choices[Path(value).name if Path(value).is_dir() else value] = value
    return choices


def run(args: argparse.Namespace) -> int:
    import torch

    from . import build_demo

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    demo = build_demo(model_choices(args.model), device=device, max_queue=args.max_queue)
    demo.launch(server_name=args.host, server_port=args.port, show_error=False)
    return 0
