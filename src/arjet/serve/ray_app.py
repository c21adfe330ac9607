"""`arjet serve --ray`: the OpenAI images API as Ray Serve deployments, past one device and one machine.

An ingress deployment answers HTTP with the routes, checks and errors of `openai_api.py` (`api_app`); per
served model an engine deployment, each replica holding today's `Engine` (its own lanes, bounded queue and
admission), takes a checked request and answers its images. Serve places the replicas (`num_cpus` /
`num_gpus` each), routes to the less busy of two, replaces a replica that dies or fails its health check,
and scales between `min_replicas` and `max_replicas` on the requests in flight per replica.

Bounds: a replica takes at most `lanes + max_queue` requests at once, and its engine refuses what its queue
cannot hold (429 with `Retry-After` from its estimate); when every replica is at its bound, Serve's router
holds at most `max_queue` more and refuses the rest (429, `Retry-After: 1`). A request whose replica died
before answering is sent once more (Serve routes it to a live replica): it is answered once, never lost.

A model with a later stage (GLM-Image's DiT) runs as two deployments: the engine replicas decode the AR
stage's codes, batched in their lanes, and painter replicas, which load the pipeline without its AR model,
run the DiT on one image at a time; the ingress hands each image's codes on as they come, so the AR stage of
the next requests runs while the DiT paints earlier ones. Each image's stats say when (`ar_span`,
`paint_span`: wall-clock seconds of the replicas' machines).

Ray is an optional extra: this module imports it only in the functions that build and run the app.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fastapi.responses import JSONResponse

from ..engine import Engine
from ..eval.ray_cluster import RayMissing, Room, connect, import_ray
from ..limits import EngineConfig
from .openai_api import (
    ApiError,
    Disconnected,
    Images,
    ImagesRequest,
    ModelLimits,
    api_app,
    decoded,
    generate_images,
    image_stats,
    model_fault,
    png_base64,
)

logger = logging.getLogger(__name__)
APP_NAME = "arjet"
LATER_STAGE_CLASSES = {"GlmImagePipeline", "glm_image"}  # checkpoints whose images come from a DiT


def import_serve():
    """`ray.serve`, or `RayMissing` naming the extra that installs it."""
    import_ray()
    try:
        from ray import serve
    except ImportError as error:  # Ray without its Serve part
        raise RayMissing(
            f"Ray Serve is missing ({error}); --ray needs it: pip install 'arjet[ray]'"
        ) from None
    return serve


@dataclass(frozen=True)
class Replicas:
    """How many replicas a deployment runs and what each holds: `count` fixed, or Serve's autoscaling
    between `minimum` and `maximum` (both given) on the requests in flight per replica."""

    count: int = 1
    minimum: int | None = None
    maximum: int | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0

    def __post_init__(self) -> None:
        if (self.minimum is None) != (self.maximum is None):
            raise ValueError("autoscaling needs both --min-replicas and --max-replicas")
        if self.minimum is not None and not 0 < self.minimum <= self.maximum:
            raise ValueError(
                f"--min-replicas {self.minimum} and --max-replicas {self.maximum} must satisfy 1 <= min <= max"
            )
        if self.count < 1:
            raise ValueError(f"--replicas must be at least 1, got {self.count}")

    @property
    def autoscaling(self) -> bool:
        return self.minimum is not None

    @property
    def target(self) -> int:
        """The replicas the deployment should have at least."""
        return self.minimum if self.autoscaling else self.count

    @property
    def most(self) -> int:
        """The replicas the deployment may have at most."""
        return self.maximum if self.autoscaling else self.count

    def options(self, in_flight: int) -> dict[str, Any]:
        """Serve's deployment options: the replica count (or autoscaling aiming at `in_flight` requests per
        replica) and each replica's resources."""
        actor = {"ray_actor_options": {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}}
        if not self.autoscaling:
            return {"num_replicas": self.count, **actor}
        scaling = {
            "min_replicas": self.minimum,
            "max_replicas": self.maximum,
            "target_ongoing_requests": in_flight,
        }
        return {"autoscaling_config": scaling, **actor}


@dataclass(frozen=True)
class ServedModel:
    """One model of the app: its `--model` source, and whether its images come from a later stage (a DiT),
    painted by their own replicas."""

    source: str
    later_stage: bool = False
    quantization: str | None = None  # `--quantize`: the scheme its replicas' weights load in (None: as saved)


