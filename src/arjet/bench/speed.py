"""The speed figures `arjet bench` and `arjet eval` share: per-sampler means of what each image cost, the
ratios against `ar`, and the environment they were measured in.

Step compression (mean forward passes of `ar` / of the sampler, same prompts and seeds) is hardware-free;
latency speedup (mean seconds per image of `ar` / of the sampler) holds only for samplers timed in the
same run. A record may come from a call that decoded several images at once (`call_images` > 1): its
`seconds` is then the call's time shared out per image, and its `call_seconds` / `call_forward_passes` are
the whole call's (the batch runs until its slowest image is done), which is what a forward costs.
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .. import machine

# a sampler's slowest call over its fastest, in time per forward, beyond which its seconds are noise
SPREAD_LIMIT = 1.5
# a share of a core: what other processes may keep busy of the cores the run's threads use (a little noise
# of the system's own is always there), and what the others must leave free besides those cores
LOAD_SLACK = 0.25


@dataclass
class SamplerSummary:
    sampler: str
    images: int
    forward_passes: float
    tokens: float
    seconds: float
    accepted_per_step: float
    peak_memory_mb: float | None
    step_compression: float | None = None
    latency_speedup: float | None = None
    ms_per_forward: float | None = None  # a call's seconds / its forward passes (the batch's, not an image's)
    images_per_second: float | None = None  # images / seconds of every call that made them
    floor_ms: float | None = None  # bandwidth floor of one forward (mean over this sampler's images)
    floor_ratio: float | None = None  # ms_per_forward / floor_ms
    drafter_forwards: float = 0.0  # a drafter's forward passes per image (each of one input per CFG row)


def summarise(
    specs: list[str], records: list[dict[str, Any]], peaks: dict[str, float | None]
) -> list[SamplerSummary]:
    """Per-sampler means of `records` (forward passes, tokens, seconds, accepted per step) and the ratios
    against `ar` when it is among them."""
    summaries = []
    for spec in specs:
        rows = [r for r in records if r["sampler"] == spec]
        summaries.append(
            SamplerSummary(
                sampler=spec,
                images=len(rows),
                forward_passes=statistics.fmean(r["forward_passes"] for r in rows),
                tokens=statistics.fmean(r["tokens"] for r in rows),
                seconds=statistics.fmean(r["seconds"] for r in rows),
                accepted_per_step=statistics.fmean(r["mean_accepted"] for r in rows),
                peak_memory_mb=peaks[spec],
                drafter_forwards=statistics.fmean(r.get("drafter_forwards", 0) for r in rows),
            )
        )
    for s in summaries:
        rows = [r for r in records if r["sampler"] == s.sampler]
        floor = [r["floor_ms"] for r in rows if r.get("floor_ms") is not None]
        calls = _calls(rows)
        s.ms_per_forward = sum(seconds for seconds, _ in calls) / sum(passes for _, passes in calls) * 1e3
        s.images_per_second = len(rows) / sum(seconds for seconds, _ in calls)
        if floor:
            s.floor_ms = statistics.fmean(floor)
            s.floor_ratio = s.ms_per_forward / s.floor_ms
    baseline = next((s for s in summaries if s.sampler == "ar"), None)
    if baseline is not None:
        for s in summaries:
            s.step_compression = baseline.forward_passes / s.forward_passes
            s.latency_speedup = baseline.seconds / s.seconds
    return summaries


def _calls(rows: list[dict[str, Any]]) -> list[tuple[float, int]]:
    """(seconds, forward passes) of each call behind `rows`: an image's own when it was decoded alone, else
    the call's (counted once, however many of its images are among `rows`)."""
    calls: dict[Any, tuple[float, int]] = {}
    for i, r in enumerate(rows):
        if r.get("call_images", 1) == 1:
            calls[i] = (r["seconds"], r["forward_passes"])
        else:
            calls[("call", r["call"])] = (r["call_seconds"], r["call_forward_passes"])
    return list(calls.values())


def environment(pipe, call_kwargs: dict[str, Any]) -> dict[str, Any]:
    device = pipe._execution_device
    info = {
        "pipeline": type(pipe).__name__,
        "device": str(device),
        "dtype": str(pipe.dtype),
        "quantization": None if pipe.quantization is None else pipe.quantization.scheme,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cores": machine.usable_cores(),
        "torch_threads": torch.get_num_threads(),
        "call": {k: v for k, v in call_kwargs.items() if v is not None},
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def speed_summaries(samplers: Sequence[str], records: Sequence[dict[str, Any]]) -> list[SamplerSummary]:
    """Per sampler with records (`forward_passes`, `tokens`, `seconds`, `mean_accepted` each): the means
    and the ratios against `ar` (None without it); no memory figures."""
    present = [spec for spec in samplers if any(r["sampler"] == spec for r in records)]
    return summarise(present, list(records), {spec: None for spec in present})


def timing_warnings(records: Sequence[dict[str, Any]], environment: dict[str, Any]) -> list[str]:
    """Why the seconds of a run may not be trustworthy: a sampler whose time per forward differs between
    its calls by more than `SPREAD_LIMIT`, and other processes keeping busy the cores the run's threads
    needed (`others_busy_cores` in `environment`, measured during the run). Empty when neither happened."""
    found = []
    for sampler in dict.fromkeys(r["sampler"] for r in records):
        per_forward = [s / p * 1e3 for s, p in _calls([r for r in records if r["sampler"] == sampler]) if p]
        if (
            len(per_forward) > 1
            and min(per_forward) > 0
            and max(per_forward) / min(per_forward) > SPREAD_LIMIT
        ):
            found.append(
                f"{sampler}: a forward took from {min(per_forward):.3g} to {max(per_forward):.3g} ms between its "
                f"calls ({max(per_forward) / min(per_forward):.1f}x apart), so its seconds are not trustworthy"
            )
    busy = load_warning(environment)
    return found + ([busy] if busy else [])


def load_warning(environment: dict[str, Any]) -> str | None:
    """A warning when other processes kept busy the cores a CPU run needed, from `environment`'s
    `others_busy_cores` (measured during the run: `machine.others_busy`), `usable_cores` and `torch_threads`;
    None on a GPU, when not measured, or when the others left the run's cores free.

    The run needed its threads' cores and a little room besides (the interpreter, the system): other
    processes busy on more than `cores - threads - LOAD_SLACK` cores took some of it. With two cores and
    one thread, others busy on one core is enough: the scheduler keeps the run's thread on the other, so
    their share never grows past the core left to them (a rule waiting for that missed a load average of
    4.2), yet the run's other threads wait for a core and the two share caches and memory bandwidth."""
    busy, threads = environment.get("others_busy_cores"), environment.get("torch_threads")
    cores = environment.get("usable_cores")
    on_cpu = str(environment.get("device", "")).partition(":")[0] == "cpu"
    if not on_cpu or None in (busy, threads, cores):
        return None
    if busy <= LOAD_SLACK or busy + min(threads, cores) <= cores - LOAD_SLACK:
        return None
    return (
        f"other processes kept {busy:.1f} of the {cores} cores busy while this ran on {threads} "
        "thread(s): the seconds and latency speedups measure the machine's load as much as the "
        "samplers; rerun when the machine is quiet"
    )
