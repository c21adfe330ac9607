"""Weights that do not match the model are an error naming the component and some keys, on every loading
route (a saved pipeline folder, a bare transformers folder, a VQ folder), unless `strict=False`."""

import json
import re

import pytest
import torch
from pickles import Payload
from safetensors.torch import load_file, save_file
from transformers import JanusVQVAE

import arjet
from arjet import cli
from arjet.addons.noise import NoiseConditioning
from arjet.pipelines.components import load_component
from arjet.testing import tiny_pipeline


def _rename_weights(folder, every: int = 1) -> str:
    """Rename every `every`-th weight of the safetensors file in `folder` (as a checkpoint of another layout
    would name them); returns one renamed key."""
    (path,) = folder.glob("*.safetensors")
    weights = load_file(path)
    renamed = {
        (f"renamed.{key}" if i % every == 0 else key): value for i, (key, value) in enumerate(weights.items())
    }
    save_file(renamed, path, metadata={"format": "pt"})
    return next(key for key in renamed if key.startswith("renamed."))


def _saved(family, tmp_path, noise: bool = False):
    pipe = tiny_pipeline(family, vocab_size=6)
    if noise:
        hidden = pipe.session_adapter().embed_codes(torch.zeros(1, 1, dtype=torch.long)).shape[-1]
        pipe.register_modules(noise_conditioning=NoiseConditioning(hidden_size=hidden, levels=4))
    pipe.save_pretrained(tmp_path / family)
    return tmp_path / family, pipe


@pytest.mark.parametrize("every", [1, 2], ids=["none-match", "half-match"])
def test_a_saved_pipeline_whose_model_weights_do_not_match_is_refused(family, every, tmp_path):
    folder, pipe = _saved(family, tmp_path)
    component = pipe.ar_component  # GLM-Image's AR model is its `vision_language_encoder`
    renamed = _rename_weights(folder / component, every)
    with pytest.raises(
        ValueError, match=rf"component '{component}' \(\w+ForConditionalGeneration\)"
    ) as raised:
        arjet.ARPipeline.from_pretrained(str(folder))
    message = str(raised.value)
    assert "not in the checkpoint" in message and "not in the model" in message and "strict=False" in message
    assert renamed in message or "renamed." in message


def _poison_weights(folder, value: float, every: bool = True) -> str:
    """Set the floating weights of the safetensors file in `folder` to `value` (all of them, or only the
    last one); returns the last one's key."""
    (path,) = folder.glob("*.safetensors")
    weights = load_file(path)
    last = [key for key, tensor in weights.items() if tensor.is_floating_point()][-1]
    poisoned = {
        key: tensor.fill_(value) if tensor.is_floating_point() and (every or key == last) else tensor
        for key, tensor in weights.items()
    }
    save_file(poisoned, path, metadata={"format": "pt"})
    return last


@pytest.mark.parametrize(
    ("value", "every"), [(float("nan"), True), (float("inf"), False)], ids=["all-nan", "one-inf"]
)
@pytest.mark.parametrize("strict", [True, False])
def test_weights_that_are_not_finite_are_refused_naming_the_component_and_a_tensor(
    value, every, strict, tmp_path
):
    """A checkpoint of NaN weights loaded and decoded every code as 0; it is refused at load time."""
    folder, pipe = _saved("janus", tmp_path)
    _poison_weights(folder / "model", value, every)
    with pytest.raises(
        ValueError,
        match=r"the weights of component 'model' \(JanusForConditionalGeneration\) in .* are not finite: \S+ holds [\d,]+ NaN or infinite value",
    ):
        arjet.ARPipeline.from_pretrained(str(folder), strict=strict)


def test_a_vq_whose_weights_are_not_finite_is_refused(tmp_path):
    folder, _ = _saved("lumina_mgpt", tmp_path)
    last = _poison_weights(folder / "vqgan", float("nan"), every=False)
    with pytest.raises(ValueError, match=f"component 'vqgan' .* not finite: {last} holds"):
        arjet.ARPipeline.from_pretrained(str(folder))


@pytest.mark.parametrize(("family", "component"), [("lumina_mgpt", "vqgan"), ("janus", "noise_conditioning")])
def test_every_weight_component_is_checked(family, component, tmp_path):
    folder, _ = _saved(family, tmp_path, noise=component == "noise_conditioning")
    _rename_weights(folder / component, every=2)
    with pytest.raises(ValueError, match=f"component '{component}'"):
        arjet.ARPipeline.from_pretrained(str(folder))


