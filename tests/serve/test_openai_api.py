"""`arjet serve`: the OpenAI images API, tested with the official `openai` client over loopback (and plain
HTTP for the error paths)."""

import base64
import contextlib
import io
import threading
import time

import httpx
import numpy as np
import openai
import PIL.Image
import pytest
import uvicorn

from arjet.engine import Engine
from arjet.engine.lanes import LaneGroup
from arjet.serve import create_app
from arjet.testing import tiny_pipeline

from ports import free_port

GRID = (3, 5)


@pytest.fixture(scope="module")
def pipe():
    pipe = tiny_pipeline("emu3", grid=GRID, vocab_size=8, logit_scale=3.0)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@contextlib.contextmanager
def serving(pipe, api_key=None, **engine_options):
    """A server on a free loopback port over one engine of `pipe` (named "tiny"); yields (base URL, engine)."""
    engine = Engine(pipe, prompt_tokens=32, **{"lanes": 3, **engine_options}).start()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app({"tiny": engine}, api_key=api_key), host="127.0.0.1", port=port, log_level="error"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", engine
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        engine.close()


def _client(url, key="unused"):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


def _pixels(b64: str) -> np.ndarray:
    return np.asarray(PIL.Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB"))


def _solo(pipe, prompt, seed, sampler="ar"):
    return np.asarray(pipe(prompt, seed=seed, sampler=sampler).images[0].convert("RGB"))


@pytest.fixture
def slow_steps(monkeypatch):
    """Every engine step takes at least 50 ms, so a request stays in flight long enough to act on it."""
    step = LaneGroup.step

    def slow(self, size, window=None):
        time.sleep(0.05)
        step(self, size, window)

    monkeypatch.setattr(LaneGroup, "step", slow)


def test_images_through_the_openai_client_are_the_solo_decodes(pipe):
    with serving(pipe) as (url, _):
        out = _client(url).images.generate(
            model="tiny",
            prompt="a red circle",
            n=3,
            response_format="b64_json",
            extra_body={"sampler": "mc-sjd:window=4", "seed": 7},
        )
    assert len(out.data) == 3
    for i, image in enumerate(out.data):
        assert np.array_equal(_pixels(image.b64_json), _solo(pipe, "a red circle", 7 + i, "mc-sjd:window=4"))
    stats = out.model_extra["arjet"]
    assert [s["seed"] for s in stats] == [7, 8, 9] and all(s["forward_passes"] >= 1 for s in stats)


def test_models_health_and_sizes(pipe):
    with serving(pipe) as (url, _):
        client = _client(url)
        assert [model.id for model in client.models.list()] == ["tiny"]
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "ok" and health["models"]["tiny"]["queued"] == 0
        out = client.images.generate(
            model="tiny", prompt="star", size="40x24", response_format="b64_json", extra_body={"seed": 1}
        )
        assert _pixels(out.data[0].b64_json).shape == (24, 40, 3)
        assert np.array_equal(
            _pixels(out.data[0].b64_json),
            np.asarray(pipe("star", seed=1, height=24, width=40).images[0].convert("RGB")),
        )


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        ({"prompt": "a", "size": "big"}, "size must be 'WIDTHxHEIGHT'", "size"),
        ({"prompt": "a", "n": 0}, "n must be an integer from 1 to", "n"),
        ({"prompt": "a", "response_format": "url"}, "response_format must be 'b64_json'", "response_format"),
        ({"prompt": "a", "model": "dall-e-3"}, "unknown model 'dall-e-3'; this server has tiny", "model"),
        ({"prompt": "a", "quality": "hd"}, "unsupported field(s) quality", "quality"),
        ({"prompt": ""}, "prompt must be a non-empty string", "prompt"),
        ({"prompt": "a", "seed": -1}, "seed must be an integer from 0", "seed"),
        ({"prompt": "a", "sampler": "sjd:windw=3"}, "windw", None),
        ({"prompt": "a", "temperature": "hot"}, "temperature", None),
        ({"prompt": "a", "size": "7x7"}, "7", None),
    ],
)
def test_bad_requests_get_openai_style_400s(pipe, body, message, param):
    with serving(pipe) as (url, engine):
        response = httpx.post(f"{url}/v1/images/generations", json=body, timeout=60)
        assert engine.queued == 0 and engine.busy == 0
    assert response.status_code == 400
    error = response.json()["error"]
    assert (
        message in error["message"] and error["type"] == "invalid_request_error" and error["param"] == param
    )


