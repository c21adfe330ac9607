"""The continuous-batching engine: each request decodes exactly as it would alone, whatever runs beside it."""

import random
import threading

import pytest
import torch

from arjet.engine import Cancelled, Engine, QueueFull
from arjet.session import DecodingSession
from arjet.testing import tiny_pipeline

GRIDS = {"janus": (4, 4), "emu3": (3, 5), "lumina_mgpt": (3, 5), "glm_image": (3, 5)}
PROMPTS = [
    "a red circle",
    "a blue square on a green background",
    "star",
    "a small yellow triangle left of a circle",
    "a",
]
SAMPLERS = [
    "ar",
    "sjd:window=3",
    "mc-sjd:window=4",
    "sjd-pac:window=9,tree_width=2",
    "lantern:k=2,delta=0.1",
    "mc-sjd:window=4,coupling=gumbel",
    "sjd:window=4,reuse=0.5",
    "gsd:window=3",
    "sjd:window=3,acceptance=entropy",
]


def _pipe(family):
    pipe = tiny_pipeline(family, grid=GRIDS[family], vocab_size=8, logit_scale=3.0)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _alone(pipe, sampler, seeds):
    return [  # eager steps (on a GPU the default captures them)
        pipe(prompt, sampler=sampler, seed=seed, output_type="latent", compile=False).codes[0]
        for prompt, seed in zip(PROMPTS, seeds, strict=True)
    ]


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_a_request_decodes_as_it_would_alone_whatever_the_arrival_order(family, sampler):
    """Bit for bit (float32 on the CPU): prompts of different lengths, lanes reused, three arrival orders."""
    pipe = _pipe(family)
    seeds = [10 + i for i in range(len(PROMPTS))]
    alone = _alone(pipe, sampler, seeds)
    preview = pipe.preview_grid(GRIDS[family])
    preview_cells = 0 if preview is None else preview[0] * preview[1]
    for lanes, order in ((1, [0, 1, 2, 3, 4]), (3, [4, 3, 2, 1, 0]), (3, [2, 0, 4, 1, 3])):
        with Engine(pipe, lanes=lanes, prompt_tokens=32) as engine:
            requests = {i: engine.submit(PROMPTS[i], sampler=sampler, seed=seeds[i]) for i in order}
            results = {i: request.result(timeout=120) for i, request in requests.items()}
        for i, codes in enumerate(alone):
            assert torch.equal(results[i].codes, codes), (lanes, order, i)
            assert results[i].stats.tokens == codes.numel() + preview_cells


def test_mixed_samplers_share_one_engine():
    """Requests of several samplers (groups side by side, and a sampler that cannot share lanes, which runs
    as one call) arrive interleaved at random moments; each still decodes as alone."""
    pipe = _pipe("emu3")
    samplers = ["ar", "mc-sjd:window=4", "zipar:w=2", "sjd-pac:window=9,tree_width=2", "pjd:c=2,window=3"]
    jobs = [(PROMPTS[i % len(PROMPTS)], samplers[i % len(samplers)], 100 + i) for i in range(12)]
    random.Random(3).shuffle(jobs)
    expected = [pipe(p, sampler=s, seed=seed, output_type="latent").codes[0] for p, s, seed in jobs]
    with Engine(pipe, lanes=2, max_groups=2, prompt_tokens=32) as engine:
        submitted = []
        for j, (prompt, sampler, seed) in enumerate(jobs):
            submitted.append(engine.submit(prompt, sampler=sampler, seed=seed))
            if j % 3 == 2:
                submitted[-1].result(timeout=120)  # let the engine run a while before more arrive
        results = [request.result(timeout=120) for request in submitted]
    for result, codes in zip(results, expected, strict=True):
        assert torch.equal(result.codes, codes)


def test_a_family_with_a_preview_grid_runs_as_whole_calls_exactly():
    """GLM-Image decodes a preview grid, then the target: the engine runs its requests (adaptive ones with
    the adaptive mode's widest sampler) as `pipe(...)` calls, each image as it would decode alone."""
    pipe = _pipe("glm_image")
    with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
        requests = [engine.submit(p, sampler="adaptive", seed=i) for i, p in enumerate(PROMPTS[:3])]
        results = [request.result(timeout=120) for request in requests]
    assert engine.stats.steps == 0 and engine.stats.images == 3  # no lane stepped
    for i, result in enumerate(results):
        alone = pipe(PROMPTS[i], sampler="mc-sjd:window=16", seed=i, output_type="latent").codes[0]
        assert torch.equal(result.codes, alone)
        assert result.stats.sampler == "adaptive"


