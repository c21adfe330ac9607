"""`arjet app`: serve the web demo (loopback by default)."""

from __future__ import annotations

import argparse

from ..limits import DEMO_ENGINE
from .options import (
    LASTING_GPU,
    add_command,
    add_compile_argument,
    add_device_argument,
    add_server_arguments,
    add_threads_argument,
    check_listen_address,
    compile_argument,
    model_choices,
    server_engine,
)
from .threads import apply_threads

DESCRIPTION = """Serve the web demo: watch a sampler fill in the image, see which forward pass fixed each
cell, and compare with plain `ar` on the same prompt and seed.

  arjet app --port 7860                                   # http://127.0.0.1:7860
  arjet app --model shapes --model /models/Janus-Pro-1B --device cuda

Visitors share each model's continuous-batching engine: --lanes of them are served at once, --max-queue
more may wait (beyond that, or when the engine expects an image to take longer than --time-limit, they are
refused at once), and an image that still takes longer is stopped so its lane serves the next. Every model
loads, and its engine decodes one full batch (measuring its throughput; on a GPU compiling and capturing
its steps, --compile auto), before the demo listens."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "app", "serve the web demo", DESCRIPTION)
    add_server_arguments(
        parser,
        port=7860,
        models="built-in name or local checkpoint folder offered in the page; repeat for several "
        "(default: every built-in model)",
        defaults=DEMO_ENGINE,
        helps={
            "lanes": "visitors served at once, their images decoding side by side",
            "max_queue": "requests waiting beyond this are refused",
            "time_limit": "seconds an image may take from its request; a longer one is stopped",
        },
    )
    add_device_argument(parser)
    add_threads_argument(parser)
    add_compile_argument(parser, LASTING_GPU)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_listen_address(args.host, args.port)  # before Gradio's import, seconds long
    choices = model_choices(args.model)
    config = server_engine(args, DEMO_ENGINE, compile=compile_argument(args))

    from ..app.ui import build_demo, serve
    from ..pipelines.loading import default_device

    apply_threads(args)
    device = args.device or default_device()
    demo = build_demo(choices, device=device, config=config, quantization=args.quantize)
    try:
        demo.shelf.warm_up()  # a model that does not load is refused here, before listening
        serve(demo, args.host, args.port)
    finally:
        demo.shelf.close()
    return 0