def later_stage(source: str) -> bool:
    """Whether the checkpoint `source` (a built-in name or a folder) renders its images through a later
    stage (GLM-Image's DiT), read from its config files; a hub id or a built-in model: no."""
    from ..builtin import resolve_model
    from ..pipelines.loading import checkpoint_kind

    folder = Path(resolve_model(source)).expanduser()
    return folder.is_dir() and checkpoint_kind(folder)[1] in LATER_STAGE_CLASSES


def load_replica_pipeline(
    model: ServedModel, device: str | None, threads: int | None, *, stage: str = "both"
):
    """`model` on `device` (a replica that Ray gave a GPU sees it as `cuda`), quantized as it says, torch's
    CPU threads pinned to `threads` (so that images equal a one-process run's at that count). `stage`: "ar"
    leaves out the components only the later stage uses, "paint" leaves out the AR model (each passed as
    None, diffusers' way to leave a component out: its weights are never read), "both" loads them all."""
    import torch

    from ..builtin import load_model, resolve_model
    from ..pipelines.auto import ARPipeline
    from ..pipelines.loading import resolve_checkpoint
    from ..pipelines.threads import PROCESS_THREADS

    if threads is not None:
        PROCESS_THREADS.pin(threads)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    left_out: tuple[str, ...] = ()
    if stage != "both":
        family = ARPipeline.pipeline_class(resolve_checkpoint(resolve_model(model.source)))
        left_out = family.later_stage_components if stage == "ar" else (family.ar_component,)
    pipe = load_model(model.source, device=device, quantization=model.quantization, **dict.fromkeys(left_out))
    pipe.set_progress_bar_config(disable=True)
    return pipe


async def _connected() -> bool:
    return False  # a replica never sees the client; the ingress cancels its call when the client goes


@dataclass(frozen=True)
class Decoded:
    """An image's codes from the AR stage, on their way to a painter, and what decoded them (`ar_span`
    among them)."""

    codes: Any  # [H, W] torch tensor on the CPU
    stats: dict[str, Any]


@dataclass(frozen=True)
class Painted:
    """An image painted from its codes (a base64 PNG) and when: `span`, wall-clock seconds from its start to
    its end."""

    b64_json: str
    span: list[float]


def ar_span(taken: float, result: Any) -> list[float]:
    """When an engine decoded `result` (an `EngineResult`), in wall-clock seconds: `taken`, the wall clock
    when the replica took its request, plus its time queued for a lane, then its decode's seconds."""
    start = taken + result.queued
    return [start, start + result.stats.seconds]


def component_classes(pipe) -> dict[str, str | None]:
    """Each of `pipe`'s components' class name (None: left out when it loaded)."""
    return {name: None if c is None else type(c).__name__ for name, c in pipe.components.items()}


class EngineReplica:
    """One engine replica: today's `Engine` over one model, started and warmed up before it takes work. A
    model with a later stage loads without that stage's components (GLM-Image: no DiT, VAE or glyph
    encoder), so the later stage's weights take no room on its device."""

    def __init__(self, model: ServedModel, config: EngineConfig, device: str | None, threads: int | None):
        pipe = load_replica_pipeline(model, device, threads, stage="ar" if model.later_stage else "both")
        self.engine = Engine(pipe, config).start()
        self.engine.warm_up()

    def limits(self) -> ModelLimits:
        return ModelLimits.of(self.engine)

    def components(self) -> dict[str, str | None]:
        """What this replica holds: each component's class name (None: left out)."""
        return component_classes(self.engine.pipe)

    def pid(self) -> int:
        """This replica's process id (to watch it, or to kill it in a test of a replica's death)."""
        return os.getpid()

    async def images(self, parsed: ImagesRequest) -> Images | ApiError:
        """`parsed`'s images, or the API's error as a value (it crosses to the ingress as it is)."""
        try:
            return await generate_images(self.engine, parsed, _connected)
        except ApiError as error:
            return error

    async def codes(self, parsed: ImagesRequest) -> list[Decoded] | ApiError:
        """`parsed`'s AR stage only: each image's codes, for a painter."""
        taken = time.time()
        try:
            results = await decoded(self.engine, parsed, _connected, output_type="latent")  # a painter paints
        except ApiError as error:
            return error
        return [
            Decoded(r.codes.cpu(), {**image_stats(parsed.seed + i, r), "ar_span": ar_span(taken, r)})
            for i, r in enumerate(results)
        ]

    def check_health(self) -> None:
        """Serve's health check: a replica whose engine stopped is replaced."""
        if self.engine.state != "running":
            raise RuntimeError(f"the engine is {self.engine.state}: {self.engine.error!r}")

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()


