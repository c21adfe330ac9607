"""`compile="auto"`: one decision (eager on the CPU, captured steps on a GPU, compiled too where the use
lasts), a fall back to eager steps with one warning when a capture, replay or compile fails, and a bound on
an engine's captured graphs. Captured steps run here through a stand-in runner (`stand_in_runner`)."""

import random
import warnings

import pytest
import torch
from stand_in_runner import StandInRunner, failing

from arjet.engine import Engine
from arjet.engine import lanes as lanes_module
from arjet.limits import AUTO_COMPILE, DEFAULT_ENGINE, EngineConfig
from arjet.pipelines import ar_stage
from arjet.pipelines.inputs import GenerationInputs
from arjet.session import capture
from arjet.session import decoder as decoder_module
from arjet.session.capture import EagerFallback, GraphBudget, compile_mode
from arjet.testing import tiny_pipeline

from stats import drawn, exact_joint, goodness_of_fit

PROMPTS = ["a red circle", "a blue square on a green background", "star"]
SAMPLERS = ["ar", "sjd:window=3", "mc-sjd:window=4"]


def _pipe(grid=(3, 5)):
    pipe = tiny_pipeline("emu3", grid=grid, vocab_size=8, logit_scale=3.0)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _codes(pipe, sampler="sjd:window=3", **kwargs):
    return pipe(PROMPTS, sampler=sampler, seed=0, output_type="latent", **kwargs).codes


@pytest.fixture
def gpu_like(monkeypatch):
    """Steps "capture" on the CPU: `compile_mode` treats it as a GPU, the runners are stand-ins."""
    monkeypatch.setattr(capture, "captures_on", lambda device: True)
    monkeypatch.setattr(ar_stage, "CudaGraphRunner", StandInRunner)
    monkeypatch.setattr(lanes_module, "CudaGraphRunner", StandInRunner)


# -- the decision ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("device", "lasting", "mode"),
    [
        ("cpu", False, "none"),
        ("cpu", True, "none"),
        ("cuda", False, "cuda-graphs"),
        ("cuda", True, "inductor-graphs"),
    ],
)
def test_auto_is_eager_on_the_cpu_and_captured_on_a_gpu(device, lasting, mode):
    assert compile_mode(AUTO_COMPILE, torch.device(device), lasting=lasting) == mode
    fallen = EagerFallback()
    with pytest.warns(RuntimeWarning):
        fallen.fail("capture", RuntimeError("x"))
    assert compile_mode(AUTO_COMPILE, torch.device(device), lasting=lasting, fallback=fallen) == "none"
    assert compile_mode("cuda-graphs", torch.device("cuda"), fallback=fallen) == "cuda-graphs"  # explicit


def test_auto_is_the_default_everywhere_and_eager_on_the_cpu():
    """`pipe(...)`, `Engine` and `EngineConfig` default to "auto", which leaves the CPU's steps eager (the
    codes of before: `tests/samplers/test_golden.py`)."""
    pipe = _pipe()
    default = next(f.default for f in GenerationInputs.__dataclass_fields__.values() if f.name == "compile")
    assert default == AUTO_COMPILE == DEFAULT_ENGINE.compile
    call = pipe.check_inputs("a red circle")
    assert (call.compile, call.fallback) == ("none", None)
    assert Engine(pipe, lanes=1, prompt_tokens=32).compile == "none"
    assert torch.equal(_codes(pipe), _codes(pipe, compile=False))


def test_auto_captures_where_it_can(gpu_like):
    """On a "GPU" the call's steps go through the runner (captured, then replayed) and decode as eager ones."""
    pipe = _pipe()
    out = pipe(PROMPTS, sampler="sjd:window=3", seed=0, output_type="latent")
    counts = out.stats[0].extra
    assert counts["graph_captures"] >= 1 and counts["graph_replays"] > counts["graph_captures"]
    assert counts["graph_memory_bytes"] > 0
    assert torch.equal(out.codes, _codes(pipe, compile=False))
    assert pipe.eager_fallback.failure is None


