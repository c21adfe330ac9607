"""The OpenAI images API over arjet's engines: `POST /v1/images/generations`, `GET /v1/models`, `GET /health`.

Each served model has its own `Engine` (one decode thread, lanes refilled as images finish). A request for
`n` images becomes `n` engine requests (image `i` with seed `seed + i`, a random seed when none is given),
so its images are those `pipe(prompt, seed=...)` would make alone. The engine's bounded queue is the
server's: a request that does not fit, or that the engine expects to take longer than the time limit (the
images ahead of it over the throughput it measures, plus its own decode), is answered 429 at once with a
`Retry-After` from that estimate; one that still runs past the time limit 504; a client that disconnects has
its images cancelled, which frees their lanes at the next step. `GET /health` reports each engine's state,
refusals, estimates and steps (their mode, captured graphs, replays and graph memory; 503 when an engine has
stopped). Errors are OpenAI-style JSON (`{"error": {"message",
"type", "param", "code"}}`): 400 for bad input (naming the field), 413 for a body over `MAX_BODY_BYTES`, 401
without the API key when one is set, 500 when the served model failed (its decode, or the rendering of its
codes: the error's message, never its traceback), 503 when an engine takes no more work.

Request fields: OpenAI's `model`, `prompt`, `n`, `size` (`"WxH"` or `"auto"`), `response_format`
(`"b64_json"`; arjet keeps no files to link to), `user` (ignored); arjet's `sampler`, `seed`,
`guidance_scale`, `temperature`, `top_k`, `top_p` (sent by the `openai` client through `extra_body`). Other
OpenAI fields (`quality`, `style`, ...) are refused by name rather than silently ignored.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .. import checks
from ..engine import Cancelled, DecodeFailed, Engine, EngineResult, EngineStopped, QueueFull
from ..limits import KEY_LIMIT
from ..samplers import SamplingOptions

logger = logging.getLogger(__name__)
OPENAI_FIELDS = {"model", "prompt", "n", "size", "response_format", "user"}
ARJET_FIELDS = {"sampler", "seed", *SamplingOptions.names()}
INTEGER_FIELDS = {"top_k"}  # of the sampling options, those JSON must give as integers (the rest: numbers)
MAX_BODY_BYTES = 1 << 20  # a request body is a few hundred bytes; anything near this is not a real one
SHOWN_FIELDS = 5  # unknown fields an error names (the rest are counted)
MAX_SHOWN_CHARS = 1000  # of a server-side error's message in a 500's body
FOLDERS = re.compile(r"(?<![\w.~/])/(?:[^\s/'\"]+/)+")  # the folders of an absolute path, "/" to the last "/"


class ApiError(Exception):
    """An error answered as OpenAI-style JSON."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param
        self.headers = dict(headers or {})

    def __reduce__(self) -> tuple:  # its own arguments, not `Exception.args`: it crosses processes (Ray)
        return ApiError, (self.status, self.message, self.kind, self.param, self.headers)

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


@dataclass(frozen=True)
class ModelLimits:
    """What a request's checks need of a served model's engine: the images one call may ask for and the
    images its queue holds."""

    max_images: int  # the pipeline's `limits.max_images_per_call`
    max_queue: int

    @classmethod
    def of(cls, engine: Engine) -> ModelLimits:
        return cls(engine.pipe.limits.max_images_per_call, engine.max_queue)


@dataclass(frozen=True)
class Images:
    """A request's answer: its images as base64 PNGs and, per image, what decoded it."""

    b64_json: list[str]
    stats: list[dict[str, Any]]


Disconnected = Callable[[], Awaitable[bool]]  # whether the client has gone (`Request.is_disconnected`)
MakeImages = Callable[["ImagesRequest", Disconnected], Awaitable[Images]]


@dataclass(frozen=True)
class ImagesRequest:
    """A checked `POST /v1/images/generations` body."""

    model: str
    prompt: str
    n: int
    size: tuple[int, int] | None  # (height, width) in pixels; None: the model's default
    seed: int  # image i gets seed + i
    sampler: str  # a registry spec (`"sjd:window=16"`); the engine checks it
    sampling: SamplingOptions  # None numbers: the model's; the engine resolves and checks them together

    @classmethod
    def parse(cls, body: Any, models: Mapping[str, ModelLimits]) -> ImagesRequest:
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        _refuse_unknown(body)
        model = _model(body, models)
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ApiError(
                400, f"prompt must be a non-empty string, got {checks.shown(prompt)}", param="prompt"
            )
        user = body.get("user")
        if user is not None and not isinstance(user, str):
            raise ApiError(400, f"user must be a string, got {checks.shown(user)}", param="user")
        n = _n(body.get("n", 1), models[model])
        response_format = body.get("response_format", "b64_json")
        if response_format != "b64_json":
            raise ApiError(
                400,
                "response_format must be 'b64_json' (arjet keeps no files to link to), got "
                f"{checks.shown(response_format)}",
                param="response_format",
            )
        size, seed = _size(body.get("size", "auto")), _seed(body.get("seed"), n)
        return cls(model, prompt, n, size, seed, _sampler(body.get("sampler", "ar")), _sampling(body))


