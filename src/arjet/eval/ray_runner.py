"""`arjet eval --ray`: a run's images made by Ray actors, each with its own pipeline, into the same run folder.

The driver (`run_eval`) checks, locks and scores as in a one-process run; only step 3 changes: each
sampler's images not yet recorded are split between `workers` actors (contiguous shares, as Accelerate
splits them), and each actor generates its share exactly as a process of an `accelerate launch` run does
(`runner._Worker`: the image saved, then its record appended to the actor's own log,
`records/process-<rank>.jsonl`). Every image is seeded by its prompt and seed alone, and each actor pins
torch's CPU threads to the driver's count, so the images equal a one-process run's at that count.

An actor that dies (its process killed, its machine gone) is restarted once by Ray, which calls its share
again; the new actor skips the images recorded meanwhile, so each image is still made and recorded once. A
run that fails anyway (a second death: `WorkerLost`) leaves a run folder that the same command resumes.

Ray is an optional extra: this module imports it only when a pool is made (`ray_cluster.import_ray`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import samplers as sampler_registry
from .ray_cluster import Room, check_address, connect, import_ray
from .records import RecordLog, read_records, record_key
from .runner import Job, _load_pipeline, _Worker, sampler_dirs
from .settings import EvalSettings

WORKER_NAME = "arjet-eval-worker-{rank}"  # each actor's name in its job's namespace (to find it, kill it)


class WorkerLost(RuntimeError, ConnectionError):
    """A Ray worker died again after its one restart (an OSError too: the command line tells it in one line;
    the run folder keeps what was recorded, and the same command resumes it)."""


class EvalWorker:
    """One Ray worker of a run: the run's pipeline on `device`, torch pinned to `threads` CPU threads,
    appending to the record log of `rank`."""

    def __init__(
        self,
        settings: EvalSettings,
        prompts: Sequence[str],
        out: str,
        folders: dict[str, str],
        rank: int,
        threads: int,
        device: str,
    ):
        from ..pipelines.threads import PROCESS_THREADS

        PROCESS_THREADS.pin(threads)
        self.out = Path(out)
        pipe = _load_pipeline(settings, device)
        self.worker = _Worker(pipe, settings, prompts, self.out, folders, RecordLog(out, rank), show=False)

    def pid(self) -> int:
        return os.getpid()

    def run(self, spec: str, jobs: list[Job], batch_size: int, workers: int) -> int:
        """Generate the jobs of `spec` not recorded yet (a restarted worker's share was partly done); how many."""
        done = {record_key(record) for record in read_records(self.out)}
        todo = [job for job in jobs if job.key not in done]
        self.worker.run(spec, sampler_registry.get(spec), todo, batch_size, workers)
        return len(todo)


class RayPool:
    """`workers` Ray actors that generate a run's images (`run`; `run_eval(..., pool=)`), started in `__enter__` on the running Ray,
    the cluster at `address`, or Ray's default (a running local cluster, else a new one) and killed in `__exit__`.
    `address` is checked when the pool is made (`check_address`), the cluster's room for the workers once it
    is joined, before any actor starts (`Room.check`)."""

    def __init__(
        self,
        workers: int,
        settings: EvalSettings,
        prompts: Sequence[str],
        out: str | os.PathLike,
        *,
        threads: int,
        device: str,
        worker_cpus: float = 1.0,
        worker_gpus: float = 0.0,
        address: str | None = None,
    ):
        self.ray = import_ray()
        check_address(address)  # before the run's work; checked again when the pool connects
        self.workers, self.actors = workers, []
        self._arguments = (settings, list(prompts), str(out), sampler_dirs(settings.samplers))
        self._threads, self._device = threads, device
        self._resources = {"num_cpus": worker_cpus, "num_gpus": worker_gpus}
        self._room = Room(workers, worker_cpus, worker_gpus, "Ray worker", "--workers, --worker-gpus")
        self._address = address

    def __enter__(self) -> RayPool:
        ray = connect(self._address)
        self._room.check(ray)
        # a threaded actor (two calls at once) answers `pid` while it runs its share
        actor = ray.remote(max_restarts=1, max_task_retries=1, max_concurrency=2, **self._resources)(
            EvalWorker
        )
        self.actors = [
            actor.options(name=WORKER_NAME.format(rank=rank)).remote(
                *self._arguments, rank, self._threads, self._device
            )
            for rank in range(self.workers)
        ]
        return self

    def run(self, spec: str, jobs: list[Job], batch_size: int) -> None:
        """`jobs` (of sampler `spec`) split in contiguous shares between the workers, until all are done."""
        share, extra = divmod(len(jobs), self.workers)
        calls, start = [], 0
        for rank, actor in enumerate(self.actors):
            end = start + share + (rank < extra)
            if end > start:
                calls.append(actor.run.remote(spec, jobs[start:end], batch_size, self.workers))
            start = end
        try:
            self.ray.get(calls)
        except self.ray.exceptions.RayActorError as error:
            raise WorkerLost(
                f"a Ray worker died twice while generating {spec!r} ({type(error).__name__}); the images it "
                "recorded are kept: the same command resumes the run"
            ) from error

    def __exit__(self, *exc: Any) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []
