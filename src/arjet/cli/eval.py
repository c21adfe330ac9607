"""`arjet eval`: every sampler on the same prompts and seeds; FID, CLIP score and speed, side by side.

    arjet eval --samplers ar,sjd,zipar --prompts shapes --n 200 --seed 0 --out runs/shapes

Sampler specs are names from `arjet samplers`, optionally with arguments after a colon. A list is split at
`;` when it has one, else at `,`, where a piece of the form `key=value` continues the spec before it:
`ar,sjd:window=32,init=random,zipar` is three samplers. `--sampler SPEC` (repeatable) adds one spec
verbatim. `--seed 0,1,2` (or `0-2`) repeats the run for each seed; prompt i uses seed + i.

The same command again resumes an interrupted run. Sharded: `accelerate launch --num_processes N -m arjet
eval ...` (on GPUs) or, on CPUs, `accelerate launch --multi_gpu --num_processes N -m arjet eval ...` /
`torchrun --nproc_per_node N -m arjet eval ...` (Accelerate's `--cpu` starts one process only, unless it
is given an MPI host file). All processes must see the same --out folder. On Ray (a machine's GPUs, or a
cluster): `arjet eval --ray --workers N --worker-gpus 1 ...` (docs/ray.md).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from .. import checks
from ..limits import DEFAULT_LIMITS
from . import types
from .options import (
    ENGINE_OR_CALL_GPU,
    add_command,
    add_compile_argument,
    add_model_arguments,
    add_ray_group,
    add_sampling_arguments,
    add_size_arguments,
    check_model_arguments,
    compile_argument,
    note,
    parse_specs,
    refuse_ray_knobs,
    sampling_options,
)
from .threads import apply_threads

DEFAULT_SAMPLERS = "ar,sjd,zipar"
DEFAULT_N = 200  # prompts when --n is not given (or all of a smaller set): FID means little far below
MAX_SEEDS = 1000  # seeds per run (each one is a full pass over the prompts for every sampler)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "eval",
        "FID, CLIP score and speed of samplers side by side (resumable, shardable)",
        __doc__,
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--samplers",
        metavar="SPECS",
        default=DEFAULT_SAMPLERS,
        help="sampler specs, e.g. 'ar,sjd:window=32,init=random,zipar' or 'ar;sjd:window=32;zipar' "
        f"(default {DEFAULT_SAMPLERS})",
    )
    parser.add_argument(
        "--sampler", action="append", default=[], metavar="SPEC", help="one more sampler spec (repeatable)"
    )
    parser.add_argument(
        "--prompts",
        default="shapes",
        metavar="SET_OR_FILE",
        help="prompt set (parti, geneval, drawbench, coco5k, coco30k, dpg, shapes) or a .txt/.tsv/.csv/.jsonl "
        "file (default: shapes, the built-in domain's held-out set)",
    )
    parser.add_argument(
        "--n",
        type=types.int_type(1),
        default=None,
        metavar="N",
        help=f"first N prompts of the set (default {DEFAULT_N}, or all of a smaller set)",
    )
    parser.add_argument(
        "--seed",
        default="0",
        metavar="SEEDS",
        help=f"seed, or seeds: '0', '0,1,2' or '0-3' (at most {MAX_SEEDS}); a full pass per seed, prompt i "
        "uses seed + i (default 0)",
    )
    parser.add_argument("--seeds", default=None, help=argparse.SUPPRESS)  # the old spelling of --seed
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="run folder: images, records, metrics, report, plots"
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help="folder of the public prompt sets (or ARJET_PROMPTS_DIR)",
    )
    parser.add_argument(
        "--batch-size",
        metavar="N",
        type=types.int_type(1, DEFAULT_LIMITS.max_images_per_call),
        default=1,
        help="images per pipeline call (default 1)",
    )
    add_size_arguments(parser)
    add_sampling_arguments(parser)
    add_compile_argument(parser, ENGINE_OR_CALL_GPU.format(engine="--batch-size above 1"))
    parser.add_argument(
        "--fid-features",
        metavar="SPEC",
        default="domain",
        help="FID feature network: domain[:<folder>], inception[:<weights file>], "
        "open_clip:<model>:<weights file>, or none (default: domain, the built-in domain CLIP)",
    )
    parser.add_argument(
        "--clip-model",
        metavar="SPEC",
        default="domain",
        help="CLIP for the CLIP score: domain[:<folder>], open_clip:<model>:<weights file>, or none (default: domain)",
    )
    parser.add_argument(
        "--reference-dir",
        metavar="DIR",
        default=None,
        help="folder of real images for FID (default for --prompts shapes: renders of the held-out scenes)",
    )
    parser.add_argument(
        "--stats-cache",
        metavar="DIR",
        default=None,
        help="cache of reference statistics (default ~/.cache/arjet/fid-reference)",
    )
    parser.add_argument(
        "--metric-batch-size",
        metavar="N",
        type=types.int_type(1, 4096),
        default=32,
        help="images per feature/CLIP batch (default 32)",
    )
    parser.add_argument(
        "--grid-prompts",
        metavar="N",
        type=types.int_type(1, 64),
        default=4,
        help="prompts (rows) in the image grid plot (default 4)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_ray_arguments(parser)
    parser.set_defaults(func=run)


def add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    """`--ray` and its knobs (see docs/ray.md)."""
    group = add_ray_group(
        parser, "make the images with Ray workers (each with its own pipeline) into the same run folder"
    )
    group.add_argument(
        "--workers", type=types.int_type(1), default=None, metavar="N", help="Ray workers (default 2)"
    )
    group.add_argument(
        "--worker-gpus",
        type=types.float_type(0.0),
        default=None,
        metavar="N",
        help="GPUs per worker (default 0: on the CPU, one CPU and --threads threads each)",
    )


def parse_seeds(text: str, limit: int = MAX_SEEDS, option: str = "--seed") -> list[int]:
    """'0', '0,1,2', '0-3' or a mix ('0-2,10') -> the seeds in order, each listed once: integers `0 <= seed < 2**63`, at
    most `limit` of them (counted before any list is built, so `0-1000000000` fails at once). Errors name
    `option`, the spelling the user typed."""
    ranges: list[range] = []
    count = 0
    for piece in (p.strip() for p in text.split(",") if p.strip()):
        first, dash, last = piece.partition("-")
        low = checks.integer_from_text(first)  # ASCII digits, as every integer option reads
        high = checks.integer_from_text(last) if dash else low
        if low is None or high is None:
            raise ValueError(f"{option} takes integers >= 0 like '0', '0,1,2' or '0-3', got {text!r}")
        if not 0 <= low <= high < checks.SEED_LIMIT:
            raise ValueError(
                f"{option} takes integers from 0 to 2**63 - 1 and ranges low-high with low <= high, got {piece!r}"
            )
        count += high - low + 1
        if count > limit:
            raise ValueError(f"{option} {text!r} lists more than {limit} seeds; use at most {limit} per run")
        ranges.append(range(low, high + 1))
    if not ranges:
        raise ValueError(f"{option} lists no seed: {text!r}")
    seeds: dict[int, None] = {}
    for seed in (seed for values in ranges for seed in values):
        if seed in seeds:  # a run of fewer seeds than typed would pass for the one asked for
            raise ValueError(f"{option} {text!r} lists seed {seed} more than once; list each seed once")
        seeds[seed] = None
    return list(seeds)


def first_prompts(args: argparse.Namespace) -> list[str]:
    """The run's prompts: the first `--n` of the set (default `DEFAULT_N`, or all of a smaller set); an
    `--n` beyond the set's size is refused, naming the size, rather than quietly running fewer."""
    from ..data.prompts import load_prompts

    prompts = load_prompts(args.prompts, None, args.data_dir, data_dir_option="--data-dir")
    if args.n is not None and args.n > len(prompts):
        raise ValueError(
            f"--n {args.n} is more than the {len(prompts):,} prompts of {args.prompts!r}; pass --n "
            f"{len(prompts)} or fewer (or leave --n out: the first {DEFAULT_N}, or all of a smaller set)"
        )
    return prompts[: args.n or DEFAULT_N]


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
    add_parser(parser.add_subparsers())
    return vars(parser.parse_args(["eval", "--out", ""]))


