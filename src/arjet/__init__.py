"""arjet: fast, correct parallel decoding for autoregressive text-to-image models.

pipe = arjet.ARPipeline.from_pretrained("deepseek-community/Janus-Pro-1B")   # or arjet.load()
out = pipe("a red circle left of a blue square", sampler="sjd", seed=0)
out.images[0]; out.stats[0]
"""

from . import samplers
from .builtin import available_models, load
from .limits import Limits
from .pipelines import ARPipeline, ARPipelineOutput, Emu3Pipeline, JanusPipeline, LuminaMGPTPipeline
from .presets import available_presets, random_pipeline

__version__ = "0.1.0"

__all__ = [
    "ARPipeline",
    "ARPipelineOutput",
    "Emu3Pipeline",
    "JanusPipeline",
    "Limits",
    "LuminaMGPTPipeline",
    "available_models",
    "available_presets",
    "load",
    "random_pipeline",
    "samplers",
]
