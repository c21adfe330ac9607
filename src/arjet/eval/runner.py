"""The evaluation runner: every (sampler, prompt, seed) image exactly once, resumable and sharded.

Steps of `run_eval`:
1. check everything that could fail late (sampler specs, sampling numbers, metric files, reference images)
   before any work;
2. join the processes (Accelerate's `PartialState`: one process, or one per rank under `accelerate launch`
   / `torchrun`) and check `OUT` (a new or empty folder, or a run with the same settings to resume; anything
   else is refused); load the pipeline and run its input checks on every sampler and prompt; only then is
   `OUT/config.json` written, so a failed start leaves nothing that blocks the corrected command;
3. per sampler (`ar` first, so the others' summary lines can give ratios), the images not yet recorded
   are split between the processes; each image is saved (atomically), then its record appended; after
   each sampler the processes meet and the main process prints a summary line;
4. the main process merges the records, scores every sampler (FID, CLIP score, speed) and writes
   `metrics.json`, `report.md` and the plots.

Prompt `i` with seed `s` is generated with `seed=s + i`, alone or in a batch (the pipeline gives each image
its own generator), so an image is the same in any batch, on any process, in a fresh or a resumed run:
exactly `pipe(prompts, seed=s).images[i]`.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from .. import checks
from .. import samplers as sampler_registry
from ..bench.speed import speed_summaries
from ..limits import EngineConfig
from .atomic import remove_temporaries, save_image
from .lock import run_folder_lock
from .records import RECORDS_DIR, RecordLog, read_records, record_key, sort_records, write_merged
from .scoring import MetricOptions, check_images, score_run
from .settings import EvalSettings, check_out_dir, write_config

IMAGES_DIR = "images"
COMMIT_MAPS = 8  # the records of the first prompts keep their commit-step map (the plot shows some)
RECORD_FIGURES = (
    "forward_passes",
    "tokens",
    "compression",
    "seconds",
    "mean_accepted",
)  # what the report averages


@dataclass(frozen=True)
class Job:
    sampler: str
    index: int
    seed: int

    @property
    def key(self) -> tuple[str, int, int]:
        return self.sampler, self.index, self.seed

    @property
    def generator_seed(self) -> int:
        return self.seed + self.index


def sampler_dirs(specs: Sequence[str]) -> dict[str, str]:
    """A folder name per sampler spec (`sjd:window=32` -> `sjd_window_32`); distinct specs, distinct names."""
    names = {spec: re.sub(r"[^A-Za-z0-9.+-]+", "_", spec) for spec in specs}
    if len(set(names.values())) != len(names):
        raise ValueError(
            f"sampler specs {list(specs)} collide as folder names {list(names.values())}; drop one"
        )
    return names


def run_order(specs: Sequence[str]) -> list[str]:
    """`ar` first (the baseline of every ratio), then the others as given."""
    return sorted(specs, key=lambda spec: spec != "ar")


def plan(settings: EvalSettings) -> list[Job]:
    return [
        Job(spec, index, seed)
        for spec in run_order(settings.samplers)
        for index in range(settings.n)
        for seed in settings.seeds
    ]


def run_eval(
    settings: EvalSettings,
    prompts: Sequence[str],
    out: str | os.PathLike,
    metrics: MetricOptions | None = None,
    *,
    batch_size: int = 1,
    device: str | None = None,
    progress: bool = True,
    command: str | None = None,
    grid_prompts: int = 4,
    pool: ImagePool | None = None,
) -> dict[str, Any] | None:
    """Generate and score a run in `out`; the metrics dict on the main process, None on the others.
    `pool`: workers elsewhere that make the images instead of this process (`ray_runner.RayPool`)."""
    # 1. check everything before any work
    metrics = metrics or MetricOptions()
    if len(prompts) != settings.n:
        raise ValueError(f"settings.n is {settings.n} but {len(prompts)} prompts were given")
    checks.integer("batch_size", batch_size, 1)
    instances = {spec: sampler_registry.get(spec) for spec in settings.samplers}
    folders = sampler_dirs(settings.samplers)
    for seed in settings.seeds:
        checks.seed("seed", seed, settings.n)  # prompt i uses seed + i
    metrics.check()
    out = Path(out)
    check_out_dir(out, settings)  # a file or a foreign folder fails here; checked again under the lock

    # 2. processes, the out dir (the main process locks it: one run at a time), the pipeline and its
    # checks; config.json only once all passed
    state = join_processes(device)
    with run_folder_lock(out) if state.is_main_process else contextlib.nullcontext(out):
        resuming = check_out_dir(out, settings)  # every process checks, so all fail alike
        own = record_check(settings, prompts, folders)  # a foreign record fails here, before the model loads
        recorded = read_records(out, own)  # read by all before any process writes one
        check_images(out, recorded)  # and their images, each decoded
        done = {record_key(r) for r in recorded}
        pipe = _load_pipeline(settings, device or state.device)
        check_calls(pipe, settings, prompts, instances, batch_size)
        wait_for_everyone(state)
        if state.is_main_process:
            if resuming:  # half-written files of a killed run; no process writes yet
                remove_temporaries(run_folders(out, folders.values()))
            else:
                write_config(out, settings)
        wait_for_everyone(state)
        log = RecordLog(out, state.process_index)

        # 3. generate, sampler by sampler
        jobs = plan(settings)
        worker = _Worker(pipe, settings, prompts, out, folders, log, show=progress and state.is_main_process)
        with pool if pool is not None else contextlib.nullcontext():
            for spec in run_order(settings.samplers):
                todo = [job for job in jobs if job.sampler == spec and job.key not in done]
                if pool is not None:
                    pool.run(spec, todo, batch_size)
                else:
                    with state.split_between_processes(todo) as mine:
                        worker.run(spec, instances[spec], mine, batch_size, state.num_processes)
                wait_for_everyone(state)
                if state.is_main_process:
                    print(summary_line(spec, settings.samplers, read_records(out, own)), flush=True)
        if not state.is_main_process:
            state.destroy_process_group()
            return None

        # 4. score and report on the main process
        from .report import write_report

        records = sort_records(read_records(out, own), settings.samplers)
        write_merged(out, records)
        results, info = score_run(records, settings.samplers, out, metrics, pipe.device)
        result = write_report(out, settings, records, results, info, pipe, command, grid_prompts)
        state.destroy_process_group()
        return result


class ImagePool(Protocol):
    """Workers that make a run's images into its folder, as this process would (started on `__enter__`,
    stopped on `__exit__`): `run` makes `jobs` of sampler `spec` and returns once all are recorded."""

    def __enter__(self) -> ImagePool: ...

    def __exit__(self, *exc: Any) -> None: ...

    def run(self, spec: str, jobs: list[Job], batch_size: int) -> None: ...


def check_calls(
    pipe, settings: EvalSettings, prompts: Sequence[str], samplers: dict, batch_size: int
) -> None:
    """Every pipeline check of the run's calls (each sampler against the grid, sizes, batch size, every
    prompt's length), without model work: a bad setting fails before the first image and config.json."""
    kwargs = settings.call_kwargs()
    first = list(prompts[:batch_size])
    for sampler in samplers.values():
        pipe.check_inputs(first, sampler=sampler, num_images_per_prompt=1, **kwargs)
    step = pipe.limits.max_images_per_call
    for start in range(0, len(prompts), step):
        pipe.check_inputs(list(prompts[start : start + step]), **kwargs)


