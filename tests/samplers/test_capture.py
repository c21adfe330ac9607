"""The ways a decode step can run: eagerly, with narrow attention spans, compiled, or as CUDA graphs; all give
the same codes for the same seeds (fp32)."""

import pytest
import torch
from test_sjd2 import _with_noise_conditioning

from arjet.samplers import MCSJD, PJD, SJD, SJD2, SJDPAC, ZipAR
from arjet.samplers.decode import CHECK_EVERY
from arjet.session import DecodingSession
from arjet.session.capture import CAPTURED_SPAN_SIZES, compile_mode
from arjet.testing import tiny_pipeline

SAMPLERS = [
    "ar",
    SJD(window=3),
    SJD(window=4, init="repeat_vertical", coupling=True),
    MCSJD(window=4, coupling="gumbel"),
    SJD(window=4, init="sample_horizontal", reuse=0.5),
    ZipAR(w=2),
    ZipAR(w=2, verify=SJD(window=3)),
    PJD(c=2, window=3),
    SJDPAC(window=9, tree_width=2),
    SJDPAC(window=14, init="sample_vertical", coupling=False),
]
GRIDS = {"janus": (4, 4), "emu3": (3, 5), "lumina_mgpt": (3, 5), "glm_image": (3, 5)}


def _codes(pipe, sampler, **kwargs):
    kwargs.setdefault("compile", False)  # the eager reference (on a GPU the default captures)
    out = pipe(["a red circle", "green star"], sampler=sampler, seed=0, output_type="latent", **kwargs)
    return out.codes


@pytest.mark.parametrize("sampler", SAMPLERS, ids=repr)
def test_narrow_attention_spans_give_the_same_codes(family, sampler, monkeypatch):
    """With spans growing one slot at a time, each step attends to just the slots the decode loop reserved;
    an input outside them would raise. Same codes as attending over the whole cache."""
    pipe = tiny_pipeline(family, grid=GRIDS[family], vocab_size=8, logit_scale=3.0)
    full = _codes(pipe, sampler)
    monkeypatch.setattr(DecodingSession, "span_step_min", 1)
    assert torch.equal(_codes(pipe, sampler), full)


def test_sjd2_with_narrow_spans_gives_the_same_codes(monkeypatch):
    pipe = _with_noise_conditioning(tiny_pipeline("emu3", grid=(3, 5), vocab_size=8, logit_scale=3.0))
    full = _codes(pipe, SJD2(window=4))
    monkeypatch.setattr(DecodingSession, "span_step_min", 1)
    assert torch.equal(_codes(pipe, SJD2(window=4)), full)


@pytest.mark.parametrize(
    ("value", "device", "mode"),
    [
        (False, "cpu", "none"),
        (True, "cpu", "inductor"),
        (True, "cuda", "cuda-graphs"),
        ("inductor", "cpu", "inductor"),
        ("inductor-graphs", "cuda", "inductor-graphs"),
    ],
)
def test_compile_modes(value, device, mode):
    assert compile_mode(value, torch.device(device)) == mode


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("graphs", "one of none, cuda-graphs, inductor, inductor-graphs"),
        ("cuda-graphs", "needs a CUDA device"),
        ("inductor-graphs", "needs a CUDA device"),
    ],
)
def test_bad_compile_values_are_refused_before_any_model_work(value, message, monkeypatch):
    pipe = tiny_pipeline("janus", grid=(2, 2), vocab_size=8)
    monkeypatch.setattr(pipe, "encode_prompts", lambda *a, **k: pytest.fail("encoded before the check"))
    with pytest.raises(ValueError, match=message):
        pipe("a red circle", compile=value)


def test_a_compiled_decoder_gives_the_eager_codes():
    """`torch.compile` of the decoder's layer on the CPU (one shape: a 2x2 grid fits one span)."""
    pipe = tiny_pipeline("janus", grid=(2, 2), vocab_size=8, logit_scale=3.0)
    for sampler in ("ar", SJD(window=2)):
        assert torch.equal(_codes(pipe, sampler, compile="inductor"), _codes(pipe, sampler))


def test_one_compiled_layer_serves_every_layer_and_the_prefill_runs_eagerly(monkeypatch):
    """The stack's layers share one compiled graph of each part around the attention per step shape
    (compiling is per shape, not per layer), and the prefill (one per prompt length) runs without compiling."""
    import arjet.session.decoder as decoder_module

    graphs: list[int] = []

    def recorder(gm, example_inputs):
        graphs.append(len(gm.graph.nodes))
        return gm.forward

    compile = torch.compile
    monkeypatch.setattr(decoder_module.torch, "compile", lambda f, **kw: compile(f, backend=recorder, **kw))
    pipe = tiny_pipeline("lumina_mgpt", grid=(3, 5), vocab_size=8, logit_scale=3.0, num_layers=3)
    eager = _codes(pipe, "ar")
    assert torch.equal(_codes(pipe, "ar", compile="inductor"), eager)
    assert len(graphs) == 2  # three layers, one step shape, two parts; the prefill runs eagerly


@pytest.mark.cuda
@pytest.mark.parametrize("sampler", SAMPLERS, ids=repr)
def test_cuda_graphs_give_the_eager_codes(family, sampler):
    pipe = tiny_pipeline(family, grid=GRIDS[family], vocab_size=8, logit_scale=3.0).to("cuda")
    assert torch.equal(_codes(pipe, sampler, compile="cuda-graphs"), _codes(pipe, sampler))


