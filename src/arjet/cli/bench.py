"""`arjet bench`: every sampler on the same prompts and seeds, in one process, ratios against `ar`."""

from __future__ import annotations

import argparse
import warnings
from typing import TYPE_CHECKING, Any

from .. import checks
from ..limits import DEFAULT_LIMITS
from . import types
from .options import (
    ENGINE_OR_CALL_GPU,
    add_command,
    add_compile_argument,
    add_json_argument,
    add_model_arguments,
    add_sampling_arguments,
    add_seed_argument,
    add_size_arguments,
    check_model_arguments,
    compile_argument,
    json_output,
    json_text,
    load_pipeline,
    parse_specs,
    sampling_options,
)

if TYPE_CHECKING:
    from ..samplers import SamplingOptions

DESCRIPTION = """Time samplers side by side: forward passes, step compression, seconds and latency speedup
against `ar`, accepted codes per step, peak memory, and each forward's time against the bandwidth floor.

  arjet bench --samplers ar,sjd,zipar --n 8
  arjet bench --arch janus-pro-7b --random-weights --device cuda --n 4 --out runs/janus-pro-7b.json

--model times a real checkpoint (default: the built-in model); --arch NAME --random-weights builds a
released checkpoint's architecture with random weights on the device (`arjet models` lists them), which
times the true per-step cost of the real sizes without their weights."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "bench", "time samplers side by side (forward passes, latency)", DESCRIPTION
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--arch",
        default=None,
        metavar="NAME",
        help="a released checkpoint's architecture with random weights (`arjet models` lists them); needs "
        "--random-weights, excludes --model",
    )
    parser.add_argument(
        "--random-weights",
        action="store_true",
        help="build --arch with random weights (seeded by --seed) on --device; default dtype bfloat16 on CUDA, "
        "float32 on CPU",
    )
    add_size_arguments(parser, minimum=None)
    parser.add_argument(
        "--samplers",
        default="ar,sjd,zipar",
        metavar="SPECS",
        help="sampler specs: 'ar,sjd,zipar', 'ar,sjd:window=32,init=random,zipar:w=4' or ';'-separated; "
        "'ar' is added first if missing (default ar,sjd,zipar)",
    )
    parser.add_argument(
        "--prompts",
        default=None,
        metavar="SET_OR_FILE",
        help="prompt set name or file (default: the built-in model's held-out set)",
    )
    parser.add_argument(
        "--n", type=types.int_type(1), default=8, metavar="N", help="number of prompts (default 8)"
    )
    parser.add_argument(
        "--batch-size",
        type=types.int_type(1, DEFAULT_LIMITS.max_images_per_call),
        default=1,
        metavar="N",
        help="prompts per pipeline call (default 1); with more, `images / s` is the throughput of a batch",
    )
    parser.add_argument(
        "--concurrency",
        type=types.int_list_type(1, DEFAULT_LIMITS.max_images_per_call),
        default=None,
        metavar="C,C,...",
        help="measure throughput through the continuous-batching engine instead: at each concurrency, that "
        "many clients keep one request each in flight over an engine with as many lanes, until --n images are "
        "done; images / s, p50 / p95 latency, lane utilisation (--samplers may name the engine's 'adaptive')",
    )
    parser.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="with --concurrency: also draw images / s against concurrency here",
    )
    add_seed_argument(parser)
    parser.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help="folder of the public prompt sets (or ARJET_PROMPTS_DIR)",
    )
    add_sampling_arguments(parser)
    add_compile_argument(parser, ENGINE_OR_CALL_GPU.format(engine="--concurrency"))
    parser.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="also write the full results here (.json); with --suite, the folder of its report",
    )
    suite = parser.add_argument_group(
        "suites", "a fixed list of measurements with targets (`--suite gpu`), instead of the options above"
    )
    suite.add_argument(
        "--suite",
        default=None,
        metavar="NAME",
        help="run a benchmark suite (gpu: the captured decode step and real-size speed, ~8 minutes on an "
        "H100; gpu-quick: the same at smaller sizes; gpu-proof: the default mode against eager, the engine, "
        "7B forwards against the graph floor, ~6 minutes on an H200) and write report.md and report.json to --out",
    )
    suite.add_argument(
        "--sections",
        default=None,
        metavar="NAMES",
        help="with --suite: run only these sections (comma-separated)",
    )
    suite.add_argument(
        "--budget-minutes",
        type=types.float_type(minimum=0.5),
        default=None,
        metavar="M",
        help="with --suite: skip sections that no longer fit in M minutes (default: the suite's)",
    )
    suite.add_argument(
        "--tests",
        default=None,
        metavar="FILE",
        help="with --suite: a JUnit XML report of a test run (pytest --junitxml) to include in the report",
    )
    add_json_argument(parser, path_was_allowed=True)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..bench.samplers import run_bench
    from ..data.prompts import load_prompts

    if args.suite is not None:
        return run_suite_command(args)
    for option in ("sections", "budget_minutes", "tests"):
        if getattr(args, option) is not None:
            raise ValueError(f"--{option.replace('_', '-')} goes with --suite NAME")

    # 1. everything the command line says is checked before any model work
    print_json, out, option = json_output(args)
    path = checks.output_file(option, out, suffixes=(".json",)) if out is not None else None
    arch = check_arch(args)
    for name in ("height", "width"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise ValueError(f"--{name} must be a positive number of pixels, got {value}")
    throughput = args.concurrency is not None
    if throughput and args.batch_size != 1:
        raise ValueError("--concurrency measures the engine, which keeps its lanes full: drop --batch-size")
    if args.plot is not None and not throughput:
        raise ValueError("--plot draws the --concurrency measurement: add --concurrency 1,4,16")
    plot = checks.output_file("--plot", args.plot, suffixes=(".png",)) if args.plot is not None else None
    specs = parse_specs(args.samplers, modes=("adaptive",) if throughput else ())  # checks every spec
    specs = ["ar", *[spec for spec in specs if spec != "ar"]]  # the baseline of every ratio
    sampling = sampling_options(args)  # checked here, before any model loads
    compile = compile_argument(args)
    prompts = load_prompts(args.prompts or "shapes", args.n, args.data_dir, data_dir_option="--data-dir")
    if arch is None:
        check_model_arguments(args)

    # 2. the model, then the bench
    size = {"height": args.height, "width": args.width, "compile": compile}
    if throughput:  # as the engine takes them: a temperature left out is 1
        return _throughput(args, arch, specs, prompts, _call(sampling, **size), path, plot, print_json)
    pipe = load_pipeline(args) if arch is None else _random_pipeline(args, arch)
    # as `pipe(...)` resolves them: a temperature left out is the model's
    call = _call(sampling_options(args, pipe.sampling_defaults()), batch_size=args.batch_size, **size)
    if arch is None:
        result = run_bench(pipe, specs, prompts, seed=args.seed, progress=not print_json, **call)
    else:
        _note_unknown_words(pipe, prompts)
        with warnings.catch_warnings():  # noted once above: words do not change a random model's cost
            warnings.filterwarnings("ignore", message=r"prompt .*the text tokenizer does not know")
            result = run_bench(
                pipe, specs, prompts, seed=args.seed, arch=arch, progress=not print_json, **call
            )

    # 3. report (and, last, why its seconds may not be trustworthy)
    if path is not None:
        path.write_text(json_text(result.to_dict()) + "\n")
    if print_json:
        print(json_text(result.to_dict()))
    else:
        _print_table(result, prompts, specs, arch, path)
    for message in result.warnings:
        warnings.warn(message, stacklevel=1)
    return 0


def _call(sampling: SamplingOptions, **more: Any) -> dict[str, Any]:
    """The keyword arguments of every call: the sampling options and `more`, those that are set."""
    return {key: value for key, value in {**sampling.kwargs(), **more}.items() if value is not None}


def _print_table(result, prompts: list[str], specs: list[str], arch: str | None, path) -> None:
    env = result.environment
    model = f"{arch}, random weights" if arch else env["pipeline"]
    weights = (
        env["dtype"] if env.get("quantization") is None else f"{env['quantization']} over {env['dtype']}"
    )
    print(f"\n{len(prompts)} prompts x {len(specs)} samplers on {env['device']} ({model}, {weights})")
    print(result.table())
    print(
        "peak memory: CUDA max allocated (weights included); CPU: peak resident memory added during a generation"
    )
    if env.get("copy_bandwidth_gb_s") is not None:
        print(
            f"floor: the weights one forward reads ({env['forward_weight_bytes'] / 1e9:.3g} GB: decoder layers, "
            f"final norm, code head) + its KV cache at the average filled length ({env['mean_kv_bytes'] / 1e9:.3g} "
            f"GB, CFG rows included), over the measured copy bandwidth ({env['copy_bandwidth_gb_s']:.3g} GB/s, "
            "read + write)"
        )
    if path is not None:
        print(f"wrote {path}")


def _throughput(args, arch, specs, prompts, call, path, plot, print_json) -> int:
    """`--concurrency`: the engine's images / s, latency and lane utilisation per sampler and concurrency."""
    from ..bench.throughput import run_throughput

    pipe = load_pipeline(args) if arch is None else _random_pipeline(args, arch)
    with warnings.catch_warnings():  # a random model's small vocabulary: words do not change the cost
        if arch is not None:
            warnings.filterwarnings("ignore", message=r"prompt .*the text tokenizer does not know")
        result = run_throughput(
            pipe, specs, prompts, args.concurrency, seed=args.seed, progress=not print_json, **call
        )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json_text(result.to_dict()) + "\n")
    if plot is not None:
        from ..reports.plots import throughput

        plot.parent.mkdir(parents=True, exist_ok=True)
        throughput(result.to_dict()["rows"]).savefig(plot, dpi=120)
    if print_json:
        print(json_text(result.to_dict()))
    else:
        _print_throughput(result, prompts, (path, plot))
    for message in result.warnings:  # last, as the bench's: why its seconds may not be trustworthy
        warnings.warn(message, stacklevel=1)
    return 0