def _optional(spec: str) -> str | None:
    return None if spec.strip().lower() == "none" else spec.strip()


def _ray_pool(args: argparse.Namespace, settings, prompts: list[str], threads: int):
    """The run's Ray workers (`--ray`; Ray is checked for here, before any work), or None."""
    if not args.ray:
        return None
    from ..eval.ray_runner import RayPool

    gpus = args.worker_gpus or 0.0
    device = args.device or ("cuda" if gpus else "cpu")
    return RayPool(
        args.workers or 2,
        settings,
        prompts,
        args.out,
        threads=threads,
        device=device,
        worker_gpus=gpus,
        address=args.ray_address,
    )


def run(args: argparse.Namespace) -> int:
    from ..builtin import DEFAULT_MODEL, available_models
    from ..data.prompts import PROMPT_SETS
    from ..eval.reference import reference_source
    from ..eval.report import judge_note
    from ..eval.runner import join_processes, run_eval
    from ..eval.scoring import MetricOptions
    from ..eval.settings import EvalSettings

    # 1. everything the user typed, checked before anything is loaded or written
    refuse_ray_knobs(args, ("--workers", "--worker-gpus"))
    specs = parse_specs(args.samplers, args.sampler)  # checks every spec
    seed_option, seed_text = ("--seed", args.seed) if args.seeds is None else ("--seeds", args.seeds)
    seeds = parse_seeds(seed_text, option=seed_option)
    sampling = sampling_options(args)
    compile = compile_argument(args, recorded=True)
    checks.output_dir("--out", args.out)
    if args.stats_cache:
        checks.output_dir("--stats-cache", args.stats_cache)
    check_model_arguments(args)
    state = join_processes(args.device)
    prompts = first_prompts(args)
    if state.is_main_process:
        if args.seeds is not None:
            note(args, "--seeds is deprecated; use --seed (it takes the same '0', '0,1,2' or '0-3')")
        judged = judge_note(args.prompts, _optional(args.fid_features), _optional(args.clip_model))
        if judged:
            note(args, judged)
    for seed in seeds:
        checks.seed(seed_option, seed, len(prompts))  # prompt i uses seed + i
    prompt_source = args.prompts
    if args.prompts not in PROMPT_SETS and Path(args.prompts).expanduser().is_file():
        prompt_source = str(Path(args.prompts).expanduser().resolve())
    model = args.model or DEFAULT_MODEL  # a built-in model keeps its name (portable reports)
    if model not in available_models() and Path(model).expanduser().exists():
        model = str(Path(model).expanduser().resolve())
    threads = apply_threads(args)

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
        dtype=args.dtype,
        quantization=args.quantize,
        compile=compile,
        sampling=sampling,
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
        pool=_ray_pool(args, settings, prompts, threads),
    )

    # 3. the table, on the main process
    if metrics is not None:
        from ..eval.report import results_table
        from ..eval.scoring import SamplerResult

        print()
        print(results_table([SamplerResult(**row) for row in metrics["samplers"]]))
        for line in metrics["notes"]:
            print(f"note: {line}")
        print(f"wrote {Path(args.out) / 'report.md'}, metrics.json, records.jsonl and plots/")
    return 0
