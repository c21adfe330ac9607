"""Deterministic splits of the shapes domain: item `i` of a split depends only on (split seed, i)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import PIL.Image
import torch

from .shapes import Scene, describe, render, sample_scene

SPLIT_SEEDS = {"train": 0, "heldout": 1}
HELDOUT_FILE = "heldout.jsonl"
HELDOUT_SIZE = 1000


def split_item(split: str, index: int) -> tuple[Scene, str]:
    """Scene and prompt of item `index` of `split`."""
    if split not in SPLIT_SEEDS:
        raise ValueError(f"unknown split {split!r}; choose one of {sorted(SPLIT_SEEDS)}")
    rng = np.random.default_rng([SPLIT_SEEDS[split], index])
    scene = sample_scene(rng)
    return scene, describe(scene, rng)


def to_tensor(image: PIL.Image.Image) -> torch.Tensor:
    """`[3, h, w]` float in [-1, 1]."""
    return torch.from_numpy(np.asarray(image.convert("RGB"), dtype=np.float32)).permute(2, 0, 1) / 127.5 - 1


class ShapesDataset(torch.utils.data.Dataset):
    """`(image [3, size, size] in [-1, 1], prompt, scene dict)` for items `0..length-1` of a split."""

    def __init__(self, split: str = "train", size: int = 64, length: int = 100_000):
        if split not in SPLIT_SEEDS:
            raise ValueError(f"unknown split {split!r}; choose one of {sorted(SPLIT_SEEDS)}")
        self.split, self.size, self.length = split, size, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        scene, prompt = split_item(self.split, index)
        return to_tensor(render(scene, self.size)), prompt, scene.to_dict()


def _heldout_path() -> Path:
    return Path(str(resources.files("arjet.data") / HELDOUT_FILE))


def write_heldout(path: Path | None = None, count: int = HELDOUT_SIZE) -> Path:
    """Write the fixed held-out set (the file shipped in the package)."""
    path = path or _heldout_path()
    lines = []
    for index in range(count):
        scene, prompt = split_item("heldout", index)
        lines.append(json.dumps({"index": index, "prompt": prompt, "scene": scene.to_dict()}))
    path.write_text("\n".join(lines) + "\n")
    return path


@cache
def _heldout() -> tuple[dict, ...]:
    return tuple(json.loads(line) for line in _heldout_path().read_text().splitlines() if line.strip())


def heldout_set(n: int | None = None) -> list[dict]:
    """The fixed held-out prompts: dicts with `index`, `prompt`, `scene` (read from the shipped file)."""
    items = list(_heldout())
    return items if n is None else items[:n]


def render_reference(item: dict, size: int = 64) -> PIL.Image.Image:
    """The reference render of a held-out item."""
    return render(Scene.from_dict(item["scene"]), size)
