import dataclasses

import pytest
import torch
from small_presets import SMALL_CODEBOOK, small_preset

import arjet
from arjet.machine import available_bytes
from arjet.pipelines.prompts import unknown_words
from arjet.presets import PRESETS, available_presets, get_preset, random_pipeline
from arjet.presets.meta import materialize_random_, parameters_on_meta, required_bytes

# Published dimensions, written out a second time so that an edit of the table has to agree with them:
# (layers, hidden, heads, KV heads, FFN, vocabulary, max positions, rope theta, codebook, default grid)
PUBLISHED = {
    "lumina-mgpt-7b-768": (32, 4096, 32, 32, 11008, 65536, 4096, 1e4, 8192, (48, 48)),
    "janus-pro-7b": (30, 4096, 32, 32, 11008, 102400, 16384, 1e4, 16384, (24, 24)),
    "janus-pro-1b": (24, 2048, 16, 16, 5632, 102400, 16384, 1e4, 16384, (24, 24)),
    "emu3-gen": (32, 4096, 32, 8, 14336, 184622, 9216, 1e6, 32768, (90, 90)),
    "glm-image": (40, 4096, 32, 2, 13696, 168064, 131072, 1e4, 16384, (32, 32)),
}


def _count(module: torch.nn.Module, without: tuple[str, ...] = ()) -> int:
    return sum(p.numel() for name, p in module.named_parameters() if not name.startswith(without))


def _code_head_rows(pipe) -> int:
    """Image codes the model scores: Janus's generation head, GLM-Image's head rows below its image-start
    token, else the code tokens of the LM vocabulary."""
    if isinstance(pipe, arjet.JanusPipeline):
        return pipe.model.model.generation_head.vision_head.out_features
    if isinstance(pipe, arjet.GlmImagePipeline):
        return min(pipe.model.lm_head.out_features, pipe.model.config.image_start_token_id)
    return sum(name.startswith(("IMGIMG", "<|visual token")) for name in pipe.model.config.vocabulary_map)


@pytest.fixture(scope="module", params=sorted(PRESETS))
def meta_pipe(request):
    return request.param, random_pipeline(request.param, device="meta")


@pytest.fixture(scope="module")
def shapes_prompts() -> list[str]:
    from arjet.data.prompts import load_prompts

    return load_prompts("shapes")  # what `arjet bench` uses by default


def test_the_registry_lists_every_published_architecture():
    assert available_presets() == sorted(PUBLISHED)
    with pytest.raises(
        ValueError,
        match="unknown architecture 'janus-pro-3b'; choose one of emu3-gen, glm-image, janus-pro-1b",
    ):
        get_preset("janus-pro-3b")


def test_every_preset_builds_on_meta_with_the_published_dimensions(meta_pipe):
    name, pipe = meta_pipe
    layers, hidden, heads, kv_heads, ffn, vocab, positions, theta, codebook, grid = PUBLISHED[name]
    assert all(p.device.type == "meta" for p in pipe.model.parameters())
    text = pipe.model.config.get_text_config()
    assert (text.num_hidden_layers, text.hidden_size, text.num_attention_heads, text.num_key_value_heads) == (
        layers,
        hidden,
        heads,
        kv_heads,
    )
    assert (text.intermediate_size, text.vocab_size, text.max_position_embeddings) == (ffn, vocab, positions)
    assert text.rope_parameters["rope_theta"] == theta
    # the modules really have those shapes (not just the config)
    decoder = pipe.model.get_input_embeddings()
    assert tuple(decoder.weight.shape) == (vocab, hidden)
    decoder_layers = (
        m
        for n, m in pipe.model.named_modules()
        if n.endswith("layers.0")
        and any(hasattr(getattr(m, "mlp", None), name) for name in ("gate_proj", "gate_up_proj"))
    )
    layer = next(decoder_layers)  # (not the SigLIP tower's)
    head_dim = hidden // heads
    assert tuple(layer.self_attn.q_proj.weight.shape) == (heads * head_dim, hidden)
    assert tuple(layer.self_attn.k_proj.weight.shape) == (kv_heads * head_dim, hidden)
    gate = (
        layer.mlp.gate_up_proj.weight[:ffn]
        if hasattr(layer.mlp, "gate_up_proj")
        else layer.mlp.gate_proj.weight
    )
    assert tuple(gate.shape) == (ffn, hidden)
    assert hasattr(layer.self_attn, "q_norm") == PRESETS[name].decoder.qk_norm  # Chameleon's qk-norm
    assert _code_head_rows(pipe) == pipe.image_tokenizer.vocab_size == codebook
    assert pipe.image_tokenizer.vocab_size == codebook
    assert pipe.grid_for(*pipe.default_size()) == grid == PRESETS[name].default_grid


