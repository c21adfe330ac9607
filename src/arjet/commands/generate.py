"""`arjet generate PROMPT --out FILE`: one image (or a grid of several) from a prompt."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import PIL.Image

from .common import (
    add_model_arguments,
    add_sampling_arguments,
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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-images", type=int, default=1, help="images for the prompt, saved as one grid")
    parser.add_argument("--height", type=int, default=None)
    parser.add_argument("--width", type=int, default=None)
    add_sampling_arguments(parser)
    parser.add_argument("--out", default="out.png", help="output image file (default: out.png)")
    parser.add_argument("--json", action="store_true", help="print the decoding stats as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..reports.grid import image_grid

    # every check that needs no model runs first, so a typo fails before a slow load
    sampler = check_sampling_arguments(args, args.sampler)
    if args.num_images < 1:
        raise ValueError(f"--num-images must be >= 1, got {args.num_images}")
    for name in ("height", "width"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise ValueError(f"--{name} must be a positive number of pixels, got {value}")
    path = Path(args.out)
    if path.suffix.lower() not in PIL.Image.registered_extensions():
        raise ValueError(f"--out must end in an image extension such as .png or .jpg, got {args.out!r}")
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
