import pytest
import torch
from small_presets import SMALL_CODEBOOK, SMALL_DECODER, small_preset

from arjet.bench.floor import (
    ForwardFloor,
    average_kv_tokens,
    decoder_graph_floor,
    floor_forward,
    forward_weight_bytes,
    kv_bytes_per_token,
    measure_copy_bandwidth,
    random_decoder,
)
from arjet.presets import random_pipeline
from arjet.session.decoder import LlamaStackDecoder


def test_copy_bandwidth_is_measured_and_checked():
    bandwidth = measure_copy_bandwidth("cpu", nbytes=8 << 20, repeats=2)
    assert 1e8 < bandwidth < 1e13  # bytes / s: between 0.1 GB/s and 10 TB/s on any machine
    with pytest.raises(ValueError, match="nbytes must be an integer >= 2"):
        measure_copy_bandwidth("cpu", nbytes=0)


@pytest.mark.parametrize("name", ["lumina-mgpt-7b-768", "janus-pro-1b", "emu3-gen"])
def test_a_forward_reads_the_decoder_the_final_norm_and_the_code_head(name):
    pipe = random_pipeline(small_preset(name), device="cpu")
    d, element = SMALL_DECODER, 4  # float32
    head_dim = d.hidden // d.heads
    attention = d.hidden * d.hidden * 2 + 2 * d.hidden * d.kv_heads * head_dim  # q, o; k, v
    if name.startswith("lumina"):
        attention += (
            2 * (d.heads + d.kv_heads) * head_dim
        )  # Chameleon's per-head q / k LayerNorms (weight, bias)
    layer = attention + 3 * d.hidden * d.ffn + 2 * d.hidden  # + SwiGLU MLP + two RMSNorms
    decoder = d.layers * layer + d.hidden  # + final norm
    if name.startswith("janus"):
        head = sum(p.numel() for p in pipe.model.model.generation_head.parameters())
        head += sum(p.numel() for p in pipe.model.model.generation_aligner.parameters())
    else:
        head = SMALL_CODEBOOK * d.hidden  # only the code rows of the LM head
    assert forward_weight_bytes(pipe) == (decoder + head) * element
    assert kv_bytes_per_token(pipe) == d.layers * 2 * d.kv_heads * head_dim * element


def test_a_forward_over_int8_weights_reads_their_bytes_not_the_float_ones():
    """The floor of an int8 bench counted the float weights (5.1 GB for Janus-Pro-1B, not about 1.4)."""
    pytest.importorskip("torchao", reason="quantization needs torchao (pip install 'arjet[quant]')")
    pipe = random_pipeline(small_preset("janus-pro-1b"), device="cpu")
    float_bytes = forward_weight_bytes(pipe)
    pipe.quantize("int8")
    # a byte per weight of the quantized linears plus a float32 scale per output row; the norms stay float
    assert 0.25 * float_bytes < forward_weight_bytes(pipe) < 0.3 * float_bytes


def test_the_kv_cache_is_counted_at_its_average_length_for_both_cfg_rows():
    pipe = random_pipeline(small_preset("janus-pro-1b"), device="cpu")  # 2x2 codes, no row-end tokens
    guided = average_kv_tokens(pipe, "a red circle", {})
    prefix = pipe.encode_prompts(["a red circle"], None, (2, 2), True)
    assert guided == prefix.visible.sum().item() + 2 * 4 / 2
    unguided = average_kv_tokens(pipe, "a red circle", {"guidance_scale": 1.0})
    assert unguided == pipe.encode_prompts(["a red circle"], None, (2, 2), False).ids.shape[1] + 4 / 2


def test_the_floor_is_bytes_over_bandwidth():
    floor = ForwardFloor(weight_bytes=3_000_000_000, kv_bytes=1e9, bandwidth=2e12)
    assert floor.bytes == 4e9 and floor.ms == pytest.approx(2.0)


def test_the_graph_floor_needs_a_cuda_device():
    with pytest.raises(ValueError, match="needs a CUDA device, got cpu"):
        decoder_graph_floor(
            layers=1, hidden=8, ffn=16, heads=2, kv_heads=2, head_rows=4, cache=8, filled=2, device="cpu"
        )


def test_the_floor_runs_arjets_own_decoder_and_it_computes_a_llama_forward():
    """The floor times arjet's decoder stack (the one every step runs), not a second copy; on the CPU its
    forward over an empty cache equals transformers' `LlamaModel` over the same embeddings."""
    decoder = random_decoder(
        layers=2, hidden=32, ffn=64, heads=4, kv_heads=2, dtype=torch.float64, device=torch.device("cpu")
    )
    assert isinstance(decoder, LlamaStackDecoder)
    head = torch.randn(8, 32, dtype=torch.float64)
    run = floor_forward(decoder, head, batch=2, width=5, cache=9, filled=0)
    logits = run()
    embeds, positions = run.args[2], run.args[3]
    with torch.no_grad():
        reference = decoder.backbone(inputs_embeds=embeds, position_ids=positions).last_hidden_state
    torch.testing.assert_close(logits, reference @ head.T)
    torch.testing.assert_close(run(), logits)  # the same work at every call


@pytest.mark.cuda
def test_the_graph_floor_times_a_captured_minimal_decoder():
    floors = decoder_graph_floor(
        layers=2,
        hidden=64,
        ffn=128,
        heads=4,
        kv_heads=2,
        head_rows=32,
        cache=96,
        filled=16,
        queries=(1, 16),
        repeats=5,
    )
    assert [f.queries for f in floors] == [1, 16]
    assert all(f.eager_ms > 0 and f.graph_ms > 0 for f in floors)
    with pytest.raises(ValueError, match="must fit the cache"):
        decoder_graph_floor(
            layers=1, hidden=8, ffn=16, heads=2, kv_heads=2, head_rows=4, cache=8, filled=2, queries=(16,)
        )