def test_parameter_counts_match_the_released_weight_files(meta_pipe):
    """The released files' sizes over their bytes per parameter (table.py cites them). They are shown to 3
    significant digits (+-0.5%), and transformers' Janus conversion drops SigLIP's attention-pool head
    (~12.6 M parameters, 0.6% of the 1B), so 1% is the tolerance; a missing or extra layer is 3% or more."""
    name, pipe = meta_pipe
    preset = PRESETS[name]
    if not preset.released_parameters:
        pytest.skip(f"{name}: the released files' sizes were not read (table.py says why)")
    counted = _count(pipe.model, preset.released_without)
    assert counted == pytest.approx(preset.released_parameters, rel=0.01)


def test_glm_image_has_the_cards_9b_ar_model_and_7b_decoder():
    """The model card's rounded sizes: a "9B-parameter" AR generator (the text model and its head; the vision
    encoder, for editing, comes on top) and a "7B-parameter" DiT."""
    pipe = random_pipeline("glm-image", device="meta")
    extra = PRESETS["glm-image"].extra
    language_model = _count(pipe.model.model.language_model) + pipe.model.lm_head.weight.numel()
    assert language_model == pytest.approx(extra["language_model_parameters"], rel=0.05)
    assert _count(pipe.transformer) == pytest.approx(extra["dit_parameters"], rel=0.1)


def test_janus_pro_7b_language_model_is_6_9_billion():
    pipe = random_pipeline("janus-pro-7b", device="meta")
    language_model = _count(pipe.model.model.language_model) + pipe.model.lm_head.weight.numel()
    assert language_model == pytest.approx(6.91e9, rel=0.005)
    assert language_model == pytest.approx(
        PRESETS["janus-pro-7b"].extra["language_model_parameters"], rel=0.005
    )


def test_janus_is_built_for_the_requested_size_and_refuses_other_shapes():
    pipe = random_pipeline("janus-pro-1b", device="meta", height=256, width=256)
    assert pipe.default_size() == (256, 256) and pipe.grid_for(256, 256) == (16, 16)
    with pytest.raises(ValueError, match="square images on a 16-px code grid.*height=256, width=384"):
        random_pipeline("janus-pro-1b", device="meta", height=256, width=384)
    with pytest.raises(ValueError, match="height must be a positive integer"):
        random_pipeline("janus-pro-1b", device="meta", height=0)


def test_emu3_and_lumina_take_a_smaller_default_size_within_the_checkpoints_rules():
    emu3 = random_pipeline("emu3-gen", device="meta", height=256, width=384)
    assert emu3.default_size() == (256, 384) and emu3.grid_for(256, 384) == (32, 48)
    lumina = random_pipeline("lumina-mgpt-7b-768", device="meta", height=512, width=256)
    assert lumina.grid_for(*lumina.default_size()) == (32, 16)
    with pytest.raises(ValueError, match="at most 768x768"):
        random_pipeline("lumina-mgpt-7b-768", device="meta", height=1024, width=1024)


def test_the_vocabulary_covers_the_shapes_prompts_and_the_templates(meta_pipe, shapes_prompts):
    _, pipe = meta_pipe
    assert [p for p in shapes_prompts if unknown_words(pipe.text_tokenizer, p)] == []
    assert unknown_words(pipe.text_tokenizer, "a red circle left of a blue square") == []


