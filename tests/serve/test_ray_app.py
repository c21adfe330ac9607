"""`arjet serve --ray` on a local Ray instance: two CPU replicas of a tiny model behind Serve's HTTP proxy,
tested with the official `openai` client; a replica killed by pid mid-run; GLM-Image's AR stage and DiT as
two deployments."""

import os
import signal
import threading
import time

import clients as serving_clients
import httpx
import numpy as np
import pytest
import torch

from arjet.limits import EngineConfig
from arjet.serve.openai_api import ImagesRequest, ModelLimits
from arjet.testing import tiny_pipeline

from ports import free_port

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'arjet[ray]')")
serve = pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'arjet[ray]')")
from arjet.serve import ray_app  # noqa: E402  (after the skip: it needs Ray only when it builds)

pytestmark = pytest.mark.slow
GRID = (3, 5)
# a replica holds lanes + max_queue = 5 requests and Serve's router 3 more: 13 places for two replicas
CONFIG = EngineConfig(lanes=2, max_queue=3, prompt_tokens=32, compile=False)
# two replicas of each engine and one painter: five replicas in 2 CPUs (the tests share them well enough)
REPLICA = ray_app.Replicas(count=2, num_cpus=0.25)
PAINTER = ray_app.Replicas(count=1, num_cpus=0.25)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    serve.shutdown()
    ray.shutdown()


def saved(pipe, folder):
    pipe.set_progress_bar_config(disable=True)
    pipe.save_pretrained(folder)
    return pipe, folder


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return saved(
        tiny_pipeline("emu3", grid=GRID, vocab_size=8, logit_scale=3.0), tmp_path_factory.mktemp("tiny")
    )


@pytest.fixture(scope="module")
def glm(tmp_path_factory):
    """A tiny GLM-Image, and the pipeline its folder loads as (the one-process pipeline the replicas run)."""
    from arjet.builtin import load_model

    _, folder = saved(
        tiny_pipeline("glm_image", grid=(2, 3), vocab_size=16, logit_scale=3.0),
        tmp_path_factory.mktemp("glm"),
    )
    pipe = load_model(str(folder), device="cpu")
    pipe.set_progress_bar_config(disable=True)
    return pipe, folder


@pytest.fixture(scope="module")
def server(local_ray, model, glm):
    """One app: the tiny model's engine replicas, and GLM-Image's engine and painter replicas."""
    assert not ray_app.later_stage(str(model[1])) and ray_app.later_stage(str(glm[1]))
    models = {
        "tiny": ray_app.ServedModel(str(model[1])),
        "glm": ray_app.ServedModel(str(glm[1]), later_stage=True),
    }
    app = ray_app.build_app(models, CONFIG, REPLICA, painters=PAINTER, threads=1)
    port = free_port()
    ray_app.run(app, "127.0.0.1", port, blocking=False)
    return f"http://127.0.0.1:{port}"


def test_room_the_running_cluster_lacks_is_refused_before_serve_starts(local_ray):
    """Serve would wait without end for replicas no node can hold; the cluster's own figures refuse them."""
    from arjet.eval.ray_cluster import ClusterTooSmall, Room

    cpus = ray.cluster_resources()["CPU"]
    room = Room(int(cpus) + 1, 1.0, 0.0, "replica", "--replicas")
    with pytest.raises(ClusterTooSmall, match=f"{int(cpus) + 1} replicas of 1 CPU and 0 GPUs each need"):
        ray_app.run(None, "127.0.0.1", free_port(), room=room, blocking=False)


def test_a_second_command_on_another_port_is_refused_not_served_elsewhere(server):
    """Serve keeps the proxy address it was first started with: a later run asking for another port is
    refused before its app replaces the running one (which still answers)."""
    port = int(server.rsplit(":", 1)[1])
    assert ray_app.serving_address() == ("127.0.0.1", port)
    with pytest.raises(ValueError, match=f"HTTP proxy on 127.0.0.1:{port} and keeps it"):
        ray_app.run("not deployed", "127.0.0.1", free_port(), blocking=False)
    assert httpx.get(f"{server}/health", timeout=60).json()["status"] in ("ok", "degraded")


def _solo(pipe, prompt, seed) -> np.ndarray:
    """The image `pipe(...)` makes alone, on one thread as every replica runs."""
    return np.asarray(pipe(prompt, seed=seed, threads=1).images[0].convert("RGB"))


