"""`arjet serve`: the OpenAI images API, tested with the official `openai` client over loopback (and plain
HTTP for the error paths)."""

import contextlib
import threading
import time

import clients as serving_clients
import httpx
import numpy as np
import openai
import pytest
import torch
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
def serving(pipe, api_key=None, warm_up=None, **engine_options):
    """A server on a free loopback port over one engine of `pipe` (named "tiny"), warmed up with `warm_up`'s
    sampler if given; yields (base URL, engine)."""
    engine = Engine(pipe, prompt_tokens=32, **{"lanes": 3, **engine_options}).start()
    if warm_up is not None:
        engine.warm_up(warm_up)
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
        out = serving_clients.client(url).images.generate(
            model="tiny",
            prompt="a red circle",
            n=3,
            response_format="b64_json",
            extra_body={"sampler": "mc-sjd:window=4", "seed": 7},
        )
    assert len(out.data) == 3
    for i, image in enumerate(out.data):
        assert np.array_equal(
            serving_clients.pixels(image.b64_json), _solo(pipe, "a red circle", 7 + i, "mc-sjd:window=4")
        )
    stats = out.model_extra["arjet"]
    assert [s["seed"] for s in stats] == [7, 8, 9] and all(s["forward_passes"] >= 1 for s in stats)


