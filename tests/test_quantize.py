"""Quantized weights (`arjet.quantize`): each bad request refused in one line before any weight is read, what
is quantized and what is not, the quantized model's logits close to the float model's, no pickle written,
and the exact samplers exact with respect to the quantized model."""

import pytest
import torch

import arjet
from arjet import quantize as quantize_module
from arjet.pipelines import base as base_module
from arjet.quantize import Quantization, is_quantized, weight_bytes
from arjet.samplers import SJD, Lantern, LogitsPolicy
from arjet.testing import tiny_drafter, tiny_pipeline

from families import guidance_of
from stats import drawn, exact_joint, goodness_of_fit

GRID = (2, 2)
PROMPT = "a red circle left of a blue square"


@pytest.fixture
def no_loading(monkeypatch):
    """Any weight read fails the test: a refusal must come before it."""

    def read(*args, **kwargs):
        raise AssertionError("weights were read before the quantization was refused")

    monkeypatch.setattr(base_module, "load_component", read)


def _one_line_error(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


def test_an_unknown_scheme_is_refused_naming_it_and_the_choices(no_loading):
    with pytest.raises(ValueError) as error:
        arjet.load(quantization="int3")
    text = _one_line_error(error)
    assert "'int3'" in text and "int8, int4, fp8" in text
    with pytest.raises(ValueError, match="got 8"):
        Quantization.parse(8)
    with pytest.raises(ValueError, match=r"pass quantization=None itself, not Quantization\(None\)"):
        Quantization(None)


@pytest.mark.parametrize(
    ("field", "value", "message"), [("scheme", "int3", "'int3'"), ("drafter", 1, "got 1")]
)
def test_a_quantization_whose_fields_were_forced_is_checked_again_before_loading(
    no_loading, field, value, message
):
    """A frozen `Quantization` changed past its dataclass (the probe's B2: scheme 'int3' fell through to fp8
    weights on the CPU, which fp8 itself is refused on) is refused where it is used, before any weight."""
    forced = Quantization("int8")
    object.__setattr__(forced, field, value)
    with pytest.raises(ValueError, match=message):
        arjet.load(quantization=forced)
    with pytest.raises(ValueError, match=message):
        tiny_pipeline("janus", grid=GRID).quantize(forced)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusals of a machine without CUDA")
@pytest.mark.parametrize(("scheme", "reason"), [("fp8", "compute capability >= 8.9"), ("int4", "no kernel")])
def test_schemes_without_a_cpu_kernel_are_refused_before_loading(no_loading, scheme, reason):
    with pytest.raises(ValueError) as error:
        arjet.load(quantization=scheme)
    assert reason in _one_line_error(error) and "int8" in str(error.value)


def test_fp8_on_a_gpu_older_than_ada_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(ValueError, match="capability 8.0"):
        Quantization("fp8").check("cuda")


def test_without_torchao_the_error_says_what_to_install(no_loading, monkeypatch):
    monkeypatch.setattr(quantize_module, "torchao_installed", lambda: False)
    with pytest.raises(ImportError) as error:
        arjet.load(quantization="int8")
    assert "pip install 'arjet[quant]'" in _one_line_error(error)


def test_quantizing_twice_is_refused():
    pipe = tiny_pipeline("janus", grid=GRID).quantize("int8")
    with pytest.raises(ValueError) as error:
        pipe.quantize("int8")
    assert "quantized already" in _one_line_error(error)


def test_the_decoder_and_code_head_are_quantized_and_nothing_else(family):
    pipe = tiny_pipeline(family, grid=GRID)
    model = pipe.model
    before = {name: p.clone() for name, p in model.named_parameters()}
    pipe.quantize("int8")
    quantized = {name for name, p in model.named_parameters() if is_quantized(p)}
    adapter = pipe.session_adapter()
    stack = adapter.static_decoder()
    for layer in stack.layers:  # the stack runs the quantized weights themselves, not float copies
        for projection in (layer.qkv, layer.o, layer.gate_up, layer.down):
            assert projection.packed is None and getattr(projection, "stacked", None) is None
        assert is_quantized(layer.o.weight) and is_quantized(layer.down.weight)
    assert all(".weight" in name for name in quantized)
    assert all(name.startswith(pipe.quantized_modules[pipe.ar_component]) for name in quantized)
    assert any(".layers." in name for name in quantized) and any("head" in name for name in quantized)
    for name, p in model.named_parameters():  # embeddings, norms, biases, the VQ: untouched
        if name not in quantized:
            assert torch.equal(p, before[name]), name


def test_the_drafter_is_quantized_when_asked_and_runs_through_arjets_stack():
    pipe = tiny_drafter(tiny_pipeline("janus", grid=GRID, logit_scale=3.0))
    pipe.quantize(Quantization("int8", drafter=True))
    assert is_quantized(pipe.drafter.fc.weight)
    assert all(is_quantized(layer.o.weight) for layer in pipe.drafter.stack().layers)
    out = pipe(PROMPT, sampler="eagle", seed=0, output_type="latent")
    assert out.codes.shape == (1, *GRID) and out.stats[0].sampler.startswith("eagle")


def test_a_drafter_is_asked_for_where_there_is_none():
    with pytest.raises(ValueError, match="has none"):
        tiny_pipeline("janus", grid=GRID).quantize(Quantization("int8", drafter=True))


def test_quantized_logits_stay_close_to_the_float_models(family):
    """int8 weight-only rounds each weight to its row's step (the row's largest |w| / 127): at most half a
    step, 0.4% of that weight, off. Through two layers and the head the logits move by a few percent of
    their spread on these tiny random models (1-2% measured when written); 5% is the bound, and the
    next-code distributions must stay within 0.02 of each other in total variation. A control: the same
    comparison between two different float models is far outside both bounds."""
    float_pipe = tiny_pipeline(family, grid=GRID, vocab_size=8, logit_scale=3.0)
    other = tiny_pipeline(family, grid=GRID, vocab_size=8, logit_scale=3.0, seed=1)
    quantized = tiny_pipeline(family, grid=GRID, vocab_size=8, logit_scale=3.0).quantize("int8")
    codes = torch.randint(0, 8, (2, GRID[0] * GRID[1]), generator=torch.Generator().manual_seed(3))
    reference = _logits(float_pipe, codes)
    spread = reference.abs().max()
    moved = (_logits(quantized, codes) - reference).abs().max()
    assert moved < 0.05 * spread and _total_variation(_logits(quantized, codes), reference) < 0.02
    assert _total_variation(_logits(other, codes), reference) > 0.05


def _logits(pipe, codes):
    from reference import full_sequence_logits

    prefix = pipe.encode_prompts([PROMPT] * len(codes), None, GRID, False)
    return full_sequence_logits(pipe, prefix, codes.reshape(-1, *GRID), None)


def _total_variation(first, second):
    return 0.5 * (first.softmax(-1) - second.softmax(-1)).abs().sum(-1).max()


def test_the_builtin_model_loads_quantized_with_a_quarter_of_the_decoders_bytes(tmp_path):
    pipe = arjet.load(quantization="int8")
    assert pipe.quantization == Quantization("int8")
    layers = pipe.model.model.language_model.layers
    assert all(is_quantized(p) for n, p in layers.named_parameters() if "proj" in n)
    float_bytes = weight_bytes(arjet.load().model.model.language_model.layers)
    assert weight_bytes(layers) < 0.3 * float_bytes  # int8 values and one float scale per row
    image = pipe(PROMPT, seed=0).images[0]
    assert image.size == (pipe.native_size()[1], pipe.native_size()[0])
    with pytest.raises(ValueError) as error:
        pipe.save_pretrained(tmp_path / "saved")
    assert "safetensors" in _one_line_error(error)
    assert not (tmp_path / "saved").exists() or not any((tmp_path / "saved").rglob("*"))


def test_a_random_architecture_is_quantized_layer_by_layer_with_the_same_other_weights():
    from small_presets import small_preset

    preset = small_preset("janus-pro-7b")
    plain = arjet.random_pipeline(preset, device="cpu")
    pipe = arjet.random_pipeline(preset, device="cpu", quantization="int8")
    assert pipe.quantization == Quantization("int8")
    pairs = zip(plain.model.named_parameters(), pipe.model.named_parameters(), strict=True)
    unchanged = [torch.equal(a, b) for (_, a), (_, b) in pairs if not is_quantized(b)]
    assert unchanged and all(unchanged)
    assert sum(is_quantized(p) for p in pipe.model.parameters()) > 0
    assert pipe(PROMPT, seed=0, output_type="latent").codes.shape[0] == 1


# -- torch.compile -----------------------------------------------------------------------------------------
COMPILED_TOL = dict(atol=1e-5, rtol=1e-5)  # float32 rounding of inductor's fused kernels (measured: 5e-7)


@pytest.mark.slow
def test_compiled_steps_over_int8_weights_give_the_eager_logits_and_codes():
    """The pipeline's compiled decoder (what `compile=True` runs on the CPU: "inductor") traces torchao's
    int8 linear into its graphs without a graph break, gives the eager quantized step's logits within
    `COMPILED_TOL`, and a seeded `ar` decode the eager codes. About 30 s: inductor compiles two graphs."""
    from torch._dynamo.utils import counters

    from arjet.session import DecodingSession

    pipe = tiny_pipeline("janus", grid=GRID, vocab_size=8, logit_scale=3.0).quantize("int8")
    pipe.set_progress_bar_config(disable=True)
    counters.clear()
    prefix = pipe.encode_prompts([PROMPT, "green star"], None, GRID, True)
    sessions = [
        DecodingSession(pipe.session_adapter(), pipe.image_layout(GRID), prefix, 3.0, decoder=decoder)
        for decoder in (None, pipe.compiled_decoder())
    ]
    codes = torch.randint(0, 8, (2, GRID[0] * GRID[1]), generator=torch.Generator().manual_seed(3))
    for cell in range(1, codes.shape[1]):
        eager, compiled = (s.logits(torch.full((2, 1), cell), codes[:, cell - 1 : cell]) for s in sessions)
        torch.testing.assert_close(compiled, eager, **COMPILED_TOL)
        for session in sessions:
            session.commit(torch.ones(2, 1, dtype=torch.bool))
    assert not counters["graph_break"]
    decode = dict(sampler="ar", seed=0, output_type="latent")
    assert torch.equal(
        pipe([PROMPT, "green star"], compile=True, **decode).codes,
        pipe([PROMPT, "green star"], compile=False, **decode).codes,
    )


# -- checkpoints in the hub's layout ------------------------------------------------------------------
def _stored_keys(folder):
    from safetensors import safe_open

    return {key for path in folder.glob("*.safetensors") for key in safe_open(str(path), "pt").keys()}  # noqa: SIM118


def _unpacked(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """`module`'s parameters and buffers by name, a quantized weight as the tensors it holds (int data,
    scales) under `name.<field>`."""
    found = {}
    for name, tensor in (*module.named_parameters(), *module.named_buffers()):
        if is_quantized(tensor):
            fields, _ = tensor.__tensor_flatten__()
            found.update({f"{name}.{field}": getattr(tensor, field) for field in fields})
        else:
            found[name] = tensor
    return found


def test_a_folder_in_the_hubs_layout_loads_the_weights_quantizing_after_loading_gives(family, tmp_path):
    """transformers writes (and reads) a released checkpoint's own layout, renaming keys at load (Emu3's
    `text_model.model.*` is `model.text_model.*` in its class); the layer-by-layer loader applies the same
    renamings, so every quantized component holds the int data and scales of a float load quantized after."""
    pipe = tiny_pipeline(family, grid=GRID)
    pipe.save_pretrained(tmp_path)
    ar = pipe.components[pipe.ar_component]
    renamed = _stored_keys(tmp_path / pipe.ar_component) - ar.state_dict().keys()
    assert bool(renamed) == (family == "emu3")  # the one family whose hub layout is not its class's
    _assert_quantized_load_is_quantizing_after(type(pipe), tmp_path)


def test_a_bare_transformers_folder_in_the_hubs_layout_loads_the_same_quantized_weights(family, tmp_path):
    """Janus-Pro, Emu3-Gen-hf and Lumina-mGPT are released as bare transformers folders (GLM-Image as a
    pipeline folder only: `test_glm_image`)."""
    if family == "glm_image":
        pytest.skip("GLM-Image loads whole pipeline folders only")
    pipe = tiny_pipeline(family, grid=GRID)
    pipe.model.save_pretrained(tmp_path)
    pipe.tokenizer.save_pretrained(tmp_path)
    extra = {}
    if family == "lumina_mgpt":
        pipe.vqgan.save_pretrained(tmp_path / "vqgan")
        extra = {"resolution": pipe.config.resolution}  # the folder's name does not say it
    _assert_quantized_load_is_quantizing_after(type(pipe), tmp_path, **extra)


def _assert_quantized_load_is_quantizing_after(pipeline_class, folder, **extra):
    """Every quantized component of the pipeline in `folder` loaded with `quantization="int8"` holds the
    tensors (int data, scales, float weights) of a float load quantized after."""
    loaded = pipeline_class.from_pretrained(str(folder), quantization="int8", **extra)
    after = pipeline_class.from_pretrained(str(folder), **extra).quantize("int8")
    for name in pipeline_class.quantized_modules:
        if name in extra:  # left out as it loaded (a stage alone): nothing to quantize
            assert loaded.components[name] is after.components[name] is None
            continue
        got, want = _unpacked(loaded.components[name]), _unpacked(after.components[name])
        assert got.keys() == want.keys() and any(key.endswith(".scale") for key in want)
        assert [key for key in want if not torch.equal(got[key], want[key])] == [], name


@pytest.mark.parametrize("stage", ["paint", "ar"])
def test_a_glm_image_stage_loaded_alone_quantizes_the_components_it_holds(tmp_path, stage):
    """A Ray painter (no AR model) or engine replica (no DiT) of GLM-Image with `--quantize`."""
    pipe = tiny_pipeline("glm_image", grid=GRID)
    pipe.save_pretrained(tmp_path)
    left_out = (pipe.ar_component,) if stage == "paint" else pipe.later_stage_components
    _assert_quantized_load_is_quantizing_after(type(pipe), tmp_path, **dict.fromkeys(left_out))


def test_negative_control_the_hubs_layout_without_transformers_renamings_is_refused(tmp_path, monkeypatch):
    from arjet.pipelines import components

    tiny_pipeline("emu3", grid=GRID).save_pretrained(tmp_path)
    monkeypatch.setattr(
        components, "_by_model_key", lambda model, stored: {k: (k, f) for k, f in stored.items()}
    )
    with pytest.raises(ValueError, match="are not in the checkpoint.*text_model"):
        arjet.Emu3Pipeline.from_pretrained(str(tmp_path), quantization="int8")


# -- exactness: the samplers are exact with respect to the quantized model --------------------------------
POLICY = LogitsPolicy(temperature=0.8, top_k=3)
SAMPLES = 4000
ALPHA = 1e-5  # as tests/samplers/test_lossless.py: no false alarm by chance across the suite
REJECT_BELOW = 1e-6


@pytest.fixture(scope="module")
def quantized_joint():
    """A quantized tiny Janus and the exact joint of its own (quantized) `ar` distribution."""
    pipe = tiny_pipeline("janus", grid=GRID, vocab_size=4, logit_scale=3.0).quantize("int8")
    return pipe, exact_joint(pipe, PROMPT, GRID, POLICY, guidance_of(pipe))


def _draw(pipe, sampler, samples=SAMPLES):
    out = pipe(
        PROMPT,
        sampler=sampler,
        num_images_per_prompt=samples,
        seed=0,
        guidance_scale=guidance_of(pipe),
        temperature=POLICY.temperature,
        top_k=POLICY.top_k,
        output_type="latent",
    )
    return drawn(out)


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["ar", SJD(window=3), SJD(window=3, coupling=True)], ids=str)
def test_exact_samplers_draw_the_quantized_models_distribution(quantized_joint, sampler):
    pipe, exact = quantized_joint
    assert goodness_of_fit(_draw(pipe, sampler), exact) > ALPHA


@pytest.mark.slow
def test_negative_control_a_wrong_rule_on_the_quantized_model_is_rejected(quantized_joint):
    """LANTERN's relaxed acceptance (delta 0.25) is not exact: the same test must reject it here."""
    pipe, exact = quantized_joint
    wrong = SJD(window=3, acceptance=Lantern(k=2, delta=0.25))
    assert goodness_of_fit(_draw(pipe, wrong, samples=4 * SAMPLES), exact) < REJECT_BELOW


# -- loading that fits: one float layer at a time ---------------------------------------------------------
PEAK_SCRIPT = """
import json, sys, threading, time
import torch, torchao.quantization, transformers, diffusers
from arjet.pipelines import ARPipeline, JanusPipeline
from arjet.quantize import weight_bytes

def anonymous():  # resident memory of this process's own (not file-backed) pages
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024

peak, done = [0], threading.Event()
def watch():
    while not done.is_set():
        peak[0] = max(peak[0], anonymous())
        time.sleep(0.002)

base = anonymous()
watcher = threading.Thread(target=watch)
watcher.start()
pipe = ARPipeline.from_pretrained(sys.argv[1], quantization="int8")
done.set()
watcher.join()
print(json.dumps({"peak": max(peak[0], anonymous()) - base, "weights": weight_bytes(pipe.model)}))
"""


@pytest.mark.slow
def test_loading_quantized_holds_the_quantized_weights_and_one_float_layer(tmp_path):
    """A Janus of about 400 MB in float32, six 60-MB layers: its int8 load may grow the process's anonymous
    memory by at most the quantized weights plus one float layer (the one being read) and 64 MB of slack,
    which is far below the float model, so a whole float copy made first would fail. The weights stay
    safetensors: the folder holds no pickle, before or after."""
    import dataclasses
    import json
    import os
    import subprocess
    import sys

    from small_presets import small_preset

    from arjet.machine import module_bytes

    preset = small_preset("janus-pro-7b")
    decoder = dataclasses.replace(preset.decoder, hidden=1024, ffn=4096, heads=8, kv_heads=8, layers=6)
    pipe = arjet.random_pipeline(dataclasses.replace(preset, decoder=decoder), device="cpu")
    float_bytes = module_bytes(pipe.model)
    layer = module_bytes(pipe.model.model.language_model.layers[0])
    pipe.save_pretrained(tmp_path)
    del pipe
    run = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, str(tmp_path)], capture_output=True, text=True, env=os.environ
    )
    assert run.returncode == 0, run.stderr[-2000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    bound = measured["weights"] + layer + (64 << 20)
    assert measured["peak"] < bound < float_bytes
    assert not [path for path in tmp_path.rglob("*") if path.suffix in (".bin", ".pt", ".pth", ".pkl")]


def test_glm_images_diffusion_stage_is_quantized_and_draws_the_image():
    """GLM-Image's DiT is quantized with the same torchao call as the AR stage (every linear layer of the
    transformer), not through diffusers' TorchAoConfig (diffusers 0.42 warns it cannot import torchao
    0.18's tensor classes)."""
    pipe = tiny_pipeline("glm_image").quantize("int8")
    assert sum(is_quantized(p) for p in pipe.transformer.parameters()) > 0
    image = pipe(PROMPT, seed=0, num_inference_steps=1).images[0]
    assert image.size[0] > 0


def test_the_engines_lanes_decode_quantized_weights_as_a_call_alone():
    from arjet.engine import Engine

    pipe = tiny_pipeline("janus", grid=(4, 4), vocab_size=8, logit_scale=3.0).quantize("int8")
    pipe.set_progress_bar_config(disable=True)
    prompts, seeds = ["a red circle", "star", "a blue square on a green background"], [10, 11, 12]
    alone = [
        pipe(prompt, sampler="sjd:window=3", seed=seed, output_type="latent", compile=False).codes[0]
        for prompt, seed in zip(prompts, seeds, strict=True)
    ]
    with Engine(pipe, lanes=2, prompt_tokens=32) as engine:
        requests = [
            engine.submit(p, sampler="sjd:window=3", seed=s) for p, s in zip(prompts, seeds, strict=True)
        ]
        results = [request.result(timeout=120).codes for request in requests]
    assert all(torch.equal(got, want) for got, want in zip(results, alone, strict=True))


def test_moving_quantized_weights_to_another_dtype_is_refused_and_devices_are_checked():
    """A quantized pipeline moved with `.to(torch.bfloat16)` failed at its first step (`scatter(): Expected
    self.dtype to be equal to src.dtype`), and `pipe.to("cpu:5")` was taken (the probe's doubtful cases)."""
    pipe = tiny_pipeline("janus", grid=GRID).quantize("int8")
    with pytest.raises(ValueError, match=r"quantized \(int8\) over torch.float32, which they keep"):
        pipe.to(torch.bfloat16)
    with pytest.raises(ValueError, match="quantized"):
        pipe.to("cpu", dtype=torch.bfloat16)
    assert pipe.to("cpu").to(torch.float32) is pipe  # where it is, as it is: fine
    with pytest.raises(ValueError, match="pipe.to's device 'cpu:5': this machine has one cpu device"):
        pipe.to("cpu:5")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="this machine has no CUDA GPU"):
            tiny_pipeline("emu3", grid=GRID).to(torch.device("cuda"))