def image_path(folder: str, index: int, seed: int) -> str:
    """Where a run saves the image of prompt `index` with seed `seed`, relative to the run folder."""
    return f"{IMAGES_DIR}/{folder}/{index}_{seed}.png"


def record_check(settings: EvalSettings, prompts: Sequence[str], folders: dict[str, str]):
    """A check (`read_records(out, check)`) that raises ValueError for a record this run would not write:
    a sampler, prompt index or seed outside the run, another prompt, an image other than the file the run
    saves for it, or figures that are not numbers."""
    seeds = set(settings.seeds)

    def check(record: dict[str, Any]) -> None:
        sampler, index, seed = record_key(record)
        if sampler not in folders:
            raise ValueError(f"sampler {sampler!r} is not one of the run's {settings.samplers}")
        if not checks.is_integer(index) or not 0 <= index < settings.n:
            raise ValueError(f"prompt index {index!r} is not one of the run's 0 to {settings.n - 1}")
        if not checks.is_integer(seed) or seed not in seeds:
            raise ValueError(f"seed {seed!r} is not one of the run's {settings.seeds}")
        expected = image_path(folders[sampler], index, seed)
        if record.get("image") != expected:
            raise ValueError(f"its image {record.get('image')!r} is not {expected!r}, the file the run saves")
        if record.get("prompt") != prompts[index]:
            raise ValueError(f"its prompt is not the run's prompt {index}")
        for name in RECORD_FIGURES:
            value = record.get(name)
            if not checks.is_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"its {name} {value!r} is not a number >= 0")

    return check