def test_malformed_json_and_unknown_routes_are_openai_style(pipe):
    with serving(pipe) as (url, _):
        bad = httpx.post(f"{url}/v1/images/generations", content=b"{not json", timeout=30)
        missing = httpx.get(f"{url}/v1/images/variations", timeout=30)
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    assert missing.status_code == 404 and missing.json()["error"]["message"] == "Not Found"


def test_an_api_key_is_required_when_set(pipe):
    with serving(pipe, api_key="sesame") as (url, _):
        with pytest.raises(openai.AuthenticationError):
            _client(url, key="wrong").models.list()
        assert [model.id for model in _client(url, key="sesame").models.list()] == ["tiny"]
        assert httpx.get(f"{url}/health").status_code == 200  # open, for load balancers


def test_a_full_queue_answers_429_with_retry_after(pipe, slow_steps):
    with serving(pipe, lanes=1, max_queue=2) as (url, engine):
        with pytest.raises(openai.RateLimitError) as refused:
            # 4 images: even with one already in the lane, 3 would wait where 2 may
            _client(url).images.generate(model="tiny", prompt="a", n=4, response_format="b64_json")
        assert refused.value.response.headers["retry-after"] == "1"
        assert engine.queued == 0  # the images that fitted were taken back
        out = _client(url).images.generate(model="tiny", prompt="a", n=2, response_format="b64_json")
    assert len(out.data) == 2


def test_a_request_past_the_time_limit_gets_504_and_frees_its_lanes(pipe, slow_steps):
    with serving(pipe, lanes=1, time_limit=0.2) as (url, engine):
        response = httpx.post(f"{url}/v1/images/generations", json={"prompt": "a red circle"}, timeout=60)
        assert response.status_code == 504 and response.json()["error"]["type"] == "timeout"
        _wait_idle(engine)


def test_a_client_that_disconnects_frees_its_lanes_and_the_server_goes_on(pipe, slow_steps):
    with serving(pipe, lanes=2) as (url, engine):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/images/generations", json={"prompt": "a red circle", "n": 2}, timeout=0.3)
        _wait_idle(engine)
        assert engine.stats.images == 0  # cancelled mid-decode, not finished
        out = _client(url).images.generate(
            model="tiny", prompt="star", response_format="b64_json", extra_body={"seed": 3}
        )
    assert np.array_equal(_pixels(out.data[0].b64_json), _solo(pipe, "star", 3))


def _wait_idle(engine, seconds=10.0):
    deadline = time.monotonic() + seconds
    while (engine.busy or engine.queued) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.busy == 0 and engine.queued == 0


@pytest.mark.slow
def test_200_requests_from_16_clients_are_each_answered_once(pipe):
    """The load test: 16 concurrent `openai` clients, 200 requests, a queue too small for all of them: every
    request gets its image (equal to its solo decode) or a 429, none is lost or answered twice."""
    answers: dict[int, object] = {}
    lock = threading.Lock()

    def client(ids, url):
        api = _client(url)
        for request_id in ids:
            try:
                out = api.images.generate(
                    model="tiny",
                    prompt="a red circle",
                    response_format="b64_json",
                    extra_body={"seed": request_id},
                )
                answer = _pixels(out.data[0].b64_json)
            except openai.RateLimitError:
                answer = 429
            with lock:
                assert request_id not in answers
                answers[request_id] = answer

    with serving(pipe, lanes=4, max_queue=6) as (url, engine):
        threads = [threading.Thread(target=client, args=(range(c, 200, 16), url)) for c in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        served = engine.stats.images
    assert sorted(answers) == list(range(200))
    images = {request_id: a for request_id, a in answers.items() if not isinstance(a, int)}
    assert len(images) == served and len(images) >= 50
    for request_id, pixels in images.items():
        assert np.array_equal(pixels, _solo(pipe, "a red circle", request_id))