class Painter:
    """One replica of a model's later stage (GLM-Image's DiT): codes to an image, one image at a time. It
    loads the pipeline without its AR model (GLM-Image: the DiT, the VAE, the glyph encoder and their
    tokenizer, processor and scheduler), so the AR model's weights take no room on its device."""

    def __init__(self, model: ServedModel, device: str | None, threads: int | None):
        self.pipe = load_replica_pipeline(model, device, threads, stage="paint")

    def pid(self) -> int:
        return os.getpid()

    def components(self) -> dict[str, str | None]:
        """What this replica holds: each component's class name (None: left out)."""
        return component_classes(self.pipe)

    async def paint(self, parsed: ImagesRequest, index: int, codes: Any) -> Painted | ApiError:
        """Image `index` of `parsed` from its codes, as a base64 PNG, and when it was painted."""
        try:
            return await asyncio.to_thread(self._paint, parsed, index, codes)
        except Exception as error:  # the model's fault: the request was checked and decoded already
            logger.error("painting an image failed", exc_info=error)
            return model_fault("the image could not be painted from its codes", error, None)

    def _paint(self, parsed: ImagesRequest, index: int, codes: Any) -> Painted:
        start = time.time()
        image = self.pipe.paint(codes[None], parsed.prompt, seed=parsed.seed + index)[0]
        return Painted(png_base64(image), [start, time.time()])