def test_whole_calls_step_in_the_engines_compile_mode(monkeypatch):
    """A family that runs as whole calls steps as the engine was told (GLM-Image's calls ran eagerly under a
    captured engine on the GPU). The mode is recorded, then the call runs eagerly: no compile on the CPU."""
    pipe = _pipe("glm_image")
    modes: list[str] = []
    call = type(pipe).__call__

    def recording(self, *args, compile=False, **kwargs):
        modes.append(compile)
        return call(self, *args, **kwargs)

    monkeypatch.setattr(type(pipe), "__call__", recording)
    with Engine(pipe, lanes=2, prompt_tokens=32, compile="inductor") as engine:
        engine.generate(PROMPTS[:2], seed=0, sampler="ar")
    assert modes and set(modes) == {"inductor"}


def test_finished_lanes_are_refilled_at_the_next_step():
    """Under a steady queue every lane holds an image at almost every step (only the last images finish
    with lanes left empty)."""
    pipe = _pipe("emu3")
    with Engine(pipe, lanes=4, prompt_tokens=32) as engine:
        engine.generate([PROMPTS[i % 5] for i in range(40)], seed=0, sampler="mc-sjd:window=4")
        stats = engine.stats
    assert stats.images == 40 and stats.utilisation >= 0.9


def _holding(engine):
    """A request that holds the engine's only lane (its thread waits in the request's step callback) until
    the returned event is set; the requests submitted meanwhile wait in the queue."""
    first_step, release = threading.Event(), threading.Event()

    def hold(codes):
        first_step.set()
        release.wait(timeout=60)

    engine.submit("a red circle", seed=99, on_step=hold)
    assert first_step.wait(timeout=60)
    return release


def test_the_queue_is_bounded_and_requests_can_be_cancelled():
    pipe = _pipe("janus")
    with Engine(pipe, lanes=1, max_queue=2, prompt_tokens=32) as engine:
        release = _holding(engine)
        first = engine.submit("a red circle", seed=0)
        second = engine.submit("a blue square", seed=1)
        with pytest.raises(QueueFull, match=r"2 requests are waiting \(max_queue=2\)"):
            engine.submit("star", seed=2)
        first.cancel()
        release.set()
        with pytest.raises(Cancelled, match="cancelled before it started"):
            first.result(timeout=60)
        assert second.result(timeout=60).codes.shape == GRIDS["janus"]


def test_an_engine_that_is_not_started_refuses_requests_naming_start():
    """A request queued before `start` would wait for a decode thread that does not exist."""
    engine = Engine(_pipe("janus"), lanes=1, prompt_tokens=32)
    with pytest.raises(RuntimeError, match=r"the engine is not started.*call engine.start\(\) first"):
        engine.submit("a red circle", seed=0)
    with pytest.raises(RuntimeError, match="the engine is not started"):
        engine.generate(["a red circle", "star"])
    assert engine.queued == 0 and engine.state == "not started"
    with engine:
        assert engine.submit("a red circle", seed=0).result(timeout=60).codes.shape == GRIDS["janus"]


def test_generate_queues_all_of_its_prompts_or_none():
    """More prompts than the queue holds, more than its room now, or a bad prompt among them: nothing of the
    call is queued, so nothing decodes for nobody and other callers keep the room."""
    pipe = _pipe("janus")
    with Engine(pipe, lanes=1, max_queue=8, prompt_tokens=32) as engine:
        release = _holding(engine)
        with pytest.raises(
            ValueError, match=r"20 prompts are more than this engine's queue holds \(max_queue=8"
        ):
            engine.generate(["a red circle"] * 20)
        assert engine.queued == 0
        others = [engine.submit("star", seed=seed) for seed in range(5)]
        with pytest.raises(
            QueueFull, match=r"4 more requests do not fit: 5 requests are waiting \(max_queue"
        ):
            engine.generate(["a red circle"] * 4)
        assert engine.queued == 5
        with pytest.raises(ValueError, match="prompt must not be empty"):
            engine.generate(["a red circle", "a blue square", ""])
        assert engine.queued == 5 and engine.stats.queue_full == 1
        release.set()
        assert [request.result(timeout=60).codes.shape for request in others] == [GRIDS["janus"]] * 5


