"""arjet: fast, correct parallel decoding for autoregressive text-to-image models.

pipe = arjet.ARPipeline.from_pretrained("deepseek-community/Janus-Pro-1B")   # or arjet.load()
out = pipe("a red circle left of a blue square", sampler="sjd", seed=0)
out.images[0]; out.stats[0]

The public names are imported on first use, so `import arjet` (and `arjet --help`) needs no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from . import samplers
    from .builtin import available_models, load
    from .limits import Limits
    from .pipelines import ARPipeline, ARPipelineOutput, Emu3Pipeline, JanusPipeline, LuminaMGPTPipeline
    from .presets import available_presets, random_pipeline


def __getattr__(name: str) -> Any:
    if name == "samplers":  # a subpackage: `from . import samplers` here would ask this function again
        import arjet.samplers as samplers

        return samplers
    if name in ("available_models", "load"):
        from . import builtin as home
    elif name == "Limits":
        from . import limits as home
    elif name in ("available_presets", "random_pipeline"):
        from . import presets as home
    elif name in __all__:
        from . import pipelines as home
    else:
        raise AttributeError(f"module 'arjet' has no attribute {name!r}")
    return getattr(home, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
