"""Options shared by the commands that load a pipeline: model, device, dtype, sampler settings.

Every option is typed and bounded at parse time (`arjet.checks`), and `check_model_arguments` /
`check_sampling_arguments` finish the checks that need no model, so a bad command line fails in a moment
with `arjet CMD: error: ...`, never after a slow load.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from .. import checks

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MAX_SIDE = 16_384  # pixels; far above any supported model's size (each family checks its own sizes)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=None,
        help="built-in model name, local checkpoint folder or hub id in the local cache (default: built-in)",
    )
    parser.add_argument(
        "--device",
        type=checks.device_type(),
        default=None,
        help="torch device (default: cuda if available, else cpu)",
    )
    parser.add_argument(
        "--dtype", choices=sorted(DTYPES), default=None, help="model dtype (default: the checkpoint's)"
    )


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--guidance-scale",
        type=checks.float_type(0.0),
        default=None,
        help="CFG scale (default: the family's)",
    )
    parser.add_argument("--temperature", type=checks.float_type(0.0), default=1.0, help="0 = greedy")
    parser.add_argument("--top-k", type=checks.int_type(1), default=None, help="default: the family's")
    parser.add_argument(
        "--top-p", type=checks.float_type(0.0, 1.0, exclusive_minimum=True), default=None, help="in (0, 1]"
    )


def add_size_arguments(parser: argparse.ArgumentParser) -> None:
    for name in ("height", "width"):
        parser.add_argument(
            f"--{name}",
            type=checks.int_type(1, MAX_SIDE),
            default=None,
            help=f"image {name} in pixels (default: the model's)",
        )


def check_model_arguments(args: argparse.Namespace) -> str:
    """The checkpoint folder `--model` names (a built-in name, a folder, or a hub id already in the local
    Hugging Face cache), found without loading anything or using the network; FileNotFoundError naming
    the path otherwise."""
    from ..builtin import resolve_model
    from ..pipelines.loading import resolve_checkpoint

    return str(resolve_checkpoint(resolve_model(args.model)))


def check_sampling_arguments(args: argparse.Namespace, sampler_spec: str):
    """The sampler for `sampler_spec` (a name, or `name:key=value,...`) with its options and the sampling
    numbers validated, before any model is loaded: a bad value fails in a moment, not after the load."""
    from .. import samplers
    from ..pipelines.base import check_sampling_options

    sampler = samplers.get(sampler_spec)
    check_sampling_options(args.guidance_scale, args.temperature, args.top_k, args.top_p)
    return sampler


def sampling_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return dict(
        guidance_scale=args.guidance_scale, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p
    )


def load_pipeline(args: argparse.Namespace):
    from ..builtin import load_model

    kwargs = {"dtype": DTYPES[args.dtype]} if args.dtype else {}
    pipe = load_model(args.model, **kwargs)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return pipe.to(device)