def test_generate_cancels_its_other_requests_when_one_fails():
    """The first image's step callback raises: `generate` raises it, and its other images are cancelled
    rather than decoded for nobody (a later request, queued behind them, is the only image made after)."""
    pipe = _pipe("janus")
    calls, cancelled = [], threading.Event()

    def watch(codes):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a watcher's bug")
        cancelled.wait(timeout=60)  # the next image holds its lane until `generate` has cancelled it

    with Engine(pipe, lanes=1, prompt_tokens=32) as engine:
        with pytest.raises(RuntimeError, match="a watcher's bug"):
            engine.generate(PROMPTS[:4], seed=0, on_step=watch)
        cancelled.set()
        engine.submit("star", seed=9).result(timeout=60)
        assert engine.stats.images == 1 and engine.queued == 0


EXIT_SCRIPT = """
from arjet.engine import Engine
from arjet.testing import tiny_pipeline

pipe = tiny_pipeline("janus", grid=(8, 8), vocab_size=8, logit_scale=3.0)
pipe.set_progress_bar_config(disable=True)
engine = Engine(pipe, lanes=2, prompt_tokens=32).start()
requests = [engine.submit("a red circle", seed=seed) for seed in range(16)]
requests[0].result(timeout=120)
print("pending at exit:", engine.queued + engine.busy, flush=True)
"""


def test_a_script_that_exits_with_requests_decoding_exits_cleanly(tmp_path):
    """No `close()`: the interpreter closes the engine at exit, instead of stopping its daemon thread
    inside a torch operation (which aborted the process: "terminate called without an active
    exception", exit status 134)."""
    import subprocess
    import sys

    (tmp_path / "script.py").write_text(EXIT_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "script.py")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "terminate called" not in done.stderr
    pending = int(done.stdout.split("pending at exit:")[1])
    assert pending > 0  # the case under test: the engine still had work when the script ended


def test_a_request_past_its_time_limit_frees_its_lane():
    pipe = _pipe("janus")
    release = threading.Event()

    def slow(codes):  # the engine's thread waits here after the request's first step
        release.wait(timeout=30)

    with Engine(pipe, lanes=1, prompt_tokens=32) as engine:
        late = engine.submit("a red circle", seed=0, time_limit=0.05, on_step=slow)
        after = engine.submit("a blue square", seed=1)
        threading.Timer(0.5, release.set).start()
        with pytest.raises(Cancelled, match="past its time limit"):
            late.result(timeout=60)
        assert torch.equal(
            after.result(timeout=60).codes, pipe("a blue square", seed=1, output_type="latent").codes[0]
        )


def test_codes_stream_to_a_watcher_as_they_are_decoded():
    pipe = _pipe("lumina_mgpt")
    seen = []
    with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
        result = engine.submit("a red circle", seed=4, sampler="sjd:window=3", on_step=seen.append).result(60)
    decoded = [int((codes >= 0).sum()) for codes in seen]
    assert decoded == sorted(decoded) and decoded[0] > 0 and decoded[-1] < result.codes.numel()
    assert all(torch.equal(codes[codes >= 0], result.codes[codes >= 0]) for codes in seen)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sampler": "sjd:windw=3"}, "windw"),
        ({"height": 7}, "height"),
        ({"temperature": -1.0}, "temperature"),
        ({"seed": "x"}, "seed"),
    ],
)
def test_bad_requests_are_refused_before_they_queue(options, message):
    engine = Engine(_pipe("janus"), lanes=1, prompt_tokens=32)
    with pytest.raises(ValueError, match=message):
        engine.submit("a red circle", **options)
    assert engine.queued == 0


def test_a_prompt_longer_than_the_lanes_prompt_region_is_refused():
    engine = Engine(_pipe("emu3"), lanes=1, prompt_tokens=8)
    with pytest.raises(ValueError, match="more than this engine's prompt_tokens=8"):
        engine.submit("a blue square on a green background next to a red circle")


def test_closing_fails_the_requests_still_decoding_or_waiting():
    engine = Engine(_pipe("lumina_mgpt"), lanes=1, prompt_tokens=32)
    first_step, release = threading.Event(), threading.Event()

    def hold(codes):  # the engine's thread waits here after the request's first step
        first_step.set()
        release.wait(timeout=30)

    engine.start()
    decoding = engine.submit("a red circle", seed=0, on_step=hold)
    waiting = engine.submit("a blue square", seed=1)
    assert first_step.wait(timeout=60)
    closer = threading.Thread(target=engine.close)
    closer.start()
    while not engine.closing:
        closer.join(timeout=0.01)
    release.set()
    closer.join(timeout=60)
    for request in (decoding, waiting):
        with pytest.raises(Cancelled, match="the engine stopped"):
            request.result(timeout=60)
    with pytest.raises(RuntimeError, match="the engine is closed"):
        engine.submit("star")
    with pytest.raises(RuntimeError, match="does not start again; make a new Engine"):
        engine.start()  # it returned as if started, and its state read "failed"
    with pytest.raises(RuntimeError, match="does not start again"), engine:
        pass


