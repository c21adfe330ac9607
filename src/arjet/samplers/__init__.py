"""Decoding algorithms over a session's grid of image codes, registered by name.

`available()` lists the names; `get("sjd")` builds the default configuration; a sampler object
(`SJD(window=32)`) can be passed anywhere a name can.
"""

from __future__ import annotations

from collections.abc import Callable

from .ar import AR
from .base import DecodeStats, DecodeTrace, Interrupted, Sampler
from .policy import LogitsPolicy, LogitsProcessor, Temperature, TopK, TopP
from .random import ImageRandom, sample

_REGISTRY: dict[str, Callable[[], Sampler]] = {}


def register(name: str, factory: Callable[[], Sampler]) -> None:
    """Register `factory` (a class or a zero-argument callable) under `name`."""
    _REGISTRY[name] = factory


def available() -> list[str]:
    return sorted(_REGISTRY)


def get(sampler: str | Sampler) -> Sampler:
    """A sampler object from a registered name (or the object itself)."""
    if not isinstance(sampler, str):
        if not callable(getattr(sampler, "run", None)):
            raise ValueError(f"sampler must be a name or an object with a run() method, got {sampler!r}")
        return sampler
    if sampler not in _REGISTRY:
        raise ValueError(f"unknown sampler {sampler!r}; available: {', '.join(available())}")
    return _REGISTRY[sampler]()


register("ar", AR)

__all__ = [
    "AR",
    "DecodeStats",
    "DecodeTrace",
    "ImageRandom",
    "Interrupted",
    "LogitsPolicy",
    "LogitsProcessor",
    "Sampler",
    "Temperature",
    "TopK",
    "TopP",
    "available",
    "get",
    "register",
    "sample",
]
