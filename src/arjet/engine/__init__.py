"""Many images at once: the continuous-batching engine (`Engine`) that the demo, `arjet eval` and
`arjet serve` run on (see `engine.py`)."""

from ..pipelines.adaptive import ADAPTIVE
from .engine import Engine, EngineStats
from .requests import (
    Cancelled,
    DecodeFailed,
    EngineResult,
    EngineStopped,
    Overloaded,
    QueueFull,
    Request,
)

__all__ = [
    "ADAPTIVE",
    "Cancelled",
    "DecodeFailed",
    "Engine",
    "EngineResult",
    "EngineStats",
    "EngineStopped",
    "Overloaded",
    "QueueFull",
    "Request",
]