@pytest.mark.cuda
@pytest.mark.parametrize("sampler", ["ar", SJD(window=3), SJDPAC(window=9, tree_width=2)], ids=repr)
def test_cuda_graphs_over_int8_weights_give_the_eager_codes(family, sampler):
    """A captured step replays torchao's int8 kernels as the eager step runs them (bfloat16 activations)."""
    pipe = tiny_pipeline(family, grid=GRIDS[family], vocab_size=8, logit_scale=3.0).to("cuda", torch.bfloat16)
    pipe.quantize("int8")
    assert torch.equal(_codes(pipe, sampler, compile="cuda-graphs"), _codes(pipe, sampler))


@pytest.mark.cuda
def test_cuda_graphs_run_sjd2_and_the_builtin_model(builtin_pipe):
    pipe = _with_noise_conditioning(tiny_pipeline("emu3", grid=(3, 5), vocab_size=8, logit_scale=3.0)).to(
        "cuda"
    )
    assert torch.equal(_codes(pipe, SJD2(window=4), compile="cuda-graphs"), _codes(pipe, SJD2(window=4)))
    builtin = builtin_pipe.to("cuda")
    try:
        for sampler in ("ar", "sjd", "zipar"):
            assert torch.equal(_codes(builtin, sampler, compile="cuda-graphs"), _codes(builtin, sampler))
    finally:
        builtin_pipe.to("cpu")


@pytest.mark.cuda
@pytest.mark.parametrize(
    "sampler",
    [
        "lantern:k=2,delta=0.1",
        "gsd:window=3",
        "sjd+entropy:window=3",
        SJD(window=3, init="sample_horizontal"),
        SJDPAC(window=9, tree_width=2),
    ],
    ids=repr,
)
def test_cuda_graphs_in_bfloat16_give_the_eager_codes(family, sampler):
    """The real models run in bfloat16: replaying the captured kernels gives the eager codes there too."""
    pipe = tiny_pipeline(family, grid=GRIDS[family], vocab_size=8, logit_scale=3.0).to("cuda", torch.bfloat16)
    assert torch.equal(_codes(pipe, sampler, compile="cuda-graphs"), _codes(pipe, sampler))


@pytest.mark.cuda
@pytest.mark.parametrize("sampler", ["ar", SJD(window=3), SJDPAC(window=9, tree_width=2)], ids=repr)
def test_compiled_layers_inside_captured_steps_give_the_eager_codes(sampler):
    """ "inductor-graphs": the layer compiled during each span's eager warm-up step, then captured (fp32)."""
    pipe = tiny_pipeline("lumina_mgpt", grid=(6, 8), vocab_size=8, logit_scale=3.0).to("cuda")
    out = pipe(
        ["a red circle", "green star"],
        sampler=sampler,
        seed=0,
        output_type="latent",
        compile="inductor-graphs",
    )
    assert torch.equal(out.codes, _codes(pipe, sampler))
    assert out.stats[0].extra["graph_captures"] >= 1


@pytest.mark.cuda
def test_a_captured_decode_replays_its_graphs_and_says_so():
    """Each attention span runs one eager warm-up step, then one capture; every later step is a replay. The
    span grows through `CAPTURED_SPAN_SIZES` sizes at most."""
    pipe = tiny_pipeline("emu3", grid=(6, 8), vocab_size=8, logit_scale=3.0).to("cuda")
    out = pipe(
        ["a red circle"] * 3, sampler=SJD(window=3), seed=0, output_type="latent", compile="cuda-graphs"
    )
    counts = out.stats[0].extra
    steps = counts["graph_replays"] + counts["eager_steps"]
    longest = max(s.forward_passes for s in out.stats) - 1  # the prefill is not a step
    assert longest <= steps < longest + CHECK_EVERY  # the loop looks for the end every CHECK_EVERY steps
    assert 1 <= counts["graph_captures"] <= CAPTURED_SPAN_SIZES
    assert counts["eager_steps"] >= counts["graph_captures"]
    assert counts["graph_replays"] > counts["eager_steps"]
    assert counts["capture_seconds"] > 0
    assert all(s.extra == counts for s in out.stats)


@pytest.mark.cuda
def test_a_step_callback_sees_the_captured_decode(family):
    """With a callback the loop reads the device every step; replayed steps reach it as eager ones do."""
    pipe = tiny_pipeline(family, grid=GRIDS[family], vocab_size=8, logit_scale=3.0).to("cuda")

    def decode(compile):
        seen: list[int] = []

        def callback(pipe, step, passes, tensors):
            seen.append(int((tensors["codes"] >= 0).sum()))
            return tensors

        out = pipe(
            "a red circle",
            sampler=SJD(window=3),
            seed=1,
            output_type="latent",
            compile=compile,
            callback_on_step_end=callback,
        )
        return out.codes, seen

    (captured, seen), (eager, seen_eager) = decode("cuda-graphs"), decode(False)
    assert torch.equal(captured, eager) and seen == seen_eager
    restarts = sum(later < earlier for earlier, later in zip(seen, seen[1:], strict=False))
    assert restarts == (
        pipe.preview_grid(GRIDS[family]) is not None
    )  # GLM-Image: its preview, then the target
    assert seen[-1] == GRIDS[family][0] * GRIDS[family][1]