def _refuse_unknown(body: dict) -> None:
    unknown = sorted(set(body) - OPENAI_FIELDS - ARJET_FIELDS)
    if not unknown:
        return
    named = ", ".join(name if len(name) <= 60 else name[:57] + "..." for name in unknown[:SHOWN_FIELDS])
    more = f" and {len(unknown) - SHOWN_FIELDS} more" if len(unknown) > SHOWN_FIELDS else ""
    allowed = ", ".join(sorted(OPENAI_FIELDS | ARJET_FIELDS))
    raise ApiError(400, f"unsupported field(s) {named}{more}; allowed: {allowed}", param=unknown[0][:60])


def _model(body: dict, models: Mapping[str, ModelLimits]) -> str:
    model = body.get("model", next(iter(models)))
    if not isinstance(model, str) or model not in models:
        raise ApiError(
            400, f"unknown model {checks.shown(model)}; this server has {', '.join(models)}", param="model"
        )
    return model


def _n(value: Any, limits: ModelLimits) -> int:
    most = limits.max_images
    if not checks.is_integer(value) or not 1 <= value <= most:
        raise ApiError(400, f"n must be an integer from 1 to {most}, got {checks.shown(value)}", param="n")
    if value > limits.max_queue:
        raise ApiError(
            400,
            f"n={value} is more images than this server's queue holds (max_queue={limits.max_queue}), so it "
            f"could never be accepted; ask for at most {limits.max_queue}",
            param="n",
        )
    return value


def _seed(value: Any, n: int) -> int:
    if value is None:
        return secrets.randbelow(KEY_LIMIT - n)
    if not checks.is_integer(value) or not 0 <= value <= KEY_LIMIT - n:
        raise ApiError(
            400, f"seed must be an integer from 0 to {KEY_LIMIT - n}, got {checks.shown(value)}", param="seed"
        )
    return value


def _sampler(value: Any) -> str:
    if not isinstance(value, str):
        raise ApiError(
            400,
            f"sampler must be a string such as 'sjd:window=16', got {checks.shown(value)}",
            param="sampler",
        )
    return value


def _sampling(body: dict) -> SamplingOptions:
    """The request's `SamplingOptions` (400 naming the field of a value of the wrong type or out of range);
    the engine checks them again once resolved against the model's defaults."""
    given = {name: body[name] for name in SamplingOptions.names() if name in body}
    for name, value in given.items():
        if name in INTEGER_FIELDS and value is not None and not checks.is_integer(value):
            raise ApiError(400, f"{name} must be an integer or null, got {checks.shown(value)}", param=name)
        if value is not None and not checks.is_number(value):
            raise ApiError(400, f"{name} must be a number or null, got {checks.shown(value)}", param=name)
        _sampling_options(name, {name: value})  # each alone first, so that an error names its own field
    # together, the guidance scale over the temperature may still overflow: the temperature is named
    return _sampling_options("temperature", given)


def _sampling_options(param: str, values: dict[str, Any]) -> SamplingOptions:
    try:
        return SamplingOptions.from_kwargs(values)
    except ValueError as error:
        raise ApiError(400, str(error), param=param) from None


SIZE = re.compile(r"([1-9][0-9]{0,5})x([1-9][0-9]{0,5})")  # as OpenAI writes it: '1024x1024'


def _size(value: Any) -> tuple[int, int] | None:
    if value is None or value == "auto":
        return None
    match = SIZE.fullmatch(value) if isinstance(value, str) else None
    if match:
        width, height = int(match[1]), int(match[2])
        return height, width
    raise ApiError(
        400,
        f"size must be 'WIDTHxHEIGHT' in pixels (e.g. '384x384') or 'auto', got {checks.shown(value)}",
        param="size",
    )


