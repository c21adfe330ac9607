"""What this machine has to give: free memory on a device, the memory a model would take (counted from its
config on the meta device, before anything is allocated) and a token of its KV cache, the CPU cores this
process may use, how many of them other processes keep busy and so how many threads torch should use
(`ThreadChooser`, one decision for the command line and the pipelines' calls); and helper processes that end
with the process that started them.

Plain measurements: nothing here reads an environment variable or changes a setting; the command line and
the pipelines set threads from these figures, and the loaders refuse a model that cannot fit.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


def available_bytes(device: Any) -> int | None:
    """Free memory on `device` (CUDA: free device memory; CPU: Linux's MemAvailable), None when unknown."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        try:
            with open("/proc/meminfo") as handle:
                fields = dict(line.split(":", 1) for line in handle)
            return int(fields["MemAvailable"].split()[0]) * 1024
        except (OSError, KeyError, ValueError):
            return None
    return None


def module_bytes(module: Any, dtype: Any = None) -> int:
    """Bytes of `module`'s parameters and buffers (each shared tensor once), floating ones in `dtype` (default:
    their own dtype). Works on a module built on the meta device."""
    import torch

    tensors = {id(t): t for t in [*module.parameters(), *module.buffers()]}.values()
    size = None if dtype is None else torch.empty((), dtype=dtype).element_size()
    return sum(t.numel() * (size if size and t.is_floating_point() else t.element_size()) for t in tensors)


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Inside this block, parameters registered on any module are moved to the meta device (no memory, no
    init work) while buffers (rotary frequencies, position ids: small, computed from the config) are built
    for real."""
    from torch import nn

    register = nn.Module.register_parameter

    def register_on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and param.device.type != "meta":
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = register_on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def release_freed_memory() -> None:
    """Hand the memory this process has freed back to the system (glibc's `malloc_trim`; nothing elsewhere).
    A loader that frees a large float tensor per layer would otherwise keep the freed blocks in its heap:
    glibc raises its mmap threshold as such blocks are freed, so later ones come from the heap and stay."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.malloc_trim(0)


def text_config(config: Any) -> Any:
    """The decoder's part of a transformers model config: its `text_config` where it has one (Janus, Emu3,
    GLM-Image), else the config itself (Chameleon, Llama)."""
    return getattr(config, "text_config", None) or config


def kv_bytes_per_token(config: Any, dtype: Any) -> int | None:
    """Bytes one token adds to one row of a KV cache in `dtype` for the transformers model `config`
    describes: layers x (K, V) x KV heads x head width x element size. None where the config does not give
    the layers, heads and width."""
    text = text_config(config)
    layers, heads, hidden = (
        getattr(text, name, None) for name in ("num_hidden_layers", "num_attention_heads", "hidden_size")
    )
    if not (layers and heads and hidden):
        return None
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    return layers * 2 * kv_heads * head_dim * dtype.itemsize


def check_fits_in_memory(
    what: str,
    build: Callable[[], Any],
    dtype: Any = None,
    device: Any = "cpu",
    *,
    copies: int = 1,
    saved: Callable[[Any], int] | None = None,
) -> None:
    """Refuse, before anything is allocated, a model that `build()` would make too large for `device`:
    `build` runs on the meta device (sizes only), and a ValueError names `what`, the bytes it would take
    (`copies` times its weights: training keeps gradients and optimizer moments too) and the memory free. A
    `build` that fails there is a config that describes no model (ValueError too). `saved(module)`: bytes
    the weights take less than `module_bytes` counts (quantized layers)."""
    import torch

    try:
        with torch.device("meta"):
            module = build()
    except (ValueError, TypeError, RuntimeError, KeyError, AttributeError, ZeroDivisionError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{what} does not describe a model that can be built ({reason})") from None
    needed = copies * module_bytes(module, dtype) - (0 if saved is None else saved(module))
    free = available_bytes(device)
    if free is not None and needed > free:
        count = sum(t.numel() for t in module.parameters())
        raise ValueError(
            f"{what} describes a model of {count:,} parameters that would take {needed / 1e9:.3g} GB"
            f"{' to train' if copies > 1 else ''}, more than "
            f"the {free / 1e9:.3g} GB of memory free on {torch.device(device).type}; check its sizes"
        )


def bfloat16_is_fast(device: Any) -> bool:
    """Whether `device` runs bfloat16 kernels natively, so that bfloat16 autocast speeds work up: a CUDA device
    with bfloat16 support, or a CPU whose torch kernels use AVX-512 (with AVX2 or less, torch emulates
    bfloat16 and is slower than in float32; some of its bfloat16 CPU kernels also fail there, e.g. the
    attention's `pack_vnni2` under `ATEN_CPU_CAPABILITY=avx2` on an AVX-512 machine)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and torch.backends.cpu.get_cpu_capability() == "AVX512"


# -- CPU cores ------------------------------------------------------------------------------------------
def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_seconds() -> tuple[float, float] | None:
    """(busy seconds of every core together, busy seconds of this process and its threads) since boot, or
    None where `/proc/stat` is not there (not Linux)."""
    try:
        with open("/proc/stat") as handle:
            fields = [int(value) for value in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + waiting for I/O
    own = os.times()
    return (sum(fields[:8]) - idle) / ticks, own.user + own.system


def others_busy(since: tuple[float, float] | None, seconds: float) -> float | None:
    """Cores kept busy by other processes, on average over the `seconds` since `cpu_seconds()` gave
    `since` (None when either reading is missing)."""
    return _busy_between(since, cpu_seconds(), seconds)


def _busy_between(
    start: tuple[float, float] | None, end: tuple[float, float] | None, seconds: float
) -> float | None:
    if start is None or end is None or seconds <= 0:
        return None
    return max(0.0, (end[0] - start[0]) - (end[1] - start[1])) / seconds


def busy_cores(interval: float = 0.2) -> float | None:
    """Cores kept busy by other processes right now: sampled over `interval` seconds while this process
    sleeps. None where it cannot be measured."""
    start, began = cpu_seconds(), time.perf_counter()
    time.sleep(interval)
    return others_busy(start, time.perf_counter() - began)


# -- CPU threads ------------------------------------------------------------------------------------------
MIN_SPAN = 0.2  # seconds: a shorter span measures too little (the kernel counts CPU time in 10 ms ticks)
FREE_SHARE = 0.75  # of a core left free by other processes, for it to count: their load comes and goes


@dataclass(frozen=True)
class LoadReading:
    """`cpu_seconds()` (None off Linux) and when it was read (`time.perf_counter()`)."""

    cpu: tuple[float, float] | None
    at: float


def load_reading() -> LoadReading:
    return LoadReading(cpu_seconds(), time.perf_counter())


def free_threads(cores: int, busy: float | None) -> int:
    """The threads for torch on `cores` usable cores while other processes keep `busy` cores busy: one per
    core they leave free (a core counts when at least `FREE_SHARE` of it is free), at least one; every core
    when the load is unknown (`busy` None).

    Why not torch's default (one thread per core): with two cores and another process busy on one, every
    parallel region waits for the thread that shares its core; the built-in model took 18 to 63 s per image
    instead of 1.6 s."""
    if busy is None:
        return cores
    return max(1, min(cores, int(cores - busy + 1 - FREE_SHARE)))


def threads_between(start: LoadReading, end: LoadReading, cores: int) -> int:
    """`free_threads` for the load other processes put on the machine between two readings."""
    return free_threads(cores, _busy_between(start.cpu, end.cpu, end.at - start.at))


class ThreadChooser:
    """The CPU threads for the next piece of work (a command, a pipeline call), from the load other processes
    put on the machine since the previous choice (or since this chooser was made: arjet's import), so that
    choosing adds no wait: only where that span is shorter than `MIN_SPAN` is it waited out, and only for a
    first choice; later ones keep the previous choice until the span is long enough to measure.

    `read` and `sleep` are the clock (tests pass their own); `restart` begins a new span (a command's
    start)."""

    def __init__(
        self, read: Callable[[], LoadReading] = load_reading, sleep: Callable[[float], None] = time.sleep
    ):
        self.read, self.sleep = read, sleep
        self.since = read()
        self.last: int | None = None

    def restart(self) -> None:
        self.since = self.read()

    def choose(self) -> int:
        now = self.read()
        if now.at - self.since.at < MIN_SPAN:
            if self.last is not None:
                return self.last
            self.sleep(MIN_SPAN - (now.at - self.since.at))
            now = self.read()
        self.last = threads_between(self.since, now, usable_cores())
        self.since = now
        return self.last


# one chooser for the process: the command line and pipeline calls measure the same spans
THREADS = ThreadChooser()


# -- helper processes -----------------------------------------------------------------------------------
PARENT_CHECK_SECONDS = 0.5


def end_with_parent(worker_id: int | None = None) -> None:
    """Make this process (a data-loader worker, a spawned child) exit as soon as the process that started it
    is gone, killed or not. torch's data-loader workers notice a dead parent only between batches, and then
    wait forever to hand their last batch to a pipe nobody reads (`arjet train clip`'s lived on for 36
    minutes, ~700 MB each). Usable as a DataLoader's `worker_init_fn` (`worker_id` is not needed)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(1)  # nothing of a worker's is worth keeping once nobody reads it

    threading.Thread(target=watch, name="arjet-end-with-parent", daemon=True).start()
