"""The OpenAI images API over arjet's engines: `POST /v1/images/generations`, `GET /v1/models`, `GET /health`.

Each served model has its own `Engine` (one decode thread, lanes refilled as images finish). A request for
`n` images becomes `n` engine requests (image `i` with seed `seed + i`, a random seed when none is given),
so its images are those `pipe(prompt, seed=...)` would make alone. The engine's bounded queue is the
server's: a request that does not fit is answered 429 with `Retry-After`; one that runs past the time limit
504; a client that disconnects has its images cancelled, which frees their lanes at the next step. Errors
are OpenAI-style JSON (`{"error": {"message", "type", "param", "code"}}`), 400 for bad input, 401 without
the API key when one is set.

Request fields: OpenAI's `model`, `prompt`, `n`, `size` (`"WxH"` or `"auto"`), `response_format`
(`"b64_json"`; arjet keeps no files to link to), `user` (ignored); arjet's `sampler`, `seed`,
`guidance_scale`, `temperature`, `top_k`, `top_p` (sent by the `openai` client through `extra_body`). Other
OpenAI fields (`quality`, `style`, ...) are refused by name rather than silently ignored.
"""

from __future__ import annotations

import asyncio
import base64
import io
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import checks
from ..engine import Cancelled, Engine, QueueFull
from ..samplers.random import KEY_LIMIT

OPENAI_FIELDS = {"model", "prompt", "n", "size", "response_format", "user"}
ARJET_FIELDS = {"sampler", "seed", "guidance_scale", "temperature", "top_k", "top_p"}
RETRY_AFTER_SECONDS = 1


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

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


@dataclass(frozen=True)
class ImagesRequest:
    """A checked `POST /v1/images/generations` body."""

    model: str
    prompt: str
    n: int
    size: tuple[int, int] | None  # (height, width) in pixels; None: the model's default
    seed: int  # image i gets seed + i
    options: dict[str, Any]  # arjet's other fields, as `Engine.submit` takes them

    @classmethod
    def parse(cls, body: Any, engines: Mapping[str, Engine]) -> ImagesRequest:
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        unknown = sorted(set(body) - OPENAI_FIELDS - ARJET_FIELDS)
        if unknown:
            allowed = ", ".join(sorted(OPENAI_FIELDS | ARJET_FIELDS))
            raise ApiError(
                400, f"unsupported field(s) {', '.join(unknown)}; allowed: {allowed}", param=unknown[0]
            )
        model = body.get("model", next(iter(engines)))
        if model not in engines:
            raise ApiError(
                400, f"unknown model {model!r}; this server has {', '.join(engines)}", param="model"
            )
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ApiError(400, "prompt must be a non-empty string", param="prompt")
        n, most = body.get("n", 1), engines[model].pipe.limits.max_images_per_call
        if not checks.is_integer(n) or not 1 <= n <= most:
            raise ApiError(400, f"n must be an integer from 1 to {most}, got {n!r}", param="n")
        seed = body.get("seed")
        if seed is None:
            seed = secrets.randbelow(KEY_LIMIT - n)
        elif not checks.is_integer(seed) or not 0 <= seed <= KEY_LIMIT - n:
            raise ApiError(
                400, f"seed must be an integer from 0 to {KEY_LIMIT - n}, got {seed!r}", param="seed"
            )
        response_format = body.get("response_format", "b64_json")
        if response_format != "b64_json":
            raise ApiError(
                400,
                f"response_format must be 'b64_json' (arjet keeps no files to link to), got {response_format!r}",
                param="response_format",
            )
        options = {key: body[key] for key in ARJET_FIELDS - {"seed"} if key in body}
        return cls(model, prompt, n, _size(body.get("size", "auto")), seed, options)


def _size(value: Any) -> tuple[int, int] | None:
    if value in (None, "auto"):
        return None
    if isinstance(value, str) and value.count("x") == 1:
        width, height = (checks.integer_from_text(part) for part in value.split("x"))
        if width and height and width > 0 and height > 0:
            return height, width
    raise ApiError(
        400, f"size must be 'WIDTHxHEIGHT' in pixels (e.g. '384x384') or 'auto', got {value!r}", param="size"
    )