def replica_died_errors() -> tuple[type[BaseException], ...]:
    """The errors of a call whose replica died (or became unreachable) before it answered."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
    from ray.serve.exceptions import ReplicaUnavailableError

    return RayActorError, ActorDiedError, ActorUnavailableError, ReplicaUnavailableError


async def answered_once(call: Callable[[], Awaitable[Any]], what: str) -> Any:
    """`call()`'s answer; sent once more when its replica died before answering (Serve routes the second
    call to a live replica); 429 when every replica and the router's queue are full; an `ApiError` answered
    as a value is raised."""
    from ray.serve.exceptions import BackPressureError

    died = replica_died_errors()
    try:
        try:
            answer = await call()
        except died as error:
            logger.warning("a %s replica died before answering (%s); sending the request again", what, error)
            try:
                answer = await call()
            except died as again:
                raise ApiError(
                    503, f"two {what} replicas died before answering ({type(again).__name__})", "server_error"
                ) from None
    except BackPressureError:
        raise ApiError(
            429,
            f"the server is busy (every {what} replica's queue is full); try again in 1 s",
            "rate_limit_error",
            headers={"Retry-After": "1"},
        ) from None
    if isinstance(answer, ApiError):
        raise answer
    return answer


class Ingress:
    """The HTTP side: `api_app`'s routes over the engine (and painter) deployments' handles."""

    def __init__(
        self,
        engines: Mapping[str, Any],
        painters: Mapping[str, Any],
        targets: Mapping[str, int],
        api_key: str | None,
    ):
        self.engines, self.painters, self.targets = dict(engines), dict(painters), dict(targets)
        self.api_key = api_key
        self._limits: dict[str, ModelLimits] = {}

    async def __serve_build_asgi_app__(self):  # Serve's hook: the ASGI app, built in the replica
        for name, handle in self.engines.items():  # each model's limits, from one of its replicas
            self._limits[name] = await answered_once(lambda handle=handle: handle.limits.remote(), name)
        return api_app(lambda: self._limits, self.images, self.health, api_key=self.api_key)

    async def images(self, parsed: ImagesRequest, disconnected: Disconnected) -> Images:
        engine, painter = self.engines[parsed.model], self.painters.get(parsed.model)
        if painter is None:
            return await answered_once(lambda: engine.images.remote(parsed), parsed.model)
        codes = await answered_once(lambda: engine.codes.remote(parsed), parsed.model)
        painted = await asyncio.gather(
            *(
                answered_once(
                    lambda i=i, c=c: painter.paint.remote(parsed, i, c.codes), f"{parsed.model} painter"
                )
                for i, c in enumerate(codes)
            )
        )
        return Images(
            [image.b64_json for image in painted],
            [{**c.stats, "paint_span": image.span} for c, image in zip(codes, painted, strict=True)],
        )

    async def health(self) -> JSONResponse:
        """Each deployment's replicas, alive (running) against the target, from Serve's status; 503 when a
        deployment has none alive."""
        serve = import_serve()
        status = await asyncio.to_thread(serve.status)
        application = status.applications.get(serve.get_replica_context().app_name)
        deployments = {}
        for name, target in self.targets.items():
            found = None if application is None else application.deployments.get(name)
            states = (
                {} if found is None else {getattr(k, "value", k): n for k, n in found.replica_states.items()}
            )
            deployments[name] = {
                "status": None if found is None else getattr(found.status, "value", found.status),
                "alive": states.get("RUNNING", 0),
                "target": target,
                "replicas": states,
            }
        serving = all(deployment["alive"] > 0 for deployment in deployments.values())
        whole = all(deployment["alive"] >= deployment["target"] for deployment in deployments.values())
        state = "ok" if whole else "degraded" if serving else "failed"
        return JSONResponse(
            {"status": state, "deployments": deployments}, status_code=200 if serving else 503
        )


def engine_deployment(name: str) -> str:
    return f"engine-{name}"


def painter_deployment(name: str) -> str:
    return f"painter-{name}"


def build_app(
    models: Mapping[str, ServedModel],
    config: EngineConfig,
    replicas: Replicas,
    *,
    painters: Replicas | None = None,
    device: str | None = None,
    threads: int | None = None,
    api_key: str | None = None,
):
    """The Serve application: an ingress over one engine deployment per model (and a painter deployment per
    model with a later stage, `painters` replicas of one image each; default: as many as `replicas`). The
    painters' router queues as many images as the engine replicas hold at most, so that a burst the engines
    took is painted, not refused after its AR stage."""
    serve = import_serve()
    if not models:
        raise ValueError("the server needs at least one model")
    painters = painters or replace(replicas)
    in_flight = config.lanes + config.max_queue  # what one engine holds: lanes decoding, a queue waiting
    engine_class = serve.deployment(
        EngineReplica, max_ongoing_requests=in_flight, max_queued_requests=config.max_queue
    )
    painter_class = serve.deployment(
        Painter, max_ongoing_requests=1, max_queued_requests=replicas.most * in_flight
    )
    engines, painted, targets = {}, {}, {}
    for name, model in models.items():
        deployment = engine_class.options(name=engine_deployment(name), **replicas.options(config.lanes))
        engines[name] = deployment.bind(model, config, device, threads)
        targets[engine_deployment(name)] = replicas.target
        if model.later_stage:
            deployment = painter_class.options(name=painter_deployment(name), **painters.options(1))
            painted[name] = deployment.bind(model, device, threads)
            targets[painter_deployment(name)] = painters.target
    ingress = serve.deployment(
        serve.ingress()(Ingress),
        name="ingress",
        max_ongoing_requests=10_000,  # it only waits on the replicas, whose own bounds refuse work
        ray_actor_options={"num_cpus": 0},
    )
    return ingress.bind(engines, painted, targets, api_key)


def run(
    app,
    host: str,
    port: int,
    *,
    address: str | None = None,
    room: Room | None = None,
    ready: Callable[[], None] | None = None,
    blocking: bool = True,
):
    """Start `app` on Ray (the cluster at `address`, checked first, or Ray's default: a running local one,
    else a new one) with Serve's HTTP proxy on `host:port`, once the cluster is found to hold `room` (what
    the app's replicas ask for); `ready` is called once Serve runs the app (its replicas loaded and
    healthy); with `blocking`, until interrupted."""
    serve = import_serve()
    ray = connect(address)
    if room is not None:
        room.check(ray)
    serve.start(http_options={"host": host, "port": port})
    check_proxy(host, port, serving_address())  # before the app replaces anything
    handle = serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    if ready is not None:
        ready()
    if not blocking:
        return handle
    try:
        while True:  # until Ctrl-C, as Serve's own blocking run
            time.sleep(60)
    finally:  # a cluster outlives the command: its app must not, or the next one is answered by this one
        serve.delete(APP_NAME)


def serving_address() -> tuple[str, int] | None:
    """The host and port Serve's HTTP proxy runs on in the joined cluster, as its controller was started
    (None: this Ray does not say; the check is then skipped). Read through Serve's client object, which
    Ray Serve 2.x keeps in `ray.serve.context`."""
    try:
        from ray.serve.context import _get_global_client

        config = _get_global_client().http_config
        return str(config.host), int(config.port)
    except (ImportError, AttributeError):
        return None


def check_proxy(host: str, port: int, found: tuple[str, int] | None) -> None:
    """Refuse (one line) a proxy address Serve did not take: once running on a cluster (an earlier `arjet
    serve --ray` left it), Serve keeps the address its proxy was first given and ignores the one asked
    for, so the command would print an address nothing answers at. `found`: `serving_address()`."""
    if found is None or found == (host, port):
        return
    raise ValueError(
        f"Ray Serve already runs on this Ray cluster with its HTTP proxy on {found[0]}:{found[1]} and keeps "
        f"it (it ignores --host {host} --port {port}): pass --host {found[0]} --port {found[1]}, or stop "
        "Serve there with `serve shutdown` and start again"
    )
