"""GLM-Image: arjet's AR stage against transformers' own model and diffusers' own pipeline, its diffusion stage
run by diffusers, its layout, defaults, sizes and folders."""

import shutil

import numpy as np
import pytest
import torch
from diffusers import GlmImagePipeline as DiffusersGlmImagePipeline
from scipy import stats as scipy_stats
from transformers import GenerationConfig, GlmImageForConditionalGeneration
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import arjet
from arjet.addons.noise import NoiseConditioning
from arjet.engine import Engine
from arjet.pipelines.glm_image import (
    DIFFUSION_COMPONENTS,
    GENERATE_DEFAULTS,
    MAX_DIT_GUIDANCE_SCALE,
    preview_grid,
    upsample_codes,
)
from arjet.samplers import LogitsPolicy
from arjet.session import DecodingSession, TransformersDecoder
from arjet.testing import tiny_drafter, tiny_pipeline

from reference import full_sequence_logits, transformers_glm_image_logits

PROMPTS = ["a red circle left of a blue square", "green star"]
GRID = (2, 3)
TOL = dict(atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def pipe():
    return tiny_pipeline("glm_image", grid=GRID, vocab_size=8, logit_scale=3.0)


def _with_processor_rule():
    """A tiny pipeline (1 x 2 grid, 4 codes) with the released model's preview rule (about 16 x 16 codes),
    so that its prompts are what the processor makes."""
    pipe = tiny_pipeline("glm_image", grid=(1, 2), vocab_size=4, logit_scale=3.0)
    pipe.register_to_config(preview_side=16)
    return pipe


def _session_logits(pipe, prefix, preview_codes, codes, decoder=None):
    """arjet's logits for every preview cell, then every target cell: two sessions, as a decode runs them."""
    adapter = pipe.session_adapter()
    rows = codes.shape[0]
    first = DecodingSession(adapter, pipe.image_layout(preview_codes.shape[1:]), prefix, decoder=decoder)
    flat = preview_codes.flatten(1)
    logits = [first.first_logits[:, None]]
    if flat.shape[1] > 1:
        logits.append(first.logits(torch.arange(1, flat.shape[1]).expand(rows, -1), flat[:, :-1]))
    then = pipe.preview_prefix(prefix, first.layout, flat)
    second = DecodingSession(adapter, pipe.image_layout(codes.shape[1:]), then, decoder=decoder)
    cells = codes.shape[1] * codes.shape[2]
    logits += [
        second.first_logits[:, None],
        second.logits(torch.arange(1, cells).expand(rows, -1), codes.flatten(1)[:, :-1]),
    ]
    return torch.cat(logits, 1)


def _random_codes(pipe, grid, rows=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    vocab = pipe.session_adapter().code_vocab_size
    preview = pipe.preview_grid(grid)
    return (
        torch.randint(0, vocab, (rows, *preview), generator=generator),
        torch.randint(0, vocab, (rows, *grid), generator=generator),
    )


# -- the AR stage against transformers -------------------------------------------------------------------
def test_session_logits_equal_transformers_own_forward(pipe):
    """Prompts of different lengths (left padding), a preview grid then the target: arjet's own decoder stack
    and the transformers-module fallback both give the logits transformers' model gives when it runs as
    `generate` does (its own multimodal positions from `get_rope_index`, its own cache)."""
    prefix = pipe.encode_prompts(PROMPTS, None, GRID, guided=False)
    preview_codes, codes = _random_codes(pipe, GRID)
    theirs = transformers_glm_image_logits(pipe, prefix, preview_codes, codes)
    adapter = pipe.session_adapter()
    fallback = TransformersDecoder(adapter.hidden_states, adapter.num_layers)
    for decoder in (None, fallback):
        torch.testing.assert_close(
            _session_logits(pipe, prefix, preview_codes, codes, decoder), theirs, **TOL
        )
    # the reference of the statistical tests agrees, and the positions matter: one per token would not do
    reference = full_sequence_logits(pipe, prefix, codes, None, preview_codes=preview_codes)
    torch.testing.assert_close(reference, theirs, **TOL)
    embeds = torch.cat(
        [
            adapter.embed_tokens(prefix.ids),
            adapter.embed_codes(torch.cat([preview_codes.flatten(1), codes.flatten(1)], 1)),
        ],
        1,
    )
    ramp = (torch.arange(embeds.shape[1])[None] - prefix.pad[:, None]).clamp(min=0)
    mask = torch.cat(
        [prefix.visible.long(), torch.ones(2, embeds.shape[1] - prefix.length, dtype=torch.long)], 1
    )
    plain = adapter.code_logits(
        adapter.hidden_states(embeds, ramp, mask, None)[:, -codes[0].numel() :]
    ).float()
    assert (plain[:, :-1] - theirs[:, -codes[0].numel() + 1 :]).abs().max() > 10 * TOL["atol"]


def test_the_session_uses_arjets_own_stack(pipe):
    prefix = pipe.encode_prompts(PROMPTS[:1], None, GRID, guided=False)
    session = DecodingSession(pipe.session_adapter(), pipe.image_layout(GRID), prefix)
    assert isinstance(session.decoder, arjet.session.LlamaStackDecoder) and session.decoder.mrope_section == (
        2,
        1,
        1,
    )


def test_the_prompt_is_the_processors():
    """What diffusers' pipeline hands `generate`: the processor's chat template, the grid sizes (the target's,
    then the preview's) and the image start, tokenized with the tokenizer's own special token first."""
    pipe = _with_processor_rule()
    for height, width in ((64, 96), (96, 64), (32, 320)):
        grid = pipe.grid_for(height, width)
        chats = [[{"role": "user", "content": [{"type": "text", "text": text}]}] for text in PROMPTS]
        theirs = pipe.processor.apply_chat_template(
            chats,
            tokenize=True,
            padding=True,
            target_h=height,
            target_w=width,
            return_dict=True,
            return_tensors="pt",
        )
        ours = pipe.encode_prompts(PROMPTS, None, grid, guided=False)
        assert torch.equal(ours.ids[ours.visible], theirs["input_ids"][theirs["attention_mask"].bool()])
        assert ours.ids[0, 0] == pipe.text_tokenizer.convert_tokens_to_ids("[gMASK]")


@pytest.mark.parametrize(
    "size", [(1024, 1024), (1152, 768), (768, 1152), (512, 2048), (2048, 512), (1056, 1024)]
)
def test_the_preview_grid_is_the_processors(size):
    processor = tiny_pipeline("glm_image", grid=(1, 1), vocab_size=4).processor
    token_h, token_w, preview_h, preview_w = processor._get_target_shape(*size)
    assert preview_grid((token_h, token_w)) == (preview_h, preview_w)


def test_upsampled_codes_are_diffusers_prior_tokens():
    codes = torch.randint(0, 100, (3, 4, 5), generator=torch.Generator().manual_seed(0))
    theirs = torch.cat([DiffusersGlmImagePipeline._upsample_token_ids(c, 4, 5) for c in codes])
    assert torch.equal(upsample_codes(codes), theirs)


# -- the AR stage against diffusers' pipeline ------------------------------------------------------------
def _diffusers(pipe) -> DiffusersGlmImagePipeline:
    return DiffusersGlmImagePipeline(**{name: getattr(pipe, name) for name in DIFFUSION_COMPONENTS})


def _their_prior_tokens(pipe, prompts, height, width, seed):
    """diffusers' `generate_prior_tokens` (its `generate(do_sample=True)`, seeded through torch's global RNG),
    back on the AR grid (it hands the DiT the codes upsampled 2x)."""
    with torch.random.fork_rng():
        tokens, _, _ = _diffusers(pipe).generate_prior_tokens(
            prompts, height, width, device=torch.device("cpu"), generator=torch.Generator().manual_seed(seed)
        )
    return tokens.view(len(prompts), 2 * height // 32, 2 * width // 32)[:, ::2, ::2]


def test_greedy_ar_equals_diffusers_ar_tokens_where_sampling_is_pinned():
    """With top-k = 1 in the model's generation config, diffusers' sampled `generate` takes each forward's
    argmax; arjet's `ar` at temperature 0 takes the same codes (batched prompts, left-padded)."""
    pipe = _with_processor_rule()
    pipe.vision_language_encoder.generation_config.top_k = 1
    theirs = _their_prior_tokens(pipe, PROMPTS, 32, 64, seed=0)
    ours = pipe(PROMPTS, height=32, width=64, temperature=0, output_type="latent").codes
    assert torch.equal(ours, theirs)


def test_ar_matches_diffusers_ar_tokens_in_distribution():
    """The two target codes of a 32 x 64 image (after diffusers' 11 x 22 preview), 400 draws each: arjet's
    `ar` and diffusers' `generate_prior_tokens` come from one distribution (chi-square test of homogeneity
    over the 16 outcomes). Both sample at the model's generation config (transformers' defaults here)."""
    pipe = _with_processor_rule()
    samples = 400
    theirs = _their_prior_tokens(pipe, [PROMPTS[0]] * samples, 32, 64, seed=1).flatten(1)
    ours = pipe(PROMPTS[0], height=32, width=64, num_images_per_prompt=samples, seed=0, output_type="latent")
    assert ours.preview_codes.shape[1:] == (11, 22)
    table = np.stack(
        [np.bincount(c[:, 0] * 4 + c[:, 1], minlength=16) for c in (theirs, ours.codes.flatten(1))]
    )
    table = table[:, table.sum(0) > 0]
    assert scipy_stats.chi2_contingency(table).pvalue > 1e-3


def test_sampling_defaults_are_the_generation_configs_as_generate_reads_it(pipe):
    config = pipe.vision_language_encoder.generation_config
    unset = pipe.check_inputs("a red circle").policy
    assert (unset.temperature, unset.top_k, unset.top_p) == (1.0, 50, None)
    defaults = GenerationConfig._get_default_generation_params()
    assert {name: defaults[name] for name in GENERATE_DEFAULTS} == GENERATE_DEFAULTS
    original = dict(temperature=config.temperature, top_p=config.top_p)
    config.temperature, config.top_p = 0.9, 0.75  # what the released checkpoint's generation config says
    try:
        released = pipe.check_inputs("a red circle").policy
        assert (released.temperature, released.top_k, released.top_p) == (0.9, 50, 0.75)
        chosen = pipe.check_inputs("a red circle", temperature=1.0, top_p=1.0, top_k=3).policy
        assert (chosen.temperature, chosen.top_k, chosen.top_p) == (1.0, 3, 1.0)
    finally:
        config.temperature, config.top_p = original["temperature"], original["top_p"]


def test_the_processed_distribution_is_generates():
    """Temperature 0.9, top-k 50, top-p 0.75: arjet's policy and transformers' warpers (in `generate`'s order)
    give the same probabilities, the nucleus's boundary code included."""
    logits = torch.randn(64, 300, generator=torch.Generator().manual_seed(0)) * 3
    warped = logits
    for warper in (TemperatureLogitsWarper(0.9), TopKLogitsWarper(50), TopPLogitsWarper(0.75)):
        warped = warper(None, warped)
    torch.testing.assert_close(
        LogitsPolicy(temperature=0.9, top_k=50, top_p=0.75).probs(logits), warped.softmax(-1)
    )


# -- the diffusion stage -------------------------------------------------------------------------------
def test_images_are_what_diffusers_makes_of_the_codes(pipe):
    """The diffusion stage is diffusers' own: the same images as diffusers' pipeline given the codes as prior
    tokens, each image's latents from its own generator."""
    call = pipe.check_inputs(
        PROMPTS, seed=[3, 4], num_inference_steps=3, dit_guidance_scale=2.0, output_type="np"
    )
    codes = torch.randint(0, 8, (2, *GRID), generator=torch.Generator().manual_seed(5))
    ours = pipe.render(codes, call, PROMPTS)
    theirs = _diffusers(pipe)(
        prompt=PROMPTS,
        prior_token_ids=upsample_codes(codes),
        height=64,
        width=96,
        num_inference_steps=3,
        guidance_scale=2.0,
        generator=[torch.Generator().manual_seed(s) for s in (3, 4)],
        output_type="np",
    ).images
    np.testing.assert_array_equal(ours, theirs)
    assert ours.shape == (2, 64, 96, 3) and ours.std() > 0


def test_the_largest_dit_guidance_scale_still_paints_a_finite_image(pipe):
    """1e30 made NaN latents (a black image) and is refused; the bound itself still gives finite pixels."""
    call = pipe.check_inputs(
        PROMPTS[:1],
        seed=3,
        num_inference_steps=2,
        dit_guidance_scale=MAX_DIT_GUIDANCE_SCALE,
        output_type="np",
    )
    codes = torch.randint(0, 8, (1, *GRID), generator=torch.Generator().manual_seed(5))
    image = pipe.render(codes, call, PROMPTS[:1])
    assert np.isfinite(image).all() and image.std() > 0


def test_a_decode_reports_both_stages_and_reproduces(pipe):
    first = pipe(PROMPTS, sampler="sjd", seed=[7, 8], num_inference_steps=2)
    again = pipe(PROMPTS, sampler="sjd", seed=[7, 8], num_inference_steps=2)
    assert torch.equal(first.codes, again.codes) and torch.equal(first.preview_codes, again.preview_codes)
    assert [np.asarray(a).tolist() for a in first.images] == [np.asarray(b).tolist() for b in again.images]
    stat = first.stats[0]
    assert stat.tokens == sum(stat.accepted_per_step) == 2 + 6 and stat.extra["preview_grid"] == [1, 2]
    assert len(stat.accepted_per_step) == stat.forward_passes == stat.commit_step.max()
    assert 1 <= stat.extra["preview_forward_passes"] <= 2 < stat.commit_step.min()
    assert stat.extra["decode_seconds"] > 0 and stat.extra["render_seconds"] > 0


def test_every_sampler_paints_a_batch_of_three_and_fixed_seeds_reproduce():
    """Each registered sampler at its defaults (sjd2 over an untrained noise conditioning, eagle over a random
    drafter), three images of two prompts, through both stages to PIL images; the same seeds give the same
    codes and pixels."""
    pipe = tiny_pipeline("glm_image", grid=GRID, vocab_size=8, logit_scale=3.0)
    hidden = pipe.session_adapter().embed_codes(torch.zeros(1, 1, dtype=torch.long)).shape[-1]
    with torch.random.fork_rng():
        torch.manual_seed(0)
        pipe.register_modules(noise_conditioning=NoiseConditioning(hidden_size=hidden, levels=4))
    tiny_drafter(pipe)  # for eagle
    prompts = [PROMPTS[0], PROMPTS[0], PROMPTS[1]]
    for sampler in arjet.samplers.available():
        first, again = (
            pipe(prompts, sampler=sampler, seed=[1, 2, 3], num_inference_steps=2) for _ in range(2)
        )
        assert len(first.images) == 3 and all(image.size == (96, 64) for image in first.images), sampler
        assert torch.equal(first.codes, again.codes) and torch.equal(first.preview_codes, again.preview_codes)
        assert all(
            np.array_equal(np.asarray(a), np.asarray(b))
            for a, b in zip(first.images, again.images, strict=True)
        )


def test_the_callback_sees_the_preview_grid_then_the_target(pipe):
    shapes, passes = [], []

    def record(p, step, forward_passes, tensors):
        shapes.append(tuple(tensors["codes"].shape))
        passes.append(forward_passes)

    out = pipe(PROMPTS[0], sampler="ar", seed=0, callback_on_step_end=record, output_type="latent")
    assert shapes == [(1, 1, 2)] * 2 + [(1, *GRID)] * 6
    assert passes == sorted(passes) and passes[-1] == out.stats[0].forward_passes == 8


def test_an_interrupted_decode_shows_the_codes_false_colours(pipe):
    def stop(p, step, forward_passes, tensors):
        p._interrupt = step >= 3

    out = pipe(PROMPTS[0], seed=0, callback_on_step_end=stop, output_type="np")
    assert (out.codes < 0).any() and out.images.shape == (1, 64, 96, 3)
    undecoded = out.codes[0] < 0
    grey = np.abs(out.images[0][::32, ::32] - 0.5).max(-1) < 1e-6
    assert np.array_equal(grey, undecoded.numpy())


def test_lantern_compares_codes_by_the_vq_codebook(pipe):
    assert "codebook" in pipe.capabilities()
    book = pipe.image_tokenizer.codebook()
    weight = pipe.vision_language_encoder.model.vqmodel.quantize.embedding.weight
    torch.testing.assert_close(book, torch.nn.functional.normalize(weight, dim=-1))
    assert pipe(PROMPTS[0], sampler="lantern:k=2,delta=0.2", seed=0, output_type="latent").codes.min() >= 0


# -- bad input ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            dict(guidance_scale=3.0),
            "guidance_scale=3.0: GlmImagePipeline's AR stage has no classifier-free guidance",
        ),
        (dict(negative_prompt="blurry"), "does not take a negative_prompt"),
        (
            dict(height=100),
            "height must be a positive multiple of 32 pixels .GLM-Image's code grid., got 100",
        ),
        (
            dict(height=32, width=32 * 5),
            "too elongated: GLM-Image's preview grid .* would be empty.*within 4:1",
        ),
        (dict(num_inference_steps=0), "num_inference_steps must be an integer from 1 to 1000, got 0"),
        (dict(num_inference_steps=True), "num_inference_steps must be an integer"),
        (dict(dit_guidance_scale=float("nan")), "dit_guidance_scale must be a finite number from 0 to 10000"),
        (
            dict(dit_guidance_scale=1e30),
            "dit_guidance_scale must be a finite number from 0 to 10000.*got 1e\\+30",
        ),
        (dict(dit_guidance_scale=-1.0), "dit_guidance_scale must be a finite number from 0 to 10000"),
        (dict(timesteps=[1]), "timesteps= is not an argument of an AR pipeline"),
    ],
)
def test_bad_input_is_refused_before_any_model_work(pipe, kwargs, message):
    with pytest.raises(ValueError, match=message):
        pipe.check_inputs("a red circle", kwargs.pop("negative_prompt", None), **kwargs)


