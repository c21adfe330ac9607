"""Deadline-aware admission: the engine measures its throughput and refuses at once a request it expects to
finish past its time limit, instead of queueing it to time out there.

The engine runs on a clock that counts its own steps (one 'second' per step), so every estimate and every
time limit is in steps: the tests are about steps, never about how fast this machine is."""

import collections
import threading

import pytest

from arjet.engine import Cancelled, Engine, Overloaded, QueueFull
from arjet.engine.admission import Load, Throughput
from arjet.testing import tiny_pipeline

GRID = (3, 5)  # 15 cells: `ar` commits the first at admission, then one per step


@pytest.fixture(scope="module")
def pipe():
    pipe = tiny_pipeline("emu3", grid=GRID, vocab_size=8, logit_scale=3.0)
    pipe.set_progress_bar_config(disable=True)
    return pipe


class StepClock:
    """The engine's steps so far, as seconds."""

    engine = None

    def __call__(self) -> float:
        return 0.0 if self.engine is None else float(self.engine.stats.steps)


def stepped_engine(pipe, **options) -> Engine:
    clock = StepClock()
    clock.engine = Engine(pipe, prompt_tokens=32, clock=clock, **options)
    return clock.engine


def test_the_rate_is_images_over_the_seconds_of_the_latest_busy_rounds():
    throughput = Throughput(history=4)
    assert throughput.rate is None and throughput.expected_wait(Load(2, [], 0)) is None
    for _ in range(7):
        throughput.record_round(1.0, 0)
    throughput.record_round(1.0, 2)
    assert throughput.rate == pytest.approx(2 / 8)  # every round counts until the history holds 4 images
    throughput.record_round(2.0, 2)
    throughput.record_round(2.0, 2)  # now the last two rounds hold 4 images: the older ones drop out
    assert throughput.rate == pytest.approx(4 / 4)
    throughput.record_image(3.0)
    throughput.record_image(5.0)
    assert throughput.latency == pytest.approx(4.0)


def test_a_request_starts_when_the_lane_cycle_reaches_it():
    """Two lanes, images of 14 s at one per 7 s: lanes 10 s and 4 s into their images free in 4 s and 10 s,
    then every 14 s."""
    load = Load(lanes=2, elapsed=[10.0, 4.0], waiting=0)
    assert [load.start(position, 14.0) for position in range(4)] == [4.0, 10.0, 18.0, 24.0]
    assert Load(lanes=2, elapsed=[], waiting=0).start(1, 14.0) == 0.0  # two free lanes
    throughput = Throughput(history=2)
    throughput.record_round(14.0, 2)
    throughput.record_image(14.0)
    assert throughput.expected_wait(Load(2, [10.0, 4.0], 2)) == 18.0 + 14.0
    assert throughput.retry_after(Load(2, [10.0, 4.0], 2), limit=30.0) == 2.0