# -- never worse than eager ------------------------------------------------------------------------------
def _failing_compile(monkeypatch):
    """Inductor fails at the first forward of a compiled layer (as a compiler error would); "auto" picks
    compiled layers for a call."""

    def compile(function, **options):
        def compiled(*args, **kwargs):
            raise RuntimeError("stand-in: BackendCompilerFailed: inductor raised")

        return compiled

    monkeypatch.setattr(decoder_module.torch, "compile", compile)
    monkeypatch.setattr(capture, "AUTO_ONE_OFF", "inductor-graphs")


@pytest.mark.parametrize("point", ["capture", "replay", "compile"])
def test_auto_falls_back_to_eager_steps_with_one_warning(point, gpu_like, monkeypatch):
    pipe = _pipe()
    eager = _codes(pipe, compile=False)
    if point == "compile":
        _failing_compile(monkeypatch)
    else:
        monkeypatch.setattr(ar_stage, "CudaGraphRunner", failing(point))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = _codes(pipe), _codes(pipe, sampler="ar")
    assert torch.equal(first, eager)
    assert torch.equal(second, _codes(pipe, sampler="ar", compile=False))
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1, messages
    assert (
        f"({point}: RuntimeError: stand-in" in messages[0] and "compile=False (--compile off)" in messages[0]
    )
    assert pipe.eager_fallback.failure.startswith(point)
    assert pipe.check_inputs("a red circle").compile == "none"  # later calls do not try again


@pytest.mark.parametrize("point", ["capture", "replay", "compile"])
def test_an_explicit_mode_raises_where_auto_falls_back(point, gpu_like, monkeypatch):
    pipe = _pipe()
    mode = "cuda-graphs"
    if point == "compile":
        _failing_compile(monkeypatch)
        mode = "inductor-graphs"
    else:
        monkeypatch.setattr(ar_stage, "CudaGraphRunner", failing(point))
    with pytest.raises(RuntimeError, match="stand-in"):
        _codes(pipe, compile=mode)
    assert pipe.eager_fallback.failure is None


def test_an_engine_under_auto_falls_back_and_says_so(gpu_like, monkeypatch):
    """A capture that fails in an engine's lanes: one warning, every request still decodes as alone, and
    `graph_counts` (what `/health` shows) names the failure."""
    pipe = _pipe()
    alone = [_one(pipe, prompt, "sjd:window=3", 30 + i) for i, prompt in enumerate(PROMPTS)]
    monkeypatch.setattr(lanes_module, "CudaGraphRunner", failing("capture"))
    monkeypatch.setattr(capture, "AUTO_LASTING", "cuda-graphs")  # no compile: this test is about capture
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
            results = engine.generate(PROMPTS, seed=30, sampler="sjd:window=3")
            counts = engine.graph_counts()
    for result, codes in zip(results, alone, strict=True):
        assert torch.equal(result.codes, codes)
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1
    assert counts["compile"] == "cuda-graphs" and counts["fell_back"].startswith("capture: RuntimeError")
    assert counts["graphs"] == 0


def _one(pipe, prompt, sampler, seed, size=None):
    height, width = size or (None, None)
    out = pipe(
        prompt, sampler=sampler, seed=seed, height=height, width=width, output_type="latent", compile=False
    )
    return out.codes[0]