def test_a_prompt_too_long_is_refused(pipe):
    limited = tiny_pipeline("glm_image", grid=GRID, vocab_size=8)
    limited.limits = arjet.Limits(max_prompt_tokens=20)
    with pytest.raises(
        ValueError, match="tokens .chat template included., more than limits.max_prompt_tokens=20"
    ):
        limited.check_inputs("a red circle " * 5)


# -- folders -----------------------------------------------------------------------------------------------
def test_a_folder_laid_out_as_the_hub_repository_loads(pipe, tmp_path):
    """diffusers' own `save_pretrained` of its GLM-Image pipeline writes the hub repository's layout; arjet
    reads it (with the processor's preview rule, as the released model), and saves the same layout back."""
    _diffusers(pipe).save_pretrained(tmp_path / "hub")
    loaded = arjet.ARPipeline.from_pretrained(str(tmp_path / "hub"))
    assert type(loaded) is arjet.GlmImagePipeline and loaded.config.preview_side == 16
    for name in DIFFUSION_COMPONENTS:
        assert (tmp_path / "hub" / name).is_dir()
    loaded.register_to_config(preview_side=pipe.config.preview_side)
    loaded.set_progress_bar_config(disable=True)
    expected = pipe(PROMPTS, sampler="sjd", seed=0, height=64, width=96, output_type="latent").codes
    assert torch.equal(
        loaded(PROMPTS, sampler="sjd", seed=0, height=64, width=96, output_type="latent").codes, expected
    )
    loaded.save_pretrained(tmp_path / "arjet")
    again = arjet.GlmImagePipeline.from_pretrained(str(tmp_path / "arjet"))
    assert again.config.preview_side == pipe.config.preview_side
    assert torch.equal(
        again(PROMPTS, sampler="sjd", seed=0, height=64, width=96, output_type="latent").codes, expected
    )


