"""LANTERN's released drafter layout, at tiny size, converted into an arjet drafter that loads and decodes."""

import pytest
import torch
from lantern_official import HEADS, HIDDEN, official_folder, official_state

from arjet.addons.drafter import Drafter
from arjet.addons.lantern_drafter import convert_lantern_drafter, read_lantern_drafter
from arjet.testing import tiny_pipeline


def test_the_official_layout_converts_loads_and_decodes(tmp_path):
    state = official_state()
    folder = official_folder(tmp_path / "lantern", state)
    out = convert_lantern_drafter(folder, tmp_path / "arjet")
    drafter = Drafter.from_pretrained(out)
    assert drafter.config.block == "chameleon" and drafter.config.fc_bias and drafter.config.input_norm
    converted = drafter.state_dict()
    assert torch.equal(converted["fc.weight"], state["module.fc.weight"])  # [embedding | hidden] order kept
    assert converted["layers.0.self_attn.q_norm.weight"].shape == (HEADS, HIDDEN // HEADS)
    assert torch.equal(
        converted["layers.0.self_attn.k_norm.bias"][2], state["module.layers.0.self_attn.k_norm.bias"][0]
    )

    pipe = tiny_pipeline("lumina_mgpt", grid=(3, 3))
    pipe.register_modules(drafter=drafter)
    codes = pipe(
        "a red circle", sampler="eagle:window=6,tree_width=2,tree_depth=2", seed=0, output_type="latent"
    ).codes
    assert codes.shape == (1, 3, 3) and ((codes >= 0) & (codes < 8)).all()


def test_per_head_norms_and_safetensors_and_no_prefix_convert_too(tmp_path):
    state = official_state(lumina_norms=False, prefix="")
    drafter = read_lantern_drafter(official_folder(tmp_path / "anole", state, "model.safetensors"))
    assert torch.equal(
        drafter.state_dict()["layers.0.self_attn.q_norm.weight"], state["layers.0.self_attn.q_norm.weight"]
    )


def test_the_llamagen_layout_has_no_input_norm_and_a_llama_block(tmp_path):
    state = {k: v for k, v in official_state(prefix="").items() if "_norm." not in k or "layernorm" in k}
    del state["layers.0.input_layernorm.weight"], state["fc.bias"]
    drafter = read_lantern_drafter(official_folder(tmp_path / "llamagen", state))
    assert drafter.config.block == "llama" and not drafter.config.input_norm and not drafter.config.fc_bias


def test_a_torch_file_with_python_objects_is_refused_unread(tmp_path):
    state = official_state()
    state["module.note"] = {"an": object.__new__(Drafter)}  # pickled code, not tensors
    with pytest.raises(ValueError, match="refuses to unpickle"):
        read_lantern_drafter(official_folder(tmp_path / "bad", state))


def test_a_layout_that_does_not_match_is_named(tmp_path):
    state = official_state()
    state["module.layers.1.mlp.up_proj.weight"] = torch.zeros(2)
    with pytest.raises(ValueError, match="unexpected"):
        read_lantern_drafter(official_folder(tmp_path / "two", state))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        read_lantern_drafter(tmp_path)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('{"hidden_size": 32, "intermediate_size": 2000000000000, "num_attention_heads": 4}',
         "the LANTERN drafter config .*config.json describes a model of .* that would take"),
        ('{"hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 5}',
         "the LANTERN drafter config .*config.json does not describe a model that can be built"),
        ('{"hidden_size": 32}', "the drafter's config.json has no intermediate_size; pass the folder"),
        ('{"hidden_size": "abc", "intermediate_size": 48, "num_attention_heads": 4}',
         "the drafter's config.json has hidden_size='abc', which is not an integer > 0; pass the folder"),
        ('{"hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "rope_theta": -1}',
         "the drafter's config.json has rope_theta=-1, which is not a finite number > 0"),
        ("[" * 100_000, "config.json holds JSON nested deeper than 64 levels"),
        ("[32, 48]", "config.json is not a JSON object"),
        (b"\xff{}", "config.json is not UTF-8 text"),
    ],
    ids=[
        "too-large", "no-model", "no-sizes", "not-an-integer", "not-positive", "nested", "not-an-object", "not-utf8"
    ],
)  # fmt: skip
def test_a_config_is_refused_before_the_weights_are_read(config, message, tmp_path, monkeypatch):
    import arjet.addons.lantern_drafter as lantern

    folder = official_folder(tmp_path / "lantern", official_state())
    path = folder / "config.json"
    path.write_bytes(config if isinstance(config, bytes) else config.encode())
    monkeypatch.setattr(lantern, "load_tensors", lambda *a, **k: pytest.fail("read the weights first"))
    with pytest.raises(ValueError, match=message):
        read_lantern_drafter(folder)


def test_weights_that_are_not_finite_are_refused(tmp_path):
    state = official_state()
    state["module.fc.weight"][1, 2] = float("nan")
    with pytest.raises(
        ValueError, match=r"the weights in .*pytorch_model\.bin are not finite: fc\.weight holds 1 NaN"
    ):
        convert_lantern_drafter(official_folder(tmp_path / "nan", state), tmp_path / "out")
    assert not (tmp_path / "out").exists()
