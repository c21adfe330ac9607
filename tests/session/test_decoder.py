"""The session's decoder stacks: arjet's own forward over the transformers weights equals transformers' own,
spans and row-end room are sized safely, and misuse seen only in the data is raised when checked."""

import pytest
import torch

from arjet.session import DecodingSession, LlamaStackDecoder, TransformersDecoder
from arjet.session import decoder as decoder_module
from arjet.testing import tiny_pipeline

from reference import full_sequence_logits

GRID = (3, 3)
TOL = dict(atol=1e-4, rtol=1e-4)


@pytest.fixture(autouse=True)
def _narrow_spans(monkeypatch):
    """Spans grow in steps of one slot here (64 by default), so that tiny grids exercise narrow spans too."""
    monkeypatch.setattr(DecodingSession, "span_step_min", 1)


def _session(pipe, decoder=None, prompts=("a red circle", "green star")):
    scale = pipe.checkpoint_guidance_scale()  # 1: no CFG (GLM-Image)
    guided = scale != 1
    prefix = pipe.encode_prompts(list(prompts), None, GRID, guided)
    return DecodingSession(
        pipe.session_adapter(), pipe.image_layout(GRID), prefix, 3.0 if guided else None, decoder=decoder
    )


def _codes(batch=2):
    return torch.randint(0, 8, (batch, GRID[0] * GRID[1]), generator=torch.Generator().manual_seed(3))


def test_every_family_uses_its_own_stack(family):
    pipe = tiny_pipeline(family, grid=GRID, vocab_size=8)
    assert isinstance(_session(pipe).decoder, LlamaStackDecoder)


@pytest.mark.parametrize("quantization", [None, "int8"])
def test_own_stack_and_transformers_module_give_the_same_logits(family, quantization):
    """With `quantization`, both run the same quantized weights: the stack calls the quantized linear (no
    float copy, no transformers module) and must agree with transformers' modules calling it."""
    pipe = tiny_pipeline(family, grid=GRID, vocab_size=8, logit_scale=3.0)
    if quantization is not None:
        pipe.quantize(quantization)
    adapter = pipe.session_adapter()
    fallback = TransformersDecoder(adapter.hidden_states, adapter.num_layers)
    sessions = [_session(pipe), _session(pipe, fallback)]
    codes = _codes()
    cells = torch.arange(1, 7).expand(2, 6)
    for session in sessions:
        session.reserve(8)
    first, second = (s.logits(cells, codes[:, :6]) for s in sessions)
    torch.testing.assert_close(first, second, **TOL)
    torch.testing.assert_close(sessions[0].first_logits, sessions[1].first_logits, **TOL)


def test_chameleon_swin_norm_layers_match_transformers():
    """Chameleon's post-norm layer order (its 30B configuration), on the tiny Lumina-mGPT model."""
    from transformers import ChameleonForConditionalGeneration

    pipe = tiny_pipeline("lumina_mgpt", grid=GRID, vocab_size=8, logit_scale=3.0)
    config = pipe.model.config
    config.swin_norm = True
    torch.manual_seed(0)
    pipe.model = ChameleonForConditionalGeneration(config).eval()
    assert pipe.session_adapter().static_decoder().swin_norm
    session = _session(pipe)
    prefix = pipe.encode_prompts(["a red circle", "green star"], None, GRID, True)
    codes = _codes()
    reference = full_sequence_logits(pipe, prefix, codes.view(2, *GRID), 3.0)
    logits = session.logits(torch.arange(1, 9).expand(2, 8), codes[:, :8])
    torch.testing.assert_close(logits, reference[:, 1:9], **TOL)


def test_a_narrow_span_attends_to_the_prefix_and_the_call_only(family):
    """Reserving a span for the next few cells gives the same logits as attending over the whole cache."""
    pipe = tiny_pipeline(family, grid=GRID, vocab_size=8, logit_scale=3.0)
    narrow, full = _session(pipe), _session(pipe)
    narrow.reserve(2)
    assert narrow.span < full.span == full.capacity
    codes = _codes()
    cells = torch.tensor([[1, 2]] * 2)
    torch.testing.assert_close(narrow.logits(cells, codes[:, :2]), full.logits(cells, codes[:, :2]), **TOL)