def create_app(engines: Mapping[str, Engine], *, api_key: str | None = None) -> FastAPI:
    """The FastAPI application serving `engines` ({model name: its started engine})."""
    if not engines:
        raise ValueError("the server needs at least one model")
    app = FastAPI(
        title="arjet", description="OpenAI images API over arjet's engines", docs_url=None, redoc_url=None
    )

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return error.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return ApiError(error.status_code, str(error.detail), headers=error.headers).response()

    def authorised(request: Request) -> None:  # a dependency, not middleware: that would hide disconnects
        if api_key is not None and request.headers.get("authorization") != f"Bearer {api_key}":
            raise ApiError(
                401, "a valid API key is required (Authorization: Bearer KEY)", "authentication_error"
            )

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "models": {
                name: {"queued": e.queued, "busy_lanes": e.busy, "images": e.stats.images}
                for name, e in engines.items()
            },
        }

    @app.get("/v1/models", dependencies=[Depends(authorised)])
    async def list_models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": 0, "owned_by": "arjet"} for name in engines],
        }

    @app.post("/v1/images/generations", dependencies=[Depends(authorised)])
    async def generate(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "the request body is not valid JSON") from None
        parsed = ImagesRequest.parse(body, engines)
        engine, started = engines[parsed.model], time.time()
        submitted = _submit(engine, parsed)
        try:
            results = await _wait(request, submitted)
        finally:
            for item in submitted:
                item.cancel()  # a no-op for finished ones; frees the lanes of the rest
        images = await asyncio.to_thread(_encode, engine.pipe, [result.codes for result in results])
        stats = [
            {
                "seed": parsed.seed + i,
                "sampler": result.stats.sampler,
                "forward_passes": result.stats.forward_passes,
                "seconds": result.stats.seconds,
                "queued_seconds": result.queued,
            }
            for i, result in enumerate(results)
        ]
        return JSONResponse(
            {"created": int(started), "data": [{"b64_json": image} for image in images], "arjet": stats}
        )

    return app


def _submit(engine: Engine, request: ImagesRequest) -> list:
    """The engine requests of `request`'s images (all or none: a queue that cannot hold them all is a 429)."""
    height, width = request.size or (None, None)
    submitted = []
    try:
        for i in range(request.n):
            submitted.append(
                engine.submit(
                    request.prompt, seed=request.seed + i, height=height, width=width, **request.options
                )
            )
    except QueueFull as error:
        for item in submitted:
            item.cancel()
        raise ApiError(
            429,
            f"the server is busy ({error}); try again shortly",
            "rate_limit_error",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        ) from None
    except ValueError as error:
        for item in submitted:
            item.cancel()
        raise ApiError(400, str(error)) from None
    return submitted


async def _wait(request: Request, submitted: list) -> list:
    """The engine results, polling for the client's disconnect (which cancels the images)."""
    futures = [asyncio.wrap_future(item.future) for item in submitted]
    for future in futures:  # an image cancelled after its client left fails later: nobody awaits it then
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
    pending = set(futures)
    while pending:
        _, pending = await asyncio.wait(pending, timeout=0.05)
        if pending and await request.is_disconnected():
            for item in submitted:
                item.cancel()
            raise ApiError(499, "the client disconnected")
    try:
        return [future.result() for future in futures]
    except Cancelled as error:
        raise ApiError(504, f"the request did not finish in time ({error})", "timeout") from None


def _encode(pipe, codes: list) -> list[str]:
    """PNG images, base64, for codes `[H, W]` each."""
    import torch

    images = pipe.decode_codes(torch.stack(codes).to(pipe._execution_device), "pil")
    encoded = []
    for image in images:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        encoded.append(base64.b64encode(buffer.getvalue()).decode("ascii"))
    return encoded