# -- bounded graphs --------------------------------------------------------------------------------------
def test_a_thousand_mixed_requests_keep_the_graphs_under_the_limit(gpu_like, monkeypatch):
    """Three samplers x three sizes in bursts (groups made and dropped, buckets of lanes, spans): the engine
    never holds more than `max_graphs` graphs, drops the least recently used, and the images still decode as
    alone."""
    monkeypatch.setattr(capture, "AUTO_LASTING", "cuda-graphs")
    limit, highest = 2, []
    captured = GraphBudget.captured

    def checked(self, runner, span):
        captured(self, runner, span)
        highest.append(len(self._graphs))

    monkeypatch.setattr(GraphBudget, "captured", checked)
    pipe = _pipe()
    sizes = [(4, 4), (4, 6), (6, 6)]
    rng = random.Random(0)
    keys = [(rng.choice(SAMPLERS), rng.choice(sizes)) for _ in range(100)]  # bursts of 10 of one kind
    jobs = [(PROMPTS[i % 3], *keys[i // 10], i) for i in range(1000)]
    with Engine(pipe, EngineConfig(lanes=4, max_queue=1000, prompt_tokens=32, max_graphs=limit)) as engine:
        requests = [
            engine.submit(prompt, sampler=sampler, seed=seed, height=h, width=w)
            for prompt, sampler, (h, w), seed in jobs
        ]
        results = [request.result(timeout=600) for request in requests]
        counts = engine.graph_counts()
    assert highest and max(highest) <= limit
    assert counts["graphs"] <= limit and counts["max_graphs"] == limit
    assert counts["graph_evictions"] > 0 and counts["graph_replays"] > counts["graph_captures"]
    assert counts["graph_memory_bytes"] == counts["graphs"] * 1000  # the stand-in's bytes per graph
    for index in rng.sample(range(1000), 12):
        prompt, sampler, size, seed = jobs[index]
        assert torch.equal(results[index].codes, _one(pipe, prompt, sampler, seed, size))


def test_max_graphs_is_checked():
    with pytest.raises(ValueError, match="max_graphs must be an integer"):
        EngineConfig(max_graphs=0)
    assert EngineConfig(max_graphs=None).max_graphs is None


# -- bfloat16: distributions, not bits -------------------------------------------------------------------
def _draws_pass_the_distribution_test(pipe, sampler, modes):
    """For each compile mode, `sampler`'s codes from `pipe` (a 2 x 2 grid, 4 codes, on CUDA) pass the
    chi-square test against the exact joint of `ar` enumerated from the same model; returns each call's stats."""
    from arjet.samplers import LogitsPolicy

    grid, prompt, samples, alpha = (2, 2), "a red circle", 4000, 1e-5
    pipe.set_progress_bar_config(disable=True)
    policy = LogitsPolicy(temperature=0.8, top_k=3)
    exact = exact_joint(pipe, prompt, grid, policy, 3.0)
    stats = {}
    for mode in modes:
        out = pipe(
            prompt,
            sampler=sampler,
            num_images_per_prompt=samples,
            seed=0,
            guidance_scale=3.0,
            temperature=policy.temperature,
            top_k=policy.top_k,
            output_type="latent",
            compile=mode,
        )
        assert goodness_of_fit(drawn(out).cpu(), exact) > alpha, mode
        stats[mode] = out.stats[0].extra
    return stats


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="captured steps need a CUDA device")
@pytest.mark.parametrize("sampler", ["ar", "sjd:window=3"])
def test_captured_bfloat16_decodes_pass_the_same_distribution_test_as_eager_ones(sampler):
    """In bfloat16 captured and eager kernels round differently, so their codes may differ: both must pass
    the chi-square test against the exact joint of `ar` (enumerated from the same bfloat16 model)."""
    pipe = tiny_pipeline("janus", grid=(2, 2), vocab_size=4, logit_scale=3.0).to("cuda", torch.bfloat16)
    _draws_pass_the_distribution_test(pipe, sampler, ("cuda-graphs", False))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="captured steps need a CUDA device")
@pytest.mark.parametrize("sampler", ["ar", "sjd:window=3"])
def test_auto_and_compiled_steps_over_int8_weights_pass_the_distribution_test(sampler):
    """Over torchao's int8 weights "auto" captures a call's steps without falling back to eager, and
    "inductor-graphs" (an engine's "auto") runs the compiled layers inside the captured steps: each passes
    the chi-square test against the exact joint of the quantized bfloat16 model, as eager steps do."""
    pipe = tiny_pipeline("janus", grid=(2, 2), vocab_size=4, logit_scale=3.0).to("cuda", torch.bfloat16)
    pipe.quantize("int8")
    stats = _draws_pass_the_distribution_test(pipe, sampler, (AUTO_COMPILE, "inductor-graphs", False))
    assert pipe.eager_fallback.failure is None
    for mode in (AUTO_COMPILE, "inductor-graphs"):
        assert stats[mode]["graph_captures"] >= 1, mode