def test_the_ar_model_alone_is_refused_with_the_layout_to_provide(pipe, tmp_path):
    pipe.vision_language_encoder.save_pretrained(tmp_path / "vision_language_encoder")
    with pytest.raises(ValueError, match="holds GLM-Image's AR model only.*zai-org/GLM-Image"):
        arjet.ARPipeline.from_pretrained(str(tmp_path / "vision_language_encoder"))


# -- the diffusion stage alone (`vision_language_encoder=None`) -------------------------------------------
@pytest.fixture(scope="module")
def stages(pipe, tmp_path_factory):
    """The tiny pipeline's folder loaded whole, and loaded without its AR model from a copy that no longer
    has one (so the load reads no AR weights at all)."""
    folder = tmp_path_factory.mktemp("glm")
    pipe.save_pretrained(folder / "whole")
    shutil.copytree(folder / "whole", folder / "dit")
    shutil.rmtree(folder / "dit" / "vision_language_encoder")
    loaded = (
        arjet.ARPipeline.from_pretrained(str(folder / "whole")),
        arjet.ARPipeline.from_pretrained(str(folder / "dit"), vision_language_encoder=None),
    )
    for each in loaded:
        each.set_progress_bar_config(disable=True)
    return loaded


def test_the_diffusion_stage_alone_holds_no_ar_model(stages):
    whole, painter = stages
    assert type(painter) is arjet.GlmImagePipeline and painter.renders_only and not whole.renders_only
    modules = {name for name, c in painter.components.items() if isinstance(c, torch.nn.Module)}
    assert modules == {"text_encoder", "vae", "transformer"}
    assert not any(isinstance(m, GlmImageForConditionalGeneration) for m in _submodules(painter))
    assert _weights(painter) == _weights(whole) - _weights(whole, "vision_language_encoder") < _weights(whole)


