"""Decoding algorithms over a session's grid of image codes, registered by name.

`available()` lists the names; `get("sjd")` builds the default configuration and `get("sjd:window=32,
init=repeat_vertical")` passes keyword arguments to the entry's factory; a sampler object (`SJD(window=32)`)
can be passed anywhere a name can.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .ar import AR
from .base import DecodeStats, DecodeTrace, Interrupted, Sampler
from .drafts import INIT_SCHEMES
from .lantern import Lantern
from .policy import LogitsPolicy, LogitsProcessor, Temperature, TopK, TopP
from .random import ImageRandom, sample
from .sjd import SJD
from .sjd2 import SJD2
from .speculative import AcceptanceRule, Exact
from .zipar import ZipAR

_REGISTRY: dict[str, Callable[..., Sampler]] = {}


def register(name: str, factory: Callable[..., Sampler]) -> None:
    """Register `factory` (a class or a callable taking keyword arguments) under `name`."""
    _REGISTRY[name] = factory


def available() -> list[str]:
    return sorted(_REGISTRY)


def get(sampler: str | Sampler) -> Sampler:
    """A sampler object from `"name"` or `"name:key=value,key=value"` (or the object itself)."""
    if not isinstance(sampler, str):
        if not callable(getattr(sampler, "run", None)):
            raise ValueError(f"sampler must be a name or an object with a run() method, got {sampler!r}")
        return sampler
    name, _, arguments = sampler.partition(":")
    if name not in _REGISTRY:
        raise ValueError(f"unknown sampler {name!r}; available: {', '.join(available())}")
    kwargs = _parse_arguments(arguments) if arguments else {}
    try:
        return _REGISTRY[name](**kwargs)
    except TypeError as error:
        raise ValueError(f"bad arguments for sampler {name!r}: {error}") from None


def parse_specs(text: str, extra: list[str] | None = None) -> list[str]:
    """Sampler specs from a command-line list, deduplicated: `'ar;sjd:window=8,init=random;zipar'`, or with
    commas only, where a `key=value` piece belongs to the spec before it (`'ar,sjd:window=8,init=random,zipar'`);
    `extra` specs (a repeatable option) are appended."""
    if ";" in text:
        specs = [piece.strip() for piece in text.split(";")]
    else:
        specs = []
        for piece in (p.strip() for p in text.split(",")):
            if specs and "=" in piece and ":" not in piece:
                specs[-1] += "," + piece
            else:
                specs.append(piece)
    specs = list(dict.fromkeys([s for s in specs if s] + [s.strip() for s in extra or [] if s.strip()]))
    if not specs:
        raise ValueError(f"the sampler list names no sampler: {text!r}")
    return specs


def _parse_arguments(text: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for item in text.split(","):
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise ValueError(f"sampler arguments look like 'key=value,key=value', got {text!r}")
        kwargs[key.strip()] = _parse_value(value.strip())
    return kwargs


def _parse_value(value: str) -> Any:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for convert in (int, float):
        try:
            return convert(value)
        except ValueError:
            pass
    return value


def _lantern(k: int = 1000, delta: float = 0.1, lam: float | None = None, top: int = 8, **sjd: Any) -> SJD:
    bound = sjd.pop("bound", "draft")
    return SJD(acceptance=Lantern(k=k, delta=delta, lam=lam, bound=bound, top=top), **sjd)


def _zipar_sjd(w: int | None = None, **sjd: Any) -> ZipAR:
    return ZipAR(w=w, verify=SJD(**sjd))


def _zipar_lantern(w: int | None = None, **lantern: Any) -> ZipAR:
    return ZipAR(w=w, verify=_lantern(**lantern))


register("ar", AR)
register("sjd", SJD)
register("sjd2", SJD2)
register("mc-sjd", lambda **kwargs: SJD(coupling=True, **kwargs))
register("lantern", _lantern)
register("zipar", ZipAR)
register("zipar+sjd", _zipar_sjd)
register("zipar+lantern", _zipar_lantern)

__all__ = [
    "AR",
    "INIT_SCHEMES",
    "SJD",
    "SJD2",
    "AcceptanceRule",
    "DecodeStats",
    "DecodeTrace",
    "Exact",
    "ImageRandom",
    "Interrupted",
    "Lantern",
    "LogitsPolicy",
    "LogitsProcessor",
    "Sampler",
    "Temperature",
    "TopK",
    "TopP",
    "ZipAR",
    "available",
    "get",
    "parse_specs",
    "register",
    "sample",
]
