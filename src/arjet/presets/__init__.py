"""Real-size architectures of the supported checkpoints (as data) and a factory that builds them with random
weights on a device, for timing decoders at their true per-step cost: `arjet.random_pipeline("janus-pro-7b")`,
`arjet bench --arch janus-pro-7b --random-weights`."""

from .build import random_pipeline
from .table import PRESETS, DecoderDims, Preset, available_presets, get_preset

__all__ = ["PRESETS", "DecoderDims", "Preset", "available_presets", "get_preset", "random_pipeline"]
