"""A drafter in the layout of LANTERN's released ones (`cnets_lumina_mgpt.Model` and its `config.json`), at
tiny size: the tiny Lumina-mGPT pipeline's width."""

import json

import torch

HIDDEN, HEADS, MLP, VOCAB = 32, 4, 48, 64  # the tiny Lumina-mGPT pipeline's width; head_dim 8


def official_state(*, lumina_norms: bool = True, prefix: str = "module.") -> dict[str, torch.Tensor]:
    """A state dict with the keys and shapes of the official drafter (`cnets_lumina_mgpt.Model`): the
    embedding copy, the fusion, and one Chameleon block whose query / key norms are `[1, head_dim]`."""
    generator = torch.Generator().manual_seed(0)

    def weight(*shape):
        return torch.randn(*shape, generator=generator) * 0.2

    rows = 1 if lumina_norms else HEADS
    state = {
        "embed_tokens.weight": weight(VOCAB, HIDDEN),
        "fc.weight": weight(HIDDEN, 2 * HIDDEN),
        "fc.bias": weight(HIDDEN),
        **{f"layers.0.self_attn.{p}_proj.weight": weight(HIDDEN, HIDDEN) for p in "qkvo"},
        **{
            f"layers.0.self_attn.{n}_norm.{w}": weight(rows, HIDDEN // HEADS)
            for n in "qk"
            for w in ("weight", "bias")
        },
        "layers.0.mlp.gate_proj.weight": weight(MLP, HIDDEN),
        "layers.0.mlp.up_proj.weight": weight(MLP, HIDDEN),
        "layers.0.mlp.down_proj.weight": weight(HIDDEN, MLP),
        "layers.0.input_layernorm.weight": 1 + weight(HIDDEN),
        "layers.0.post_attention_layernorm.weight": 1 + weight(HIDDEN),
    }
    return {prefix + key: value for key, value in state.items()}


def official_folder(path, state, weights="pytorch_model.bin"):
    path.mkdir()
    config = {
        "model_type": "chameleon",
        "hidden_size": HIDDEN,
        "intermediate_size": MLP,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 512,
        "vocab_size": VOCAB,
        "dropout": 0.05,
    }
    (path / "config.json").write_text(json.dumps(config))
    if weights.endswith(".bin"):
        torch.save(state, path / weights)
    else:
        from safetensors.torch import save_file

        save_file(state, path / weights)
    return path