def _print_throughput(result, prompts: list[str], written: tuple) -> None:
    env = result.environment
    print(
        f"\n{len(prompts)} images per measurement on {env['device']} ({env['torch_threads']} threads), through "
        "the engine"
    )
    print(result.table())
    for row in result.rows:
        if row.windows:
            print(f"{row.sampler} at concurrency {row.concurrency}: steps by window {row.windows}")
    for path in written:
        if path is not None:
            print(f"wrote {path}")


SUITE_EXCLUDES = {  # options a suite sets itself, with their defaults
    "model": None,
    "arch": None,
    "random_weights": False,
    "samplers": "ar,sjd,zipar",
    "prompts": None,
    "n": 8,
    "batch_size": 1,
    "concurrency": None,
    "plot": None,
    "height": None,
    "width": None,
    "compile": "auto",
    "json": False,
}


def run_suite_command(args: argparse.Namespace) -> int:
    """`arjet bench --suite NAME --out DIR`: the suite's sections, then its report."""
    from pathlib import Path

    from ..bench.suite import get_suite, run_suite

    suite = get_suite(args.suite)
    given = [name for name, default in SUITE_EXCLUDES.items() if getattr(args, name) != default]
    if given:
        options = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ValueError(f"--suite {suite.name} sets its own models, samplers and sizes; drop {options}")
    if args.out is None:
        raise ValueError(f"--suite {suite.name} writes a report folder: pass --out DIR")
    out = checks.output_dir("--out", args.out)  # report.md and report.json go into a folder
    tests = None if args.tests is None else Path(args.tests)
    sections = None if args.sections is None else [n.strip() for n in args.sections.split(",") if n.strip()]
    device = args.device or "cuda"
    import torch

    if not device.startswith("cuda"):
        raise ValueError(
            f"--suite {suite.name} captures CUDA graphs: it needs a CUDA device, got --device {device}"
        )
    if not torch.cuda.is_available():
        raise ValueError(
            f"--suite {suite.name} captures CUDA graphs, and CUDA is not available on this machine"
        )
    budget = None if args.budget_minutes is None else args.budget_minutes * 60
    report = run_suite(suite, out, sections=sections, budget_s=budget, tests=tests, device=device)
    print((out / "report.md").read_text())
    print(f"wrote {out / 'report.md'} and {out / 'report.json'}")
    missed = [t["target"] for t in report["targets"] if t["met"] is False]
    return 1 if missed else 0


