"""Fixtures for the evaluation tests: a tiny CLIP that really tells colours apart, and coloured images.

The CLIP is an open_clip model with a custom config (`pretrained=None`), trained for well under a second
on trivially separable data (a coloured square on a noisy grey background, captioned "a <colour> square")
and saved in the domain-CLIP folder layout, so every test loads it the way the built-in one is loaded.
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import torch
import torch.nn.functional as F

from arjet.eval.clip import save_open_clip_folder

COLOURS = {
    "red": (1.0, 0.0, 0.0),
    "green": (0.0, 0.8, 0.0),
    "blue": (0.0, 0.0, 1.0),
    "yellow": (1.0, 1.0, 0.0),
    "cyan": (0.0, 1.0, 1.0),
    "purple": (0.6, 0.0, 0.8),
    "white": (1.0, 1.0, 1.0),
    "black": (0.0, 0.0, 0.0),
}
TINY_CLIP_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 16, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 8, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


def colour_squares(colours: list[str], seed: int, size: int = 16) -> torch.Tensor:
    """Float images [N, 3, size, size]: a square of each colour at a random place on noisy grey."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(len(colours), 3, size, size, generator=generator) * 0.3 + 0.35
    half = size // 2
    for k, colour in enumerate(colours):
        x, y = torch.randint(0, size - half + 1, (2,), generator=generator).tolist()
        fill = torch.tensor(COLOURS[colour])[:, None, None] * 0.9 + 0.05
        images[k, :, y : y + half, x : x + half] = fill + 0.05 * torch.rand(
            3, half, half, generator=generator
        )
    return images.clamp(0, 1)


def to_pil(images: torch.Tensor) -> list[PIL.Image.Image]:
    arrays = (images.permute(0, 2, 3, 1).numpy() * 255).round().astype(np.uint8)
    return [PIL.Image.fromarray(array) for array in arrays]


def fake_data_module(colour: str = "red") -> types.ModuleType:
    """A stand-in for `arjet.data` (the built-in domain's data module): held-out scenes and their renders."""
    module = types.ModuleType("arjet.data")
    module.heldout_set = lambda n=None: [
        {"prompt": f"a {colour} square", "scene": {"colour": colour}, "index": i} for i in range(n or 10)
    ]

    def render_reference(item, size):
        assert isinstance(size, int)
        return to_pil(colour_squares([item["scene"]["colour"]], seed=item["index"], size=size))[0]

    module.render_reference = render_reference
    return module


def _train_tiny_clip(steps: int = 60):
    import open_clip

    torch.manual_seed(0)
    model = open_clip.CLIP(**TINY_CLIP_CONFIG)
    tokenizer = open_clip.SimpleTokenizer(context_length=TINY_CLIP_CONFIG["text_cfg"]["context_length"])
    names = list(COLOURS)
    texts = tokenizer([f"a {name} square" for name in names])
    mean = torch.tensor(open_clip.OPENAI_DATASET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(open_clip.OPENAI_DATASET_STD).view(1, 3, 1, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    target = torch.arange(len(names))
    for step in range(steps):
        images = (colour_squares(names, seed=1000 + step) - mean) / std
        image_features = F.normalize(model.encode_image(images), dim=-1)
        text_features = F.normalize(model.encode_text(texts), dim=-1)
        logits = model.logit_scale.exp() * image_features @ text_features.T
        loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="session")
def tiny_clip_dir(tmp_path_factory) -> Path:
    """A CLIP folder (open_clip_config.json + open_clip_model.safetensors) that separates colours."""
    folder = tmp_path_factory.mktemp("tiny-clip")
    return save_open_clip_folder(_train_tiny_clip(), TINY_CLIP_CONFIG, folder)
