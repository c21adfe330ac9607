"""The contract every pipeline keeps, run on a tiny random model of each family."""

import io

import numpy as np
import PIL.Image
import pytest
import torch

import arjet
from arjet.pipelines.glm_image import GlmImagePipeline
from arjet.session import LlamaStackDecoder
from arjet.testing import tiny_pipeline

from families import all_cells
from stats import drawn

GRID = (3, 3)
PROMPTS = ["a red circle left of a blue square", "three green triangles"]


@pytest.fixture
def pipe(family):
    return tiny_pipeline(family, grid=GRID, vocab_size=8, logit_scale=3.0)


def _downsample(pipe) -> int:
    return pipe.image_tokenizer.downsample


def test_generates_images_of_the_right_size_in_every_output_type(pipe):
    side = GRID[0] * _downsample(pipe)
    out = pipe(PROMPTS, seed=0)
    assert len(out.images) == 2 and all(isinstance(im, PIL.Image.Image) for im in out.images)
    assert out.images[0].size == (side, side)
    assert out.codes.dtype == torch.long and out.codes.shape == (2, *GRID)
    assert out.codes.min() >= 0 and out.codes.max() < 8
    array = pipe(PROMPTS[0], seed=0, output_type="np").images
    assert (
        isinstance(array, np.ndarray)
        and array.shape == (1, side, side, 3)
        and 0 <= array.min() <= array.max() <= 1
    )
    tensor = pipe(PROMPTS[0], seed=0, output_type="pt").images
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (1, 3, side, side)
    latent = pipe(PROMPTS[0], seed=0, output_type="latent")
    assert torch.equal(latent.images, latent.codes)
    images, codes, stats = pipe(PROMPTS[0], seed=0, return_dict=False)
    assert torch.equal(codes, latent.codes) and len(stats) == 1


def test_stats_count_the_forwards_actually_run(pipe, monkeypatch):
    calls = []
    original = LlamaStackDecoder.forward

    def forward(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(LlamaStackDecoder, "forward", forward)
    out = pipe(PROMPTS, seed=0)
    cells = all_cells(pipe, GRID)  # a preview grid's too (GLM-Image)
    before = cells - GRID[0] * GRID[1]
    assert len(calls) == cells  # each grid's prefill + one forward for every later cell
    for stat in out.stats:
        assert stat.forward_passes == cells and stat["forward_passes"] == cells
        assert stat.tokens == cells and stat.accepted_per_step == [1] * cells
        assert stat.seconds > 0 and stat.compression == 1.0
        assert stat.commit_step.shape == GRID and stat.commit_step.flatten().tolist() == list(
            range(before + 1, cells + 1)
        )


def test_same_seed_same_codes_and_batch_equals_single(pipe):
    batch = pipe(PROMPTS, seed=[5, 6], num_images_per_prompt=1).codes
    again = pipe(PROMPTS, seed=[5, 6]).codes
    assert torch.equal(batch, again)
    single = torch.cat([pipe(PROMPTS[0], seed=5).codes, pipe(PROMPTS[1], seed=6).codes])
    assert torch.equal(batch, single)
    generators = [torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)]
    assert torch.equal(pipe(PROMPTS, generator=generators).codes, batch)
    other = pipe(PROMPTS, seed=[7, 8]).codes
    assert not torch.equal(batch, other)


def test_num_images_per_prompt_repeats_each_prompt(pipe):
    out = pipe(PROMPTS, seed=0, num_images_per_prompt=2)
    assert out.codes.shape[0] == 4 and len(out.stats) == 4
    # seed=s gives image i the seed s + i: image 1 (prompt 0) equals a single call with seed 1
    assert torch.equal(out.codes[1], pipe(PROMPTS[0], seed=1).codes[0])


def test_save_pretrained_round_trip(pipe, tmp_path):
    """The reloaded pipeline decodes the same codes and paints the same pixels up to float32 rounding. Both
    calls run on one thread count (GLM-Image's pixels move by up to 3.4e-6 between one and two threads);
    the tolerance covers the rest: the reloaded weights sit at other addresses, and a BLAS may round by
    memory alignment (2.2e-6 apart on an AMD EPYC), while a wrong weight moves pixels by far more."""
    threads = torch.get_num_threads()
    before = pipe(PROMPTS, seed=3, output_type="np", threads=threads)
    pipe.save_pretrained(tmp_path / "saved")
    for loader in (type(pipe), arjet.ARPipeline):
        loaded = loader.from_pretrained(str(tmp_path / "saved"))
        assert type(loaded) is type(pipe)
        loaded.set_progress_bar_config(disable=True)
        after = loaded(PROMPTS, seed=3, output_type="np", threads=threads)
        assert torch.equal(before.codes, after.codes)
        np.testing.assert_allclose(before.images, after.images, rtol=0, atol=1e-5)


