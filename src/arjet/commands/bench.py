"""`arjet bench`: every sampler on the same prompts and seeds, in one process, ratios against `ar`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .common import add_model_arguments, add_sampling_arguments, load_pipeline, sampling_kwargs


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="compare samplers' forward passes, latency and memory")
    add_model_arguments(parser)
    parser.add_argument(
        "--samplers",
        default="ar,sjd,zipar",
        help="sampler specs: 'ar,sjd,zipar', 'ar,sjd:window=32,init=random,zipar:w=4' or ';'-separated; "
        "'ar' is added first if missing",
    )
    parser.add_argument(
        "--prompts", default=None, help="prompt set name or file (default: the built-in model's held-out set)"
    )
    parser.add_argument("--n", type=int, default=8, help="number of prompts (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="image i uses seed + i")
    parser.add_argument(
        "--data-dir", default=None, help="folder of the public prompt sets (or ARJET_PROMPTS_DIR)"
    )
    add_sampling_arguments(parser)
    parser.add_argument(
        "--json", dest="json_out", default=None, help="also write the full results as JSON here"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .. import samplers
    from ..bench import run_bench
    from ..eval.prompts import load_prompts

    specs = samplers.parse_specs(args.samplers)
    specs = ["ar", *[spec for spec in specs if spec != "ar"]]  # the baseline of every ratio
    for spec in specs:
        samplers.get(spec)  # fail on a bad spec before loading anything
    prompts = load_prompts(args.prompts or "shapes", args.n, args.data_dir)
    pipe = load_pipeline(args)
    result = run_bench(pipe, specs, prompts, seed=args.seed, **sampling_kwargs(args))
    env = result.environment
    print(
        f"\n{len(prompts)} prompts x {len(specs)} samplers on {env['device']} ({env['pipeline']}, {env['dtype']})"
    )
    print(result.table())
    print(
        "peak memory: CUDA max allocated (weights included); CPU: peak resident memory added during a generation"
    )
    if args.json_out:
        path = Path(args.json_out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result.to_dict(), indent=2))
        print(f"wrote {path}")
    return 0