def check_arch(args: argparse.Namespace) -> str | None:
    """The preset name of `--arch` (validated with `--random-weights` / `--model`), or None."""
    from ..presets import available_presets, get_preset

    if args.arch is None:
        if args.random_weights:
            raise ValueError(f"--random-weights needs --arch NAME, one of {', '.join(available_presets())}")
        return None
    get_preset(args.arch)  # unknown names list the valid ones
    if args.model is not None:
        raise ValueError(
            f"pass either --model (a checkpoint) or --arch (random weights), not both (got --model {args.model} "
            f"--arch {args.arch})"
        )
    if not args.random_weights:
        raise ValueError(
            f"--arch {args.arch} builds the architecture with random weights: add --random-weights (a real "
            "checkpoint loads with --model PATH)"
        )
    return args.arch


def _random_pipeline(args: argparse.Namespace, arch: str):
    import torch

    from ..pipelines.loading import torch_dtype
    from ..presets import random_pipeline
    from .threads import apply_threads

    if args.device is not None and args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: CUDA is not available on this machine")
    apply_threads(args)
    return random_pipeline(
        arch,
        device=args.device,
        dtype=torch_dtype(args.dtype),
        height=args.height,
        width=args.width,
        seed=args.seed,
        quantization=args.quantize,
    )


def _note_unknown_words(pipe, prompts: list[str]) -> None:
    from ..pipelines.prompts import unknown_words

    count = sum(bool(unknown_words(pipe.text_tokenizer, prompt)) for prompt in prompts)
    if count:
        print(
            f"note: {count} of {len(prompts)} prompts have words outside the random model's small vocabulary; each "
            "reads as one unknown token (prompt length, and so the cost, is what matters here)"
        )