def _submodules(pipe):
    for component in pipe.components.values():
        if isinstance(component, torch.nn.Module):
            yield from component.modules()


def _weights(pipe, *names: str) -> int:
    """The parameters of `pipe`'s components `names` (all of them when none is named)."""
    chosen = names or pipe.components
    return sum(
        p.numel()
        for name in chosen
        if isinstance(pipe.components[name], torch.nn.Module)
        for p in pipe.components[name].parameters()
    )


def test_the_diffusion_stage_alone_paints_the_whole_pipelines_images(stages):
    """Given the codes a call decoded and the call's seeds, `paint` makes that call's images, bit for bit at
    the same threads, on either pipeline; another seed, another image."""
    whole, painter = stages
    same = dict(num_inference_steps=2, output_type="np", threads=1)
    decoded = whole(PROMPTS, sampler="sjd", seed=[7, 8], **same)
    for painting in stages:
        painted = painting.paint(decoded.codes, PROMPTS, seed=[7, 8], **same)
        np.testing.assert_array_equal(painted, decoded.images)
    other_seed = painter.paint(decoded.codes, PROMPTS, seed=[9, 8], **same)
    assert not np.array_equal(other_seed[0], decoded.images[0])
    assert np.array_equal(other_seed[1], decoded.images[1])