async def read_json(request: Request) -> Any:
    """The request's JSON body, at most `MAX_BODY_BYTES` (413 beyond, by its Content-Length or as it
    streams in); 400 for a body that is not JSON (or nests deeper than Python's parser recurses)."""
    declared = request.headers.get("content-length", "0")
    if not (declared.isascii() and declared.isdigit()):
        raise ApiError(400, "Content-Length must be a number of bytes")
    if int(declared) > MAX_BODY_BYTES:
        raise _too_large()
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise _too_large()
    except ClientDisconnect:  # nobody reads the answer; not a server error for the log
        raise ApiError(400, "the client closed the connection before its request body arrived") from None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise ApiError(400, "the request body is not valid JSON (or nests too deep)") from None


def _too_large() -> ApiError:
    return ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes", "invalid_request_error")


def create_app(engines: Mapping[str, Engine], *, api_key: str | None = None) -> FastAPI:
    """The FastAPI application serving `engines` ({model name: its started engine}); `api_key`: required as
    `Authorization: Bearer KEY` on every route but `/health` (compared in constant time)."""
    if not engines:
        raise ValueError("the server needs at least one model")

    async def images(parsed: ImagesRequest, disconnected: Disconnected) -> Images:
        return await generate_images(engines[parsed.model], parsed, disconnected, api_key)

    async def health() -> JSONResponse:
        models = {name: _health(engine) for name, engine in engines.items()}
        ok = all(model["state"] == "running" for model in models.values())
        return JSONResponse(
            {"status": "ok" if ok else "failed", "models": models}, status_code=200 if ok else 503
        )

    limits = {name: ModelLimits.of(engine) for name, engine in engines.items()}
    return api_app(lambda: limits, images, health, api_key=api_key)


def api_app(
    models: Callable[[], Mapping[str, ModelLimits]],
    images: MakeImages,
    health: Callable[[], Awaitable[JSONResponse]],
    *,
    api_key: str | None = None,
) -> FastAPI:
    """The API's routes, errors and key check over whatever makes the images: `models()` the served models'
    limits (asked per request: a distributed server learns them from its replicas), `images` the answer to
    a checked request, `health` the `GET /health` response."""
    app = FastAPI(
        title="arjet", description="OpenAI images API over arjet's engines", docs_url=None, redoc_url=None
    )
    expected = None if api_key is None else f"Bearer {api_key}".encode()

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return error.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return ApiError(error.status_code, str(error.detail), headers=error.headers).response()

    @app.exception_handler(Exception)
    async def server_error(request: Request, error: Exception) -> JSONResponse:
        logger.error("%s %s failed", request.method, request.url.path, exc_info=error)
        return ApiError(500, f"the server failed ({type(error).__name__})", "server_error").response()

    def authorised(request: Request) -> None:  # a dependency, not middleware: that would hide disconnects
        given = request.headers.get("authorization", "").encode("latin-1")
        if expected is not None and not secrets.compare_digest(given, expected):
            raise ApiError(
                401, "a valid API key is required (Authorization: Bearer KEY)", "authentication_error"
            )

    @app.get("/health")
    async def health_route() -> JSONResponse:
        return await health()

    @app.get("/v1/models", dependencies=[Depends(authorised)])
    async def list_models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": 0, "owned_by": "arjet"} for name in models()],
        }

    @app.post("/v1/images/generations", dependencies=[Depends(authorised)])
    async def generate(request: Request) -> JSONResponse:
        parsed = ImagesRequest.parse(await read_json(request), models())
        started = time.time()
        answer = await images(parsed, request.is_disconnected)
        return JSONResponse(
            {
                "created": int(started),
                "data": [{"b64_json": image} for image in answer.b64_json],
                "arjet": answer.stats,
            }
        )

    return app


async def generate_images(
    engine: Engine, parsed: ImagesRequest, disconnected: Disconnected, api_key: str | None = None
) -> Images:
    """`parsed`'s images from `engine` (ApiError for a refusal or a failure; the images are cancelled when
    `disconnected()` says the client left, or when this coroutine is cancelled)."""
    results = await decoded(engine, parsed, disconnected)
    try:  # rendered off the event loop and the decode thread
        images = await asyncio.to_thread(_encode, results)
    except Exception as error:  # the served model's fault (a VQ decoder that overflows), not the request's
        logger.error("rendering %d image(s) failed", len(results), exc_info=error)
        raise model_fault("the images could not be rendered from their codes", error, api_key) from None
    return Images(images, [image_stats(parsed.seed + i, result) for i, result in enumerate(results)])