def replica_pids(deployment: str, want: int) -> set[int]:
    """The process ids of `want` replicas of `deployment` (asked through Serve's handle until as many
    distinct ones have answered)."""
    handle = serve.get_deployment_handle(deployment, app_name=ray_app.APP_NAME)
    pids: set[int] = set()
    deadline = time.monotonic() + 120
    while len(pids) < want and time.monotonic() < deadline:
        pids.add(handle.pid.remote().result())  # one at a time: the router queues few requests
    assert len(pids) == want, pids
    return pids


def load(url, requests: int, clients: int, during=None) -> dict[int, object]:
    """`requests` requests (seed = request id) from `clients` concurrent `openai` clients; `during()` runs
    once a quarter of them have been answered. {request id: its pixels, or 429}."""
    answers: dict[int, object] = {}
    lock, quarter = threading.Lock(), threading.Event()

    def client(ids):
        api = serving_clients.client(url, timeout=300)
        for request_id in ids:
            answer = serving_clients.answer(api, "tiny", request_id)
            with lock:
                assert request_id not in answers  # answered once
                answers[request_id] = answer
                if len(answers) >= requests // 4:
                    quarter.set()

    threads = [threading.Thread(target=client, args=(range(c, requests, clients),)) for c in range(clients)]
    for thread in threads:
        thread.start()
    if during is not None:
        assert quarter.wait(timeout=300)
        during()
    for thread in threads:
        thread.join(timeout=600)
    return answers


def check_answers(answers, requests, pipe, least: int):
    """Every request answered (none lost), at least `least` with an image, each its solo decode's."""
    assert sorted(answers) == list(range(requests))
    images = {request_id: a for request_id, a in answers.items() if not isinstance(a, int)}
    assert len(images) >= least
    for request_id, pixels in images.items():
        assert np.array_equal(pixels, _solo(pipe, "a red circle", request_id))


def test_200_requests_from_16_clients_over_two_replicas_are_each_answered_once(server, model):
    """Every request gets its image (its solo decode's) or a 429; /health shows both replicas."""
    health = httpx.get(f"{server}/health").json()
    assert health["status"] == "ok"
    alive = {name: (d["alive"], d["target"]) for name, d in health["deployments"].items()}
    assert alive == {"engine-tiny": (2, 2), "engine-glm": (2, 2), "painter-glm": (1, 1)}
    assert [m.id for m in serving_clients.client(server).models.list().data] == ["tiny", "glm"]
    answers = load(server, 200, 16)
    check_answers(answers, 200, model[0], least=40)
    # whether 16 clients overflow the 13 places depends on timing; 48 sent at once must (429, Retry-After)
    burst = load(server, 48, 48)
    check_answers(burst, 48, model[0], least=1)
    assert any(isinstance(a, int) for a in burst.values())  # answer() checked each 429's Retry-After


def test_a_replica_killed_mid_run_loses_no_request_and_is_replaced(server, model):
    before = replica_pids("engine-tiny", 2)
    killed = min(before)
    answers = load(server, 32, 8, during=lambda: os.kill(killed, signal.SIGKILL))
    check_answers(answers, 32, model[0], least=16)
    deadline, engine = time.monotonic() + 180, {"alive": "no answer from /health", "target": 2}
    while time.monotonic() < deadline:
        try:  # the replacement loads a model beside the others: on 2 busy cores /health may answer late
            engine = httpx.get(f"{server}/health", timeout=60).json()["deployments"]["engine-tiny"]
        except httpx.TimeoutException:
            continue
        if engine["alive"] == 2 and engine["status"] == "HEALTHY":
            break
        time.sleep(0.5)
    assert engine["alive"] == engine["target"] == 2
    after = replica_pids("engine-tiny", 2)
    assert (
        killed not in after and len(after & before) == 1
    )  # the other replica went on, a new one replaced it