@pytest.mark.cuda
@pytest.mark.parametrize("sampler", ["ar", "mc-sjd:window=4", "sjd-pac:window=9,tree_width=2"])
def test_captured_lanes_decode_as_alone_on_the_gpu(family, sampler):
    """On CUDA every (bucket of lanes, window) step is one captured graph, reused by every image that
    passes through the lanes; each image is still the one the eager `pipe(...)` makes alone."""
    pipe = _pipe(family).to("cuda")
    seeds = [20 + i for i in range(len(PROMPTS))]
    alone = _alone(pipe, sampler, seeds)
    with Engine(pipe, lanes=2, prompt_tokens=32, compile="cuda-graphs") as engine:
        results = engine.generate(PROMPTS, seed=20, sampler=sampler)
        graphs = sum(len(runner.graphs) for group in engine.groups for runner in group.runners.values())
    for result, codes in zip(results, alone, strict=True):
        assert torch.equal(result.codes, codes.cpu())
    if pipe.preview_grid(GRIDS[family]) is None:
        assert graphs >= 1
    else:  # GLM-Image runs as whole calls (two grids), each capturing its own steps
        assert graphs == 0 and all(r.stats.extra["graph_captures"] >= 1 for r in results)


@pytest.mark.parametrize("sampler", ["ar", "mc-sjd:window=4", "sjd-pac:window=9,tree_width=2", "adaptive"])
def test_the_captured_lanes_path_keys_one_runner_per_bucket_and_window(sampler, monkeypatch):
    """The engine's captured path on the CPU, the runner's replay replaced by an eager step: one runner per
    (bucket of lanes, adaptive window), whatever the sampler's stepper holds; every step's span is one of
    the captured session's two sizes, and each image decodes as alone."""
    import math

    from arjet.engine import lanes as lanes_module
    from arjet.session.capture import CAPTURED_SPAN_SIZES, CudaGraphRunner

    spans: list[tuple[int, int]] = []  # (span, capacity) of every step

    class EagerRunner(CudaGraphRunner):
        def __call__(self, step):
            spans.append((self.session.span, self.session.capacity))
            step()

    monkeypatch.setattr(lanes_module, "CudaGraphRunner", EagerRunner)
    monkeypatch.setattr(lanes_module, "CAPTURED_MODES", ("none",))  # "capture" the eager mode
    monkeypatch.setattr(DecodingSession, "span_step_min", 1)  # spans as narrow as the sizes allow
    pipe = tiny_pipeline(
        "emu3", grid=(8, 8), vocab_size=8, logit_scale=3.0
    )  # the image outgrows half the cache
    pipe.set_progress_bar_config(disable=True)
    seeds = [40 + i for i in range(len(PROMPTS))]
    alone = _alone(pipe, sampler, seeds) if sampler != "adaptive" else None
    with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
        results = engine.generate(PROMPTS, seed=40, sampler=sampler)
        keys = [key for group in engine.groups for key in group.runners]
    assert CAPTURED_SPAN_SIZES == 2 and spans
    assert all(span in (math.ceil(capacity / 2), capacity) for span, capacity in spans)
    if sampler == "ar":  # one cell a step: the decode starts in the first size and grows into the second
        assert len({span for span, _ in spans}) == 2
    assert len(keys) == len(set(keys))
    if sampler == "adaptive":
        assert all(window is not None for _, window in keys)
    else:
        assert all(window is None for _, window in keys)
        for result, codes in zip(results, alone, strict=True):
            assert torch.equal(result.codes, codes)


# -- bad arguments -------------------------------------------------------------------------------------
def test_a_step_callback_that_is_not_a_function_is_refused_at_submit():
    engine = Engine(_pipe("janus"), lanes=1, prompt_tokens=32)
    with pytest.raises(ValueError, match="on_step must be a function of the codes or None, got 5"):
        engine.submit("a red circle", on_step=5)
    assert engine.queued == 0


@pytest.mark.parametrize("seed", ["1", 1.5, True, -1, None, 2**63 - 1])
def test_generate_refuses_a_seed_that_is_not_one_for_every_prompt(seed):
    engine = Engine(_pipe("janus"), lanes=1, prompt_tokens=32)
    with pytest.raises(ValueError, match=r"seed must be an integer with 0 <= seed and seed \+ 1 < 2\*\*63"):
        engine.generate(["a red circle", "star"], seed=seed)
    with pytest.raises(ValueError, match="seed must be"):
        engine.submit("a red circle", seed="1")
    assert engine.queued == 0