def test_callback_sees_partial_codes_and_can_interrupt(pipe):
    seen = []

    def callback(p, step, timestep, tensors):
        seen.append(tensors["codes"].clone())
        if step == 3:
            p._interrupt = True
        return tensors

    out = pipe(
        PROMPTS[0], seed=0, callback_on_step_end=callback, callback_on_step_end_tensor_inputs=["codes"]
    )
    assert len(seen) == 4
    assert (seen[0] >= 0).sum() == 1 and (seen[-1] >= 0).sum() == 4
    assert (drawn(out) >= 0).sum() == 4  # stopped early: the rest stays -1 and is painted grey
    assert out.images[0].size[0] == GRID[1] * _downsample(pipe)


def test_the_public_interrupt_stops_the_call_and_each_call_starts_unset(pipe):
    def callback(p, step, timestep, tensors):
        p.interrupt = step == 1

    pipe.interrupt = True  # left set by an earlier call: the next call starts anew
    stopped = pipe(PROMPTS[0], seed=0, callback_on_step_end=callback, output_type="latent")
    first_grid = (
        stopped.codes if stopped.preview_codes is None else stopped.preview_codes
    )  # GLM-Image: its preview
    assert (first_grid >= 0).sum() == 2  # the callback saw cell 0 (step 0), then one step (step 1)
    assert pipe.interrupt and pipe._interrupt  # diffusers' name reads the same flag
    whole = pipe(PROMPTS[0], seed=0, output_type="latent")
    assert not pipe.interrupt and (whole.codes >= 0).all()


def test_a_call_without_a_callback_runs_no_step_hook(pipe, monkeypatch):
    """Per step the loop reads the stop flag only; the pipeline's hook object runs only for a callback."""
    from arjet.pipelines import ar_stage

    calls = []
    monkeypatch.setattr(ar_stage.StepHook, "__call__", lambda self, trace: calls.append(trace))
    pipe(PROMPTS[0], seed=0, output_type="latent")
    assert calls == []
    pipe(PROMPTS[0], seed=0, output_type="latent", callback_on_step_end=lambda *args: None)
    assert calls


def test_images_from_codes_paints_a_calls_codes_and_the_old_name_warns(pipe):
    if isinstance(pipe, GlmImagePipeline):
        pytest.skip("GLM-Image's images come from its diffusion stage, not from its codes")
    out = pipe(PROMPTS[0], seed=0, output_type="np")
    images = pipe.images_from_codes(out.codes, output_type="np")
    np.testing.assert_allclose(images, out.images, rtol=0, atol=1e-6)
    with pytest.warns(FutureWarning, match="use pipe.images_from_codes"):
        old = pipe.decode_codes(out.codes, output_type="np")
    assert np.array_equal(old, images)


@pytest.mark.parametrize("bad", [float("nan"), 3e38])
def test_a_vq_decoder_that_paints_non_finite_pixels_is_an_error_not_a_black_image(bad):
    """NaN weights in the VQ decoder, or finite ones so large it overflows: the codes are sound, the pixels
    are not, and the call says so instead of handing back a black image."""
    pipe = tiny_pipeline("janus", grid=GRID, vocab_size=8)
    pipe.set_progress_bar_config(disable=True)
    with torch.no_grad():
        for weight in pipe.image_tokenizer.vqmodel.decoder.parameters():
            weight.fill_(bad)
    with pytest.raises(ValueError, match="decoder gave pixels that are not finite"):
        pipe(PROMPTS[0], seed=0, output_type="np")
    assert (pipe(PROMPTS[0], seed=0, output_type="latent").codes >= 0).all()  # the codes need no pixels


def test_greedy_is_deterministic_without_a_seed(pipe):
    assert torch.equal(pipe(PROMPTS, temperature=0).codes, pipe(PROMPTS, temperature=0).codes)


def test_sampler_object_is_accepted(pipe):
    from arjet.samplers import AR

    assert torch.equal(
        pipe(PROMPTS[0], seed=1, sampler=AR()).codes, pipe(PROMPTS[0], seed=1, sampler="ar").codes
    )