@pytest.mark.parametrize(
    "call",
    [
        lambda p: p("a red circle"),
        lambda p: p.check_inputs("a red circle"),
        lambda p: p.session_adapter(),
        lambda p: p.sampling_defaults(),
        lambda p: Engine(p),
    ],
    ids=["call", "check_inputs", "session", "defaults", "engine"],
)
def test_the_diffusion_stage_alone_refuses_the_ar_stage_in_one_line(stages, call):
    with pytest.raises(ValueError, match=r"^[^\n]*vision_language_encoder=None: it has no AR model[^\n]*$"):
        call(stages[1])


def test_paint_refuses_what_it_cannot_paint(stages):
    painter, codes = stages[1], torch.zeros(1, *GRID, dtype=torch.long)
    with pytest.raises(ValueError, match="LongTensor"):
        painter.paint(codes.float(), "x")
    with pytest.raises(ValueError, match=">= 0"):
        painter.paint(codes - 1, "x")
    with pytest.raises(ValueError, match="2 prompts for 1"):
        painter.paint(codes, ["x", "y"])
    with pytest.raises(ValueError, match="'pil', 'np' or 'pt'"):
        painter.paint(codes, "x", output_type="latent")


# -- the AR stage alone (`transformer=None`, ...: `later_stage_components`) ------------------------------
@pytest.fixture(scope="module")
def ar_stage(pipe, stages, tmp_path_factory):
    """The tiny pipeline loaded without its later stage's components, from a copy that no longer has them."""
    folder = tmp_path_factory.mktemp("glm-ar")
    pipe.save_pretrained(folder)
    for name in arjet.GlmImagePipeline.later_stage_components:
        shutil.rmtree(folder / name)
    left_out = dict.fromkeys(arjet.GlmImagePipeline.later_stage_components)
    decoder = arjet.ARPipeline.from_pretrained(str(folder), **left_out)
    decoder.set_progress_bar_config(disable=True)
    return decoder