def run_folders(out: Path, sampler_folders: Iterable[str]) -> list[Path]:
    """The folders a run writes files into (where a killed run may have left its temporaries)."""
    from .report import PLOTS_DIR

    return [out, out / RECORDS_DIR, out / PLOTS_DIR, *(out / IMAGES_DIR / name for name in sampler_folders)]


def join_processes(device: str | None = None):
    """Accelerate's process state: this process alone, or its rank under `accelerate launch` / `torchrun`.
    Without an accelerator (or with `device="cpu"`) the processes meet over gloo on the CPU."""
    from accelerate import PartialState

    return PartialState(cpu=device == "cpu" or (device is None and not torch.cuda.is_available()))


def wait_for_everyone(state) -> None:
    """`state.wait_for_everyone()`, except that CPU processes on a machine with GPUs meet without naming a
    GPU: Accelerate's barrier passes `device_ids=[local rank]`, which fails where that GPU does not exist."""
    from accelerate.utils import DistributedType

    if state.distributed_type == DistributedType.MULTI_CPU and torch.cuda.is_available():
        torch.distributed.barrier()
    else:
        state.wait_for_everyone()


def _load_pipeline(settings: EvalSettings, device: torch.device | str):
    from ..builtin import load_model

    pipe = load_model(settings.model, device=device, dtype=settings.dtype, quantization=settings.quantization)
    pipe.set_progress_bar_config(disable=True)
    return pipe


