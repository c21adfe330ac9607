"""The drafter component: its shapes and weights' names, its save / load round trip in a pipeline, and the
checks that refuse a drafter with weights that are not finite or of another model's width."""

import json
import os
import re

import pytest
import torch

from arjet.addons.drafter import Drafter
from arjet.testing import tiny_drafter, tiny_pipeline


def test_a_drafter_holds_the_fusion_and_one_block_with_the_official_key_names():
    drafter = Drafter(hidden_size=16, intermediate_size=24, num_attention_heads=2)
    keys = set(drafter.state_dict())
    assert {
        "fc.weight",
        "fc.bias",
        "layers.0.self_attn.q_proj.weight",
        "layers.0.mlp.down_proj.weight",
    } <= keys
    assert "layers.0.input_layernorm.weight" in keys and not any("embed" in key for key in keys)
    assert drafter.fc.weight.shape == (16, 32)


def test_the_chameleon_block_has_per_head_query_and_key_norms_and_input_norm_can_go():
    drafter = Drafter(
        hidden_size=16, intermediate_size=24, num_attention_heads=2, block="chameleon", input_norm=False
    )
    state = drafter.state_dict()
    assert state["layers.0.self_attn.q_norm.weight"].shape == (2, 8)
    assert "layers.0.input_layernorm.weight" not in state


def test_a_drafter_refuses_an_unknown_block_and_heads_that_do_not_divide_the_width():
    with pytest.raises(ValueError, match="block must be one of llama, chameleon"):
        Drafter(hidden_size=16, intermediate_size=24, num_attention_heads=2, block="gpt")
    with pytest.raises(ValueError, match="not a multiple"):
        Drafter(hidden_size=16, intermediate_size=24, num_attention_heads=3)


def test_teacher_forcing_is_causal():
    """Output `j` depends on the pairs up to `j` only."""
    torch.manual_seed(0)
    drafter = Drafter(hidden_size=16, intermediate_size=24, num_attention_heads=2)
    embeds, hidden = torch.randn(2, 2, 5, 16)
    out = drafter(embeds, hidden)
    changed = hidden.clone()
    changed[:, 3:] += 1.0
    again = drafter(embeds, changed)
    assert torch.allclose(out[:, :3], again[:, :3], atol=1e-6) and not torch.allclose(
        out[:, 3:], again[:, 3:]
    )


def test_unrolled_depths_are_the_chains_drafting_computes():
    """Depth `k` at position `j` is what drafting `k` steps past committed position `j - k` computes: the
    teacher-forced pairs up to `j - k`, then pairs whose hidden state is the drafter's previous output."""
    torch.manual_seed(0)
    drafter = Drafter(hidden_size=16, intermediate_size=24, num_attention_heads=2)
    embeds, hidden = torch.randn(2, 2, 6, 16)
    depths = drafter.unrolled(embeds, hidden, 3)
    assert depths.shape == (3, 2, 6, 16)
    assert torch.allclose(depths[0], drafter(embeds, hidden), atol=1e-5)
    for k in (1, 2):
        for j in range(k, 6):
            committed = j - k
            chain = hidden[:, : committed + 1]
            for _ in range(k):  # each draft step appends the last output as the next pair's hidden state
                out = drafter(embeds[:, : chain.shape[1]], chain)
                chain = torch.cat([chain, out[:, -1:]], 1)
            expected = drafter(embeds[:, : chain.shape[1]], chain)[:, -1]
            assert torch.allclose(depths[k][:, j], expected, atol=1e-5), (k, j)


def test_for_adapter_sizes_the_drafter_for_the_target(family):
    pipe = tiny_pipeline(family)
    drafter = Drafter.for_adapter(pipe.session_adapter())
    width = pipe.session_adapter().embed_codes(torch.zeros(1, 1, dtype=torch.long)).shape[-1]
    assert drafter.config.hidden_size == width and drafter.config.intermediate_size == 2 * width