BAD_INPUTS = [
    (dict(prompt=""), "prompt must not be empty"),
    (dict(prompt="   "), "prompt must not be empty"),
    (dict(prompt=42), "prompt must be a non-empty string"),
    (dict(prompt=[]), "prompt must be a non-empty string"),
    (dict(prompt=["ok", None]), "prompt must contain only strings"),
    (dict(sampler="nope"), "unknown sampler 'nope'; available: ar"),
    (dict(sampler="sjd:window=0"), "window"),
    (dict(top_k=0), "top_k must be a positive integer, got 0"),
    (dict(top_k=-3), "top_k must be a positive integer"),
    (dict(top_p=0.0), r"top_p must be in \(0, 1\], got 0.0"),
    (dict(top_p=1.5), r"top_p must be in \(0, 1\]"),
    (dict(top_p=float("nan")), r"top_p must be in \(0, 1\], got nan"),
    (dict(top_p=float("inf")), r"top_p must be in \(0, 1\], got inf"),
    (dict(temperature=-1.0), r"temperature must be a finite number >= 0 \(0 = greedy\), got -1.0"),
    (dict(temperature=float("inf")), "temperature must be a finite number >= 0.*got inf"),
    (dict(temperature=float("nan")), "temperature must be a finite number >= 0.*got nan"),
    (dict(guidance_scale=-2.0), "guidance_scale must be a finite number >= 0.*got -2.0"),
    (dict(guidance_scale=float("inf")), "guidance_scale must be a finite number >= 0.*got inf"),
    (dict(guidance_scale=float("nan")), "guidance_scale must be a finite number >= 0.*got nan"),
    (dict(num_images_per_prompt=0), "num_images_per_prompt must be an integer >= 1, got 0"),
    (dict(num_images_per_prompt=1.0), "num_images_per_prompt must be an integer >= 1, got 1.0"),
    (dict(height=7), "height"),
    (dict(width=7), "width"),
    (dict(height=0), "height must be a positive integer \\(pixels\\).*got 0"),
    (dict(width=0), "width must be a positive integer \\(pixels\\).*got 0"),
    (dict(height=-64), "height must be a positive integer.*got -64"),
    (dict(width=12.5), "width must be a positive integer.*got 12.5"),
    (dict(output_type="jpeg"), "output_type must be one of"),
    (dict(seed=[1, 2, 3]), "seed must be an int or a list of 1 ints"),
    (dict(seed=1, generator=torch.Generator()), "pass either generator or seed"),
    (dict(callback_on_step_end_tensor_inputs=["latents"]), "callback tensor inputs"),
    (dict(callback_on_step_end="print"), "callback_on_step_end must be callable"),
]

# sizes each family cannot make, for the tiny models of GRID: Janus makes 6x6 only; Emu3 any multiple of its
# 2-px codes within 512 positions; Lumina-mGPT at most 96x96 pixels in 32-px units, aspect ratio up to 4
FAMILY_BAD_INPUTS = {
    "janus": [
        (dict(height=8, width=6), "makes 6x6 images only, got height=8, width=6"),
        (dict(aspect_ratio="1:1"), "JanusPipeline does not take an aspect_ratio"),
    ],
    "emu3": [
        (dict(width=7), "width must be a positive multiple of 2 pixels, got 7"),
        (dict(height=64, width=64), "height=64, width=64 needs 1056 image tokens.*512 positions"),
        (dict(aspect_ratio="wide"), "aspect_ratio must look like '16:9'.*got 'wide'"),
        (dict(aspect_ratio="0:1"), "aspect_ratio must look like '16:9'"),
        (dict(aspect_ratio=1.5), "aspect_ratio must look like '16:9'.*got 1.5"),
        (dict(aspect_ratio="\uff11\uff16:\uff19"), "two positive integers in ASCII digits.*got '１６:９'"),
        (dict(aspect_ratio="1_6:9"), "aspect_ratio must look like '16:9'"),
        (dict(aspect_ratio="16:9:1"), "aspect_ratio must look like '16:9'"),
        (dict(aspect_ratio="1:1", height=4), "pass either aspect_ratio or height/width, not both"),
        (dict(aspect_ratio="100000:1"), "width=1898 needs 950 image tokens.*512 positions"),
    ],
    "lumina_mgpt": [
        (dict(width=48), "width must be a positive multiple of 32 pixels, got 48"),
        (dict(height=128, width=96), "height=128, width=96 is 12288 pixels.*at most 96x96 = 9216"),
        (dict(height=32, width=160), "aspect ratio of 5.*aspect ratios up to 4"),
        (dict(aspect_ratio="1:1"), "LuminaMGPTPipeline does not take an aspect_ratio"),
    ],
    # GLM-Image: any multiple of 32 px whose preview grid (about 2x2 codes for the tiny model) is not empty
    "glm_image": [
        (dict(width=48), "width must be a positive multiple of 32 pixels .GLM-Image's code grid., got 48"),
        (dict(height=32, width=160), "too elongated.*within 4:1"),
        (dict(aspect_ratio="1:1"), "GlmImagePipeline does not take an aspect_ratio"),
        (dict(guidance_scale=3.0), "GlmImagePipeline's AR stage has no classifier-free guidance"),
    ],
}


