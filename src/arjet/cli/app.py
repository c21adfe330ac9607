"""`arjet app`: serve the web demo (loopback by default)."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

from . import types
from .options import add_command, add_device_argument, add_threads_argument
from .threads import apply_threads

DESCRIPTION = """Serve the web demo: watch a sampler fill in the image, see which forward pass fixed each
cell, and compare with plain `ar` on the same prompt and seed.

  arjet app --port 7860                                   # http://127.0.0.1:7860
  arjet app --model shapes --model /models/Janus-Pro-1B --device cuda

Visitors share each model's continuous-batching engine: --lanes of them are served at once, --max-queue
more may wait (beyond that they are refused), and an image that takes longer than --time-limit is stopped
so its lane serves the next."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "app", "serve the web demo", DESCRIPTION)
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=types.int_type(1, 65535), default=7860, help="TCP port (default 7860)")
    parser.add_argument(
        "--model",
        action="append",
        default=None,
        metavar="NAME_OR_PATH",
        help="built-in name or local checkpoint folder offered in the page; repeat for several "
        "(default: every built-in model)",
    )
    add_device_argument(parser)
    add_threads_argument(parser)
    parser.add_argument(
        "--lanes",
        type=types.int_type(1, 256),
        default=4,
        help="visitors served at once, their images decoding side by side (default 4)",
    )
    parser.add_argument(
        "--max-queue",
        type=types.int_type(1, 10_000),
        default=16,
        help="requests waiting beyond this are refused (default 16)",
    )
    parser.add_argument(
        "--time-limit",
        type=types.float_type(0.0, exclusive_minimum=True),
        default=60.0,
        help="seconds an image may take from its request; a longer one is stopped (default 60)",
    )
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


def check_listen_address(host: str, port: int) -> None:
    """Refuse, before any model loads, an address the demo could not listen on: a host this machine does not
    resolve, or a port it cannot bind (taken, or reserved for root). Gradio would say "Cannot find empty
    port" only after trying for seconds."""
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise ValueError(
            f"--host {host!r} is not an address or a name this machine resolves ({reason}); use e.g. 127.0.0.1 "
            "(this machine only) or 0.0.0.0 (every interface)"
        ) from None
    with socket.socket(family, kind, protocol) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
        try:
            probe.bind(address)
        except OSError as error:
            raise ValueError(
                f"cannot listen on --host {host} --port {port} ({error.strerror or error}); choose another "
                "--port, or a --host of this machine"
            ) from None


def run(args: argparse.Namespace) -> int:
    check_listen_address(args.host, args.port)  # before Gradio's import, seconds long
    choices = model_choices(args.model)

    from ..app.ui import build_demo, serve
    from ..pipelines.loading import default_device

    apply_threads(args)
    device = args.device or default_device()
    demo = build_demo(
        choices, device=device, max_queue=args.max_queue, time_limit=args.time_limit, lanes=args.lanes
    )
    serve(demo, args.host, args.port)
    return 0