async def decoded(
    engine: Engine, parsed: ImagesRequest, disconnected: Disconnected, output_type: str = "pil"
) -> list[EngineResult]:
    """`parsed`'s engine results (their codes; images in `output_type` rendered on first read, none for
    "latent"): ApiError for a refusal or a failure; the images are cancelled when the client leaves or this
    coroutine is cancelled."""
    submitted = _submit(engine, parsed, output_type)
    try:
        return await _wait(disconnected, submitted)
    finally:
        for item in submitted:
            item.cancel()  # a no-op for finished ones; frees the lanes of the rest


def image_stats(seed: int, result: EngineResult) -> dict[str, Any]:
    """What the response says of one image (its `arjet` entry)."""
    return {
        "seed": seed,
        "sampler": result.stats.sampler,
        "forward_passes": result.stats.forward_passes,
        "seconds": result.stats.seconds,
        "queued_seconds": result.queued,
    }


def _health(engine: Engine) -> dict[str, Any]:
    """One engine's state, load, refusals, estimates (seconds and images per second; null: not yet) and how its
    steps run (`Engine.graph_counts`)."""
    stats, estimate = engine.stats, engine.estimate()
    return {
        "state": engine.state,
        "error": None if engine.error is None else repr(engine.error),
        "queued": engine.queued,
        "busy_lanes": engine.busy,
        "images": stats.images,
        "refused": {"queue_full": stats.queue_full, "overloaded": stats.overloaded},
        "expired": stats.expired,
        "failed": stats.failed,
        "throughput": estimate.throughput,
        "latency_seconds": estimate.latency,
        "expected_wait_seconds": estimate.expected_wait,
        "steps": engine.graph_counts(),
    }


def _submit(engine: Engine, request: ImagesRequest, output_type: str) -> list:
    """The engine requests of `request`'s images (all or none: one that is refused takes the others back)."""
    height, width = request.size or (None, None)
    submitted = []
    try:
        for i in range(request.n):
            submitted.append(
                engine.submit(
                    request.prompt,
                    sampler=request.sampler,
                    seed=request.seed + i,
                    height=height,
                    width=width,
                    sampling=request.sampling,
                    output_type=output_type,
                )
            )
    except Exception as error:
        for item in submitted:
            item.cancel()
        raise _refusal(error) from None
    return submitted


def _refusal(error: Exception) -> Exception:
    """The API's answer to an engine that refused a request."""
    if isinstance(error, QueueFull):
        retry = 1 if error.retry_after is None else max(1, math.ceil(error.retry_after))
        return ApiError(
            429,
            f"the server is busy ({error}); try again in {retry} s",
            "rate_limit_error",
            headers={"Retry-After": str(retry)},
        )
    if isinstance(error, EngineStopped):
        return ApiError(503, f"this model's engine takes no more work ({error})", "server_error")
    if isinstance(error, (ValueError, TypeError)):
        return ApiError(400, str(error))
    return error


async def _wait(disconnected: Disconnected, submitted: list) -> list[EngineResult]:
    """The engine results, polling for the client's disconnect (which cancels the images)."""
    futures = [asyncio.wrap_future(item.future) for item in submitted]
    for future in futures:  # an image cancelled after its client left fails later: nobody awaits it then
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
    pending = set(futures)
    while pending:
        _, pending = await asyncio.wait(pending, timeout=0.05)
        if pending and await disconnected():
            for item in submitted:
                item.cancel()
            raise ApiError(499, "the client disconnected")
    try:
        return [future.result() for future in futures]
    except Cancelled as error:
        raise ApiError(504, f"the request did not finish in time ({error})", "timeout") from None
    except DecodeFailed as error:
        raise ApiError(500, str(error), "server_error") from None
    except EngineStopped as error:
        raise ApiError(503, f"this model's engine stopped ({error})", "server_error") from None


def model_fault(what: str, error: Exception, api_key: str | None) -> ApiError:
    """A 500 that says what failed and why: the error's own message on one line, without the folders of any
    absolute path or the API key (the traceback stays in the server's log)."""
    said = " ".join(str(error).split())
    if api_key:
        said = said.replace(api_key, "[API key]")
    said = FOLDERS.sub(".../", said)
    if len(said) > MAX_SHOWN_CHARS:
        said = said[: MAX_SHOWN_CHARS - 3] + "..."
    return ApiError(500, f"{what} ({type(error).__name__}: {said})", "server_error")


def _encode(results: list[EngineResult]) -> list[str]:
    """Each result's image (rendered here, in a worker thread) as a base64 PNG."""
    return [png_base64(result.image) for result in results]


def png_base64(image: Any) -> str:
    """A PIL image as a base64 PNG (the API's `b64_json`)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")