def test_an_input_beyond_the_reserved_span_is_raised_when_checked():
    pipe = tiny_pipeline("emu3", grid=GRID, vocab_size=8)
    session = _session(pipe)
    session.reserve(0)
    session.logits(torch.tensor([[8], [8]]), torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="beyond the reserved span"):
        session.check()


def test_more_row_ends_than_announced_is_raised_when_checked():
    """Two queries feed a row's last cell (cells 2 and 5 of a 3-wide grid) where one was announced."""
    pipe = tiny_pipeline("emu3", grid=GRID, vocab_size=8)
    session = _session(pipe)
    session.logits(torch.tensor([[3, 6]] * 2), torch.zeros(2, 2, dtype=torch.long), row_ends=1)
    with pytest.raises(ValueError, match="row_ends"):
        session.check()


def test_row_end_room_matches_the_default_packing(family):
    pipe = tiny_pipeline(family, grid=GRID, vocab_size=8, logit_scale=3.0)
    tight, loose = _session(pipe), _session(pipe)
    codes = _codes()
    cells = torch.tensor([[2, 3, 4, 5]] * 2)  # feeds cells 1..4: one row end (after cell 2) in a 3-wide grid
    torch.testing.assert_close(
        tight.logits(cells, codes[:, 1:5], row_ends=1), loose.logits(cells, codes[:, 1:5]), **TOL
    )
    tight.check()


def test_a_packed_weight_is_reused_made_again_after_a_change_and_dropped_with_the_weight():
    if not decoder_module._can_pack([torch.empty(1, 1)]):
        pytest.skip("this torch build has no oneDNN linear")
    linear = torch.nn.Linear(16, 8)
    packed = decoder_module._packed(linear.weight)
    assert decoder_module._packed(linear.weight) is packed
    with torch.no_grad():
        linear.weight.mul_(2)
        changed = decoder_module._packed(linear.weight)
        x = torch.randn(3, 16)
        out = torch.ops.mkldnn._linear_pointwise(x, changed, linear.bias, "none", [], "")
        torch.testing.assert_close(out, torch.nn.functional.linear(x, linear.weight, linear.bias))
    assert changed is not packed
    slot = id(linear.weight)
    assert slot in decoder_module._PACKED
    del linear, packed, changed
    assert slot not in decoder_module._PACKED


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("family_name", ["lumina_mgpt", "glm_image"])
def test_stacked_qkv_and_gate_up_give_the_separate_products(family_name, dtype, monkeypatch):
    """CUDA's stacked copies (one q/k/v product and one gate/up product per layer), run here on the CPU: the
    same logits as the separate products, within rounding (GLM-Image holds gate and up as one already)."""
    pipe = tiny_pipeline(family_name, grid=GRID, vocab_size=8, logit_scale=3.0).to(dtype=dtype)
    monkeypatch.setattr(decoder_module, "_can_pack", lambda weights: False)
    codes, cells = _codes(), torch.arange(1, 7).expand(2, 6)
    logits = {}
    for stack in (False, True):
        monkeypatch.setattr(decoder_module, "_can_stack", lambda weights, stack=stack: stack)
        session = _session(pipe)
        layer = session.decoder.layers[0]
        assert (layer.qkv.stacked is not None) == stack
        assert (layer.gate_up.stacked is not None) == (stack and family_name != "glm_image")
        session.reserve(8)
        logits[stack] = session.logits(cells, codes[:, :6])
    tolerance = {torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    torch.testing.assert_close(logits[True], logits[False], atol=tolerance, rtol=tolerance)


def test_weights_are_stacked_on_cuda_only_within_the_free_memory_share(monkeypatch):
    """The copies cost memory: stacked only where they take at most `STACK_LIMIT_SHARE` of what is free."""
    from types import SimpleNamespace

    assert not decoder_module._can_stack([torch.empty(4, 4)])  # the CPU packs for oneDNN instead
    weight = SimpleNamespace(device=torch.device("cuda"), numel=lambda: 1000, element_size=lambda: 2)
    free = 2000 / decoder_module.STACK_LIMIT_SHARE  # exactly the share: 2 kB of copies
    monkeypatch.setattr(decoder_module, "available_bytes", lambda device: free)
    assert decoder_module._can_stack([weight])
    assert not decoder_module._can_stack([weight, weight])
    monkeypatch.setattr(decoder_module, "available_bytes", lambda device: None)
    assert not decoder_module._can_stack([weight])
