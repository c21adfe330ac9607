"""`arjet serve`: the OpenAI images API over continuous-batching engines (loopback by default)."""

from __future__ import annotations

import argparse
import os
import stat
import warnings
from collections.abc import Mapping
from pathlib import Path

from ..limits import SERVE_ENGINE
from ..quantize import Quantization
from . import types
from .options import (
    LASTING_GPU,
    add_command,
    add_compile_argument,
    add_device_argument,
    add_ray_group,
    add_server_arguments,
    add_threads_argument,
    check_listen_address,
    compile_argument,
    model_choices,
    refuse_ray_knobs,
    server_engine,
)
from .threads import apply_threads

DESCRIPTION = """Serve the OpenAI images API: POST /v1/images/generations, GET /v1/models, GET /health.

  arjet serve --port 8000                                   # http://127.0.0.1:8000/v1
  arjet serve --model shapes --model /models/Janus-Pro-1B --device cuda --lanes 16

  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
  out = client.images.generate(model="shapes", prompt="a red circle", n=2, response_format="b64_json",
                               extra_body={"sampler": "mc-sjd", "seed": 0})

Each model runs one engine: requests share its --lanes as images finish and new ones arrive; beyond
--max-queue waiting images, or when the engine expects a request to take longer than --time-limit (the
images ahead of it over the throughput it measures), a request gets 429 at once with Retry-After; one that
still takes longer gets 504; a client that disconnects frees its lanes. Before it listens, the server
decodes one full batch per model (measuring the adaptive mode's costs and the throughput, and on a GPU
compiling and capturing the steps: --compile auto; /health reports captures, replays and graph memory, at
most --max-graphs graphs kept). Several GPUs or machines: --ray (Ray Serve: engine replicas, one per GPU
with --replica-gpus 1, replaced when they die; see docs/ray.md), or one server per device (--device cuda:N)
behind any HTTP load balancer.

API key: set ARJET_API_KEY in the environment, or --api-key-file PATH (the key on the file's first line);
--api-key KEY works too, but every user of this machine sees it in `ps`."""
API_KEY_VARIABLE = "ARJET_API_KEY"
MAX_KEY_FILE_BYTES = 4096  # a key is a line of at most a few hundred characters


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "serve", "serve the OpenAI images API", DESCRIPTION)
    add_server_arguments(
        parser,
        port=8000,
        models="built-in name or local checkpoint folder to serve (its name is the API's `model`); repeat for "
        "several (default: the built-in shapes model)",
        defaults=SERVE_ENGINE,
        helps={
            "lanes": "images each model's engine decodes at once",
            "max_queue": "images that may wait for a lane; beyond it requests get 429",
            "time_limit": "seconds a request may take from its arrival; then it gets 504 and frees its lanes",
        },
    )
    add_device_argument(parser)
    add_threads_argument(parser)
    add_compile_argument(parser, LASTING_GPU)
    parser.add_argument(
        "--api-key-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="require `Authorization: Bearer KEY` on every route but /health, KEY being the file's first "
        f"line (or set {API_KEY_VARIABLE}; default: no key)",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="as --api-key-file, with the key itself (visible to every local user in `ps`: prefer "
        f"{API_KEY_VARIABLE} or --api-key-file)",
    )
    add_ray_arguments(parser)
    parser.set_defaults(func=run)


def add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    """`--ray` and its knobs (see docs/ray.md)."""
    group = add_ray_group(
        parser,
        "serve as Ray Serve deployments: an ingress over engine replicas (one Engine each), replaced when "
        "they die, on this machine's Ray or the cluster of --ray-address",
    )
    group.add_argument(
        "--replicas",
        type=types.int_type(1),
        default=None,
        metavar="N",
        help="engine replicas per model (default 1)",
    )
    group.add_argument(
        "--min-replicas",
        type=types.int_type(1),
        default=None,
        metavar="A",
        help="autoscale on requests in flight between A and --max-replicas B (instead of --replicas)",
    )
    group.add_argument(
        "--max-replicas", type=types.int_type(1), default=None, metavar="B", help="see --min-replicas"
    )
    group.add_argument(
        "--replica-cpus",
        type=types.float_type(0.0),
        default=None,
        metavar="N",
        help="CPUs Ray reserves per replica (default 1; torch threads per replica: --threads, else this)",
    )
    group.add_argument(
        "--replica-gpus",
        type=types.float_type(0.0),
        default=None,
        metavar="N",
        help="GPUs per replica (default 0; 1 for one replica per GPU)",
    )


RAY_KNOBS = ("--replicas", "--min-replicas", "--max-replicas", "--replica-cpus", "--replica-gpus")


