"""`arjet domain-report`: how good the built-in shapes model is, judged by the domain CLIP."""

from __future__ import annotations

import argparse

from .. import checks
from . import types
from .options import (
    add_command,
    add_json_argument,
    add_model_arguments,
    add_sampling_arguments,
    add_seed_argument,
    check_model_arguments,
    json_output,
    json_text,
    load_pipeline,
    sampling_options,
)

DESCRIPTION = """Judge a model of the built-in shapes domain with the domain CLIP: one image per held-out
prompt, then CLIP score, FID (domain-CLIP features) and colour / shape accuracy, next to the same figures
for the reference renders and for the references passed through the model's image tokenizer (the most
its codes can show).

  arjet domain-report --n 200 --sampler ar --out report.json --grid grid.png"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "domain-report", "how good a shapes-domain model is (domain CLIP judge)", DESCRIPTION
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--n",
        type=types.int_type(2),
        default=500,
        metavar="N",
        help="held-out prompts, 2 to 500 (default 500; the FID floor uses 2N references)",
    )
    parser.add_argument(
        "--sampler",
        default="ar",
        metavar="SPEC",
        help="sampler spec (default ar; `arjet samplers` lists them)",
    )
    add_seed_argument(parser)
    add_sampling_arguments(parser)
    parser.add_argument("--out", default=None, metavar="FILE", help="also write the figures here (.json)")
    add_json_argument(parser, path_was_allowed=True)
    parser.add_argument(
        "--grid",
        default=None,
        metavar="FILE",
        help="save an image of the first prompts: reference, VQ reconstruction, generated",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .. import samplers
    from ..eval.domain import check_report_size, domain_report

    # every check that needs no model first: a typo fails before the load and the generation
    n = check_report_size(args.n)
    samplers.get(args.sampler)
    sampling = sampling_options(args)
    checks.seed("--seed", args.seed, n)
    print_json, out, option = json_output(args)
    path = checks.output_file(option, out, suffixes=(".json",)) if out is not None else None
    grid = checks.output_file("--grid", args.grid, image=True) if args.grid else None
    check_model_arguments(args)
    report = domain_report(
        load_pipeline(args), n=n, sampler=args.sampler, seed=args.seed, grid=grid, sampling=sampling
    )
    if path is not None:
        path.write_text(json_text(report) + "\n")
    if print_json:
        print(json_text(report))
        return 0
    for key, value in report.items():
        print(f"{key:40s} {value:.4f}" if isinstance(value, float) else f"{key:40s} {value}")
    return 0
