"""Many images at once: the continuous-batching engine (`Engine`) that the demo, `arjet eval` and
`arjet serve` run on (see `engine.py`)."""

from .engine import Engine, EngineStats
from .requests import ADAPTIVE, Cancelled, EngineResult, QueueFull, Request

__all__ = ["ADAPTIVE", "Cancelled", "Engine", "EngineResult", "EngineStats", "QueueFull", "Request"]