def _burst(engine, requests=40, clients=20) -> collections.Counter:
    """`clients` threads share `requests` requests, each waiting for its answer before its next one."""
    answers: dict[int, str] = {}
    refusals: list[Overloaded] = []
    lock = threading.Lock()

    def client(ids):
        for seed in ids:
            try:
                engine.submit("a red circle", seed=seed, output_type="latent").result(timeout=120)
                answer = "image"
            except Overloaded as refused:
                answer = "overloaded"
                refusals.append(refused)
            except QueueFull:
                answer = "queue full"
            except Cancelled:
                answer = "late"
            with lock:
                assert seed not in answers, "answered twice"
                answers[seed] = answer

    threads = [threading.Thread(target=client, args=(range(c, requests, clients),)) for c in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert sorted(answers) == list(range(requests)), "a request was never answered"
    limit = engine.time_limit
    assert all(r.expected_wait > limit and r.retry_after >= 1 for r in refusals)
    return collections.Counter(answers.values())


def test_a_burst_is_refused_at_once_rather_than_left_to_time_out(pipe):
    """40 requests, 20 at a time, for 2 lanes whose images take 14 steps and a time limit of 40 steps: the
    engine (its throughput measured by a warm-up) takes what it can finish and refuses the rest at once."""
    with stepped_engine(pipe, lanes=2, max_queue=16, time_limit=40) as engine:
        engine.warm_up("ar")
        answers = _burst(engine)
        stats = engine.stats
    assert answers["late"] == 0
    assert answers["image"] >= 6 and answers["overloaded"] >= 10
    assert stats.overloaded == answers["overloaded"] and stats.expired == 0


def test_negative_control_an_engine_with_no_estimate_queues_the_burst_to_time_out(pipe):
    """The same burst on a cold engine (nothing measured yet: nothing refused for lateness) leaves many
    requests to time out in the queue, as before deadline-aware admission."""
    with stepped_engine(pipe, lanes=2, max_queue=16, time_limit=40) as engine:
        answers = _burst(engine)
    assert answers["late"] >= 5


def test_a_full_queue_says_when_to_retry_from_the_estimate(pipe):
    """One lane, held after the first step of its image (14 steps long): the next lane frees in 13 steps."""
    held, release = threading.Event(), threading.Event()

    def hold(codes):
        held.set()
        release.wait(timeout=60)

    with stepped_engine(pipe, lanes=1, max_queue=2) as engine:
        engine.warm_up("ar", images=1)
        holding = engine.submit("a red circle", seed=0, on_step=hold)
        assert held.wait(timeout=60)
        waiting = [engine.submit("star", seed=seed) for seed in (1, 2)]
        with pytest.raises(QueueFull, match=r"2 requests are waiting \(max_queue=2\)") as refused:
            engine.submit("star", seed=3)
        release.set()
        for request in (holding, *waiting):
            request.result(timeout=60)
    assert refused.value.retry_after == 13.0 and engine.stats.queue_full == 1


def test_estimates_are_reported(pipe):
    with stepped_engine(pipe, lanes=2, time_limit=100) as engine:
        assert engine.estimate().throughput is None
        engine.warm_up("ar")
        estimate = engine.estimate()
    assert estimate.throughput == pytest.approx(2 / 14) and estimate.latency == 14.0
    assert estimate.expected_wait == 14.0  # two free lanes: its own decode


def test_a_sampler_slower_than_the_limit_is_refused_after_it_times_out_and_others_still_run(pipe):
    """The warm-up measures `mc-sjd` (a few steps an image); `ar` takes 14 steps, past a limit of 10. The
    first `ar` request runs and times out; its seconds count as a lower bound of `ar`'s latency, so the
    next `ar` requests are refused at once (`Overloaded`, with Retry-After) instead of each timing out in
    turn, while `mc-sjd` requests, judged by their own group's latency, are still admitted and answered."""
    with stepped_engine(pipe, lanes=1, max_queue=4, time_limit=10) as engine:
        engine.warm_up("mc-sjd:window=8", images=2)
        fast = engine.stats.steps / 2
        assert fast < 10
        answers = []
        for seed in range(6):
            try:
                engine.submit("a red circle", sampler="ar", seed=seed, output_type="latent").result(
                    timeout=120
                )
                answers.append("image")
            except Overloaded as refused:
                assert refused.retry_after >= 1 and refused.expected_wait > 10
                answers.append("overloaded")
            except Cancelled:
                answers.append("late")
        assert answers == ["late"] + ["overloaded"] * 5
        for seed in range(3):  # another sampler is judged by its own latency: still admitted
            engine.submit("a red circle", sampler="mc-sjd:window=8", seed=seed, output_type="latent").result(
                timeout=120
            )
        assert engine.stats.expired == 1


def test_a_groups_latency_is_forgotten_after_the_horizon():
    throughput = Throughput(history=4, horizon=100.0)
    throughput.record_image(2.0)  # the engine's, no group
    throughput.record_image(30.0, "ar", now=10.0)
    assert throughput.group_latency("ar", now=50.0) == 30.0
    assert throughput.group_latency("mc-sjd", now=50.0) == pytest.approx(16.0)  # no samples: the engine's
    assert throughput.group_latency("ar", now=111.0) == pytest.approx(16.0)  # forgotten: tried again
