"""`arjet frontier`: the speed-quality frontier across finished `arjet eval` runs."""

from __future__ import annotations

import argparse

from .options import add_command

DESCRIPTION = """Put the samplers of finished `arjet eval` runs on one speed-quality plot: FID and CLIP
score against forward passes per image and against seconds per image, the Pareto front of each panel
joined, `ar`'s run-to-run spread (its lowest to highest figure over the runs given) shaded, a second seed of
a sampler drawn hollow. Forward passes compare across runs; seconds only within one run (`--timed`,
default the run holding most samplers). Writes frontier.png, frontier.md (the table) and frontier.json.

  arjet frontier runs/frontier-200 runs/frontier-seed1000-200 runs/shapes-ar-seed1000-200 --out docs/eval"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "frontier", "the speed-quality frontier across eval runs", DESCRIPTION)
    parser.add_argument(
        "runs", nargs="+", metavar="RUN", help="finished `arjet eval` run folders, one seed each"
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for frontier.png / .md / .json")
    parser.add_argument(
        "--timed", default=None, metavar="RUN", help="the run (folder name) whose seconds are plotted"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..eval import frontier

    figure = frontier.write(frontier.Frontier.of(frontier.load_points(args.runs), args.timed), args.out)
    print(f"wrote {figure}, frontier.md and frontier.json")
    return 0
