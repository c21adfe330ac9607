import json

import pytest
import torch
from huggingface_hub.errors import LocalEntryNotFoundError

import arjet
from arjet.addons import NoiseConditioning
from arjet.pipelines import loading
from arjet.testing import tiny_drafter, tiny_pipeline


def test_missing_local_folder_says_what_to_provide(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint folder at"):
        arjet.ARPipeline.from_pretrained(str(tmp_path / "nothing-here"))


def test_unavailable_hub_id_names_the_local_folder_to_provide(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        FileNotFoundError, match=r"hf download deepseek-community/Janus-Pro-1B --local-dir ./Janus-Pro-1B"
    ):
        arjet.ARPipeline.from_pretrained("deepseek-community/Janus-Pro-1B", local_files_only=True)


def test_folder_without_config_is_explained(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither model_index.json"):
        arjet.ARPipeline.from_pretrained(str(tmp_path))


def test_unsupported_model_type_lists_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="does not support; supported: JanusPipeline"):
        arjet.ARPipeline.from_pretrained(str(tmp_path))


@pytest.mark.parametrize("family", ["janus", "emu3"])
def test_bare_transformers_checkpoint_loads_through_the_auto_class(family, tmp_path):
    pipe = tiny_pipeline(family, grid=(2, 2), vocab_size=6)
    pipe.model.save_pretrained(tmp_path)
    pipe.tokenizer.save_pretrained(tmp_path)
    loaded = arjet.ARPipeline.from_pretrained(str(tmp_path))
    assert type(loaded) is type(pipe)
    loaded.set_progress_bar_config(disable=True)
    size = pipe.default_size()
    out = loaded("a red circle", seed=0, height=size[0], width=size[1])
    assert out.codes.shape == (1, 2, 2)


# -- nothing downloads silently ------------------------------------------------------------------------
class _SnapshotCalls:
    """Stands in for `huggingface_hub.snapshot_download`: records its arguments, serves `folder` (or fails
    the way an uncached id does)."""

    def __init__(self, folder=None):
        self.folder = folder
        self.calls = []

    def __call__(self, repo_id, **kwargs):
        self.calls.append((repo_id, kwargs))
        if self.folder is None:
            raise LocalEntryNotFoundError("Cannot find an appropriate cached snapshot folder")
        return str(self.folder)


@pytest.mark.parametrize("loader", [arjet.ARPipeline, arjet.JanusPipeline])
def test_hub_ids_are_looked_up_in_the_local_cache_only_by_default(loader, monkeypatch):
    fake = _SnapshotCalls()
    monkeypatch.setattr(loading, "snapshot_download", fake)
    with pytest.raises(FileNotFoundError) as raised:
        loader.from_pretrained("deepseek-community/Janus-Pro-1B")
    assert fake.calls == [("deepseek-community/Janus-Pro-1B", {"local_files_only": True})]
    message = str(raised.value)
    assert "not in the local Hugging Face cache" in message
    assert "hf download deepseek-community/Janus-Pro-1B --local-dir ./Janus-Pro-1B" in message
    assert "from_pretrained('./Janus-Pro-1B')" in message and "local_files_only=False" in message


@pytest.mark.parametrize("loader", [arjet.ARPipeline, arjet.JanusPipeline])
def test_downloading_is_an_explicit_opt_in(loader, monkeypatch, tmp_path):
    pipe = tiny_pipeline("janus", grid=(2, 2), vocab_size=6)
    pipe.save_pretrained(tmp_path)
    fake = _SnapshotCalls(tmp_path)
    monkeypatch.setattr(loading, "snapshot_download", fake)
    loaded = loader.from_pretrained("someone/tiny-janus", local_files_only=False, revision="v1")
    assert fake.calls == [("someone/tiny-janus", {"local_files_only": False, "revision": "v1"})]
    assert type(loaded) is type(pipe)
    fake.folder = None
    with pytest.raises(FileNotFoundError, match="could not be downloaded from the Hugging Face hub"):
        loader.from_pretrained("someone/tiny-janus", local_files_only=False)


# -- Lumina-mGPT: a bare Chameleon checkpoint + arjet's VQGAN folder -------------------------------------
def _save_bare_lumina(folder, with_vqgan=True):
    pipe = tiny_pipeline("lumina_mgpt", grid=(2, 2), vocab_size=6)  # 64 px, one code per 32-px unit
    pipe.model.save_pretrained(folder)
    pipe.tokenizer.save_pretrained(folder)
    if with_vqgan:
        pipe.vqgan.save_pretrained(folder / "vqgan")
    return pipe


@pytest.mark.parametrize("loader", [arjet.ARPipeline, arjet.LuminaMGPTPipeline])
def test_bare_lumina_checkpoint_with_its_vqgan_folder(loader, tmp_path):
    pipe = _save_bare_lumina(tmp_path)
    loaded = loader.from_pretrained(str(tmp_path), resolution=64)
    assert type(loaded) is arjet.LuminaMGPTPipeline
    assert loaded.config.resolution == 64 and loaded.default_size() == (64, 64)
    loaded.set_progress_bar_config(disable=True)
    out = loaded("a red circle", seed=0)
    assert out.codes.shape == (1, 2, 2) and out.images[0].size == (64, 64)
    assert torch.equal(out.codes, pipe("a red circle", seed=0).codes)


def test_lumina_vqgan_can_live_elsewhere(tmp_path):
    pipe = _save_bare_lumina(tmp_path / "model", with_vqgan=False)
    pipe.vqgan.save_pretrained(tmp_path / "converted")
    loaded = arjet.ARPipeline.from_pretrained(
        str(tmp_path / "model"), resolution=64, vqgan=str(tmp_path / "converted")
    )
    loaded.set_progress_bar_config(disable=True)
    assert torch.equal(loaded("a red circle", seed=0).codes, pipe("a red circle", seed=0).codes)


def test_missing_lumina_vqgan_names_the_folder_and_the_converter(tmp_path):
    _save_bare_lumina(tmp_path, with_vqgan=False)
    with pytest.raises(FileNotFoundError) as raised:
        arjet.ARPipeline.from_pretrained(str(tmp_path), resolution=64)
    message = str(raised.value)
    assert f"expected at {tmp_path / 'vqgan'}" in message
    assert "arjet convert-vqgan vqgan.ckpt OUT --config vqgan.yaml" in message and "vqgan=OUT" in message


def test_lumina_resolution_is_required_when_the_checkpoint_is_not_a_known_one(tmp_path):
    _save_bare_lumina(tmp_path / "my-lumina")
    with pytest.raises(
        ValueError, match=r"pass the size it was trained for.*resolution=768.*Lumina-mGPT-7B-512: 512"
    ):
        arjet.ARPipeline.from_pretrained(str(tmp_path / "my-lumina"))
    with pytest.raises(ValueError, match="resolution must be a positive multiple of 32 pixels, got 500"):
        arjet.ARPipeline.from_pretrained(str(tmp_path / "my-lumina"), resolution=500)


def test_lumina_resolution_is_read_from_a_released_checkpoints_name(tmp_path, monkeypatch):
    # a local copy named like its hub repository (what `hf download ... --local-dir` makes)
    _save_bare_lumina(tmp_path / "Lumina-mGPT-7B-512")
    assert arjet.ARPipeline.from_pretrained(str(tmp_path / "Lumina-mGPT-7B-512")).config.resolution == 512
    # an explicit resolution wins
    loaded = arjet.ARPipeline.from_pretrained(str(tmp_path / "Lumina-mGPT-7B-512"), resolution=64)
    assert loaded.config.resolution == 64
    # a hub id found in the cache: the snapshot folder is named by revision, its repository folder by id
    snapshot = tmp_path / "hub" / "models--Alpha-VLLM--Lumina-mGPT-7B-1024" / "snapshots" / "0123abcd"
    _save_bare_lumina(snapshot)
    fake = _SnapshotCalls(snapshot)
    monkeypatch.setattr(loading, "snapshot_download", fake)
    loaded = arjet.ARPipeline.from_pretrained("Alpha-VLLM/Lumina-mGPT-7B-1024")
    assert loaded.config.resolution == 1024 and loaded.default_size() == (1024, 1024)
    assert fake.calls == [("Alpha-VLLM/Lumina-mGPT-7B-1024", {"local_files_only": True})]


def test_a_folder_saved_before_the_image_tokenizers_moved_still_loads(tmp_path):
    """Saved pipelines name their components' modules; `arjet.tokenizers` is `arjet.vq` today."""
    pipe = tiny_pipeline("lumina_mgpt", grid=(2, 2), vocab_size=6)
    pipe.save_pretrained(tmp_path)
    index = json.loads((tmp_path / "model_index.json").read_text())
    assert index["vqgan"] == ["arjet.vq.chameleon_vqgan", "ChameleonVQGAN"]
    index["vqgan"] = ["arjet.tokenizers.chameleon_vqgan", "ChameleonVQGAN"]  # as saved by arjet 0.1
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    loaded = arjet.ARPipeline.from_pretrained(str(tmp_path))
    assert type(loaded.vqgan).__module__ == "arjet.vq.chameleon_vqgan"
    loaded.set_progress_bar_config(disable=True)
    pipe.set_progress_bar_config(disable=True)
    assert torch.equal(loaded("a red circle", seed=0).codes, pipe("a red circle", seed=0).codes)
    assert loading.current_module("arjet.tokenizers") == "arjet.vq"
    assert loading.current_module("arjet.session.drafting") == "arjet.session.drafting"  # whole names only


def test_a_folder_saved_before_the_add_ons_moved_still_loads(tmp_path):
    """The drafter and the noise conditioning were saved as `arjet.session.drafter` / `arjet.session.noise`;
    they are `arjet.addons.drafter` / `arjet.addons.noise` today."""
    pipe = tiny_drafter(tiny_pipeline("janus", grid=(2, 2), vocab_size=6))
    hidden = pipe.session_adapter().embed_codes(torch.zeros(1, 1, dtype=torch.long)).shape[-1]
    pipe.register_modules(noise_conditioning=NoiseConditioning(hidden_size=hidden, levels=4))
    pipe.save_pretrained(tmp_path)
    index = json.loads((tmp_path / "model_index.json").read_text())
    assert index["drafter"] == ["arjet.addons.drafter", "Drafter"]
    assert index["noise_conditioning"] == ["arjet.addons.noise", "NoiseConditioning"]
    index["drafter"] = ["arjet.session.drafter", "Drafter"]  # as saved before issue 34
    index["noise_conditioning"] = ["arjet.session.noise", "NoiseConditioning"]
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    loaded = arjet.ARPipeline.from_pretrained(str(tmp_path))
    assert type(loaded.drafter).__module__ == "arjet.addons.drafter"
    assert type(loaded.noise_conditioning).__module__ == "arjet.addons.noise"
    for name in ("drafter", "noise_conditioning"):
        original, read = pipe.components[name].state_dict(), loaded.components[name].state_dict()
        assert original.keys() == read.keys() and all(torch.equal(original[k], read[k]) for k in original)
    assert loading.current_module("arjet.session.drafter") == "arjet.addons.drafter"
    assert loading.current_module("arjet.session.noise") == "arjet.addons.noise"


# -- built-in names -------------------------------------------------------------------------------------
def test_a_built_in_name_loads_the_built_in_model_in_float32(builtin_pipe):
    pipe = arjet.ARPipeline.from_pretrained("shapes")
    assert type(pipe) is type(builtin_pipe) and pipe.dtype == torch.float32
    for (name, a), (_, b) in zip(
        pipe.model.state_dict().items(), builtin_pipe.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_a_local_folder_wins_over_a_built_in_name(tmp_path, monkeypatch):
    tiny_pipeline("emu3", grid=(2, 2), vocab_size=6).save_pretrained(tmp_path / "shapes")
    monkeypatch.chdir(tmp_path)
    assert type(arjet.ARPipeline.from_pretrained("shapes")) is arjet.Emu3Pipeline


def test_loading_draws_no_progress_bars_of_its_own_and_restores_the_libraries(tmp_path, capfd):
    """transformers drew "Loading weights" and diffusers "Loading pipeline components..." for every load,
    nested, though loading takes a fraction of a second; a saved pipeline loads in silence."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    tiny_pipeline("lumina_mgpt").save_pretrained(tmp_path / "saved")
    capfd.readouterr()
    arjet.ARPipeline.from_pretrained(str(tmp_path / "saved"))
    printed = capfd.readouterr()
    assert "Loading" not in printed.err + printed.out
    assert transformers_logging.is_progress_bar_enabled() and diffusers_logging.is_progress_bar_enabled()


# -- files a loader could not read, named before anything loads ------------------------------------------
@pytest.mark.parametrize(
    ("file", "text", "message"),
    [
        ("model_index.json", "[" * 100_000, "model_index.json holds JSON nested deeper than 64 levels"),
        ("config.json", '{"model_type": ' * 100_000, "config.json holds JSON nested deeper than 64 levels"),
        ("config.json", '["janus"]', "config.json is not a JSON object"),
        ("model_index.json", "{", "model_index.json is not valid JSON"),
    ],
    ids=["nested-index", "nested-config", "not-an-object", "not-json"],
)
def test_the_kind_of_checkpoint_names_a_file_it_cannot_read(file, text, message, tmp_path):
    (tmp_path / file).write_text(text)
    with pytest.raises(ValueError, match=message):
        loading.checkpoint_kind(tmp_path)


def _cut_short(path):
    path.write_bytes(path.read_bytes()[:1000])


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda part: _cut_short(next(part.glob("*.safetensors"))), r"\.safetensors is not a readable safetensors"),
        (lambda part: (part / "config.json").write_text("[" * 100_000), "config.json holds JSON nested deeper"),
    ],
    ids=["weights-cut-short", "nested-config"],
)  # fmt: skip
def test_from_pretrained_names_a_damaged_file_before_loading_any_component(
    family, damage, message, tmp_path, monkeypatch
):
    from arjet.pipelines import base

    pipe = tiny_pipeline(family, grid=(2, 2), vocab_size=6)
    folder = tmp_path / family
    pipe.save_pretrained(folder)
    damage(folder / pipe.ar_component)
    monkeypatch.setattr(base, "load_component", lambda *a, **k: pytest.fail("loaded before the check"))
    with pytest.raises(
        ValueError, match=f"the checkpoint '{folder}': {folder / pipe.ar_component}/.*{message}"
    ):
        arjet.ARPipeline.from_pretrained(str(folder))


@pytest.mark.parametrize(
    ("family", "field", "value", "message"),
    [
        (
            "janus",
            "default_guidance_scale",
            float("nan"),
            "must be a finite number from 0 to 1e\\+30, got nan",
        ),
        ("janus", "default_guidance_scale", "3", "must be a finite number from 0 to 1e\\+30, got '3'"),
        ("janus", "default_guidance_scale", -1.0, "must be a finite number from 0 to 1e\\+30, got -1.0"),
        ("janus", "default_guidance_scale", 1e300, r"must be a finite number from 0 to 1e\+30, got 1e\+300"),
        ("emu3", "image_area", 0, "must be an integer >= 1, got 0"),
        ("emu3", "default_height", 1.5, "must be an integer >= 1, got 1.5"),
        ("emu3", "default_negative_prompt", ["x"], r"must be text, got \['x'\]"),
        ("lumina_mgpt", "resolution", "768", "must be an integer >= 1, got '768'"),
        # a component's entry (it said "too many values to unpack (expected 2)": the probe's doubtful case)
        ("janus", "model", "transformers", r"must name a component as \[library, class\]"),
        ("janus", "model", ["transformers", "Janus", "x"], r"must name a component .*got \['transformers'"),
        ("janus", "tokenizer", [1, 2], r"must name a component as \[library, class\]"),
    ],
)
def test_a_saved_setting_of_the_wrong_type_is_refused_at_load_naming_the_file_and_field(
    family, field, value, message, tmp_path, monkeypatch
):
    """A `default_guidance_scale` of NaN loaded, and every call then failed blaming `guidance_scale`, an
    option the caller never gave."""
    from arjet.pipelines import base

    folder = tmp_path / family
    tiny_pipeline(family, grid=(2, 2), vocab_size=6).save_pretrained(folder)
    index = json.loads((folder / "model_index.json").read_text())
    (folder / "model_index.json").write_text(json.dumps({**index, field: value}))
    monkeypatch.setattr(base, "load_component", lambda *a, **k: pytest.fail("loaded before the check"))
    with pytest.raises(ValueError, match=rf"{folder / 'model_index.json'}: {field} {message}"):
        arjet.ARPipeline.from_pretrained(str(folder))


def test_the_saved_settings_of_every_family_pass_the_load_time_check(family, tmp_path):
    folder = tmp_path / family
    tiny_pipeline(family, grid=(2, 2), vocab_size=6).save_pretrained(folder)
    index = json.loads((folder / "model_index.json").read_text())
    assert set(index) & set(loading.INDEX_SETTINGS)  # every family declares some
    loading.check_index_settings(folder / "model_index.json", index)