@pytest.mark.parametrize("limit", ["5", -1, 0, float("nan"), float("inf"), True])
def test_a_time_limit_must_be_a_positive_number_of_seconds(limit):
    pipe = _pipe("janus")
    with pytest.raises(ValueError, match=r"time_limit must be a finite number > 0 \(seconds, or None"):
        Engine(pipe, time_limit=limit)
    engine = Engine(pipe, lanes=1, prompt_tokens=32)
    with pytest.raises(ValueError, match="time_limit must be a finite number > 0"):
        engine.submit("a red circle", time_limit=limit)
    assert engine.queued == 0


def test_lanes_are_bounded_and_must_fit_in_memory(monkeypatch):
    from arjet.engine import lanes as lanes_module

    pipe = _pipe("janus")
    with pytest.raises(ValueError, match=r"lanes must be an integer from 1 to 1024, got 1000000000"):
        Engine(pipe, lanes=10**9)
    monkeypatch.setattr(lanes_module, "available_bytes", lambda device: 10**6)  # 1 MB free
    with pytest.raises(
        ValueError, match=r"lanes=1024 in up to 2 group\(s\) .* GB of KV cache .* free on cpu"
    ):
        Engine(pipe, lanes=1024)
    Engine(pipe, lanes=1, prompt_tokens=8, max_groups=1)  # a few kB fit


def test_the_lane_memory_check_sizes_the_cache_in_the_ar_models_dtype(monkeypatch):
    """GLM-Image's first component (what `pipe.dtype` reads) is its text encoder, not the AR model whose
    KV cache the lanes hold: the estimate takes the AR model's dtype."""
    from arjet.engine import lanes as lanes_module

    pipe = tiny_pipeline("glm_image", grid=GRIDS["glm_image"], vocab_size=8)
    pipe.text_encoder.to(torch.float16)
    assert pipe.dtype == torch.float16
    seen = []

    def spy(config, dtype):
        seen.append(dtype)
        return kv_bytes_per_token(config, dtype)

    kv_bytes_per_token = lanes_module.kv_bytes_per_token
    monkeypatch.setattr(lanes_module, "kv_bytes_per_token", spy)
    Engine(pipe, lanes=1, prompt_tokens=8, max_groups=1)
    assert seen == [torch.float32]


def test_an_engine_takes_a_config_and_overrides():
    """`Engine(pipe, config, **overrides)`: a named config (the faces' defaults) with fields replaced; the
    flat keywords alone keep working, and the bounds are `arjet.limits`'."""
    from arjet.limits import DEFAULT_ENGINE, DEMO_ENGINE, MAX_LANES, SERVE_ENGINE, EngineConfig

    pipe = _pipe("janus")
    assert (SERVE_ENGINE.lanes, SERVE_ENGINE.max_queue, SERVE_ENGINE.time_limit) == (8, 64, 120.0)
    assert (DEMO_ENGINE.lanes, DEMO_ENGINE.max_queue, DEMO_ENGINE.time_limit) == (4, 16, 60.0)
    assert EngineConfig() == DEFAULT_ENGINE and MAX_LANES == 1024
    engine = Engine(pipe, SERVE_ENGINE, lanes=1, prompt_tokens=32)
    assert engine.config == EngineConfig(lanes=1, max_queue=64, prompt_tokens=32, time_limit=120.0)
    assert (engine.lanes, engine.max_queue, engine.time_limit, engine.compile) == (1, 64, 120.0, "none")
    flat = Engine(pipe, lanes=2, max_queue=5, prompt_tokens=32)
    assert flat.config == EngineConfig(lanes=2, max_queue=5, prompt_tokens=32)
    with pytest.raises(ValueError, match="compile must be True, False or one of none, cuda-graphs"):
        EngineConfig(compile="fast")
    with pytest.raises(ValueError, match="config must be an arjet.limits.EngineConfig or None, got 8"):
        Engine(pipe, 8)
    with pytest.raises(TypeError, match="lane"):
        Engine(pipe, lane=2)