def test_the_ar_stage_alone_decodes_the_whole_pipelines_codes_without_the_dit(stages, ar_stage):
    whole = stages[0]
    assert ar_stage.decodes_only and not whole.decodes_only
    held = {name for name, c in ar_stage.components.items() if isinstance(c, torch.nn.Module)}
    assert held == {"vision_language_encoder"}
    options = dict(sampler="sjd", seed=[3, 4], output_type="latent")
    assert torch.equal(ar_stage(PROMPTS, **options).codes, whole(PROMPTS, **options).codes)
    engine = Engine(ar_stage).start()  # what a Ray engine replica of GLM-Image runs
    try:
        (result,) = engine.generate(PROMPTS[:1], seed=3, output_type="latent")
    finally:
        engine.close()
    assert torch.equal(result.codes, whole(PROMPTS[0], seed=3, output_type="latent").codes[0])


@pytest.mark.parametrize(
    "call",
    [
        lambda p: p("a red circle"),
        lambda p: p("a red circle", output_type="np"),
        lambda p: p.paint(torch.zeros(1, *GRID, dtype=torch.long), "x"),
    ],
    ids=["call", "np", "paint"],
)
def test_the_ar_stage_alone_refuses_to_paint_in_one_line(ar_stage, call):
    with pytest.raises(ValueError, match=r"^[^\n]*transformer=None: it has no diffusion stage[^\n]*$"):
        call(ar_stage)