def test_sizes_for_measures_the_target_so_that_its_drafter_builds_on_the_meta_device(family):
    """`sizes_for` runs the target's embedding on its own device (emu3's, lumina's and glm's fail on the meta
    device); a drafter of those sizes then builds there (what the memory checks do), the sizes
    `for_adapter` builds with."""
    adapter = tiny_pipeline(family).session_adapter()
    sizes = Drafter.sizes_for(adapter, intermediate_size=40, num_attention_heads=2)
    width = adapter.embed_codes(torch.zeros(1, 1, dtype=torch.long)).shape[-1]
    assert sizes == {"hidden_size": width, "intermediate_size": 40, "num_attention_heads": 2}
    with torch.device("meta"):
        assert Drafter(**sizes).fc.weight.is_meta
    built = Drafter.for_adapter(adapter, intermediate_size=40, num_attention_heads=2).config
    assert {key: built[key] for key in sizes} == sizes


def _saved_drafter(folder, **config):
    """A tiny drafter saved in `folder`, its config.json then changed by `config`."""
    Drafter(hidden_size=16, intermediate_size=24, num_attention_heads=2).save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**saved, **config}))
    return folder


def test_from_pretrained_loads_a_drafter_that_fits(tmp_path):
    drafter = Drafter.from_pretrained(_saved_drafter(tmp_path / "drafter"))
    assert drafter.config.intermediate_size == 24 and not drafter.fc.weight.is_meta


@pytest.mark.parametrize(
    ("config", "text", "message"),
    [
        (
            {"intermediate_size": 10**12},
            None,
            "the drafter config .* describes a model of .* that would take",
        ),
        (
            {"num_attention_heads": 3},
            None,
            "the drafter config .* does not describe a model that can be built",
        ),
        (None, "[" * 100_000, "config.json holds JSON nested deeper than 64 levels"),
        (None, "[16, 24]", "the drafter config .* is not a drafter's config"),
        (
            {"max_position_embeddings": 10**15},
            None,
            r"the drafter config .* \(max_position_embeddings must be an integer from 1 to 1048576, got 10+\)",
        ),
    ],
    ids=["too-large", "no-model", "nested", "not-an-object", "positions"],
)
def test_from_pretrained_refuses_a_config_before_allocating(config, text, message, tmp_path, monkeypatch):
    from diffusers.models.modeling_utils import ModelMixin

    folder = _saved_drafter(tmp_path / "drafter", **(config or {}))
    if text is not None:
        (folder / "config.json").write_text(text)
    monkeypatch.setattr(ModelMixin, "from_pretrained", lambda *a, **k: pytest.fail("loaded before the check"))
    with pytest.raises(ValueError, match=message):
        Drafter.from_pretrained(folder)


@pytest.mark.parametrize(
    ("file", "make"),
    [
        ("config.json", os.mkfifo),
        ("diffusion_pytorch_model.safetensors", lambda p: p.symlink_to("/dev/zero")),
    ],
    ids=["config-fifo", "weights-dev-zero"],
)
def test_from_pretrained_names_a_file_that_is_not_a_regular_file(file, make, tmp_path, monkeypatch):
    """diffusers blocked on the FIFO, or called the file missing."""
    from diffusers.models.modeling_utils import ModelMixin

    folder = _saved_drafter(tmp_path / "drafter")
    (folder / file).unlink()
    make(folder / file)
    monkeypatch.setattr(ModelMixin, "from_pretrained", lambda *a, **k: pytest.fail("loaded before the check"))
    with pytest.raises(ValueError, match=re.escape(f"{folder / file} is not a regular file")):
        Drafter.from_pretrained(folder)