def run(args: argparse.Namespace) -> int:
    check_listen_address(args.host, args.port)  # before the models load
    choices = model_choices(args.model) or {"shapes": "shapes"}
    config = server_engine(args, SERVE_ENGINE, compile=compile_argument(args))
    api_key = read_api_key(args, os.environ)
    if args.ray:
        return run_on_ray(args, choices, config, api_key)
    refuse_ray_knobs(args, RAY_KNOBS)

    import uvicorn

    from ..builtin import load_model
    from ..engine import DecodeFailed, Engine
    from ..serve import create_app

    apply_threads(args)
    engines = {}
    try:
        for name, source in choices.items():
            pipe = load_model(source, device=args.device, quantization=args.quantize)
            pipe.set_progress_bar_config(disable=True)
            engines[name] = Engine(pipe, config).start()
            try:  # the adaptive mode's costs and the throughput, before the first request
                engines[name].warm_up()
            except DecodeFailed as error:  # the model's fault, told as a bad --model is
                raise ValueError(f"--model {source!r} cannot decode: {error.__cause__ or error}") from error
        app = create_app(engines, api_key=api_key)
        print(f"serving {', '.join(engines)} on http://{args.host}:{args.port}/v1", flush=True)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        for engine in engines.values():
            engine.close()
    return 0


def run_on_ray(args: argparse.Namespace, choices: dict[str, str], config, api_key: str | None) -> int:
    """`arjet serve --ray`: the app on Ray Serve until interrupted (its replicas load the models)."""
    import torch

    from ..eval.ray_cluster import Room, check_address
    from ..serve import ray_app

    ray_app.import_serve()  # a clear error without Ray, before anything starts
    cpus = 1.0 if args.replica_cpus is None else args.replica_cpus
    gpus = 0.0 if args.replica_gpus is None else args.replica_gpus
    quantization = Quantization.parse(args.quantize)
    if quantization is not None and gpus and not torch.cuda.is_available():
        quantization.check_installed()  # the replicas' GPUs are on other machines: each checks its own
    elif quantization is not None:  # where the replicas run: a GPU each with --replica-gpus, else a CPU
        quantization.check(args.device or ("cuda" if gpus else "cpu"))
    if args.replicas is not None and (args.min_replicas is not None or args.max_replicas is not None):
        raise ValueError(
            "give --replicas N (a fixed count) or --min-replicas A --max-replicas B (autoscaled), not both"
        )
    check_address(args.ray_address)  # before the models are looked at; checked again when Ray is joined
    replicas = ray_app.Replicas(args.replicas or 1, args.min_replicas, args.max_replicas, cpus, gpus)
    threads = args.threads or max(1, int(cpus))
    models = {
        name: ray_app.ServedModel(source, ray_app.later_stage(source), args.quantize)
        for name, source in choices.items()
    }
    app = ray_app.build_app(models, config, replicas, device=args.device, threads=threads, api_key=api_key)
    deployments = sum(1 + model.later_stage for model in models.values())  # an engine, and a painter
    room = Room(
        replicas.target * deployments, cpus, gpus, "replica",
        "--replicas or --min-replicas, --replica-cpus, --replica-gpus",
    )  # fmt: skip
    where = f"http://{args.host}:{args.port}/v1"
    print(f"starting {', '.join(models)} on Ray (the replicas load and warm up) ...", flush=True)
    ray_app.run(
        app, args.host, args.port, address=args.ray_address, room=room,
        ready=lambda: print(f"serving {', '.join(models)} on Ray at {where}", flush=True),
    )  # fmt: skip
    return 0


def read_api_key(args: argparse.Namespace, environment: Mapping[str, str]) -> str | None:
    """The API key from --api-key-file, --api-key (with a warning: `ps` shows it) or ARJET_API_KEY (in that
    order of precedence; at most one of the two options); None: no key. An empty key is refused."""
    if args.api_key_file is not None and args.api_key is not None:
        raise ValueError("give the API key once: --api-key-file or --api-key, not both")
    if args.api_key_file is not None:
        source = f"--api-key-file {args.api_key_file}"
        lines = read_key_file(args.api_key_file, source).splitlines()
        key = lines[0].strip() if lines else ""
    elif args.api_key is not None:
        warnings.warn(
            f"--api-key shows the key to every user of this machine (in `ps`); set {API_KEY_VARIABLE} or use "
            "--api-key-file instead",
            stacklevel=2,
        )
        key, source = args.api_key.strip(), "--api-key"
    elif API_KEY_VARIABLE in environment:
        key, source = environment[API_KEY_VARIABLE].strip(), API_KEY_VARIABLE
    else:
        return None
    if not key:
        raise ValueError(f"the API key from {source} is empty")
    return key


def read_key_file(path: Path, source: str) -> str:
    """The text of the key file `path` (named `source` in errors): a regular file, checked before it is
    opened (a FIFO would block the start, a device such as /dev/zero never end), of at most
    `MAX_KEY_FILE_BYTES`, in UTF-8. OSError for a file that is missing or unreadable."""
    if not stat.S_ISREG(path.stat().st_mode):
        raise ValueError(f"{source} is not a regular file; put the key on the first line of a plain file")
    # non-blocking, in case the path became a FIFO since the check; the read is bounded in any case
    with os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as file:
        data = file.read(MAX_KEY_FILE_BYTES + 1)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise ValueError(
            f"{source} is larger than {MAX_KEY_FILE_BYTES:,} bytes, which no API key needs; put the key alone "
            "on the file's first line"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{source} is not UTF-8 text (the byte 0x{data[error.start]:02x} at offset {error.start})"
        ) from None
