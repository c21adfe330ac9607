"""Diffusers-style text-to-image pipelines, one file per model family, all decoding through a session.

The family pipelines are imported on first use (they bring diffusers and transformers), so the light
helpers beside them (`loading`: finding checkpoints, dtype names) serve the command line without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "PIPELINES",
    "ARPipeline",
    "ARPipelineOutput",
    "BaseARPipeline",
    "Emu3Pipeline",
    "GlmImagePipeline",
    "JanusPipeline",
    "LuminaMGPTPipeline",
]

if TYPE_CHECKING:
    from .auto import PIPELINES, ARPipeline
    from .base import ARPipelineOutput, BaseARPipeline
    from .emu3 import Emu3Pipeline
    from .glm_image import GlmImagePipeline
    from .janus import JanusPipeline
    from .lumina_mgpt import LuminaMGPTPipeline


def __getattr__(name: str) -> Any:
    if name in ("PIPELINES", "ARPipeline"):
        from . import auto as home
    elif name in ("ARPipelineOutput", "BaseARPipeline"):
        from . import base as home
    elif name == "Emu3Pipeline":
        from . import emu3 as home
    elif name == "GlmImagePipeline":
        from . import glm_image as home
    elif name == "JanusPipeline":
        from . import janus as home
    elif name == "LuminaMGPTPipeline":
        from . import lumina_mgpt as home
    else:
        raise AttributeError(f"module 'arjet.pipelines' has no attribute {name!r}")
    return getattr(home, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
