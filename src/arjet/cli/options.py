"""What the commands share: arjet's argument parser, the options that mean the same in every command, and
the checks that run before any model work.

Every option is typed and bounded when it is parsed (`arjet.checks`); a command then checks what needs no
model (sampler specs, sampling numbers, output paths, the model folder) before it loads one, so a bad
command line fails in a moment with `arjet CMD: error: ...` (exit status 2), never after a slow load.
Nothing here imports torch at import time, so `arjet --help` stays fast.

One meaning per option name: `--model` a built-in name, folder or cached hub id; `--seed S` image i uses
seed S + i; `--out` where the command writes its result; `--json` prints the result as JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import checks
from ..limits import (
    AUTO_COMPILE,
    AUTO_LASTING,
    AUTO_ONE_OFF,
    CAPTURED_CHOICES,
    MAX_LANES,
    MAX_QUEUE,
    MAX_THREADS,
    EngineConfig,
)
from ..pipelines.loading import DTYPES
from ..quantize import INSTALL, SCHEMES
from . import types
from .threads import apply_threads

if TYPE_CHECKING:
    from ..samplers import SamplingOptions

MAX_SIDE = 16_384  # pixels; far above any supported model's size (each family checks its own sizes)
SEED_HELP = "seed of the first image; image i uses seed + i (default 0)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with arjet's one error format: `arjet CMD: error: MESSAGE` first, then where to find the
    usage; exit status 2 (argparse's own convention for a bad command line)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n(see `{self.prog} --help`)\n")


def add_command(
    subparsers: argparse._SubParsersAction, name: str, summary: str, description: str, **kwargs: Any
) -> argparse.ArgumentParser:
    """A command's parser: `summary` is its line in `arjet --help`, `description` heads `arjet NAME --help`
    (kept as written: examples and lists stay laid out)."""
    return subparsers.add_parser(
        name,
        help=summary,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )


# -- options ------------------------------------------------------------------------------------------
def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        type=types.device_type(),
        default=None,
        help="torch device: cpu, cuda or cuda:N (default: cuda if available, else cpu)",
    )


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """`--model`, `--device`, `--dtype` and `--threads`: which model, where and how it runs."""
    parser.add_argument(
        "--model",
        default=None,
        metavar="NAME_OR_PATH",
        help="built-in model name (`arjet models`), local checkpoint folder, or hub id already in the local "
        "Hugging Face cache (default: the built-in shapes model)",
    )
    add_device_argument(parser)
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        default=None,
        help="weights dtype (default: the checkpoint's; float32 for the built-in models)",
    )
    add_quantize_argument(parser)
    add_threads_argument(parser)


def add_quantize_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quantize",
        choices=SCHEMES,
        default=None,
        help="quantize the AR decoder's linear layers and code head as the weights load (torchao): int8 "
        f"(CPU, CUDA), int4 (CUDA), fp8 (CUDA, compute capability >= 8.9); needs `{INSTALL}`",
    )


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads",
        type=types.int_type(1, MAX_THREADS),
        default=None,
        metavar="N",
        help="CPU threads torch may use (default: one per core that other processes leave free, measured "
        "while the command starts)",
    )


COMPILE_CHOICES = ("auto", "off", "cuda-graphs", "inductor", "inductor-graphs")


# what --compile auto does on a GPU, by command (the choice itself is `arjet.session.capture.compile_mode`'s)
ONE_OFF_GPU = f"{AUTO_ONE_OFF} on a GPU (inductor's compile would cost a one-off run more than it saves)"
LASTING_GPU = (
    f"{AUTO_LASTING} on a GPU (the compile, paid while the command starts, makes every later image faster)"
)
ENGINE_OR_CALL_GPU = (
    f"on a GPU {AUTO_LASTING} where images go through the engine ({{engine}}: the warm-up pays the compile), "
    f"{AUTO_ONE_OFF} for calls"
)


def add_compile_argument(parser: argparse.ArgumentParser, gpu: str = ONE_OFF_GPU) -> None:
    """`--compile`, default auto; `gpu`: what auto picks on a GPU for this command."""
    parser.add_argument(
        "--compile",
        choices=COMPILE_CHOICES,
        default=AUTO_COMPILE,
        help=f"how each decode step runs: auto (the default: {gpu}; eager steps on the CPU, where they are "
        "faster; if capturing or compiling fails it warns once and runs eager steps), off (eager steps), "
        "cuda-graphs (captured once per attention span and replayed; CUDA only), inductor (the decoder through "
        "torch.compile; slow the first time), inductor-graphs (both: compiled, then captured; CUDA only). An "
        "explicit mode that fails stops the command",
    )


def compile_argument(args: argparse.Namespace, *, recorded: bool = False) -> bool | str:
    """`--compile` as the pipeline's `compile=` value, refused before any model work where it cannot run.
    `recorded`: the value a run folder keeps, so auto on a device where it runs eager steps is False."""
    import torch

    from ..pipelines.loading import default_device
    from ..session.capture import compile_mode

    choice = {"off": False}.get(args.compile, args.compile)
    device = str(args.device or default_device())
    if choice in CAPTURED_CHOICES and not device.startswith("cuda"):
        raise ValueError(
            f"--compile {choice} needs a CUDA device, got --device {device} (use inductor or off)"
        )
    if recorded and choice == AUTO_COMPILE and compile_mode(choice, torch.device(device)) == "none":
        return False
    return choice


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """The numbers that shape the target distribution (`arjet.samplers.SamplingOptions`)."""
    parser.add_argument(
        "--guidance-scale",
        type=types.float_type(0.0),
        default=None,
        metavar="S",
        help="classifier-free guidance scale; 1 disables CFG (default: the model's, 3 for the built-in ones)",
    )
    parser.add_argument(
        "--temperature",
        type=types.float_type(0.0),
        default=None,
        metavar="T",
        help="sampling temperature; 0 = greedy (default: the model's, 1 but for GLM-Image's generation config; "
        "`arjet eval` records 1)",
    )
    parser.add_argument(
        "--top-k",
        type=types.int_type(1),
        default=None,
        metavar="K",
        help="sample among the K most likely codes only (default: the model family's, none for Janus)",
    )
    parser.add_argument(
        "--top-p",
        type=types.float_type(0.0, 1.0, exclusive_minimum=True),
        default=None,
        metavar="P",
        help="nucleus sampling: the most likely codes holding probability P, in (0, 1] (default: off but for "
        "GLM-Image's generation config)",
    )


def add_size_arguments(parser: argparse.ArgumentParser, minimum: int | None = 1) -> None:
    """`--height` / `--width` in pixels (`minimum=None`: the command checks the lower bound itself)."""
    for name in ("height", "width"):
        parser.add_argument(
            f"--{name}",
            type=types.int_type(minimum, MAX_SIDE),
            default=None,
            metavar="PIXELS",
            help=f"image {name} in pixels (default: the model's)",
        )


def add_seed_argument(parser: argparse.ArgumentParser, limit_note: str = "") -> None:
    parser.add_argument(
        "--seed",
        type=types.int_type(0, checks.SEED_LIMIT - 1),
        default=0,
        metavar="S",
        help=SEED_HELP + limit_note,
    )


def add_json_argument(parser: argparse.ArgumentParser, *, path_was_allowed: bool = False) -> None:
    """`--json`: print the result as JSON on stdout. Where `--json PATH` used to write a file, that spelling
    still works (a note says to use `--out PATH`)."""
    what = "print the results as JSON on stdout"
    if path_was_allowed:
        parser.add_argument("--json", nargs="?", const=True, default=False, metavar="PATH", help=what)
    else:
        parser.add_argument("--json", action="store_true", help=what)


# -- the same step in every command --------------------------------------------------------------------
def note(args: argparse.Namespace, message: str) -> None:
    """One line on stderr: `arjet CMD: note: ...`."""
    print(f"arjet {args.command}: note: {message}", file=sys.stderr)


def json_output(args: argparse.Namespace) -> tuple[bool, str | None, str | None]:
    """(print JSON?, output path, the option that named it) from `--json` / `--out`, where the old
    `--json PATH` spelling is read as `--out PATH` with a note."""
    if isinstance(args.json, str):
        note(args, f"`--json {args.json}` is deprecated; use --out {args.json} (--json alone prints JSON)")
        return False, args.json, "--json"
    return bool(args.json), args.out, "--out"


def check_model_arguments(args: argparse.Namespace) -> str:
    """The checkpoint folder `--model` names (a built-in name, a folder, or a hub id already in the local
    Hugging Face cache), found without loading anything or using the network; FileNotFoundError naming
    the path otherwise, and a ValueError naming the file when one of its files is cut short or malformed
    (`checks.check_checkpoint_files`)."""
    from ..builtin import resolve_model
    from ..pipelines.loading import resolve_checkpoint

    folder = str(resolve_checkpoint(resolve_model(args.model)))
    checks.check_checkpoint_files("--model", folder)
    return folder


def parse_specs(text: str, extra: list[str] | None = None, modes: tuple[str, ...] = ()) -> list[str]:
    """Sampler specs from a command-line list, deduplicated: `'ar;sjd:window=8,init=random;zipar'`, or with
    commas only, where a `key=value` piece belongs to the spec before it (`'ar,sjd:window=8,init=random,zipar'`);
    `extra` specs (a repeatable option) are appended. Each spec is checked (`arjet.samplers.get`), so a bad one
    fails here, before any model work; `modes` are names the command takes besides samplers (the engine's
    `adaptive`)."""
    from .. import samplers

    if ";" in text:
        specs = [piece.strip() for piece in text.split(";")]
    else:
        specs = []
        for piece in (p.strip() for p in text.split(",")):
            if specs and "=" in piece and ":" not in piece:
                specs[-1] += "," + piece
            else:
                specs.append(piece)
    specs = list(dict.fromkeys([s for s in specs if s] + [s.strip() for s in extra or [] if s.strip()]))
    if not specs:
        raise ValueError(f"the sampler list names no sampler: {text!r}")
    for spec in specs:
        if spec not in modes:
            samplers.get(spec)
    return specs


def sampling_options(args: argparse.Namespace, defaults: SamplingOptions | None = None) -> SamplingOptions:
    """The command line's `SamplingOptions`, checked (so that, made before the model loads, e.g. a
    temperature so small that the logits overflow is refused before any model work). `defaults`: the
    pipeline's (`pipe.sampling_defaults()`), for what the command line leaves out, the temperature
    included (1, but GLM-Image's generation config says 0.9): the numbers `pipe(...)` would use. Without
    them, a number left out is the model's when the options reach a pipeline, and the temperature is 1
    (as `arjet eval` records, and as an engine takes it)."""
    from ..samplers import SamplingOptions

    given = {name: getattr(args, name) for name in SamplingOptions.names()}
    if args.temperature is None:
        del given["temperature"]
    return SamplingOptions.from_kwargs(given, defaults)


def load_pipeline(args: argparse.Namespace):
    """The pipeline `--model` names, in `--dtype`, quantized as `--quantize` says, on `--device` (default:
    cuda if available, else cpu)."""
    from ..builtin import load_model
    from ..pipelines.loading import default_device

    apply_threads(args)
    return load_model(
        args.model, device=args.device or default_device(), dtype=args.dtype, quantization=args.quantize
    )


def json_text(value: Any, indent: int = 2) -> str:
    """JSON for people: nested objects indented, lists of plain numbers or strings kept on one line."""
    return _json_lines(value, indent, 0)


def _json_lines(value: Any, indent: int, depth: int) -> str:
    pad, inner = " " * (indent * depth), " " * (indent * (depth + 1))
    if isinstance(value, dict) and value:
        items = [
            f"{inner}{json.dumps(str(k))}: {_json_lines(v, indent, depth + 1)}" for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, (list, tuple)) and value and any(isinstance(v, (dict, list, tuple)) for v in value):
        items = [f"{inner}{_json_lines(v, indent, depth + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value)


# -- servers (the demo, the API) -----------------------------------------------------------------------
SERVER_ENGINE_FIELDS = ("lanes", "max_queue", "time_limit", "max_graphs")
MAX_GRAPHS_HELP = "captured step graphs each engine keeps on a GPU; beyond it the least recently used goes"  # what a server's command line sets of its engine


def add_server_arguments(
    parser: argparse.ArgumentParser,
    *,
    port: int,
    models: str,
    defaults: EngineConfig,
    helps: dict[str, str],
) -> None:
    """Where a server listens, what it serves and how much it takes on: `--host` (loopback by default),
    `--port`, `--model` (repeatable), `--lanes`, `--max-queue`, `--time-limit`, `--max-graphs` (`defaults`'
    values, each with its line of `helps`, keyed by the `EngineConfig` field, `--max-graphs`'s shared;
    `server_engine` reads them back)."""
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)"
    )
    parser.add_argument(
        "--port", type=types.int_type(1, 65535), default=port, help=f"TCP port (default {port})"
    )
    parser.add_argument("--model", action="append", default=None, metavar="NAME_OR_PATH", help=models)
    add_quantize_argument(parser)
    helps = {"max_graphs": MAX_GRAPHS_HELP, **helps}
    kinds = {
        "lanes": types.int_type(1, MAX_LANES),
        "max_queue": types.int_type(1, MAX_QUEUE),
        "time_limit": types.float_type(0.0, exclusive_minimum=True),
        "max_graphs": types.int_type(1),
    }
    for name in SERVER_ENGINE_FIELDS:
        default = getattr(defaults, name)
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=kinds[name],
            default=default,
            help=f"{helps[name]} (default {default:g})",
        )


def server_engine(args: argparse.Namespace, defaults: EngineConfig, **more: Any) -> EngineConfig:
    """`defaults` with what the server's command line set (`--lanes`, `--max-queue`, `--time-limit`,
    `--max-graphs`) and
    `more` (fields of `EngineConfig` by name)."""
    return replace(defaults, **{name: getattr(args, name) for name in SERVER_ENGINE_FIELDS}, **more)


def model_choices(values: list[str] | None) -> dict[str, str] | None:
    """{label: source} for `--model` values; a folder is labelled by its name. A folder whose files are cut
    short or malformed is refused here, before any of the models loads (`checks.check_checkpoint_files`)."""
    if not values:
        return None
    from ..builtin import available_models

    choices = {}
    for value in values:
        if value not in available_models() and not Path(value).is_dir():
            raise FileNotFoundError(
                f"--model {value!r} is neither a built-in model ({', '.join(available_models())}) nor a local folder"
            )
        if value not in available_models():
            checks.check_checkpoint_files("--model", value)
        choices[Path(value).name if Path(value).is_dir() else value] = value
    return choices


def add_ray_group(parser: argparse.ArgumentParser, ray_help: str) -> argparse._ArgumentGroup:
    """The "on Ray" group of a command that runs on Ray (`serve`, `eval`): `--ray` (`ray_help` says what it
    does there) and `--ray-address`; the command adds its own knobs to the group returned."""
    group = parser.add_argument_group("on Ray (pip install 'arjet[ray]'; see docs/ray.md)")
    group.add_argument("--ray", action="store_true", help=ray_help)
    group.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="a running Ray cluster: host:port (`ray start --head` prints it), ray://host:port (Ray Client), "
        "auto (a running one) or local (a new one); checked before Ray is asked (something must answer "
        "there within seconds); default: Ray's own choice, a local cluster when one runs, else a new one",
    )
    return group


def refuse_ray_knobs(args: argparse.Namespace, knobs: tuple[str, ...]) -> None:
    """Without `--ray`, refuse `--ray-address` and the command's Ray `knobs` (option names, as `--replicas`)
    that were given: they would be ignored, and the user meant the run to go elsewhere."""
    if args.ray:
        return
    given = [knob for knob in ("--ray-address", *knobs) if vars(args)[knob[2:].replace("-", "_")] is not None]
    if given:
        verb, them = ("needs", "it") if len(given) == 1 else ("need", "them")
        raise ValueError(
            f"{', '.join(given)} {verb} --ray (without it the command runs here and ignores {them})"
        )


def check_listen_address(host: str, port: int) -> None:
    """Refuse, before any model loads, an address a server could not listen on: a host this machine does
    not resolve, or a port it cannot bind (taken, or reserved for root). Gradio would say "Cannot find
    empty port" only after trying for seconds; uvicorn would fail after the models loaded."""
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise ValueError(
            f"--host {host!r} is not an address or a name this machine resolves ({reason}); use e.g. 127.0.0.1 "
            "(this machine only) or 0.0.0.0 (every interface)"
        ) from None
    with socket.socket(family, kind, protocol) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
        try:
            probe.bind(address)
        except OSError as error:
            raise ValueError(
                f"cannot listen on --host {host} --port {port} ({error.strerror or error}); choose another "
                "--port, or a --host of this machine"
            ) from None