def test_sampling_options_go_to_submit_whole_or_as_keywords():
    """`submit(sampling=SamplingOptions(...))` is `submit(temperature=..., ...)`: the same group, the same
    codes; giving both, or a keyword that is no option, is refused before anything is queued."""
    from arjet.samplers import SamplingOptions

    pipe = _pipe("janus")
    options = SamplingOptions(guidance_scale=2.0, temperature=0.7, top_k=3)
    with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
        whole = engine.submit(PROMPTS[0], sampler="sjd:window=3", seed=4, sampling=options)
        flat = engine.submit(PROMPTS[0], sampler="sjd:window=3", seed=4, **options.kwargs())
        assert whole.group == flat.group and whole.group.sampling == options
        assert torch.equal(whole.result(timeout=120).codes, flat.result(timeout=120).codes)
        left_out = engine.submit(PROMPTS[1], seed=1, output_type="latent")
        assert left_out.group.sampling == SamplingOptions(
            pipe.checkpoint_guidance_scale(), 1.0, pipe.default_top_k, None
        )
        left_out.result(timeout=120)
        with pytest.raises(ValueError, match="pass sampling= or temperature=, not both"):
            engine.submit("a", sampling=options, temperature=0.5)
        with pytest.raises(TypeError, match="submit\\(\\) got an unexpected keyword argument 'colour'"):
            engine.submit("a", colour="red")
        assert engine.queued == 0
    expected = pipe(PROMPTS[0], sampler="sjd:window=3", seed=4, output_type="latent", **options.kwargs())
    assert torch.equal(whole.result().codes, expected.codes[0])


# -- failures stay with what failed -----------------------------------------------------------------------
@pytest.mark.parametrize("sampler", ["mc-sjd:window=4", "zipar:w=2"])
def test_a_step_callback_that_raises_fails_only_its_own_request(sampler):
    """In lanes and in a whole call (zipar): the others decode as alone, and the engine goes on."""
    pipe = _pipe("emu3")

    def broken(codes):
        raise RuntimeError("the watcher broke")

    with Engine(pipe, lanes=3, prompt_tokens=32) as engine:
        first = engine.submit(PROMPTS[0], sampler=sampler, seed=1)
        bad = engine.submit(PROMPTS[1], sampler=sampler, seed=2, on_step=broken)
        last = engine.submit(PROMPTS[2], sampler=sampler, seed=3)
        with pytest.raises(RuntimeError, match="the watcher broke"):
            bad.result(timeout=60)
        results = [request.result(timeout=60) for request in (first, last)]
        later = engine.submit(PROMPTS[3], sampler=sampler, seed=4).result(timeout=60)
        assert engine.state == "running" and engine.stats.failed == 1
    for result, (prompt, seed) in zip(
        [*results, later], [(PROMPTS[0], 1), (PROMPTS[2], 3), (PROMPTS[3], 4)], strict=True
    ):
        assert torch.equal(
            result.codes, pipe(prompt, sampler=sampler, seed=seed, output_type="latent").codes[0]
        )


class _Stop(BaseException):
    """A callback's own BaseException, neither an Exception nor one of Python's."""


@pytest.mark.parametrize("stop", [SystemExit(3), KeyboardInterrupt(), GeneratorExit(), _Stop("halt")])
@pytest.mark.parametrize("sampler", ["sjd:window=3", "zipar:w=2"])
def test_a_step_callback_that_raises_a_base_exception_fails_only_its_own_request(sampler, stop):
    """A callback's SystemExit or KeyboardInterrupt is its own failure, not the decode thread's: the request
    fails as DecodeFailed naming it (not raising it into the waiter's thread), the engine keeps running."""
    from arjet.engine import DecodeFailed

    pipe = _pipe("janus")

    def broken(codes):
        raise stop

    with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
        bad = engine.submit(PROMPTS[0], sampler=sampler, seed=1, on_step=broken)
        with pytest.raises(DecodeFailed, match="the request's on_step raised") as failure:
            bad.result(timeout=60)
        assert failure.value.__cause__ is stop
        later = engine.submit(PROMPTS[1], sampler=sampler, seed=2).result(timeout=60)
        assert engine.state == "running" and engine.stats.failed == 1
    expected = pipe(PROMPTS[1], sampler=sampler, seed=2, output_type="latent").codes[0]
    assert torch.equal(later.codes, expected)


@pytest.mark.parametrize("sampler", ["sjd:window=3", "zipar:w=2"])
def test_a_model_whose_logits_are_not_finite_fails_the_request_and_the_engine_goes_on(sampler):
    from arjet.engine import DecodeFailed

    pipe = _pipe("janus")
    sound = {name: weight.clone() for name, weight in pipe.model.state_dict().items()}
    with torch.no_grad():
        for weight in pipe.model.parameters():
            weight.fill_(float("nan"))
    with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
        with pytest.raises(DecodeFailed, match=r"the model's logits are not finite \(NaN or inf\)"):
            engine.submit(PROMPTS[0], sampler=sampler, seed=1).result(timeout=60)
        pipe.model.load_state_dict(sound)
        later = engine.submit(PROMPTS[1], sampler=sampler, seed=2).result(timeout=60)
        assert engine.state == "running"
    expected = pipe(PROMPTS[1], sampler=sampler, seed=2, output_type="latent").codes[0]
    assert torch.equal(later.codes, expected)


