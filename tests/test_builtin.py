"""The models shipped in the package: present, small, loadable, and every sampler runs on them."""

import pytest
import torch

import arjet
from arjet.builtin import assets_dir
from arjet.cli import main
from arjet.data import heldout_set
from arjet.eval.clip import load_clip


@pytest.fixture
def shapes(builtin_pipe):
    return builtin_pipe


def test_built_in_models_are_listed_and_small():
    assert {"shapes", "shapes-sjd2"} <= set(arjet.available_models())
    total = sum(f.stat().st_size for f in assets_dir().rglob("*") if f.is_file())
    assert total <= 40 * 2**20, f"assets are {total / 2**20:.1f} MB"


def test_load_gives_a_float32_janus_pipeline(shapes):
    assert isinstance(shapes, arjet.JanusPipeline) and shapes.dtype == torch.float32
    assert shapes.default_size() == (64, 64) and shapes.image_tokenizer.grid == (16, 16)
    with pytest.raises(ValueError, match="unknown built-in model 'nope'"):
        arjet.load("nope")


def test_load_refuses_keywords_it_does_not_take_naming_what_it_takes():
    with pytest.raises(
        ValueError,
        match="unexpected argument.s. bogus= for loading a JanusPipeline; it takes strict, dtype, .*drafter",
    ):
        arjet.load(bogus=1)
    with pytest.raises(ValueError, match="unexpected argument.s. colour=, size= for loading"):
        arjet.ARPipeline.from_pretrained("shapes", size=2, colour="red")


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("cuda", "this machine has no CUDA GPU; use cpu"),
        ("cuda:99", "CUDA GPU"),
        ("tpu", "is not a torch device"),
        ("cpu:x", "is not a torch device"),
    ],
)
def test_load_names_a_device_this_machine_lacks_before_loading(device, message, monkeypatch):
    if device == "cuda" and torch.cuda.is_available():
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(arjet.ARPipeline, "from_pretrained", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(ValueError, match=f"device '{device}'.*{message}"):
        arjet.load(device=device)


@pytest.mark.parametrize(
    ("file", "damage", "message"),
    [
        ("model/model.safetensors", lambda data: data[:1000], "is not a readable safetensors file"),
        ("drafter/config.json", lambda data: b"[" * 100_000, "holds JSON nested deeper than 64 levels"),
    ],
    ids=["weights-cut-short", "nested-config"],
)
def test_load_model_names_a_damaged_file_of_a_local_folder(file, damage, message, tmp_path):
    """What the command line says for `--model` (`arjet.cli.options.check_model_arguments`), the library
    says too: the folder and the file, from the headers, before any component loads."""
    import shutil

    from arjet.builtin import load_model

    folder = tmp_path / "shapes"
    shutil.copytree(assets_dir() / "shapes", folder)
    (folder / file).write_bytes(damage((folder / file).read_bytes()))
    with pytest.raises(ValueError, match=f"the checkpoint '{folder}': {folder / file} {message}"):
        load_model(str(folder))


@pytest.mark.parametrize(
    "sampler", ["ar", "sjd", "mc-sjd", "zipar", "zipar+sjd", "lantern:k=16,delta=0.1", "zipar+lantern:k=16"]
)
def test_every_sampler_makes_an_image(shapes, sampler):
    out = shapes("a red circle left of a blue square", sampler=sampler, seed=0)
    assert out.images[0].size == (64, 64) and out.stats[0].tokens == 256
    assert out.stats[0].forward_passes <= 256


@pytest.mark.slow
def test_the_shipped_drafters_siblings_save_target_forwards_over_jacobi_siblings(shapes):
    """On the same window and tree as `sjd-pac`, the drafter's proposals for the siblings (its trained guess
    from the committed codes) save target forwards over Jacobi ones (13% on the 200 evaluation prompts)."""
    prompts = [item["prompt"] for item in heldout_set(4)]
    passes = {
        spec: sum(s.forward_passes for s in shapes(prompts, sampler=spec, seed=[0, 1, 2, 3]).stats)
        for spec in ("sjd-pac", "eagle:chain=jacobi,window=64")
    }
    assert passes["eagle:chain=jacobi,window=64"] < 0.95 * passes["sjd-pac"], passes  # 0.80 here


def test_sjd2_runs_on_its_fine_tuned_variant():
    pipe = arjet.load("shapes-sjd2")
    pipe.set_progress_bar_config(disable=True)
    out = pipe("three green triangles", sampler="sjd2", seed=0)
    assert out.stats[0].tokens == 256 and out.stats[0].forward_passes < 256


def test_generate_cli_defaults_to_the_built_in_model(tmp_path, capsys):
    assert main(["generate", "a red circle left of a blue square", "--out", str(tmp_path / "out.png")]) == 0
    assert (tmp_path / "out.png").is_file() and "256 codes" in capsys.readouterr().out


def test_domain_clip_is_shipped():
    clip = load_clip("domain")
    assert clip.encode_texts(["a red circle"]).shape[0] == 1