def test_glm_image_runs_its_ar_stage_and_its_dit_as_two_deployments(server, glm):
    """The AR stage in an engine replica that holds no DiT, the DiT in a painter replica that holds no AR
    model: each image's codes and pixels are the one-process pipeline's."""
    pipe = glm[0]
    out = serving_clients.client(server).images.generate(
        model="glm", prompt="a red circle", n=2, response_format="b64_json", extra_body={"seed": 5}
    )
    for i, image in enumerate(out.data):
        alone = pipe("a red circle", seed=5 + i, threads=1)
        assert np.array_equal(
            serving_clients.pixels(image.b64_json), np.asarray(alone.images[0].convert("RGB"))
        )
        assert out.model_extra["arjet"][i]["seed"] == 5 + i
    codes = serve.get_deployment_handle("engine-glm", app_name=ray_app.APP_NAME).codes
    parsed = ImagesRequest.parse({"prompt": "a red circle", "seed": 5}, {"glm": ModelLimits(4, 6)})
    decoded = codes.remote(parsed).result()
    alone = pipe("a red circle", seed=5, threads=1, output_type="latent").codes[0]
    assert torch.equal(decoded[0].codes, alone)
    painter = serve.get_deployment_handle("painter-glm", app_name=ray_app.APP_NAME)
    held = painter.components.remote().result()
    assert held["vision_language_encoder"] is None and held["transformer"] == "GlmImageTransformer2DModel"
    engine = serve.get_deployment_handle("engine-glm", app_name=ray_app.APP_NAME)
    held = engine.components.remote().result()
    assert held["vision_language_encoder"] == "GlmImageForConditionalGeneration"
    assert held["transformer"] is held["vae"] is held["text_encoder"] is None


def glm_spans(url, seeds, clients: int) -> dict[int, tuple[list[float], list[float]]]:
    """GLM-Image requests of one 512 x 512 image each (seed = request id) from `clients` concurrent `openai`
    clients: {request id: (its AR stage's span, its paint's span)}, as its answer's stats say."""
    spans = {}

    def client(ids):
        # a 429 (a burst beyond the bounds, or one sent before Serve's router has seen both replicas) is
        # sent again after its Retry-After: a request sent later only decodes later
        api = serving_clients.client(url, timeout=300).with_options(max_retries=20)
        for seed in ids:
            out = api.images.generate(
                model="glm", prompt="a red circle", size="512x512", extra_body={"seed": seed}
            )
            stats = out.model_extra["arjet"][0]
            spans[seed] = (stats["ar_span"], stats["paint_span"])

    seeds = list(seeds)
    threads = [threading.Thread(target=client, args=(seeds[c::clients],)) for c in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert sorted(spans) == seeds
    return spans


def overlapping(spans) -> list[tuple[int, int]]:
    """The pairs (a, b) of requests where a's AR stage ran while b's image was painted."""
    return [
        (a, b)
        for a, (ar, _) in spans.items()
        for b, (_, paint) in spans.items()
        if a != b and ar[0] < paint[1] and paint[0] < ar[1]
    ]


def test_the_ar_stage_of_later_requests_runs_while_the_dit_paints_earlier_ones(server):
    """8 requests at once are two rounds of both engine replicas' two lanes: the first round's images are
    painted while the second round decodes (512 x 512 makes a round of the AR stage long beside the hand-over
    from an engine replica to the painter). The same requests sent one after another, as a composition that
    painted each request before it took the next would run them, overlap nowhere: the spans tell the two
    apart. Each image is painted after its AR stage."""
    at_once, one_by_one = glm_spans(server, range(8), clients=8), glm_spans(server, range(8, 12), clients=1)
    for ar, paint in [*at_once.values(), *one_by_one.values()]:
        assert ar[0] <= ar[1] <= paint[0] <= paint[1]
    assert overlapping(at_once)
    assert not overlapping(one_by_one)


def test_replica_counts_become_serve_options_and_bad_ones_are_refused():
    """A fixed count, or Serve's autoscaling between a min and a max on the requests in flight (options Serve
    itself accepts); a half-given or inverted range is refused naming the options."""
    fixed = ray_app.Replicas(count=3, num_gpus=1).options(in_flight=4)
    assert fixed == {"num_replicas": 3, "ray_actor_options": {"num_cpus": 1.0, "num_gpus": 1}}
    scaled = ray_app.Replicas(minimum=1, maximum=4).options(in_flight=8)
    assert scaled["autoscaling_config"] == {
        "min_replicas": 1,
        "max_replicas": 4,
        "target_ongoing_requests": 8,
    }
    serve.deployment(ray_app.EngineReplica).options(**scaled)  # Serve checks its autoscaling config here
    assert ray_app.Replicas(minimum=2, maximum=5).target == 2
    with pytest.raises(ValueError, match="both --min-replicas and --max-replicas"):
        ray_app.Replicas(minimum=2)
    with pytest.raises(ValueError, match="1 <= min <= max"):
        ray_app.Replicas(minimum=3, maximum=2)