@pytest.mark.parametrize(
    "name", ["lumina-mgpt-7b-768", "janus-pro-1b", "emu3-gen", "glm-image"]
)  # one per family
def test_a_scaled_down_preset_builds_on_cpu_and_generates(name):
    pipe = random_pipeline(small_preset(name), device="cpu", seed=3)
    pipe.set_progress_bar_config(disable=True)
    params = list(pipe.model.parameters())
    assert all(
        p.device.type == "cpu" and p.dtype == torch.float32 for p in params
    )  # float32 by default on CPU
    assert all(p.std() > 0 for p in params if p.numel() > 16)
    # the rotary frequencies are a buffer: kept from construction, not left uninitialised
    rotary = next(m for n, m in pipe.model.named_modules() if n.endswith("rotary_emb"))
    inv_freq, _ = rotary.compute_default_rope_parameters(rotary.config)
    torch.testing.assert_close(rotary.inv_freq, inv_freq)
    guided = pipe.classifier_free_guidance
    prefix = pipe.encode_prompts(["a red circle"], None, pipe.grid_for(*pipe.default_size()), guided)
    assert (
        prefix.ids != pipe.text_tokenizer.unk_token_id
    ).all()  # the family's template and negative prompt too
    out = pipe("a red circle left of a blue square", sampler="sjd:window=4", seed=0, output_type="np")
    grid = small_preset(name).default_grid
    assert tuple(out.codes.shape) == (1, *grid) and out.codes.min() >= 0 and out.codes.max() < SMALL_CODEBOOK
    assert out.images.shape[1:3] == (
        grid[0] * pipe.image_tokenizer.downsample,
        grid[1] * pipe.image_tokenizer.downsample,
    )
    assert out.stats[0].forward_passes >= 2


def test_weights_are_seeded_and_take_the_requested_dtype():
    preset = small_preset("janus-pro-1b")
    first = (
        random_pipeline(preset, device="cpu", seed=0).model.model.language_model.layers[0].mlp.up_proj.weight
    )
    again = (
        random_pipeline(preset, device="cpu", seed=0).model.model.language_model.layers[0].mlp.up_proj.weight
    )
    other = (
        random_pipeline(preset, device="cpu", seed=1).model.model.language_model.layers[0].mlp.up_proj.weight
    )
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert first.std().item() == pytest.approx(0.02, rel=0.1)
    half = random_pipeline(preset, device="cpu", dtype=torch.bfloat16)
    assert {p.dtype for p in half.model.parameters()} == {torch.bfloat16}
    with pytest.raises(ValueError, match="dtype must be a floating torch.dtype"):
        random_pipeline(preset, device="cpu", dtype=torch.int64)


def test_the_vocabulary_must_fit_the_decoder():
    preset = small_preset("emu3-gen")
    too_small = dataclasses.replace(preset, decoder=dataclasses.replace(preset.decoder, vocab=100))
    with pytest.raises(ValueError, match="need .* token ids but the decoder's vocabulary has 100"):
        random_pipeline(too_small, device="meta")


def test_parameters_on_meta_keeps_buffers_and_materialize_keeps_shared_parameters():
    with parameters_on_meta():
        module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
        module.register_buffer("steps", torch.arange(3))
    module.append(torch.nn.Linear(4, 4))
    module[2].weight = module[0].weight  # tied
    assert module[0].weight.device.type == "meta" and module[1].running_var.device.type == "cpu"
    materialize_random_(module, "cpu", torch.float64, seed=0)
    assert module[0].weight is module[2].weight and module[0].weight.dtype == torch.float64
    assert torch.equal(module.steps, torch.arange(3)) and torch.equal(
        module[1].running_var, torch.ones(4, dtype=torch.float64)
    )


def test_the_factory_is_exported():
    assert arjet.random_pipeline is random_pipeline and "janus-pro-7b" in arjet.available_presets()


def test_a_model_that_does_not_fit_is_refused_before_allocation(monkeypatch):
    import arjet.presets.build as build

    monkeypatch.setattr(build, "available_bytes", lambda device: 10**9)
    with pytest.raises(
        ValueError, match=r"janus-pro-1b needs 4\.2 GB for its weights in torch.bfloat16 and cpu has 1\.0 GB"
    ):
        random_pipeline("janus-pro-1b", device="cpu", dtype=torch.bfloat16)
    pipe = random_pipeline("janus-pro-1b", device="meta")
    assert required_bytes(pipe.model, torch.bfloat16) == 2 * sum(p.numel() for p in pipe.model.parameters())
    assert available_bytes(torch.device("cpu")) > 0
