"""Score a finished run: per sampler FID, CLIP score and the speed figures, from the images on disk.

Images are read in record order (sampler, prompt index, seed), so the scores do not depend on which
process made which image, nor on how often the run was interrupted.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import PIL.Image
import torch

from ..bench.speed import speed_summaries
from .clip import load_clip, parse_clip_spec
from .features import check_feature_spec, load_feature_network
from .images import MODEL_IMAGE_PIXELS, check_image, read_image
from .metrics import clip_scores, frechet_distance, reference_statistics
from .reference import ReferenceSource


@dataclass
class MetricOptions:
    """How the main process scores a run. `None` skips a metric."""

    fid_features: str | None = "domain"
    clip_model: str | None = "domain"
    reference: ReferenceSource | None = None
    cache_dir: Path | None = None
    batch_size: int = 32

    def check(self) -> None:
        """Raise (ValueError, FileNotFoundError) naming the spec at fault, before any image is generated."""
        if self.fid_features is not None:
            with _about(f"FID features {self.fid_features!r}"):
                check_feature_spec(self.fid_features)
            if self.reference is None:
                raise FileNotFoundError(
                    "FID needs real reference images: pass --reference-dir DIR (a folder of real images for these "
                    "prompts; the built-in `shapes` prompts have their own), or --fid-features none to skip FID"
                )
            self.reference.check()
        if self.clip_model is not None:
            with _about(f"CLIP {self.clip_model!r}"):
                parse_clip_spec(self.clip_model).check()


@contextlib.contextmanager
def _about(what: str) -> Iterator[None]:
    """An error of the block as one of the same kind that starts with `what` (which spec was at fault)."""
    try:
        yield
    except (ValueError, OSError) as error:
        kind = FileNotFoundError if isinstance(error, FileNotFoundError) else ValueError
        raise kind(f"{what}: {error}") from None


@dataclass
class SamplerResult:
    """One row of the report."""

    sampler: str
    images: int
    fid: float | None
    clip_score: float | None
    forward_passes: float
    step_compression: float | None
    seconds: float
    latency_speedup: float | None
    accepted_per_step: float
    images_per_second: float | None = None  # throughput: images over the time that made them
    drafter_forwards: float = 0.0  # a drafter's forward passes per image

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_images(out: Path, records: Sequence[dict[str, Any]]) -> Iterator[PIL.Image.Image]:
    """The images of `records`, read one at a time (a run may hold more than fits in memory), each the size
    of the first; ValueError naming an image that is not a file inside the run folder `out` (through a
    link, say), that is no image, or whose header claims more than `MODEL_IMAGE_PIXELS` pixels (checked before
    it is decoded)."""
    size = None
    for record in records:
        image = _run_image(read_image, out, record, size)
        size = image.size
        yield image


def check_images(out: Path, records: Sequence[dict[str, Any]]) -> None:
    """`load_images`' checks, every image decoded and none kept: what a resumed run does before any work, so
    an image swapped for another file, or cut short, fails the run before the model loads, not while it is
    scored."""
    size = None
    for record in records:
        size = _run_image(check_image, out, record, size)


def _run_image(read, out: Path, record: dict[str, Any], size: tuple[int, int] | None):
    path = (out / record["image"]).resolve()
    if not path.is_relative_to(out.resolve()) or not path.is_file():
        raise ValueError(f"image {record['image']!r} of a record is not a file inside the run folder {out}")
    try:
        return read(path, MODEL_IMAGE_PIXELS, size)
    except ValueError as error:
        raise ValueError(f"{error}; remove it with its record, or pass a new --out") from None


def score_run(
    records: Sequence[dict[str, Any]],
    samplers: Sequence[str],
    out: Path,
    options: MetricOptions,
    device: torch.device | str = "cpu",
) -> tuple[list[SamplerResult], dict[str, Any]]:
    """Rows per sampler (in `samplers` order) and what the scores were computed with."""
    by_sampler = {spec: [r for r in records if r["sampler"] == spec] for spec in samplers}
    info: dict[str, Any] = {"fid_features": options.fid_features, "clip_model": options.clip_model}
    fid = _fid(out, by_sampler, options, device, info) if options.fid_features is not None else {}
    clip = _clip(out, by_sampler, options, device) if options.clip_model is not None else {}
    rows = []
    for summary in speed_summaries(samplers, records):
        rows.append(
            SamplerResult(
                sampler=summary.sampler,
                images=summary.images,
                fid=fid.get(summary.sampler),
                clip_score=clip.get(summary.sampler),
                forward_passes=summary.forward_passes,
                step_compression=summary.step_compression,
                seconds=summary.seconds,
                latency_speedup=summary.latency_speedup,
                accepted_per_step=summary.accepted_per_step,
                images_per_second=summary.images_per_second,
                drafter_forwards=summary.drafter_forwards,
            )
        )
    return rows, info


def _fid(out: Path, by_sampler, options: MetricOptions, device, info: dict[str, Any]) -> dict[str, float]:
    first = next((rows[0] for rows in by_sampler.values() if rows), None)
    if first is None:
        return {}
    size = next(load_images(out, [first])).size  # every image of a run has the same size
    features = load_feature_network(options.fid_features, device)
    reference = reference_statistics(features, options.reference, size, options.cache_dir, options.batch_size)
    info["reference"] = {
        "source": options.reference.description,
        "images": reference.count,
        "size": list(size),
    }
    info["fid_feature_dims"] = features.num_features
    return {
        spec: frechet_distance(features, reference, load_images(out, rows), options.batch_size)
        for spec, rows in by_sampler.items()
        if len(rows) >= 2  # FID needs two images at least
    }


def _clip(out: Path, by_sampler, options: MetricOptions, device) -> dict[str, float]:
    clip = load_clip(options.clip_model, device)
    return {
        spec: statistics.fmean(
            clip_scores(clip, load_images(out, rows), [r["prompt"] for r in rows], options.batch_size)
        )
        for spec, rows in by_sampler.items()
        if rows
    }