def test_models_health_and_sizes(pipe):
    with serving(pipe) as (url, _):
        client = serving_clients.client(url)
        assert [model.id for model in client.models.list()] == ["tiny"]
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "ok" and health["models"]["tiny"]["queued"] == 0
        out = client.images.generate(
            model="tiny", prompt="star", size="40x24", response_format="b64_json", extra_body={"seed": 1}
        )
        assert serving_clients.pixels(out.data[0].b64_json).shape == (24, 40, 3)
        assert np.array_equal(
            serving_clients.pixels(out.data[0].b64_json),
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
        (
            {"prompt": "a", "temperature": "hot"},
            "temperature must be a number or null, got 'hot'",
            "temperature",
        ),
        ({"prompt": "a", "size": "7x7"}, "7", None),
        # the sampling options' own checks, each naming its field
        ({"prompt": "a", "temperature": -1.0}, "temperature must be a finite number >= 0", "temperature"),
        ({"prompt": "a", "temperature": None}, "temperature must be a finite number >= 0", "temperature"),
        ({"prompt": "a", "top_k": 0}, "top_k must be a positive integer, got 0", "top_k"),
        ({"prompt": "a", "top_p": 1.5}, "top_p must be in (0, 1], got 1.5", "top_p"),
        ({"prompt": "a", "guidance_scale": 1e31}, "guidance_scale=1e+31 scales the logits", "guidance_scale"),
        (  # each fine alone, not together
            {"prompt": "a", "guidance_scale": 1e20, "temperature": 1e-20},
            "temperature=1e-20 with guidance_scale=1e+20 scales the logits",
            "temperature",
        ),
        # a field of the wrong type is named, whatever the field
        ({"prompt": "a", "model": ["tiny"]}, "unknown model ['tiny']", "model"),
        ({"prompt": "a", "model": {"x": 1}}, "unknown model {'x': 1}", "model"),
        ({"prompt": ["a"]}, "prompt must be a non-empty string, got ['a']", "prompt"),
        ({"prompt": "a", "n": "2"}, "n must be an integer", "n"),
        ({"prompt": "a", "n": 1.0}, "n must be an integer", "n"),
        ({"prompt": "a", "size": 384}, "size must be 'WIDTHxHEIGHT'", "size"),
        # as OpenAI writes sizes, nothing looser (the probe's doubtful ' 64 x 64 ', '+64x+64', '064x064')
        *(
            ({"prompt": "a", "size": size}, "size must be 'WIDTHxHEIGHT'", "size")
            for size in (" 64 x 64 ", "+64x+64", "064x064", "64X64", "64x64 ", "\uff16\uff14x64", "0x64")
        ),
        (
            {"prompt": "a", "response_format": ["b64_json"]},
            "response_format must be 'b64_json'",
            "response_format",
        ),
        ({"prompt": "a", "user": 7}, "user must be a string, got 7", "user"),
        ({"prompt": "a", "seed": "7"}, "seed must be an integer", "seed"),
        ({"prompt": "a", "sampler": ["ar"]}, "sampler must be a string", "sampler"),
        ({"prompt": "a", "sampler": {"name": "ar"}}, "sampler must be a string", "sampler"),
        ({"prompt": "a", "guidance_scale": "3"}, "guidance_scale must be a number or null", "guidance_scale"),
        ({"prompt": "a", "top_p": [0.9]}, "top_p must be a number or null", "top_p"),
        ({"prompt": "a", "top_k": 2.5}, "top_k must be an integer or null, got 2.5", "top_k"),
        ({"prompt": "a", "top_k": True}, "top_k must be an integer or null, got True", "top_k"),
        ({"prompt": "a", "temperature": False}, "temperature must be a number or null", "temperature"),
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


def _chunks(data: bytes, size: int = 1 << 16):
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_hostile_bodies_get_json_errors_never_a_500(pipe):
    """A body nested 100k deep, one over the size limit (by its Content-Length, or streamed without one; 200k
    unknown fields are 3 MB), 50k unknown fields: each a short JSON error, and the server goes on."""
    from arjet.serve.openai_api import MAX_BODY_BYTES

    route = "/v1/images/generations"
    with serving(pipe) as (url, engine):
        deep = httpx.post(f"{url}{route}", content=b"[" * 100_000 + b"]" * 100_000, timeout=30)
        nested = httpx.post(f"{url}{route}", json={"prompt": "a", "seed": [[[[[[[[[[1]]]]]]]]]]}, timeout=30)
        large = httpx.post(f"{url}{route}", content=b" " * (MAX_BODY_BYTES + 1), timeout=30)
        streamed = httpx.post(f"{url}{route}", content=_chunks(b" " * (8 * MAX_BODY_BYTES)), timeout=30)
        fields = httpx.post(f"{url}{route}", json={f"f{i}": 0 for i in range(50_000)} | {"prompt": "a"})
        many = httpx.post(f"{url}{route}", json={f"field{i}": 0 for i in range(200_000)} | {"prompt": "a"})
        after = serving_clients.client(url).images.generate(
            model="tiny", prompt="star", response_format="b64_json"
        )
        assert engine.queued == 0
    assert deep.status_code == 400 and "not valid JSON" in deep.json()["error"]["message"]
    assert nested.status_code == 400 and nested.json()["error"]["param"] == "seed"
    assert len(nested.content) < 500
    for response in (large, streamed, many):
        assert response.status_code == 413, response.text
        assert (
            response.json()["error"]["message"] == f"the request body is larger than {MAX_BODY_BYTES} bytes"
        )
    assert large.request.headers["content-length"] and "content-length" not in streamed.request.headers
    assert fields.status_code == 400 and len(fields.content) < 1000
    message = fields.json()["error"]["message"]
    assert "unsupported field(s) f0, f1, f10, f100, f1000 and 49995 more" in message
    assert len(after.data) == 1


@pytest.mark.parametrize(
    "sampler",
    ["x" * 900_000, "sjd:init=" + "x" * 900_000, "lantern:delta=" + "1" * 900_000 + "x"],
    ids=["name", "value", "number"],
)
def test_a_long_sampler_spec_gets_a_short_400(pipe, sampler):
    """The spec's errors quote an excerpt of it, as every other field's do: the body stays small whatever
    the request holds (and a run of digits is refused at once, the server going on)."""
    with serving(pipe) as (url, engine):
        response = httpx.post(
            f"{url}/v1/images/generations", json={"prompt": "a", "sampler": sampler}, timeout=60
        )
        after = serving_clients.client(url).images.generate(
            model="tiny", prompt="star", response_format="b64_json"
        )
        assert engine.queued == 0
    assert response.status_code == 400 and len(response.content) < 500, len(response.content)
    assert "..." in response.json()["error"]["message"] and len(after.data) == 1


def test_more_images_than_the_queue_holds_is_a_400_not_a_429_forever(pipe):
    with serving(pipe, max_queue=4) as (url, engine):
        response = httpx.post(f"{url}/v1/images/generations", json={"prompt": "a", "n": 5}, timeout=30)
        assert engine.queued == 0
    assert response.status_code == 400 and response.json()["error"]["param"] == "n"
    assert (
        "n=5 is more images than this server's queue holds (max_queue=4)"
        in response.json()["error"]["message"]
    )


def test_an_api_key_is_required_when_set(pipe, monkeypatch):
    from arjet.serve import openai_api

    compared = []
    compare = openai_api.secrets.compare_digest
    monkeypatch.setattr(
        openai_api.secrets, "compare_digest", lambda a, b: compared.append(1) or compare(a, b)
    )
    with serving(pipe, api_key="sesame") as (url, _):
        for key in ("wrong", "sesamf", "sesame!"):
            with pytest.raises(openai.AuthenticationError):
                serving_clients.client(url, key=key).models.list()
        odd = httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer s\xe9same".encode("latin-1")})
        assert odd.status_code == 401 and odd.json()["error"]["type"] == "authentication_error"
        assert [model.id for model in serving_clients.client(url, key="sesame").models.list()] == ["tiny"]
        assert httpx.get(f"{url}/health").status_code == 200  # open, for load balancers
    assert len(compared) == 5  # every check in constant time


def test_a_full_queue_answers_429_with_retry_after(pipe, slow_steps):
    with serving(pipe, lanes=1, max_queue=2) as (url, engine):
        first = threading.Thread(
            target=serving_clients.client(url).images.generate,
            kwargs=dict(model="tiny", prompt="a", n=2, response_format="b64_json"),
        )
        first.start()  # one image in the lane, one waiting
        deadline = time.monotonic() + 30
        while (engine.busy, engine.queued) != (1, 1) and time.monotonic() < deadline:
            time.sleep(0.005)
        with pytest.raises(openai.RateLimitError) as refused:  # two more: the second finds the queue full
            serving_clients.client(url).images.generate(
                model="tiny", prompt="a", n=2, response_format="b64_json"
            )
        assert int(refused.value.response.headers["retry-after"]) >= 1
        first.join(timeout=60)
        assert engine.queued == 0 and engine.stats.images == 2  # the refused request's image was taken back
        out = serving_clients.client(url).images.generate(
            model="tiny", prompt="a", n=2, response_format="b64_json"
        )
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
        out = serving_clients.client(url).images.generate(
            model="tiny", prompt="star", response_format="b64_json", extra_body={"seed": 3}
        )
    assert np.array_equal(serving_clients.pixels(out.data[0].b64_json), _solo(pipe, "star", 3))


def _wait_idle(engine, seconds=10.0):
    deadline = time.monotonic() + seconds
    while (engine.busy or engine.queued) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.busy == 0 and engine.queued == 0


class StepClock:
    """The engine's steps so far, as seconds: time limits and estimates in steps, whatever the machine."""

    engine = None

    def __call__(self) -> float:
        return 0.0 if self.engine is None else float(self.engine.stats.steps)


def test_a_burst_gets_images_or_immediate_429s_never_504s_from_a_queue_it_could_not_clear(pipe):
    """The busy-server case scaled down: 2 lanes, images of 14 steps, a time limit of 40 steps, a queue of 16,
    and 48 requests from 24 clients at once. Every request is answered exactly once: an image (the solo
    decode) or a 429 at once whose Retry-After comes from the engine's estimate; none waits in the queue to
    get a 504."""
    clock = StepClock()
    answers: dict[int, object] = {}
    retry_after: list[int] = []
    lock = threading.Lock()

    def client(ids, url):
        for seed in ids:
            response = httpx.post(
                f"{url}/v1/images/generations", json={"prompt": "a red circle", "seed": seed}, timeout=120
            )
            with lock:
                assert seed not in answers, "answered twice"
                answers[seed] = response.status_code
                if response.status_code == 429:
                    retry_after.append(int(response.headers["retry-after"]))
                    assert "longer than its time limit of 40 s" in response.json()["error"]["message"]
                elif response.status_code == 200:
                    answers[seed] = serving_clients.pixels(response.json()["data"][0]["b64_json"])

    with serving(pipe, lanes=2, max_queue=16, time_limit=40, clock=clock) as (url, engine):
        clock.engine = engine
        engine.warm_up("ar")  # measures the throughput (in steps)
        threads = [threading.Thread(target=client, args=(range(c, 48, 24), url)) for c in range(24)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        health = httpx.get(f"{url}/health").json()["models"]["tiny"]
    assert sorted(answers) == list(range(48)), "a request was never answered"
    codes = [answer if isinstance(answer, int) else 200 for answer in answers.values()]
    assert codes.count(504) == 0 and codes.count(429) >= 10 and codes.count(200) >= 6
    assert set(codes) == {200, 429} and all(seconds >= 1 for seconds in retry_after)
    assert health["refused"]["overloaded"] == codes.count(429) and health["expired"] == 0
    for seed, answer in answers.items():
        if not isinstance(answer, int):
            assert np.array_equal(answer, _solo(pipe, "a red circle", seed))


def test_health_reports_state_refusals_and_estimates(pipe):
    with serving(pipe, warm_up="ar", lanes=2, time_limit=60) as (url, _):
        response = httpx.get(f"{url}/health")
    assert response.status_code == 200 and response.json()["status"] == "ok"
    model = response.json()["models"]["tiny"]
    assert model["state"] == "running" and model["error"] is None and model["images"] == 2
    assert model["refused"] == {"queue_full": 0, "overloaded": 0} and model["expired"] == model["failed"] == 0
    assert model["throughput"] > 0 and model["latency_seconds"] > 0
    assert model["expected_wait_seconds"] == model["latency_seconds"]  # free lanes: its own decode


def test_a_failing_decode_is_a_json_500_and_the_server_goes_on(pipe, monkeypatch):
    """A group whose step runs out of memory (the hostile `eagle2` tree): its request gets a JSON 500, other
    requests and later ones are served, and /health still says ok."""
    step = LaneGroup.step

    def out_of_memory(self, size, window=None):
        if self.key.sampler.startswith("sjd"):
            raise MemoryError("the tree needs GBs")
        step(self, size, window)

    monkeypatch.setattr(LaneGroup, "step", out_of_memory)
    with serving(pipe) as (url, engine):
        failed = httpx.post(
            f"{url}/v1/images/generations", json={"prompt": "a", "sampler": "sjd:window=3"}, timeout=60
        )
        out = serving_clients.client(url).images.generate(
            model="tiny", prompt="star", response_format="b64_json", extra_body={"seed": 3}
        )
        health = httpx.get(f"{url}/health")
    assert failed.status_code == 500 and failed.json()["error"]["type"] == "server_error"
    assert "MemoryError: the tree needs GBs" in failed.json()["error"]["message"]
    assert np.array_equal(serving_clients.pixels(out.data[0].b64_json), _solo(pipe, "star", 3))
    assert health.status_code == 200 and health.json()["models"]["tiny"]["failed"] == 1


def test_a_model_whose_images_cannot_be_rendered_is_a_500_that_says_why():
    """The VQ decoder paints non-finite pixels: the server's model is at fault (500, not 400), and the body
    says why (the error's message), on one line, with no traceback and no API key."""
    broken = tiny_pipeline("emu3", grid=GRID, vocab_size=8, logit_scale=3.0)
    broken.set_progress_bar_config(disable=True)
    with torch.no_grad():
        for weight in broken.image_tokenizer.vqmodel.decoder.parameters():
            weight.fill_(float("nan"))
    with serving(broken, api_key="sesame") as (url, engine):
        with pytest.raises(openai.InternalServerError) as failed:
            serving_clients.client(url, key="sesame").images.generate(
                model="tiny", prompt="a", response_format="b64_json"
            )
        health = httpx.get(f"{url}/health")
    error = failed.value.response.json()["error"]
    assert failed.value.status_code == 500 and error["type"] == "server_error"
    assert error["message"] == (
        "the images could not be rendered from their codes (ValueError: the image tokenizer's decoder gave "
        "pixels that are not finite (NaN or inf): its weights or its config make it overflow; load a "
        "checkpoint whose VQ weights are sound)"
    )
    assert health.json()["status"] == "ok"


def test_a_500_names_no_folder_of_a_path_and_never_the_api_key(pipe, monkeypatch):
    def unreadable(*args, **kwargs):
        raise OSError("cannot read /srv/models/secret-project/vq.bin\n(key sesame)")

    monkeypatch.setattr(type(pipe), "render", unreadable)
    with serving(pipe, api_key="sesame") as (url, engine):
        response = httpx.post(
            f"{url}/v1/images/generations",
            json={"prompt": "a"},
            headers={"Authorization": "Bearer sesame"},
            timeout=60,
        )
    assert response.status_code == 500
    assert response.json()["error"]["message"] == (
        "the images could not be rendered from their codes (OSError: cannot read .../vq.bin (key [API key]))"
    )


class Stop(BaseException):
    """Not an `Exception`: what stops the decode thread (as KeyboardInterrupt would)."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_stopped_engine_is_a_503_and_health_says_so(pipe, monkeypatch):
    def die(self):
        raise Stop("stopped")

    monkeypatch.setattr(Engine, "_round", die)
    with serving(pipe) as (url, engine):
        deadline = time.monotonic() + 30
        while engine.state != "failed" and time.monotonic() < deadline:
            time.sleep(0.01)
        response = httpx.post(f"{url}/v1/images/generations", json={"prompt": "a"}, timeout=30)
        health = httpx.get(f"{url}/health")
    assert response.status_code == 503 and "takes no more work" in response.json()["error"]["message"]
    assert health.status_code == 503 and health.json()["status"] == "failed"
    assert health.json()["models"]["tiny"]["state"] == "failed"
    assert health.json()["models"]["tiny"]["error"] == "Stop('stopped')"


@pytest.mark.slow
def test_200_requests_from_16_clients_are_each_answered_once(pipe):
    """The load test: 16 concurrent `openai` clients, 200 requests, a queue too small for all of them: every
    request gets its image (equal to its solo decode) or a 429, none is lost or answered twice."""
    answers: dict[int, object] = {}
    lock = threading.Lock()

    def client(ids, url):
        api = serving_clients.client(url)
        for request_id in ids:
            answer = serving_clients.answer(api, "tiny", request_id)
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


def test_a_client_that_hangs_up_mid_body_is_no_server_error(pipe, caplog):
    """A client that sends half its body and closes the connection logged two tracebacks per connection
    (`ClientDisconnect` through the 500 handler: the probe's doubtful case); nobody reads the answer, the
    server logs no error and answers the next request."""
    import socket

    with serving(pipe) as (url, engine):
        port = int(url.rsplit(":", 1)[1])
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as connection:
                connection.sendall(
                    b"POST /v1/images/generations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b'Content-Length: 1000\r\n\r\n{"prompt": "a red'
                )
        caplog.clear()
        time.sleep(1)  # the server notices the closed connections
        response = httpx.post(f"{url}/v1/images/generations", json={"prompt": "a", "seed": 1}, timeout=60)
        assert response.status_code == 200
    assert not [r for r in caplog.records if r.levelname == "ERROR"], [r.getMessage() for r in caplog.records]
