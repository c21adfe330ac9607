"""`arjet serve`: the OpenAI images API over continuous-batching engines (loopback by default)."""

from __future__ import annotations

import argparse

from .options import (
    add_command,
    add_compile_argument,
    add_device_argument,
    add_server_arguments,
    add_threads_argument,
    check_listen_address,
    compile_argument,
    model_choices,
)
from .threads import apply_threads

DESCRIPTION = """Serve the OpenAI images API: POST /v1/images/generations, GET /v1/models, GET /health.

  arjet serve --port 8000                                   # http://127.0.0.1:8000/v1
  arjet serve --model shapes --model /models/Janus-Pro-1B --device cuda --compile cuda-graphs --lanes 16

  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
  out = client.images.generate(model="shapes", prompt="a red circle", n=2, response_format="b64_json",
                               extra_body={"sampler": "mc-sjd", "seed": 0})

Each model runs one engine: requests share its --lanes as images finish and new ones arrive; beyond
--max-queue waiting images a request gets 429 with Retry-After; one that takes longer than --time-limit
gets 504; a client that disconnects frees its lanes. Several GPUs: one server per device (--device cuda:N)
behind any HTTP load balancer."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "serve", "serve the OpenAI images API", DESCRIPTION)
    add_server_arguments(
        parser,
        port=8000,
        models="built-in name or local checkpoint folder to serve (its name is the API's `model`); repeat for "
        "several (default: the built-in shapes model)",
        lanes=(8, "images each model's engine decodes at once"),
        max_queue=(64, "images that may wait for a lane; beyond it requests get 429"),
        time_limit=(
            120.0,
            "seconds a request may take from its arrival; then it gets 504 and frees its lanes",
        ),
    )
    add_device_argument(parser)
    add_threads_argument(parser)
    add_compile_argument(parser)
    parser.add_argument(
        "--api-key", default=None, help="require `Authorization: Bearer KEY` on every route but /health"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_listen_address(args.host, args.port)  # before the models load
    choices = model_choices(args.model) or {"shapes": "shapes"}
    compile = compile_argument(args)
    if args.api_key is not None and not args.api_key.strip():
        raise ValueError("--api-key must not be empty")

    import uvicorn

    from ..builtin import load_model
    from ..engine import Engine
    from ..serve import create_app

    apply_threads(args)
    engines = {}
    try:
        for name, source in choices.items():
            pipe = load_model(source, device=args.device)
            pipe.set_progress_bar_config(disable=True)
            engines[name] = Engine(
                pipe, lanes=args.lanes, max_queue=args.max_queue, time_limit=args.time_limit, compile=compile
            ).start()
        app = create_app(engines, api_key=args.api_key)
        print(f"serving {', '.join(engines)} on http://{args.host}:{args.port}/v1", flush=True)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        for engine in engines.values():
            engine.close()
    return 0
