"""`arjet eval`: every sampler on the same prompts and seeds; FID, CLIP score and speed, side by side.

    arjet eval --model M --samplers ar,sjd,zipar --prompts shapes --n 200 --seeds 0 --out runs/shapes

Sampler specs are names from `arjet.samplers.available()`, optionally with arguments after a colon. A
list is split at `;` when it has one, else at `,`, where a piece of the form `key=value` continues the
spec before it: `ar,sjd:window=32,init=random,zipar` is three samplers. `--sampler SPEC` (repeatable)
adds one spec verbatim.

Sharded: `accelerate launch --num_processes N -m arjet.eval ...` (on GPUs) or, on CPUs,
`accelerate launch --multi_gpu --num_processes N -m arjet.eval ...` / `torchrun --nproc_per_node N -m
arjet.eval ...` (Accelerate's `--cpu` starts one process only, unless it is given an MPI host file). All
processes must see the same --out folder.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings
from pathlib import Path

from .. import checks
from ..commands.common import add_model_arguments, add_sampling_arguments, add_size_arguments
from ..limits import DEFAULT_LIMITS

DEFAULT_SAMPLERS = "ar,sjd,zipar"
MAX_SEEDS = 1000  # seeds per run (each one is a full pass over the prompts for every sampler)


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="FID, CLIP score and speed of samplers side by side (resumable, shardable)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--samplers",
        default=DEFAULT_SAMPLERS,
        help="sampler specs, e.g. 'ar,sjd:window=32,init=random,zipar' or 'ar;sjd:window=32;zipar' "
        f"(default {DEFAULT_SAMPLERS})",
    )
    parser.add_argument("--sampler", action="append", default=[], help="one more sampler spec (repeatable)")
    parser.add_argument(
        "--prompts",
        default="shapes",
        help="prompt set (parti, geneval, drawbench, coco5k, coco30k, dpg, shapes) or a .txt/.tsv/.csv/.jsonl "
        "file (default: shapes, the built-in domain's held-out set)",
    )
    parser.add_argument(
        "--n", type=checks.int_type(1), default=None, help="first N prompts of the set (default: all)"
    )
    parser.add_argument(
        "--seeds",
        default="0",
        help=f"seeds, e.g. '0' or '0,1,2' or '0-3' (at most {MAX_SEEDS}); prompt i uses seed + i",
    )
    parser.add_argument("--out", required=True, help="run folder: images, records, metrics, report, plots")
    parser.add_argument(
        "--data-dir", default=None, help="folder of the public prompt sets (or ARJET_PROMPTS_DIR)"
    )
    parser.add_argument(
        "--batch-size",
        type=checks.int_type(1, DEFAULT_LIMITS.max_images_per_call),
        default=1,
        help="images per pipeline call (default 1)",
    )
    add_size_arguments(parser)
    add_sampling_arguments(parser)
    parser.add_argument(
        "--fid-features",
        default="domain",
        help="FID feature network: domain[:<folder>], inception[:<weights file>], "
        "open_clip:<model>:<weights file>, or none (default: domain, the built-in domain CLIP)",
    )
    parser.add_argument(
        "--clip-model",
        default="domain",
        help="CLIP for the CLIP score: domain[:<folder>], open_clip:<model>:<weights file>, or none (default: domain)",
    )
    parser.add_argument(
        "--reference-dir",
        default=None,
        help="folder of real images for FID (default for --prompts shapes: renders of the held-out scenes)",
    )
    parser.add_argument(
        "--stats-cache",
        default=None,
        help="cache of reference statistics (default ~/.cache/arjet/fid-reference)",
    )
    parser.add_argument(
        "--metric-batch-size",
        type=checks.int_type(1, 4096),
        default=32,
        help="images per feature/CLIP batch (default 32)",
    )
    parser.add_argument(
        "--grid-prompts",
        type=checks.int_type(1, 64),
        default=4,
        help="prompts (rows) in the image grid plot (default 4)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(func=run)


def parse_seeds(text: str, limit: int = MAX_SEEDS) -> list[int]:
    """'0', '0,1,2', '0-3' or a mix ('0-2,10') -> distinct seeds in order: integers `0 <= seed < 2**63`, at
    most `limit` of them (counted before any list is built, so `0-1000000000` fails at once)."""
    ranges: list[range] = []
    count = 0
    for piece in (p.strip() for p in text.split(",") if p.strip()):
        first, dash, last = piece.partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise ValueError(
                f"--seeds takes integers >= 0 like '0', '0,1,2' or '0-3', got {text!r}"
            ) from None
        if not 0 <= low <= high < checks.SEED_LIMIT:
            raise ValueError(
                f"--seeds takes integers from 0 to 2**63 - 1 and ranges low-high with low <= high, got {piece!r}"
            )
        count += high - low + 1
        if count > limit:
            raise ValueError(f"--seeds {text!r} lists more than {limit} seeds; use at most {limit} per run")
        ranges.append(range(low, high + 1))
    if not ranges:
        raise ValueError(f"--seeds lists no seed: {text!r}")
    return list(dict.fromkeys(seed for values in ranges for seed in values))


def canonical_command(args: argparse.Namespace) -> str:
    """The command line that reproduces `args` (every option that differs from its default)."""
    parts = ["arjet", "eval"]
    defaults = _defaults()
    for name, value in vars(args).items():
        if name in ("func", "command") or value == defaults.get(name):
            continue
        option = "--" + name.replace("_", "-")
        if value is True:
            parts.append(option)
        elif isinstance(value, list):
            parts += [item for spec in value for item in (option, spec)]
        else:
            parts += [option, str(value)]
    return shlex.join(parts)


def _defaults() -> dict:
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    return vars(parser.parse_args(["eval", "--out", ""]))


def _optional(spec: str) -> str | None:
    return None if spec.strip().lower() == "none" else spec.strip()


def run(args: argparse.Namespace) -> int:
    from .. import samplers
    from ..builtin import DEFAULT_MODEL, available_models
    from ..commands.common import check_model_arguments
    from ..pipelines.base import check_sampling_options
    from .prompts import PROMPT_SETS, load_prompts
    from .reference import reference_source
    from .runner import join_processes, run_eval
    from .scoring import MetricOptions
    from .settings import EvalSettings

    # 1. everything the user typed, checked before anything is loaded or written
    specs = samplers.parse_specs(args.samplers, args.sampler)  # checks every spec
    seeds = parse_seeds(args.seeds)
    check_sampling_options(args.guidance_scale, args.temperature, args.top_k, args.top_p)
    checks.output_dir("--out", args.out)
    if args.stats_cache:
        checks.output_dir("--stats-cache", args.stats_cache)
    check_model_arguments(args)
    state = join_processes(args.device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prompts = load_prompts(args.prompts, args.n, args.data_dir)
    if state.is_main_process:
        for warning in caught:
            print(f"arjet eval: note: {warning.message}", file=sys.stderr)
    for seed in seeds:
        checks.seed("--seeds", seed, len(prompts))  # prompt i uses seed + i
    prompt_source = args.prompts
    if args.prompts not in PROMPT_SETS and Path(args.prompts).expanduser().is_file():
        prompt_source = str(Path(args.prompts).expanduser().resolve())
    model = args.model or DEFAULT_MODEL  # a built-in model keeps its name (portable reports)
    if model not in available_models() and Path(model).expanduser().exists():
        model = str(Path(model).expanduser().resolve())

    # 2. the run
    settings = EvalSettings(
        model=model,
        samplers=specs,
        prompts=prompt_source,
        n=len(prompts),
        seeds=seeds,
        prompts_sha1=EvalSettings.prompt_digest(prompts),
        height=args.height,
        width=args.width,
        guidance_scale=args.guidance_scale,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        dtype=args.dtype,
    )
    options = MetricOptions(
        fid_features=_optional(args.fid_features),
        clip_model=_optional(args.clip_model),
        reference=reference_source(args.reference_dir, args.prompts, len(prompts)),
        cache_dir=Path(args.stats_cache) if args.stats_cache else None,
        batch_size=args.metric_batch_size,
    )
    metrics = run_eval(
        settings,
        prompts,
        args.out,
        options,
        batch_size=args.batch_size,
        device=args.device,
        progress=not args.no_progress,
        command=canonical_command(args),
        grid_prompts=args.grid_prompts,
    )

    # 3. the table, on the main process
    if metrics is not None:
        from .report import results_table
        from .scoring import SamplerResult

        print()
        print(results_table([SamplerResult(**row) for row in metrics["samplers"]]))
        for note in metrics["notes"]:
            print(f"note: {note}")
        print(f"wrote {Path(args.out) / 'report.md'}, metrics.json, records.jsonl and plots/")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m arjet.eval ...` (e.g. under `accelerate launch -m arjet.eval ...`) = `arjet eval ...`."""
    from ..cli import main as arjet_main

    return arjet_main(["eval", *(sys.argv[1:] if argv is None else argv)])