def _assert_raises_before_model_work(pipe, kwargs, message):
    calls = []
    handle = pipe.model.register_forward_pre_hook(lambda *a: calls.append(1))
    forwards = []
    module = getattr(pipe.session_adapter(), "backbone", None) or pipe.model.model.language_model
    handle2 = module.register_forward_pre_hook(lambda *a: forwards.append(1))
    kwargs = {"prompt": "a red circle", **kwargs}
    try:
        with pytest.raises(ValueError, match=message):
            pipe(**kwargs)
    finally:
        handle.remove()
        handle2.remove()
    assert not calls and not forwards


@pytest.mark.parametrize(("kwargs", "message"), BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_raises_before_any_model_work(pipe, kwargs, message):
    _assert_raises_before_model_work(pipe, kwargs, message)


def test_bad_size_for_the_family_raises_before_any_model_work(pipe, family):
    for kwargs, message in FAMILY_BAD_INPUTS[family]:
        _assert_raises_before_model_work(pipe, kwargs, message)


def test_check_inputs_validates_without_encoding(pipe, monkeypatch):
    """`check_inputs` is where every check lives: it resolves the defaults and never tokenizes."""
    monkeypatch.setattr(type(pipe), "encode_prompts", lambda *a: pytest.fail("check_inputs encoded"))
    checked = pipe.check_inputs(PROMPTS, num_images_per_prompt=2, seed=4)
    assert checked.prompts == PROMPTS and checked.batch_size == 4 and checked.grid == GRID
    assert checked.guidance_scale == pipe.default_guidance_scale and checked.tensor_inputs == ["codes"]
    assert [g.initial_seed() for g in checked.generators] == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="height must be a positive integer"):
        pipe.check_inputs(PROMPTS, height=0)


def test_negative_prompt_only_where_the_family_uses_it(pipe, monkeypatch):
    if not pipe.supports_negative_prompt:
        with pytest.raises(ValueError, match="does not take a negative_prompt"):
            pipe(PROMPTS[0], negative_prompt="blurry")
        return
    with pytest.raises(ValueError, match="negative prompts for 2 prompts"):
        pipe(PROMPTS, negative_prompt=["x", "y", "z"])
    # the negative prompt is the unconditional row of the prefix: cond rows stay, uncond rows change
    prefixes = {}
    for negative in ("blurry", "a red circle"):
        prefixes[negative] = pipe.encode_prompts([PROMPTS[0]], [negative], GRID, guided=True)
    blurry, circle = prefixes["blurry"], prefixes["a red circle"]

    def visible_row(prefix, row):
        return prefix.ids[row][prefix.visible[row]].tolist()

    assert visible_row(blurry, 0) == visible_row(circle, 0)
    assert visible_row(blurry, 1) != visible_row(circle, 1)
    words = pipe.tokenizer.convert_ids_to_tokens(visible_row(circle, 1))
    assert "red" in words and "circle" in words and "blurry" not in words
    # ... and it changes what is decoded (8 images: one tiny image can come out the same by chance)
    a = pipe(PROMPTS[0], negative_prompt="blurry", seed=0, num_images_per_prompt=8).codes
    b = pipe(PROMPTS[0], negative_prompt="a red circle", seed=0, num_images_per_prompt=8).codes
    assert a.shape == b.shape == (8, *GRID) and not torch.equal(a, b)
    # no negative prompt: the configured default one ("blurry" for the tiny model) forms the uncond row
    assert torch.equal(pipe(PROMPTS[0], seed=0, num_images_per_prompt=8).codes, a)
    # without CFG there is no unconditional row at all, so the negative prompt cannot matter
    c = pipe(PROMPTS[0], negative_prompt="blurry", seed=0, guidance_scale=1.0).codes
    d = pipe(PROMPTS[0], negative_prompt="a red circle", seed=0, guidance_scale=1.0).codes
    assert torch.equal(c, d)


def test_progress_bar_advances_to_every_cell(pipe):
    stream = io.StringIO()
    pipe.set_progress_bar_config(disable=False, file=stream, mininterval=0, ascii=True)
    cells = all_cells(pipe, GRID)
    pipe(PROMPTS, seed=0)
    assert f"{2 * cells}/{2 * cells}" in stream.getvalue()
    pipe.set_progress_bar_config(disable=True)
    silent = io.StringIO()
    pipe.set_progress_bar_config(disable=True, file=silent)
    pipe(PROMPTS[0], seed=0)
    assert silent.getvalue() == ""


