"""Diffusers-style text-to-image pipelines, one file per model family, all decoding through a session."""

from .auto import PIPELINES, ARPipeline
from .base import ARPipelineOutput, BaseARPipeline
from .emu3 import Emu3Pipeline
from .janus import JanusPipeline
from .lumina_mgpt import LuminaMGPTPipeline

__all__ = [
    "PIPELINES",
    "ARPipeline",
    "ARPipelineOutput",
    "BaseARPipeline",
    "Emu3Pipeline",
    "JanusPipeline",
    "LuminaMGPTPipeline",
]
