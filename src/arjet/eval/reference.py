"""Where FID's real images come from: a folder of images, or the built-in domain's held-out renders.

Both sets go through the same protocol as the generated images: centre crop to the generated aspect
ratio and a Lanczos resize to the generated size (the clean-fid / GigaGAN convention), so the feature
network sees real and generated pixels alike. A source's `key(size)` names exactly those pixels; the
reference statistics are cached under it (see `arjet.eval.metrics.reference_statistics`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import PIL.Image

from .images import REFERENCE_IMAGE_PIXELS, read_image

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


class ReferenceSource(Protocol):
    description: str

    def check(self) -> None:
        """Raise (FileNotFoundError / ValueError saying what is missing) before any image is generated."""

    def key(self, size: tuple[int, int]) -> str:
        """Identity of the reference pixels at `size` (width, height)."""

    def images(self, size: tuple[int, int]) -> Iterator[PIL.Image.Image]:
        """The reference images, RGB, exactly `size` (width, height)."""


def fit(image: PIL.Image.Image, size: tuple[int, int]) -> PIL.Image.Image:
    """Centre-crop `image` to the aspect ratio of `size` (width, height), then resize it there (Lanczos)."""
    image = image.convert("RGB")
    if image.size == tuple(size):
        return image
    width, height = image.size
    scale = min(width / size[0], height / size[1])
    crop_w, crop_h = round(size[0] * scale), round(size[1] * scale)
    left, top = (width - crop_w) // 2, (height - crop_h) // 2
    return image.crop((left, top, left + crop_w, top + crop_h)).resize(size, PIL.Image.Resampling.LANCZOS)


class FolderReference:
    """Every image file under `folder` (recursively, sorted by path)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder).expanduser()
        self.description = f"folder {self.folder}"
        self._files: list[Path] | None = None

    def files(self) -> list[Path]:
        if self._files is None:
            self._files = sorted(
                p for p in self.folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()
            )
        return self._files

    def check(self) -> None:
        if not self.folder.is_dir():
            raise FileNotFoundError(
                f"reference image folder {self.folder} does not exist: FID needs real images; put them there "
                "or pass another --reference-dir"
            )
        if len(self.files()) < 2:
            raise FileNotFoundError(
                f"reference folder {self.folder} holds {len(self.files())} images ({', '.join(IMAGE_SUFFIXES)}); "
                "FID needs at least 2, and hundreds to mean much"
            )

    def key(self, size: tuple[int, int]) -> str:
        digest = hashlib.sha1(f"folder:{size}".encode())
        for path in self.files():
            stat = path.stat()
            digest.update(f"{path.relative_to(self.folder)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
        return digest.hexdigest()

    def images(self, size: tuple[int, int]) -> Iterator[PIL.Image.Image]:
        for path in self.files():
            yield fit(read_image(path, REFERENCE_IMAGE_PIXELS), size)

    def __len__(self) -> int:
        return len(self.files())


class DomainReference:
    """Renders of the built-in domain's first `n` held-out scenes (`arjet.data`): the real images of the
    `shapes` prompt set. The key hashes the rendered pixels, so a changed renderer never reuses old stats."""

    def __init__(self, n: int):
        self.n = n
        self.description = f"renders of the first {n} held-out scenes of the built-in domain"
        self._renders: dict[tuple[int, int], list[PIL.Image.Image]] = {}

    def check(self) -> None:
        try:
            from ..data import heldout_set, render_reference  # noqa: F401
        except ImportError as error:
            raise FileNotFoundError(
                "the built-in domain's reference renderer (arjet.data: heldout_set, render_reference) is not "
                f"available ({error}); pass --reference-dir with real images instead"
            ) from None

    def _render(self, size: tuple[int, int]) -> list[PIL.Image.Image]:
        if size not in self._renders:
            from ..data import heldout_set, render_reference

            side = size[0] if size[0] == size[1] else size
            self._renders[size] = [
                fit(_as_pil(render_reference(item, side)), size) for item in heldout_set(self.n)
            ]
        return self._renders[size]

    def key(self, size: tuple[int, int]) -> str:
        digest = hashlib.sha1(f"domain:{size}".encode())
        for image in self._render(size):
            digest.update(image.tobytes())
        return digest.hexdigest()

    def images(self, size: tuple[int, int]) -> Iterator[PIL.Image.Image]:
        yield from self._render(size)

    def __len__(self) -> int:
        return self.n


def _as_pil(image: Any) -> PIL.Image.Image:
    """A PIL image from a PIL image, an `[h, w, 3]` uint8 / [0, 1] float array, or a `[3, h, w]` tensor."""
    if isinstance(image, PIL.Image.Image):
        return image
    array = np.asarray(image.detach().cpu().permute(1, 2, 0) if hasattr(image, "detach") else image)
    if array.dtype != np.uint8:
        array = (np.clip(array, 0, 1) * 255).round().astype(np.uint8)
    return PIL.Image.fromarray(array)


def reference_source(reference_dir: str | os.PathLike | None, prompts: str, n: int) -> ReferenceSource | None:
    """The reference for a run: `reference_dir` when given, the domain renders for the `shapes` prompts,
    else None (no FID possible)."""
    if reference_dir is not None:
        return FolderReference(reference_dir)
    if prompts == "shapes":
        return DomainReference(n)
    return None
