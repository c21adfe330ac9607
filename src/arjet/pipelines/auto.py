"""`ARPipeline.from_pretrained(path)`: the right family pipeline for a checkpoint, chosen from its config."""

from __future__ import annotations

import os
from typing import Any

from .base import BaseARPipeline
from .emu3 import Emu3Pipeline
from .glm_image import GlmImagePipeline
from .janus import JanusPipeline
from .loading import HUB_OPTIONS, checkpoint_kind, resolve_checkpoint
from .lumina_mgpt import LuminaMGPTPipeline

PIPELINES: tuple[type[BaseARPipeline], ...] = (
    JanusPipeline,
    Emu3Pipeline,
    LuminaMGPTPipeline,
    GlmImagePipeline,
)


class ARPipeline:
    """Not instantiated: `ARPipeline.from_pretrained(...)` returns a `JanusPipeline`, `Emu3Pipeline`,
    `LuminaMGPTPipeline` or `GlmImagePipeline` for a saved arjet pipeline folder, a bare transformers checkpoint,
    or (GLM-Image) a folder laid out as the hub repository."""

    def __init__(self, *args: Any, **kwargs: Any):
        raise TypeError("use ARPipeline.from_pretrained(path) or a family pipeline class directly")

    @classmethod
    def pipeline_class(cls, folder) -> type[BaseARPipeline]:
        kind, name = checkpoint_kind(folder)
        for pipeline in PIPELINES:
            if (kind == "pipeline" and name == pipeline.__name__) or (
                kind == "transformers" and name == pipeline.model_type
            ):
                return pipeline
        supported = ", ".join(f"{p.__name__} ({p.model_type})" for p in PIPELINES)
        what = "pipeline class" if kind == "pipeline" else "model_type"
        raise ValueError(
            f"{folder} holds {what} {name!r}, which arjet does not support; supported: {supported}"
        )

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs: Any
    ) -> BaseARPipeline:
        folder = resolve_checkpoint(
            pretrained_model_name_or_path, **{k: kwargs.pop(k) for k in HUB_OPTIONS if k in kwargs}
        )
        return cls.pipeline_class(folder).from_pretrained(str(folder), **kwargs)
