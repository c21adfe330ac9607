"""Many images at once: images per second, request latency and lane utilisation through the engine, at
several levels of concurrency, for several samplers, in one run.

`concurrency` clients each keep one request in flight (a closed loop: the next is submitted when the last
one's image is back), over an engine with as many lanes as clients, until `n` images are done; every
sampler and concurrency gets a fresh engine, warmed up with one request per lane first (untimed: it also
measures the adaptive mode's cost model). Image `i` of every measurement is prompt `i` with seed
`seed + i`, so every sampler decodes the same requests.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .. import checks, machine
from ..engine import ADAPTIVE, Engine
from ..limits import EngineConfig
from ..reports.tables import markdown_table, number, ratio, significant
from .speed import load_warning

HEADER = (
    "sampler",
    "concurrency",
    "images / s",
    "vs ar",
    "p50 latency (s)",
    "p95 latency (s)",
    "lane utilisation",
    "forward passes / image",
)


@dataclass
class ThroughputRow:
    sampler: str
    concurrency: int
    images: int
    seconds: float
    images_per_second: float
    latency_p50: float
    latency_p95: float
    utilisation: float
    forward_passes: float
    windows: dict[int, int] = field(default_factory=dict)  # adaptive: steps by window
    vs_ar: float | None = None
    steps: dict[str, Any] = field(
        default_factory=dict
    )  # the engine's mode and graphs (`Engine.graph_counts`)


@dataclass
class ThroughputResult:
    rows: list[ThroughputRow]
    environment: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # why the seconds may not be trustworthy

    def to_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "rows": [asdict(row) for row in self.rows],
            "warnings": self.warnings,
        }

    def table(self) -> str:
        rows = [
            (
                row.sampler,
                str(row.concurrency),
                significant(row.images_per_second),
                ratio(row.vs_ar),
                number(row.latency_p50, 3),
                number(row.latency_p95, 3),
                f"{row.utilisation:.0%}",
                number(row.forward_passes, 1),
            )
            for row in self.rows
        ]
        return markdown_table(HEADER, rows, numeric=[False, *[True] * (len(HEADER) - 1)])


def run_throughput(
    pipe,
    samplers: Sequence[str],
    prompts: Sequence[str],
    concurrencies: Sequence[int],
    *,
    seed: int = 0,
    compile: bool | str = "auto",
    progress: bool = True,
    **call_kwargs: Any,
) -> ThroughputResult:
    """Every sampler (a spec, or `"adaptive"`) at every concurrency over `prompts` (see the module
    docstring); `call_kwargs` (size, guidance, temperature, top-k, top-p) go to every request."""
    if not prompts:
        raise ValueError("the throughput bench needs at least one prompt")
    for value in concurrencies:
        checks.integer("concurrency", value, 1)
    for spec in samplers:  # every spec checked before the first engine starts
        pipe.check_inputs(prompts[0], sampler="ar" if spec == ADAPTIVE else spec, **call_kwargs)
    pipe.set_progress_bar_config(disable=True)
    rows = []
    load_reading, began = machine.cpu_seconds(), time.perf_counter()
    for concurrency in concurrencies:
        for spec in samplers:
            rows.append(_measure(pipe, spec, prompts, concurrency, seed, compile, call_kwargs))
            if progress:
                row = rows[-1]
                print(
                    f"  {spec} at concurrency {concurrency}: {row.images_per_second:.3g} images/s", flush=True
                )
    for row in rows:
        base = next((r for r in rows if r.sampler == "ar" and r.concurrency == row.concurrency), None)
        row.vs_ar = None if base is None else row.images_per_second / base.images_per_second
    info = {
        "device": str(pipe._execution_device),
        "dtype": str(pipe.dtype),
        "torch_threads": torch.get_num_threads(),
        "usable_cores": machine.usable_cores(),
        "others_busy_cores": machine.others_busy(load_reading, time.perf_counter() - began),
        "call": dict(call_kwargs),
    }
    busy = load_warning(info)
    return ThroughputResult(rows, info, [busy] if busy else [])


def _measure(pipe, spec, prompts, concurrency, seed, compile, call_kwargs) -> ThroughputRow:
    config = EngineConfig(lanes=concurrency, max_queue=concurrency, compile=compile)
    with Engine(pipe, config) as engine:
        engine.generate(prompts[:1] * concurrency, seed=seed, sampler=spec, **call_kwargs)  # warm-up
        before = engine.stats.snapshot()
        latencies: list[float] = []
        passes: list[int] = []
        next_index = iter(range(len(prompts)))
        lock = threading.Lock()
        errors: list[BaseException] = []

        def client() -> None:
            while True:
                with lock:
                    index = next(next_index, None)
                if index is None:
                    return
                submitted = time.perf_counter()
                try:
                    result = engine.submit(
                        prompts[index], sampler=spec, seed=seed + index, **call_kwargs
                    ).result()
                except BaseException as error:  # noqa: BLE001 (re-raised below, in the caller's thread)
                    errors.append(error)
                    return
                with lock:
                    latencies.append(time.perf_counter() - submitted)
                    passes.append(result.stats.forward_passes)

        clients = [threading.Thread(target=client) for _ in range(concurrency)]
        start = time.perf_counter()
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        seconds = time.perf_counter() - start
        if errors:
            raise errors[0]
        used = engine.stats.since(before)
        steps = engine.graph_counts()
    return ThroughputRow(
        sampler=spec,
        concurrency=concurrency,
        images=len(latencies),
        seconds=seconds,
        images_per_second=len(latencies) / seconds,
        latency_p50=statistics.median(latencies),
        latency_p95=_percentile(latencies, 0.95),
        utilisation=used.utilisation,
        forward_passes=statistics.fmean(passes),
        windows=dict(sorted(used.windows.items())),
        steps=steps,
    )


def _percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile of `values`, by linear interpolation between the nearest ranks."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
