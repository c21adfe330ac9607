"""arjet: fast, correct parallel decoding for autoregressive text-to-image models.

pipe = arjet.ARPipeline.from_pretrained("deepseek-community/Janus-Pro-1B")   # or arjet.load()
out = pipe("a red circle left of a blue square", sampler="sjd", seed=0)
out.images[0]; out.stats[0]

The public names and the subpackages (`arjet.testing`, `arjet.data`, `arjet.eval`, ...) are imported on
first use, so `import arjet` (and `arjet --help`) needs no torch.
"""

import logging
import typing

__version__ = "0.1.0"


class _KnownNoise(logging.Filter):
    """Drops the lines transformers' and diffusers' import of torchao (the `quant` extra, imported by them
    whenever it is installed, quantized or not) logs with torch 2.14 / diffusers 0.42: deprecations arjet
    cannot act on, which would otherwise open every command's stderr."""

    NOISE = ("is an Enum subclass and is now natively supported", "Unable to import `torchao` Tensor objects")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(text in str(record.msg) for text in self.NOISE)


for _logger in ("torch.utils._pytree", "diffusers.quantizers.torchao.torchao_quantizer"):
    logging.getLogger(_logger).addFilter(_KnownNoise())

__all__ = [
    "ARPipeline",
    "ARPipelineOutput",
    "Drafter",
    "Emu3Pipeline",
    "GlmImagePipeline",
    "JanusPipeline",
    "Limits",
    "LuminaMGPTPipeline",
    "Quantization",
    "available_models",
    "available_presets",
    "load",
    "random_pipeline",
    "samplers",
]

# the parts of the package reachable as attributes (`arjet.testing.tiny_pipeline`); the command line is
# not among them (it sits above this face), `import arjet.cli` still works
SUBMODULES = (
    "addons",
    "app",
    "bench",
    "builtin",
    "checks",
    "data",
    "eval",
    "limits",
    "pipelines",
    "presets",
    "quantize",
    "reports",
    "samplers",
    "session",
    "testing",
    "train",
    "vq",
    "weights",
)

if typing.TYPE_CHECKING:
    from . import samplers
    from .addons import Drafter
    from .builtin import available_models, load
    from .limits import Limits
    from .pipelines import (
        ARPipeline,
        ARPipelineOutput,
        Emu3Pipeline,
        GlmImagePipeline,
        JanusPipeline,
        LuminaMGPTPipeline,
    )
    from .presets import available_presets, random_pipeline
    from .quantize import Quantization


def __getattr__(name: str) -> typing.Any:
    if name in SUBMODULES:
        return _submodule(name)
    if name in ("available_models", "load"):
        home = _submodule("builtin")
    elif name == "Limits":
        home = _submodule("limits")
    elif name == "Quantization":
        home = _submodule("quantize")
    elif name == "Drafter":
        home = _submodule("addons")
    elif name in ("available_presets", "random_pipeline"):
        home = _submodule("presets")
    elif name in __all__:
        home = _submodule("pipelines")
    else:
        raise AttributeError(f"module 'arjet' has no attribute {name!r}")
    return getattr(home, name)


def _submodule(name: str) -> typing.Any:
    """Import the part `name` (written out, one per line: the layer test reads every import by its name).
    `import arjet.X as module` rather than `from . import X`: the latter would ask `__getattr__` again."""
    if name == "addons":
        import arjet.addons as module
    elif name == "app":
        import arjet.app as module
    elif name == "bench":
        import arjet.bench as module
    elif name == "builtin":
        import arjet.builtin as module
    elif name == "checks":
        import arjet.checks as module
    elif name == "quantize":
        import arjet.quantize as module
    elif name == "data":
        import arjet.data as module
    elif name == "eval":
        import arjet.eval as module
    elif name == "limits":
        import arjet.limits as module
    elif name == "pipelines":
        import arjet.pipelines as module
    elif name == "presets":
        import arjet.presets as module
    elif name == "reports":
        import arjet.reports as module
    elif name == "samplers":
        import arjet.samplers as module
    elif name == "session":
        import arjet.session as module
    elif name == "testing":
        import arjet.testing as module
    elif name == "train":
        import arjet.train as module
    elif name == "vq":
        import arjet.vq as module
    elif name == "weights":
        import arjet.weights as module
    else:
        raise AttributeError(f"arjet has no part {name!r}; its parts: {', '.join(SUBMODULES)}")
    return module


def __dir__() -> list[str]:
    """The public names and parts, and the module's own dunders (no helper imports such as `typing`)."""
    dunders = [name for name in globals() if name.startswith("__") and name.endswith("__")]
    return sorted({*dunders, *__all__, *SUBMODULES})