def _failing(method, sampler, error):
    """`method` of LaneGroup, raising `error` for the group of `sampler`."""

    def run(self, *args, **kwargs):
        if self.key.sampler == sampler:
            raise error
        return method(self, *args, **kwargs)

    return run


def test_a_group_whose_step_fails_fails_its_requests_only_and_the_engine_goes_on(monkeypatch):
    from arjet.engine import DecodeFailed
    from arjet.engine.lanes import LaneGroup

    pipe = _pipe("emu3")
    step = LaneGroup.step
    monkeypatch.setattr(
        LaneGroup, "step", _failing(step, "sjd:window=3", MemoryError("no room for the tree"))
    )
    with Engine(pipe, lanes=2, max_groups=2, prompt_tokens=32) as engine:
        doomed = [engine.submit(PROMPTS[i], sampler="sjd:window=3", seed=i) for i in range(3)]
        fine = [engine.submit(PROMPTS[i], sampler="ar", seed=i) for i in range(3)]
        for request in doomed:
            with pytest.raises(
                DecodeFailed, match=r"its group \(sjd:window=3, 3x5\) failed \(MemoryError: no room"
            ):
                request.result(timeout=60)
        codes = [request.result(timeout=60).codes for request in fine]
        monkeypatch.setattr(LaneGroup, "step", step)
        again = engine.submit(PROMPTS[0], sampler="sjd:window=3", seed=0).result(timeout=60)
        assert engine.state == "running"
    assert engine.stats.group_failures >= 1 and engine.stats.failed == 3
    for i, alone in enumerate(_alone(pipe, "ar", range(5))[:3]):
        assert torch.equal(codes[i], alone)
    assert torch.equal(again.codes, _alone(pipe, "sjd:window=3", range(5))[0])


def test_a_whole_call_that_fails_fails_its_requests_only(monkeypatch):
    """A sampler that cannot share lanes (zipar, eagle2) runs its requests as one call: a call that runs out
    of memory (eagle2's hostile trees did) fails those requests, and the engine goes on."""
    from arjet.engine import DecodeFailed
    from arjet.samplers.zipar import ZipAR

    def out_of_memory(self, decode):
        raise MemoryError("the tree needs GBs")

    pipe = _pipe("emu3")
    monkeypatch.setattr(ZipAR, "run", out_of_memory)
    with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
        doomed = [engine.submit(PROMPTS[i], sampler="zipar:w=2", seed=i) for i in range(2)]
        fine = engine.submit(PROMPTS[0], sampler="ar", seed=0)
        for request in doomed:
            with pytest.raises(DecodeFailed, match=r"its call failed \(MemoryError: the tree needs GBs\)"):
                request.result(timeout=60)
        assert torch.equal(fine.result(timeout=60).codes, _alone(pipe, "ar", range(5))[0])
        assert engine.state == "running" and engine.stats.failed == 2


def test_a_group_that_cannot_be_made_fails_its_requests_only(monkeypatch):
    from arjet.engine import DecodeFailed
    from arjet.engine.lanes import LaneGroup

    pipe = _pipe("janus")
    make = LaneGroup.__init__

    def out_of_memory(self, pipe, key, *args, **kwargs):
        if key.sampler == "mc-sjd:window=4":
            raise RuntimeError("CUDA out of memory")
        make(self, pipe, key, *args, **kwargs)

    monkeypatch.setattr(LaneGroup, "__init__", out_of_memory)
    with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
        doomed = engine.submit("a red circle", sampler="mc-sjd:window=4", seed=0)
        fine = engine.submit("a red circle", sampler="ar", seed=0)
        with pytest.raises(DecodeFailed, match="could not be made .*CUDA out of memory"):
            doomed.result(timeout=60)
        assert torch.equal(fine.result(timeout=60).codes, _alone(pipe, "ar", [0] * 5)[0])


