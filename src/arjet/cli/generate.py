"""`arjet generate PROMPT --out FILE`: images from a prompt, with any sampler."""

from __future__ import annotations

import argparse

from .. import checks
from ..limits import DEFAULT_LIMITS
from . import types
from .options import (
    add_command,
    add_compile_argument,
    add_json_argument,
    add_model_arguments,
    add_sampling_arguments,
    add_seed_argument,
    add_size_arguments,
    check_model_arguments,
    compile_argument,
    json_text,
    load_pipeline,
    sampling_options,
)

DESCRIPTION = """Generate images for one prompt and save them (several images as one grid).

  arjet generate "a red circle left of a blue square" --out circle.png
  arjet generate "three green triangles" --sampler sjd:window=32 --num-images 4 --seed 3 --out tri.png

Prints what each image cost (forward passes, codes per forward, seconds); --json prints it as JSON."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "generate", "generate images from a prompt", DESCRIPTION)
    parser.add_argument("prompt", help="what to draw, e.g. 'a red circle left of a blue square'")
    add_model_arguments(parser)
    parser.add_argument(
        "--sampler",
        default="ar",
        metavar="SPEC",
        help="sampler name, optionally with options: 'sjd' or 'sjd:window=32,init=random' (default ar; "
        "`arjet samplers` lists them)",
    )
    add_seed_argument(parser)
    parser.add_argument(
        "--num-images",
        type=types.int_type(1, DEFAULT_LIMITS.max_images_per_call),
        default=1,
        metavar="N",
        help=f"images for the prompt, saved as one grid (default 1, at most {DEFAULT_LIMITS.max_images_per_call})",
    )
    add_size_arguments(parser)
    add_sampling_arguments(parser)
    add_compile_argument(parser)
    parser.add_argument(
        "--out", default="out.png", metavar="FILE", help="the image file to write (default out.png)"
    )
    add_json_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from .. import samplers
    from ..reports.grid import image_grid

    # 1. every check that needs no model, so a typo fails before a slow load
    if not args.prompt.strip():
        raise ValueError("the prompt is empty: describe an image, e.g. 'a red circle left of a blue square'")
    checks.text("the prompt", args.prompt)
    if len(args.prompt) > DEFAULT_LIMITS.max_prompt_chars:
        raise ValueError(
            f"the prompt has {len(args.prompt)} characters, more than {DEFAULT_LIMITS.max_prompt_chars}"
        )
    samplers.get(args.sampler)  # the spec itself goes to the pipeline, so the stats name it in full
    sampling_options(args)  # checked here, before any model loads
    checks.seed("--seed", args.seed, args.num_images)
    path = checks.output_file("--out", args.out, image=True)
    compile = compile_argument(args)
    check_model_arguments(args)

    # 2. the model, the images
    pipe = load_pipeline(args)
    sampling = sampling_options(args, pipe.sampling_defaults())
    out = pipe(
        args.prompt,
        sampler=args.sampler,
        seed=args.seed,
        num_images_per_prompt=args.num_images,
        height=args.height,
        width=args.width,
        compile=compile,
        **sampling.kwargs(),
    )
    (out.images[0] if len(out.images) == 1 else image_grid(out.images)).save(path)

    # 3. what each image cost (and on how many CPU threads, which the command chose unless told)
    threads = torch.get_num_threads() if pipe._execution_device.type == "cpu" else None
    if args.json:
        stats = [{k: v for k, v in s.to_dict().items() if k != "commit_step"} for s in out.stats]
        print(json_text({"prompt": args.prompt, "out": str(path), "threads": threads, "stats": stats}))
        return 0
    where = "" if threads is None else f" on {threads} CPU thread{'s' if threads > 1 else ''}"
    lines = [_cost(stat) + where for stat in out.stats]
    if len(lines) == 1:
        print(f"saved {path}: {lines[0]}")
        return 0
    print(f"saved {path}: {len(lines)} images as one grid, row by row")
    for index, line in enumerate(lines):
        print(f"  image {index} (seed {args.seed + index}): {line}")
    return 0


def _cost(stat) -> str:
    return (
        f"{stat.tokens} codes in {stat.forward_passes} forward passes ({stat.compression:.2f} codes/forward) "
        f"with {stat.sampler}, {stat.seconds:.2f} s"
    )