def test_a_bare_transformers_folder_whose_weights_do_not_match_is_refused(family, tmp_path):
    if family == "glm_image":
        pytest.skip(
            "GLM-Image loads whole pipeline folders only (test_glm_image: the AR model alone is refused)"
        )
    pipe = tiny_pipeline(family, vocab_size=6)
    pipe.model.save_pretrained(tmp_path)
    pipe.tokenizer.save_pretrained(tmp_path)
    if family == "lumina_mgpt":
        pipe.vqgan.save_pretrained(tmp_path / "vqgan")
    _rename_weights(tmp_path)
    extra = {"resolution": 96} if family == "lumina_mgpt" else {}  # the folder's name does not say it
    with pytest.raises(ValueError, match="component 'model'"):
        arjet.ARPipeline.from_pretrained(str(tmp_path), **extra)


def test_a_bare_lumina_folder_with_a_foreign_vqgan_is_refused(tmp_path):
    pipe = tiny_pipeline("lumina_mgpt", vocab_size=6)
    pipe.model.save_pretrained(tmp_path)
    pipe.tokenizer.save_pretrained(tmp_path)
    pipe.vqgan.save_pretrained(tmp_path / "vqgan")
    _rename_weights(tmp_path / "vqgan", every=3)
    with pytest.raises(ValueError, match="component 'vqgan' \\(ChameleonVQGAN\\)"):
        arjet.LuminaMGPTPipeline.from_pretrained(str(tmp_path), resolution=96)


def test_a_vq_folder_whose_weights_do_not_match_is_refused(tmp_path):
    """The route of `arjet train ar --vq` and the VQ evaluation."""
    tiny_pipeline("janus", vocab_size=6).model.model.vqmodel.save_pretrained(tmp_path)
    _rename_weights(tmp_path, every=5)
    with pytest.raises(ValueError, match=r"component 'vq' \(JanusVQVAE\)"):
        load_component(JanusVQVAE, tmp_path, "vq")


def test_weights_a_family_never_reads_may_be_missing(tmp_path):
    """Lumina-mGPT's checkpoints lack transformers' Chameleon VQ (its fine-tuning deletes `model.vqmodel`;
    arjet decodes with its own VQGAN): the rest must still match."""
    folder, _ = _saved("lumina_mgpt", tmp_path)
    (path,) = (folder / "model").glob("*.safetensors")
    weights = load_file(path)
    save_file(
        {k: v for k, v in weights.items() if not k.startswith("model.vqmodel.")},
        path,
        metadata={"format": "pt"},
    )
    assert type(arjet.ARPipeline.from_pretrained(str(folder))) is arjet.LuminaMGPTPipeline
    save_file(
        {k: v for k, v in weights.items() if not k.startswith("model.norm.")}, path, metadata={"format": "pt"}
    )
    with pytest.raises(
        ValueError, match=r"1 of the model's weights are not in the checkpoint \(model.norm.weight\)"
    ):
        arjet.ARPipeline.from_pretrained(str(folder))


def test_strict_false_loads_what_matches_and_leaves_the_rest_random(tmp_path):
    folder, pipe = _saved("emu3", tmp_path)
    _rename_weights(folder / "model", every=2)
    loaded = arjet.ARPipeline.from_pretrained(str(folder), strict=False)
    same = [
        torch.equal(a, b)
        for a, b in zip(loaded.model.state_dict().values(), pipe.model.state_dict().values(), strict=True)
    ]
    assert any(same) and not all(same)
    with pytest.raises(ValueError, match="strict must be True or False"):
        arjet.ARPipeline.from_pretrained(str(folder), strict="no")


def test_matching_folders_load_strictly(family, tmp_path):
    folder, pipe = _saved(family, tmp_path, noise=True)
    loaded = arjet.ARPipeline.from_pretrained(str(folder))
    for name in ("model", "noise_conditioning"):
        for a, b in zip(
            getattr(loaded, name).state_dict().values(),
            getattr(pipe, name).state_dict().values(),
            strict=True,
        ):
            assert torch.equal(a, b), name


