"""`arjet generate PROMPT --out FILE`: one image (or a grid of several) from a prompt."""

from __future__ import annotations

import argparse
import json

from .. import checks
from ..limits import DEFAULT_LIMITS
from .common import (
    add_model_arguments,
    add_sampling_arguments,
    add_size_arguments,
    check_model_arguments,
    check_sampling_arguments,
    load_pipeline,
    sampling_kwargs,
)


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="generate an image from a prompt")
    parser.add_argument("prompt")
    add_model_arguments(parser)
    parser.add_argument(
        "--sampler",
        default="ar",
        help="sampler name, optionally with options: 'sjd' or 'sjd:window=32,init=random' "
        "(see `arjet.samplers.available()`)",
    )
    parser.add_argument(
        "--seed", type=checks.int_type(0, checks.SEED_LIMIT - 1), default=0, help="image i uses seed + i"
    )
    parser.add_argument(
        "--num-images",
        type=checks.int_type(1, DEFAULT_LIMITS.max_images_per_call),
        default=1,
        help=f"images for the prompt, saved as one grid (at most {DEFAULT_LIMITS.max_images_per_call})",
    )
    add_size_arguments(parser)
    add_sampling_arguments(parser)
    parser.add_argument("--out", default="out.png", help="output image file (default: out.png)")
    parser.add_argument("--json", action="store_true", help="print the decoding stats as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..reports.grid import image_grid

    # every check that needs no model runs first, so a typo fails before a slow load
    if not args.prompt.strip():
        raise ValueError("the prompt is empty: describe an image, e.g. 'a red circle left of a blue square'")
    if len(args.prompt) > DEFAULT_LIMITS.max_prompt_chars:
        raise ValueError(
            f"the prompt has {len(args.prompt)} characters, more than {DEFAULT_LIMITS.max_prompt_chars}"
        )
    sampler = check_sampling_arguments(args, args.sampler)
    checks.seed("--seed", args.seed, args.num_images)
    path = checks.output_file("--out", args.out, image=True)
    check_model_arguments(args)
    pipe = load_pipeline(args)
    out = pipe(
        args.prompt,
        sampler=sampler,
        seed=args.seed,
        num_images_per_prompt=args.num_images,
        height=args.height,
        width=args.width,
        **sampling_kwargs(args),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    image = out.images[0] if len(out.images) == 1 else image_grid(out.images)
    image.save(path)
    if args.json:
        stats = [{k: v for k, v in s.to_dict().items() if k != "commit_step"} for s in out.stats]
        print(json.dumps({"prompt": args.prompt, "out": str(path), "stats": stats}, indent=2))
    else:
        stat = out.stats[0]
        print(
            f"saved {path}: {stat.tokens} codes in {stat.forward_passes} forward passes "
            f"({stat.compression:.2f} codes/forward) with {stat.sampler}, {stat.seconds:.2f} s"
        )
    return 0
