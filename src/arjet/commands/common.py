"""Options shared by the commands that load a pipeline: model, device, dtype, sampler settings."""

from __future__ import annotations

import argparse
from typing import Any

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=None,
        help="built-in model name, local checkpoint folder or hub id (default: built-in)",
    )
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument(
        "--dtype", choices=sorted(DTYPES), default=None, help="model dtype (default: the checkpoint's)"
    )


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--guidance-scale", type=float, default=None, help="CFG scale (default: the family's)"
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=None, help="default: the family's")
    parser.add_argument("--top-p", type=float, default=None)


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