def test_callback_returns_are_checked_not_applied(pipe):
    steps = []

    def unchanged(p, step, timestep, tensors):
        steps.append(step)
        return tensors

    reference = pipe(PROMPTS[0], seed=0).codes
    assert torch.equal(pipe(PROMPTS[0], seed=0, callback_on_step_end=unchanged).codes, reference)
    assert torch.equal(pipe(PROMPTS[0], seed=0, callback_on_step_end=lambda *a: None).codes, reference)

    # editing the (copied) tensors in place is harmless as long as they are not handed back
    def scribble(p, step, timestep, tensors):
        tensors["codes"].fill_(0)

    assert torch.equal(pipe(PROMPTS[0], seed=0, callback_on_step_end=scribble).codes, reference)

    def replace(p, step, timestep, tensors):
        tensors["codes"].fill_(0)
        return tensors

    with pytest.raises(ValueError, match="returned a changed 'codes'.*cannot be replaced"):
        pipe(PROMPTS[0], seed=0, callback_on_step_end=replace)
    with pytest.raises(ValueError, match="must return its tensors dict"):
        pipe(PROMPTS[0], seed=0, callback_on_step_end=lambda *a: 3)


def test_tokenizer_without_codebook_gives_the_session_none(pipe, monkeypatch):
    from arjet.pipelines import base
    from arjet.vq import ImageTokenizer

    class NoCodebook(ImageTokenizer):  # an image tokenizer that has everything but a codebook
        def __init__(self, inner):
            self.inner = inner
            self.grid = getattr(inner, "grid", None)  # Janus's fixed grid

        downsample = property(lambda self: self.inner.downsample)
        vocab_size = property(lambda self: self.inner.vocab_size)

        def encode(self, pixels):
            return self.inner.encode(pixels)

        def decode(self, codes):
            return self.inner.decode(codes)

    seen = []
    session_class = base.DecodingSession

    def session(*args, **kwargs):
        seen.append(kwargs["codebook"])
        return session_class(*args, **kwargs)

    monkeypatch.setattr(base, "DecodingSession", session)
    with_codebook = pipe(PROMPTS[0], seed=0)
    assert isinstance(seen[-1], torch.Tensor) and seen[-1].shape[0] == 8
    inner = pipe.image_tokenizer
    monkeypatch.setattr(type(pipe), "image_tokenizer", property(lambda self: NoCodebook(inner)))
    out = pipe(PROMPTS[0], seed=0)
    assert seen[-1] is None and torch.equal(out.codes, with_codebook.codes)


def test_from_pretrained_refuses_another_familys_saved_pipeline(tmp_path):
    from arjet import Emu3Pipeline, JanusPipeline, LuminaMGPTPipeline

    tiny_pipeline("emu3", grid=(2, 2), vocab_size=6).save_pretrained(tmp_path / "emu3")
    for loader in (JanusPipeline, LuminaMGPTPipeline):
        with pytest.raises(
            ValueError, match=r"holds a saved Emu3Pipeline, not a .*Emu3Pipeline.from_pretrained"
        ):
            loader.from_pretrained(str(tmp_path / "emu3"))
    assert type(Emu3Pipeline.from_pretrained(str(tmp_path / "emu3"))) is Emu3Pipeline
    assert type(arjet.ARPipeline.from_pretrained(str(tmp_path / "emu3"))) is Emu3Pipeline


@pytest.mark.parametrize("sampler", ["ar", "sjd", "sjd-pac", "zipar+sjd:w=2"])
def test_callbacks_run_once_per_step_and_never_past_the_end(sampler):
    """One call per forward that commits codes (the prefill's commits cell 0); with a callback the loop checks
    every step whether every image is done, so the last call's forward_passes is the stats' largest."""
    pipe = tiny_pipeline("emu3", grid=(3, 4), vocab_size=16, logit_scale=3.0)
    calls = []

    def callback(pipe, step, forward_passes, tensors):
        calls.append((step, forward_passes, sorted(tensors)))

    out = pipe(["a red circle", "a blue square"], sampler=sampler, seed=0, callback_on_step_end=callback)
    most = max(s.forward_passes for s in out.stats)
    assert [(step, passes) for step, passes, _ in calls] == [(i, i + 1) for i in range(most)]
    assert calls[-1][2] == ["codes"]
    plain = pipe(["a red circle", "a blue square"], sampler=sampler, seed=0)
    assert torch.equal(plain.codes, out.codes)
