"""FID (torchmetrics' FrechetInceptionDistance over any feature network) and CLIP score (open_clip).

FID keeps real-image statistics as torchmetrics does: the feature sum, the sum of outer products and the
count (float64). Those of a reference set are cached on disk under the feature network's key and the
reference pixels' key, so a run computes them once per (network, reference, image size).
CLIP score follows torchmetrics' `CLIPScore`: `max(100 * cos(image, text), 0)` per image.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import PIL.Image
import torch
import torch.nn.functional as F

from .atomic import atomic_target
from .clip import OpenCLIP
from .features import FeatureNetwork
from .reference import ReferenceSource

CACHE_VARIABLE = "ARJET_CACHE_DIR"


def default_cache_dir() -> Path:
    """`$ARJET_CACHE_DIR/fid-reference`, else `~/.cache/arjet/fid-reference`."""
    root = os.environ.get(CACHE_VARIABLE)
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "arjet") / "fid-reference"


@dataclass
class FeatureStatistics:
    """Sufficient statistics of a feature set: sum [d], sum of outer products [d, d] (float64), count."""

    total: torch.Tensor
    outer: torch.Tensor
    count: int

    def save(self, path: Path) -> None:
        with atomic_target(path) as temporary, open(temporary, "wb") as handle:
            np.savez(handle, total=self.total.numpy(), outer=self.outer.numpy(), count=self.count)

    @classmethod
    def load(cls, path: Path) -> FeatureStatistics:
        with np.load(path) as data:
            return cls(torch.from_numpy(data["total"]), torch.from_numpy(data["outer"]), int(data["count"]))


def image_batches(images: Iterable[PIL.Image.Image], batch_size: int) -> Iterator[torch.Tensor]:
    """Float tensors `[n, 3, h, w]` in [0, 1] of up to `batch_size` images (all one size)."""
    batch: list[np.ndarray] = []
    for image in images:
        batch.append(np.asarray(image.convert("RGB")))
        if len(batch) == batch_size:
            yield _stack(batch)
            batch = []
    if batch:
        yield _stack(batch)


def _stack(arrays: list[np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255


def _fid_metric(features: FeatureNetwork):
    from torchmetrics.image.fid import FrechetInceptionDistance

    device = next(features.parameters()).device
    # sync_on_compute=False: only one process scores, even inside a distributed launch
    metric = FrechetInceptionDistance(
        feature=features, normalize=True, reset_real_features=False, sync_on_compute=False
    )
    return metric.to(device)


@torch.no_grad()
def feature_statistics(
    features: FeatureNetwork, images: Iterable[PIL.Image.Image], batch_size: int = 32
) -> FeatureStatistics:
    metric = _fid_metric(features)
    device = next(features.parameters()).device
    for batch in image_batches(images, batch_size):
        metric.update(batch.to(device), real=True)
    return FeatureStatistics(
        metric.real_features_sum.cpu(),
        metric.real_features_cov_sum.cpu(),
        int(metric.real_features_num_samples),
    )


def reference_statistics(
    features: FeatureNetwork,
    source: ReferenceSource,
    size: tuple[int, int],
    cache_dir: str | os.PathLike | None = None,
    batch_size: int = 32,
) -> FeatureStatistics:
    """Statistics of `source`'s images at `size` (width, height), cached under (network, pixels)."""
    key = hashlib.sha1(f"{features.key}\n{source.key(size)}".encode()).hexdigest()
    path = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = path / f"{key}.npz"
    if path.is_file():
        return FeatureStatistics.load(path)
    stats = feature_statistics(features, source.images(size), batch_size)
    stats.save(path)
    return stats


@torch.no_grad()
def frechet_distance(
    features: FeatureNetwork,
    reference: FeatureStatistics,
    images: Iterable[PIL.Image.Image],
    batch_size: int = 32,
) -> float:
    """FID of `images` against `reference` statistics (computed with the same `features`)."""
    metric = _fid_metric(features)
    device = next(features.parameters()).device
    metric.real_features_sum = reference.total.to(device)
    metric.real_features_cov_sum = reference.outer.to(device)
    metric.real_features_num_samples = torch.tensor(reference.count, device=device)
    for batch in image_batches(images, batch_size):
        metric.update(batch.to(device), real=False)
    return float(metric.compute())


@torch.no_grad()
def clip_scores(
    clip: OpenCLIP, images: Iterable[PIL.Image.Image], prompts: Sequence[str], batch_size: int = 32
) -> list[float]:
    """Per image (one prompt per image, in order), `max(100 * cos(image embedding, prompt embedding), 0)`."""
    scores: list[float] = []
    for pixels in image_batches(images, batch_size):
        texts = list(prompts[len(scores) : len(scores) + len(pixels)])
        if len(texts) < len(pixels):
            raise ValueError(f"more images than the {len(prompts)} prompts; pass one prompt per image")
        image_features = F.normalize(clip.encode_images(pixels), dim=-1)
        text_features = F.normalize(clip.encode_texts(texts), dim=-1)
        scores.extend((100 * (image_features * text_features).sum(-1)).clamp(min=0).tolist())
    if len(scores) != len(prompts):
        raise ValueError(f"{len(scores)} images for {len(prompts)} prompts; pass one prompt per image")
    return scores