def test_a_pipeline_saves_and_loads_its_drafter(family, tmp_path):
    pipe = tiny_drafter(tiny_pipeline(family, grid=(3, 3)), seed=3)
    assert "drafter" in pipe.capabilities() and "drafter" not in tiny_pipeline(family).capabilities()
    pipe.save_pretrained(tmp_path)
    assert (tmp_path / "drafter" / "diffusion_pytorch_model.safetensors").is_file()
    loaded = type(pipe).from_pretrained(tmp_path)
    for key, value in pipe.drafter.state_dict().items():
        assert torch.equal(loaded.drafter.state_dict()[key], value), key
    options = dict(sampler="eagle:window=6,tree_width=2,tree_depth=2", seed=5, output_type="latent")
    assert torch.equal(pipe("a red circle", **options).codes, loaded("a red circle", **options).codes)


def test_from_pretrained_refuses_weights_that_are_not_finite(tmp_path):
    drafter = Drafter(hidden_size=16, intermediate_size=24, num_attention_heads=2)
    with torch.no_grad():
        drafter.layers[0].mlp.up_proj.weight[3, 5] = float("inf")
    drafter.save_pretrained(tmp_path / "drafter")
    message = (
        r"the weights of the drafter in .*drafter are not finite: layers\.0\.mlp\.up_proj\.weight holds "
        r"1 NaN or infinite value\(s\) of 384; the checkpoint is corrupt"
    )
    with pytest.raises(ValueError, match=message) as error:
        Drafter.from_pretrained(tmp_path / "drafter")
    assert "\n" not in str(error.value)
    with torch.no_grad():
        drafter.layers[0].mlp.up_proj.weight[3, 5] = 0.0  # the control: the same drafter, finite
    drafter.save_pretrained(tmp_path / "drafter")
    assert torch.equal(Drafter.from_pretrained(tmp_path / "drafter").fc.weight, drafter.fc.weight)


def _narrower(pipe) -> Drafter:
    """A drafter half as wide as `pipe`'s model (one trained for another model)."""
    width = Drafter.target_width(pipe.session_adapter())
    return Drafter(hidden_size=width // 2, intermediate_size=width, num_attention_heads=2)


def _other_width_message(pipe) -> str:
    width = Drafter.target_width(pipe.session_adapter())
    return f"the drafter has hidden_size={width // 2}, but this model's hidden states are {width} wide"


def test_register_modules_refuses_a_drafter_of_another_width(family):
    pipe = tiny_pipeline(family)
    with pytest.raises(ValueError, match=_other_width_message(pipe)) as error:
        pipe.register_modules(drafter=_narrower(pipe))
    assert pipe.drafter is None and "drafter" not in pipe.capabilities() and "\n" not in str(error.value)
    assert tiny_drafter(pipe).drafter is not None  # the control: a drafter of its width registers


def test_a_folder_whose_drafter_has_another_width_is_refused_on_loading(tmp_path):
    pipe = tiny_drafter(tiny_pipeline("janus"))
    pipe.save_pretrained(tmp_path)
    _narrower(pipe).save_pretrained(tmp_path / "drafter")
    with pytest.raises(ValueError, match=_other_width_message(pipe)):
        type(pipe).from_pretrained(tmp_path)


@pytest.mark.parametrize("sampler", ["eagle", "eagle2", "lantern:drafter=true", "lantern++:drafter=true"])
def test_a_drafter_of_another_width_set_directly_is_refused_before_any_model_work(sampler, monkeypatch):
    """`pipe.drafter = ...` skips `register_modules`; the samplers that use the drafter check it per call."""
    pipe = tiny_pipeline("janus", grid=(2, 2))
    pipe.drafter = _narrower(pipe)
    monkeypatch.setattr(pipe, "encode_prompts", lambda *a, **k: pytest.fail("model work before the check"))
    with pytest.raises(ValueError, match=_other_width_message(pipe)):
        pipe("a red circle", sampler=sampler)
    monkeypatch.undo()
    assert pipe("a red circle", sampler="sjd", output_type="latent").codes.shape == (
        1,
        2,
        2,
    )  # no drafter used