class _Worker:
    """Generates jobs of one process and writes image + record per job."""

    def __init__(self, pipe, settings: EvalSettings, prompts, out: Path, folders, log: RecordLog, show: bool):
        self.pipe = pipe
        self.settings = settings
        self.call_kwargs = settings.call_kwargs()
        self.prompts = prompts
        self.out = out
        self.folders = folders
        self.log = log
        self.show = show

    def run(self, spec: str, sampler, jobs: list[Job], batch_size: int, processes: int) -> None:
        if not jobs:
            return
        from tqdm.auto import tqdm

        where = f" (this process's share of {processes})" if processes > 1 else ""
        with tqdm(total=len(jobs), desc=f"{spec}{where}", unit="image", disable=not self.show) as bar:
            if batch_size > 1 and sampler.continuous:
                self._generate_continuously(spec, sampler, jobs, batch_size, bar)
                return
            # warm-up (untimed): first-call costs must not land on the first image's seconds
            self.pipe(
                self.prompts[jobs[0].index], sampler=sampler, seed=0, output_type="latent", **self.call_kwargs
            )
            for start in range(0, len(jobs), batch_size):
                batch = jobs[start : start + batch_size]
                self._generate(spec, sampler, batch)
                bar.update(len(batch))

    def _generate_continuously(self, spec: str, sampler, jobs: list[Job], lanes: int, bar) -> None:
        """The jobs through an engine of `lanes` lanes, refilled as images finish. Each image is the one
        `pipe(prompt, seed=...)` makes alone; its record's `seconds` is the wall time since the image before
        it finished (so they add up to the run's time, and their mean is the time per image at this
        throughput), `latency_seconds` its own decode."""
        from concurrent.futures import FIRST_COMPLETED, wait

        from ..engine import Engine

        settings = self.settings
        config = EngineConfig(lanes=lanes, max_queue=len(jobs), compile=settings.compile)
        options = {"height": settings.height, "width": settings.width, "sampling": settings.sampling}
        with Engine(self.pipe, config) as engine:
            engine.submit(self.prompts[jobs[0].index], sampler=sampler, seed=0, **options).result()  # warm-up
            requests = {
                engine.submit(
                    self.prompts[job.index], sampler=sampler, seed=job.generator_seed, **options
                ).future: job
                for job in jobs
            }
            last = time.perf_counter()
            pending = set(requests)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    job, result = requests[future], future.result()
                    now = time.perf_counter()
                    seconds, last = now - last, now
                    image = self.pipe.images_from_codes(
                        result.codes[None].to(self.pipe._execution_device), "pil"
                    )[0]
                    relative = image_path(self.folders[spec], job.index, job.seed)
                    save_image(image, self.out / relative)
                    record = make_record(
                        job, self.prompts[job.index], relative, result.codes, result.stats, lanes
                    )
                    self.log.append({**record, "seconds": seconds, "latency_seconds": result.stats.seconds})
                    bar.update(1)

    def _generate(self, spec: str, sampler, batch: list[Job]) -> None:
        result = self.pipe(
            [self.prompts[job.index] for job in batch],
            sampler=sampler,
            seed=[job.generator_seed for job in batch],
            **self.call_kwargs,
        )
        for job, image, codes, stat in zip(batch, result.images, result.codes, result.stats, strict=True):
            relative = image_path(self.folders[spec], job.index, job.seed)
            save_image(image, self.out / relative)
            self.log.append(make_record(job, self.prompts[job.index], relative, codes, stat, len(batch)))


def make_record(job: Job, prompt: str, image: str, codes: torch.Tensor, stat, batch: int) -> dict[str, Any]:
    """The JSON line of one finished image (a few hundred bytes, whatever the grid)."""
    record = {
        "sampler": job.sampler,
        "index": job.index,
        "seed": job.seed,
        "generator_seed": job.generator_seed,
        "prompt": prompt,
        "image": image,
        "forward_passes": stat.forward_passes,
        "tokens": stat.tokens,
        "compression": stat.compression,
        "seconds": stat.seconds / batch,
        "batch_size": batch,
        "mean_accepted": statistics.fmean(stat.accepted_per_step) if stat.accepted_per_step else 0.0,
        "accepted_histogram": dict(sorted(Counter(stat.accepted_per_step).items())),  # tokens -> steps
        "codes_sha1": hashlib.sha1(codes.cpu().numpy().tobytes()).hexdigest(),
        "drafter_forwards": stat.extra.get("drafter_forwards", 0),  # a drafter's own forward passes
    }
    if job.index < COMMIT_MAPS:
        record["commit_step"] = stat.commit_step.tolist()
    return record


def summary_line(spec: str, samplers: Sequence[str], records: Sequence[dict[str, Any]]) -> str:
    summary = next(s for s in speed_summaries(samplers, records) if s.sampler == spec)
    ratios = ""
    if summary.step_compression is not None and spec != "ar":
        ratios = f" ({summary.step_compression:.2f}x fewer than ar)"
    speed = (
        f" (latency speedup {summary.latency_speedup:.2f}x)"
        if summary.latency_speedup is not None and spec != "ar"
        else ""
    )
    return (
        f"{spec}: {summary.images} images, {summary.forward_passes:.1f} forward passes{ratios}, "
        f"{summary.seconds:.3f} s/image{speed}, {summary.accepted_per_step:.2f} accepted/step"
    )