def test_generate_refuses_a_folder_of_foreign_weights_in_one_line(tmp_path, capsys):
    folder, _ = _saved("janus", tmp_path)
    _rename_weights(folder / "model")
    out = tmp_path / "x.png"
    assert cli.main(["generate", "a red circle", "--model", str(folder), "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error[-1].startswith("arjet generate: error: the weights of component 'model'")
    assert not out.exists()


def _pickle_weights(folder, marker):
    """Replace the safetensors of `folder` by a torch file that also pickles a payload (it would write
    `marker` if unpickled), as a `pytorch_model.bin` from an untrusted source might."""
    (path,) = folder.glob("*.safetensors")
    weights = {**load_file(path), "payload": Payload(marker)}
    path.unlink()
    torch.save(weights, folder / "pytorch_model.bin")


def test_pickled_objects_in_a_weights_file_are_refused_unrun(family, tmp_path):
    folder, pipe = _saved(family, tmp_path)
    component = pipe.ar_component
    _pickle_weights(folder / component, tmp_path / "ran")
    with pytest.raises(
        ValueError, match=f"component '{component}' in .* hold pickled Python objects other than tensors"
    ):
        arjet.ARPipeline.from_pretrained(str(folder))
    assert not (tmp_path / "ran").exists()


def test_a_weights_file_of_tensors_only_still_loads_as_pytorch_model_bin(tmp_path):
    folder, pipe = _saved("janus", tmp_path)
    (path,) = (folder / "model").glob("*.safetensors")
    torch.save(load_file(path), folder / "model" / "pytorch_model.bin")
    path.unlink()
    loaded = arjet.ARPipeline.from_pretrained(str(folder))
    assert torch.equal(loaded.model.lm_head.weight, pipe.model.lm_head.weight)


def _edit_config(folder, **text_config):
    config = json.loads((folder / "config.json").read_text())
    config.get("text_config", config).update(text_config)
    (folder / "config.json").write_text(json.dumps(config))


def test_a_config_too_large_for_memory_is_refused_before_allocating(family, tmp_path, monkeypatch):
    folder, pipe = _saved(family, tmp_path)
    component = pipe.ar_component
    _edit_config(folder / component, vocab_size=10**12)  # 10**12 x width floats: terabytes

    def no_allocation(*args, **kwargs):
        raise AssertionError("the loader ran before the config's size was checked")

    monkeypatch.setattr(type(getattr(pipe, component)), "from_pretrained", no_allocation)
    with pytest.raises(
        ValueError, match=f"component '{component}' .* describes a model of .* parameters that would take"
    ):
        arjet.ARPipeline.from_pretrained(str(folder))


def test_a_config_that_builds_no_model_is_named(tmp_path):
    folder, _ = _saved("janus", tmp_path)
    _edit_config(folder / "model", hidden_size=-8)
    with pytest.raises(ValueError, match="component 'model' .* does not describe a model that can be built"):
        arjet.ARPipeline.from_pretrained(str(folder))


@pytest.mark.parametrize("value", ["256", 256.5, True, -1])
def test_a_config_field_of_the_wrong_type_ends_in_one_line_naming_the_file_and_field(value, tmp_path, capsys):
    """transformers' strict configs raise their own errors (not ValueError), which were tracebacks."""
    folder, _ = _saved("janus", tmp_path)
    _edit_config(folder / "model", hidden_size=value)
    out = tmp_path / "x.png"
    assert cli.main(["generate", "a red circle", "--model", str(folder), "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"arjet generate: error: {folder / 'model' / 'config.json'}, the config of ")
    assert re.search(r"hidden[_ ]size", error) and not out.exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0, -1e-6, 0.5, 1e10, 1e300])
@pytest.mark.parametrize("field", ["rms_norm_eps", "vision_config.layer_norm_eps"])
def test_a_norm_epsilon_that_is_not_a_small_positive_number_is_refused_at_load(field, value, tmp_path):
    """An epsilon of NaN loaded and decoded every code as 0 (a flat grey image, exit 0); one of 1e10 flattened
    every hidden state and decoded noise (exit 0)."""
    folder, _ = _saved("janus", tmp_path)
    if field == "rms_norm_eps":
        _edit_config(folder / "model", rms_norm_eps=value)
        named = "text_config.rms_norm_eps"
    else:
        config = json.loads((folder / "model" / "config.json").read_text())
        config["vision_config"]["layer_norm_eps"] = value
        (folder / "model" / "config.json").write_text(json.dumps(config))
        named = field
    with pytest.raises(ValueError, match=rf"model/config.json: {named} must be a finite number .*0\.01"):
        arjet.ARPipeline.from_pretrained(str(folder))


@pytest.mark.parametrize(
    ("part", "field"), [("text_config", "num_hidden_layers"), ("vq_config", "num_res_blocks")]
)
def test_a_config_of_a_million_layers_is_refused_before_the_model_is_built(
    part, field, tmp_path, monkeypatch
):
    """Building a million layers (or a VQ model's million resnet blocks per resolution) on the meta device
    took minutes; the size is extrapolated from one and two layers per count instead, and the full build
    never runs."""
    from arjet.pipelines import components

    folder, _ = _saved("janus", tmp_path)
    config = json.loads((folder / "model" / "config.json").read_text())
    config[part][field] = 10**6
    (folder / "model" / "config.json").write_text(json.dumps(config))

    def no_build(*args, **kwargs):
        raise AssertionError("the whole model was built before its layers were counted")

    monkeypatch.setattr(components, "check_fits_in_memory", no_build)
    monkeypatch.setattr(components, "available_bytes", lambda device: 10**9)
    with pytest.raises(
        ValueError,
        match=rf"component 'model' .* describes a model of about [\d,]+ parameters "
        rf"\({part}.{field}=1,000,000\) that would take .* GB, more than the 1 GB",
    ):
        arjet.ARPipeline.from_pretrained(str(folder))


def test_a_config_nested_too_deep_is_named_not_a_recursion_error(tmp_path):
    folder, pipe = _saved("janus", tmp_path)
    (folder / "model" / "config.json").write_text('{"a": ' * 100_000)
    with pytest.raises(ValueError, match="model/config.json holds JSON nested deeper than 64 levels"):
        load_component(type(pipe.model), folder / "model", "model")


def test_weights_of_another_shape_are_named_not_raised_by_transformers(tmp_path):
    folder, _ = _saved("janus", tmp_path)
    _edit_config(folder / "model", vocab_size=100)
    with pytest.raises(ValueError, match="weights have another shape in the checkpoint .*embed_tokens"):
        arjet.ARPipeline.from_pretrained(str(folder))


@pytest.mark.parametrize(
    "command",
    [
        ["generate", "a red circle", "--model", "{folder}", "--out", "{tmp}/x.png"],
        ["train", "ar", "--init", "{folder}", "--out", "{tmp}/run", "--max-steps", "1"],
        ["train", "sjd2", "--base", "{folder}", "--out", "{tmp}/run", "--max-steps", "1"],
        ["train", "ar", "--vq", "{folder}/model/vqmodel", "--out", "{tmp}/run", "--max-steps", "1"],
    ],
    ids=["generate --model", "train ar --init", "train sjd2 --base", "train ar --vq"],
)
def test_commands_refuse_pickled_weights_in_one_line(command, tmp_path, capsys):
    folder, pipe = _saved("janus", tmp_path)
    pipe.model.model.vqmodel.save_pretrained(folder / "model" / "vqmodel")
    _pickle_weights(folder / "model" / "vqmodel", tmp_path / "ran")
    _pickle_weights(folder / "model", tmp_path / "ran")
    argv = [part.format(folder=folder, tmp=tmp_path) for part in command]
    assert cli.main(argv) == 2
    error = capsys.readouterr().err
    lines = [line for line in error.splitlines() if "error:" in line]
    assert len(lines) == 1 and "hold pickled Python objects other than tensors" in lines[0], error
    assert "Traceback" not in error and "weights_only=False" not in error
    assert not (tmp_path / "ran").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("where", ["model_type", "text_config.model_type"])
def test_a_model_type_that_is_not_a_string_is_refused_in_one_line(where, tmp_path, capsys):
    """`"model_type": ["janus"]` raised a TypeError from inside transformers' weight loader: a traceback from
    generate, serve and app (the probe's B4)."""
    folder, _ = _saved("janus", tmp_path)
    config = json.loads((folder / "model" / "config.json").read_text())
    owner, field = (config, where) if "." not in where else (config["text_config"], "model_type")
    owner[field] = [owner[field]]
    (folder / "model" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=rf"model/config.json: {re.escape(where)} must be a string"):
        arjet.ARPipeline.from_pretrained(str(folder))
    out = tmp_path / "x.png"
    assert cli.main(["generate", "a red circle", "--model", str(folder), "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # (after the save's progress bar)
    assert error.startswith("arjet generate: error: ") and "must be a string" in error and not out.exists()


def test_a_bare_checkpoint_whose_model_type_is_not_a_string_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": {"name": "janus"}}))
    with pytest.raises(ValueError, match="config.json: model_type must be a string such as 'janus'"):
        arjet.ARPipeline.from_pretrained(str(tmp_path))


@pytest.mark.parametrize("family", ["janus", "glm_image"])
def test_a_config_of_ten_thousand_levels_is_refused_before_the_model_is_built(family, tmp_path, monkeypatch):
    """`vq_config.channel_multiplier: [1] * 10000` built 280,000 modules for 95 s before the refusal came (the
    probe's B5); GLM-Image's VAE lists its levels as `block_out_channels`."""
    from arjet.pipelines import components

    folder, _ = _saved(family, tmp_path)
    component, field = ("model", "channel_multiplier") if family == "janus" else ("vae", "block_out_channels")
    config = json.loads((folder / component / "config.json").read_text())
    owner = config["vq_config"] if family == "janus" else config
    owner[field] = [owner[field][0]] * 10_000
    (folder / component / "config.json").write_text(json.dumps(config))

    build = components._build

    def built(model_class, config):
        fields = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        assert len((fields.get("vq_config") or fields).get(field, ())) < 10_000, "built before it was refused"
        return build(model_class, config)

    monkeypatch.setattr(components, "_build", built)
    with pytest.raises(ValueError, match=rf"{field} lists 10,000 levels, more than 16"):
        arjet.ARPipeline.from_pretrained(str(folder))
