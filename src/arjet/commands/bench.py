"""`arjet bench`: every sampler on the same prompts and seeds, in one process, ratios against `ar`.

`--model` times a real checkpoint (or the built-in model); `--arch NAME --random-weights` builds a released
checkpoint's architecture with random weights on the device (`arjet.random_pipeline`), which times the
true per-step cost of the real sizes without their weights.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from pathlib import Path

from .common import DTYPES, add_model_arguments, add_sampling_arguments, load_pipeline, sampling_kwargs


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    from ..presets import available_presets

    parser = subparsers.add_parser("bench", help="compare samplers' forward passes, latency and memory")
    add_model_arguments(parser)
    parser.add_argument(
        "--arch",
        default=None,
        help=f"a released checkpoint's architecture with random weights ({', '.join(available_presets())}); "
        "needs --random-weights, excludes --model",
    )
    parser.add_argument(
        "--random-weights",
        action="store_true",
        help="build --arch with random weights (seeded by --seed) on --device; default dtype bfloat16 on CUDA, "
        "float32 on CPU",
    )
    parser.add_argument(
        "--height", type=int, default=None, help="image height in pixels (default: the model's)"
    )
    parser.add_argument(
        "--width", type=int, default=None, help="image width in pixels (default: the model's)"
    )
    parser.add_argument(
        "--samplers",
        default="ar,sjd,zipar",
        help="sampler specs: 'ar,sjd,zipar', 'ar,sjd:window=32,init=random,zipar:w=4' or ';'-separated; "
        "'ar' is added first if missing",
    )
    parser.add_argument(
        "--prompts", default=None, help="prompt set name or file (default: the built-in model's held-out set)"
    )
    parser.add_argument("--n", type=int, default=8, help="number of prompts (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="image i uses seed + i")
    parser.add_argument(
        "--data-dir", default=None, help="folder of the public prompt sets (or ARJET_PROMPTS_DIR)"
    )
    add_sampling_arguments(parser)
    parser.add_argument(
        "--json", dest="json_out", default=None, help="also write the full results as JSON here"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .. import samplers
    from ..bench import run_bench
    from ..eval.prompts import load_prompts
    from ..pipelines.base import check_sampling_options

    # 1. everything the command line says is checked before any model work
    json_path = check_json_path(args.json_out) if args.json_out is not None else None
    arch = check_arch(args)
    for name in ("height", "width"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise ValueError(f"--{name} must be a positive number of pixels, got {value}")
    specs = samplers.parse_specs(args.samplers)
    specs = ["ar", *[spec for spec in specs if spec != "ar"]]  # the baseline of every ratio
    for spec in specs:
        samplers.get(spec)
    check_sampling_options(args.guidance_scale, args.temperature, args.top_k, args.top_p)
    prompts = load_prompts(args.prompts or "shapes", args.n, args.data_dir)

    # 2. the model, then the bench
    call_kwargs = sampling_kwargs(args)
    call_kwargs.update({k: v for k, v in (("height", args.height), ("width", args.width)) if v is not None})
    if arch is None:
        pipe = load_pipeline(args)
        result = run_bench(pipe, specs, prompts, seed=args.seed, **call_kwargs)
    else:
        pipe = _random_pipeline(args, arch)
        _note_unknown_words(pipe, prompts)
        with warnings.catch_warnings():  # noted once above: words do not change a random model's cost
            warnings.filterwarnings("ignore", message=r"prompt .*the text tokenizer does not know")
            result = run_bench(pipe, specs, prompts, seed=args.seed, arch=arch, **call_kwargs)

    # 3. report
    env = result.environment
    model = f"{arch}, random weights" if arch else env["pipeline"]
    print(f"\n{len(prompts)} prompts x {len(specs)} samplers on {env['device']} ({model}, {env['dtype']})")
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
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result.to_dict(), indent=2))
        print(f"wrote {json_path}")
    return 0


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


def check_json_path(value: str) -> Path:
    """`--json` as a path the results can be written to: not a folder, under a folder (existing or to be
    made) that is writable."""
    path = Path(value).expanduser()
    if not value or path.is_dir():
        raise ValueError(f"--json {value!r} is a folder; give a file path such as {path / 'bench.json'}")
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"--json {value}: {ancestor} is a file, so no folder can be made there")
    if not os.access(ancestor, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"--json {value}: not writable here (no write permission in {ancestor})")
    return path


def _random_pipeline(args: argparse.Namespace, arch: str):
    import torch

    from ..presets import random_pipeline

    if args.device is not None and args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: CUDA is not available on this machine")
    dtype = DTYPES[args.dtype] if args.dtype else None
    return random_pipeline(
        arch, device=args.device, dtype=dtype, height=args.height, width=args.width, seed=args.seed
    )


def _note_unknown_words(pipe, prompts: list[str]) -> None:
    from ..pipelines.prompts import unknown_words

    count = sum(bool(unknown_words(pipe.tokenizer, prompt)) for prompt in prompts)
    if count:
        print(
            f"note: {count} of {len(prompts)} prompts have words outside the random model's small vocabulary; each "
            "reads as one unknown token (prompt length, and so the cost, is what matters here)"
        )
