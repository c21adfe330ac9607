"""arjet's Chameleon VQGAN: tokenizer contract, save/load, checkpoint conversion, parity with transformers."""

import inspect

import pytest
import torch
from pickles import Payload
from tiny_vqgan import TINY, YAML, randomize_, tiny_vqgan
from transformers import ChameleonVQVAE, ChameleonVQVAEConfig

from arjet.vq import ChameleonVQGAN, ImageTokenizer, convert_chameleon_vqgan
from arjet.vq import convert as convert_module


def _pixels(batch: int = 2, height: int = 16, width: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.rand(batch, 3, height, width, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def _codes(batch: int = 2, height: int = 8, width: int = 8, seed: int = 2) -> torch.Tensor:
    return torch.randint(
        0, TINY["n_embed"], (batch, height, width), generator=torch.Generator().manual_seed(seed)
    )


def test_tokenizer_contract():
    model = tiny_vqgan()
    assert isinstance(model, ImageTokenizer)
    assert (model.downsample, model.vocab_size) == (2, 16)
    assert model.codebook().shape == (16, 8)
    pixels = model.decode(_codes(height=3, width=5))
    assert pixels.shape == (2, 3, 6, 10)
    assert pixels.min() >= -1 and pixels.max() <= 1 and pixels.std() > 0
    codes = model.encode(_pixels(height=12, width=16))
    assert codes.shape == (2, 6, 8) and codes.dtype == torch.long
    assert codes.min() >= 0 and codes.max() < 16 and codes.unique().numel() > 1


def test_defaults_are_the_released_tokenizer():
    defaults = {
        name: param.default for name, param in inspect.signature(ChameleonVQGAN.__init__).parameters.items()
    }
    assert defaults["ch"] == 128 and defaults["ch_mult"] == (1, 1, 2, 2, 4)
    assert (defaults["n_embed"], defaults["embed_dim"], defaults["z_channels"]) == (8192, 256, 256)
    assert (defaults["num_res_blocks"], defaults["attn_resolutions"], defaults["resolution"]) == (2, (), 512)


def test_encode_picks_the_nearest_code():
    model = tiny_vqgan()
    latents = model.quant_conv(model.encoder(_pixels()))
    distances = torch.cdist(latents.permute(0, 2, 3, 1).flatten(0, 2), model.codebook())
    assert torch.equal(model.encode(_pixels()).flatten(), distances.argmin(-1))


def test_save_and_load_round_trip(tmp_path):
    model = tiny_vqgan()
    model.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "config.json",
        "diffusion_pytorch_model.safetensors",
    ]
    loaded = ChameleonVQGAN.from_pretrained(tmp_path).eval()
    codes = _codes()
    assert torch.equal(loaded.decode(codes), model.decode(codes))
    assert torch.equal(loaded.encode(_pixels()), model.encode(_pixels()))
    assert tuple(loaded.config.ch_mult) == TINY["ch_mult"]


@pytest.mark.parametrize("lightning", [True, False])
def test_convert_checkpoint_reproduces_the_source(tmp_path, lightning):
    source = tiny_vqgan(seed=3)
    state = dict(source.state_dict())
    state["loss.discriminator.main.0.weight"] = torch.randn(4, 3, 4, 4)  # training-only, dropped
    ckpt = tmp_path / "vqgan.ckpt"
    torch.save({"state_dict": state, "global_step": 3, "epoch": 1} if lightning else state, ckpt)
    (tmp_path / "vqgan.yaml").write_text(YAML)

    out = convert_chameleon_vqgan(ckpt, tmp_path / "out", config_path=tmp_path / "vqgan.yaml")
    converted = ChameleonVQGAN.from_pretrained(out).eval()
    codes = _codes()
    assert torch.equal(converted.decode(codes), source.decode(codes))
    assert torch.equal(converted.encode(_pixels()), source.encode(_pixels()))


def test_convert_refuses_pickled_objects(tmp_path):
    marker = tmp_path / "marker"
    ckpt = tmp_path / "vqgan.ckpt"
    torch.save({"state_dict": tiny_vqgan().state_dict(), "callbacks": Payload(marker)}, ckpt)
    with pytest.raises(ValueError, match="non-tensor Python objects.*refuses to unpickle"):
        convert_chameleon_vqgan(ckpt, tmp_path / "out")
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


def test_convert_reports_bad_checkpoints(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.ckpt"):
        convert_chameleon_vqgan(tmp_path / "nowhere.ckpt", tmp_path / "out")

    (tmp_path / "vqgan.yaml").write_text(YAML)
    state = dict(tiny_vqgan().state_dict())
    del state["decoder.conv_out.weight"]
    torch.save({"state_dict": state}, tmp_path / "partial.ckpt")
    with pytest.raises(ValueError, match="lacks 1 of .*decoder.conv_out.weight"):
        convert_chameleon_vqgan(tmp_path / "partial.ckpt", tmp_path / "out", tmp_path / "vqgan.yaml")

    torch.save({"state_dict": tiny_vqgan().state_dict()}, tmp_path / "tiny.ckpt")
    with pytest.raises(ValueError, match="lacks .*pass its vqgan.yaml"):
        convert_chameleon_vqgan(tmp_path / "tiny.ckpt", tmp_path / "out")  # default = full-size config
    (tmp_path / "wide.yaml").write_text(YAML.replace("z_channels: 8", "z_channels: 16"))
    with pytest.raises(ValueError, match=r"do not fit the config.*quant_conv.weight: \(8, 8, 1, 1\)"):
        convert_chameleon_vqgan(tmp_path / "tiny.ckpt", tmp_path / "out", tmp_path / "wide.yaml")

    state = dict(tiny_vqgan().state_dict(), **{"model_ema.decay": torch.tensor(0.99)})
    torch.save(state, tmp_path / "extra.ckpt")
    with pytest.warns(UserWarning, match="model_ema.decay"):
        convert_chameleon_vqgan(tmp_path / "extra.ckpt", tmp_path / "out", tmp_path / "vqgan.yaml")


def test_config_from_yaml(tmp_path):
    (tmp_path / "vqgan.yaml").write_text(YAML)
    config = convert_module.read_vqgan_config(tmp_path / "vqgan.yaml")
    assert config == dict(TINY, ch_mult=[1, 2], attn_resolutions=[8], in_channels=3, out_ch=3, dropout=0.0)
    (tmp_path / "double.yaml").write_text(YAML.replace("double_z: false", "double_z: true"))
    with pytest.raises(ValueError, match="double_z=True"):
        convert_module.read_vqgan_config(tmp_path / "double.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000, "nests deeper than a YAML reader can follow"),
        ("model:\n  params: [", "is not a YAML file"),
        (b"\xff\xfe", "is not a YAML file"),
    ],
    ids=["nested", "not-yaml", "not-utf8"],
)
def test_a_config_that_is_no_yaml_is_named(text, message, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError, match=f"{path} {message}"):
        convert_module.read_vqgan_config(path)


@pytest.mark.parametrize(
    "pixels, message",
    [
        (torch.zeros(3, 16, 16), r"\[B, 3, h, w\].*\(3, 16, 16\)"),
        (torch.zeros(1, 4, 16, 16), r"\[B, 3, h, w\].*\(1, 4, 16, 16\)"),
        (torch.zeros(1, 3, 15, 16), "15x16 must be divisible by .* 2"),
    ],
)
def test_encode_rejects_bad_pixels(pixels, message):
    with pytest.raises(ValueError, match=message):
        tiny_vqgan().encode(pixels)


@pytest.mark.parametrize(
    "codes, message",
    [
        (torch.zeros(8, 8, dtype=torch.long), r"\[B, H, W\].*\(8, 8\)"),
        (torch.zeros(1, 8, 8), r"integer tensor"),
        (torch.full((1, 2, 2), 16), r"0\.\.15.*16\.\.16"),
        (torch.full((1, 2, 2), -1), r"0\.\.15.*-1\.\.-1"),
    ],
)
def test_decode_rejects_bad_codes(codes, message):
    with pytest.raises(ValueError, match=message):
        tiny_vqgan().decode(codes)


def test_rejects_widths_groupnorm_cannot_split():
    with pytest.raises(ValueError, match="multiple of 32.*ch=48"):
        ChameleonVQGAN(**dict(TINY, ch=48))


def test_encoder_matches_transformers():
    """transformers' ChameleonVQVAE is the encoder half with the same parameter names; same weights must
    give the same codes."""
    hf = ChameleonVQVAE(
        ChameleonVQVAEConfig(
            embed_dim=TINY["embed_dim"],
            num_embeddings=TINY["n_embed"],
            latent_channels=TINY["z_channels"],
            base_channels=TINY["ch"],
            channel_multiplier=list(TINY["ch_mult"]),
            num_res_blocks=TINY["num_res_blocks"],
            attn_resolutions=list(TINY["attn_resolutions"]),
            resolution=TINY["resolution"],
        )
    )
    randomize_(hf, seed=5)
    ours = tiny_vqgan(seed=6)
    result = ours.load_state_dict(hf.state_dict(), strict=False)
    assert not result.unexpected_keys
    assert result.missing_keys and all(key.startswith("decoder.") for key in result.missing_keys)

    pixels = _pixels(batch=4, height=16, width=24)
    with torch.no_grad():
        expected = hf.encode(pixels).image_tokens.view(4, 8, 12)
        torch.testing.assert_close(ours.encoder(pixels), hf.encoder(pixels))
    codes = ours.encode(pixels)
    assert codes.unique().numel() > 4
    assert torch.equal(codes, expected)