def test_a_round_that_fails_outside_any_group_fails_what_is_in_flight_and_the_engine_goes_on(monkeypatch):
    from arjet.engine import DecodeFailed

    pipe = _pipe("janus")
    plan, calls = Engine._plan, []

    def broken_once(self):
        calls.append(1)
        if len(calls) == 1:
            raise AssertionError("a bug in planning")
        return plan(self)

    monkeypatch.setattr(Engine, "_plan", broken_once)
    with Engine(pipe, lanes=1, prompt_tokens=32) as engine:
        lost = engine.submit("a red circle", seed=0)
        with pytest.raises(
            DecodeFailed, match=r"the engine's round failed \(AssertionError: a bug in planning\)"
        ):
            lost.result(timeout=60)
        assert engine.submit("star", seed=1).result(timeout=60).codes.shape == GRIDS["janus"]


class Stop(BaseException):
    """Not an `Exception`: what stops the decode thread (as KeyboardInterrupt would)."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_decode_thread_that_dies_fails_its_requests_and_refuses_new_work(monkeypatch):
    from arjet.engine import EngineStopped

    def die(self):  # once there is work
        with self._lock:
            while not self._queue:
                self._lock.wait()
        raise Stop("stopped")

    monkeypatch.setattr(Engine, "_round", die)
    with Engine(_pipe("janus"), lanes=1, prompt_tokens=32) as engine:
        waiting = engine.submit("a red circle", seed=0)
        with pytest.raises(EngineStopped, match=r"the engine's decode thread stopped \(Stop\('stopped'\)\)"):
            waiting.result(timeout=60)
        assert engine.state == "failed" and isinstance(engine.error, Stop)
        with pytest.raises(EngineStopped, match="stopped after an error"):
            engine.submit("star")


# -- results carry images ------------------------------------------------------------------------------
@pytest.mark.parametrize("output_type", ["pil", "np", "pt", "latent"])
def test_results_carry_the_image_rendered_in_the_readers_thread(output_type, monkeypatch):
    import numpy as np

    pipe = _pipe("lumina_mgpt")
    alone = pipe("a red circle", seed=5, output_type=output_type).images[0]
    render, threads = type(pipe).render, []

    def recorded(self, *args, **kwargs):
        threads.append(threading.current_thread().name)
        return render(self, *args, **kwargs)

    monkeypatch.setattr(type(pipe), "render", recorded)
    with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
        result = engine.submit("a red circle", seed=5, output_type=output_type).result(timeout=60)
        assert threads == []  # nothing rendered on the decode thread
        image = result.image
    assert threads == ([] if output_type == "latent" else [threading.current_thread().name])
    assert np.array_equal(np.asarray(image), np.asarray(alone))
    with pytest.raises(ValueError, match="output_type must be one of"):
        Engine(pipe, lanes=1, prompt_tokens=32).submit("a", output_type="png")


def test_a_glm_image_result_renders_through_its_diffusion_stage():
    import numpy as np

    pipe = _pipe("glm_image")
    with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
        result = engine.submit(PROMPTS[0], seed=3, output_type="np").result(timeout=120)
    assert np.array_equal(result.image, pipe(PROMPTS[0], seed=3, output_type="np").images[0])


# -- warm-up --------------------------------------------------------------------------------------------
def test_after_a_warm_up_the_first_adaptive_request_measures_nothing(monkeypatch):
    from arjet.pipelines import adaptive

    measured = []
    measure = adaptive.CostModel.measure.__func__
    monkeypatch.setattr(
        adaptive.CostModel,
        "measure",
        classmethod(lambda cls, *a, **k: measured.append(1) or measure(cls, *a, **k)),
    )
    pipe = _pipe("emu3")
    with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
        warm = engine.warm_up()
        assert len(warm) == 2 and measured == [1] and engine.estimate().throughput is not None
        engine.submit("a blue square", sampler="adaptive", seed=9).result(timeout=60)
    assert measured == [1]


def test_a_whole_call_stays_within_the_pipelines_limits():
    """Requests of a sampler that cannot share lanes run as calls of at most `max_images_per_call` images
    (the demo's pipelines take one), each decoding as alone."""
    from arjet.limits import Limits

    pipe = _pipe("emu3")
    pipe.limits = Limits(max_images_per_call=1)
    with Engine(pipe, lanes=3, prompt_tokens=32) as engine:
        results = [engine.submit(p, sampler="zipar:w=2", seed=i) for i, p in enumerate(PROMPTS[:3])]
        codes = [request.result(timeout=60).codes for request in results]
    assert engine.stats.failed == 0
    for i, prompt in enumerate(PROMPTS[:3]):
        assert torch.equal(codes[i], pipe(prompt, sampler="zipar:w=2", seed=i, output_type="latent").codes[0])
