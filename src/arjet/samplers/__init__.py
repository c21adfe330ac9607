"""Decoding algorithms over a session's grid of image codes, registered by name.

`available()` lists the names; `get("sjd")` builds the default configuration and `get("sjd:window=32,
init=repeat_vertical")` passes keyword arguments to the entry's factory, typed and range-checked by the
entry's option schema (`options("sjd")`); a sampler object (`SJD(window=32)`) can be passed anywhere a
name can.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .ar import AR
from .base import DecodeStats, DecodeTrace, Interrupted, Sampler, requirements
from .drafts import INIT_SCHEMES
from .lantern import BOUNDS, Lantern
from .policy import LogitsPolicy, LogitsProcessor, SamplingOptions, Temperature, TopK, TopP
from .random import ImageRandom, sample
from .schema import MAX_SIZE, Option, parse_options
from .sjd import SJD
from .sjd2 import SJD2
from .sjd_pac import SJDPAC
from .speculative import AcceptanceRule, Exact
from .zipar import SCHEDULES, ZipAR

_REGISTRY: dict[str, Callable[..., Sampler]] = {}
_OPTIONS: dict[str, tuple[Option, ...] | None] = {}


def register(name: str, factory: Callable[..., Sampler], options: Sequence[Option] | None = None) -> None:
    """Register `factory` (a class or a callable taking keyword arguments) under `name`. `options` is its
    schema (types, ranges, help) for specs such as `"name:key=value"`; without one, spec values are read
    as true / false / none / numbers / text and the factory checks them."""
    _REGISTRY[name] = factory
    _OPTIONS[name] = tuple(options) if options is not None else None


def available() -> list[str]:
    return sorted(_REGISTRY)


def options(name: str) -> tuple[Option, ...]:
    """The option schema of registered sampler `name` (empty when it takes none or has no schema)."""
    _check_name(name)
    return _OPTIONS[name] or ()


def get(sampler: str | Sampler) -> Sampler:
    """A sampler object from `"name"` or `"name:key=value,key=value"` (or the object itself). Unknown,
    repeated or badly typed options raise a ValueError naming the option and what is allowed."""
    if not isinstance(sampler, str):
        if not callable(getattr(sampler, "run", None)):
            raise ValueError(f"sampler must be a name or an object with a run() method, got {sampler!r}")
        return sampler
    name, colon, arguments = sampler.partition(":")
    name = name.strip()
    _check_name(name)
    try:
        if colon and not arguments.strip():
            raise ValueError(f"{sampler!r} has a colon but no options; write {name!r} or {name}:key=value")
        kwargs = parse_options(arguments, _OPTIONS[name]) if arguments.strip() else {}
        return _REGISTRY[name](**kwargs)
    except (TypeError, ValueError) as error:
        raise ValueError(f"bad arguments for sampler {name!r}: {error}") from None


def label(sampler: str | Sampler) -> str:
    """How stats and reports name a sampler: its spec as given, without spaces (`"sjd:window=32"`), or an
    object's `name`."""
    if isinstance(sampler, str):
        name, colon, arguments = sampler.partition(":")
        pieces = [piece.strip().replace(" ", "") for piece in arguments.split(",") if piece.strip()]
        return name.strip() + (colon + ",".join(pieces) if pieces else "")
    return getattr(sampler, "name", type(sampler).__name__)


def _check_name(name: str) -> None:
    if name not in _REGISTRY:
        raise ValueError(f"unknown sampler {name!r}; available: {', '.join(available())}")


def parse_specs(text: str, extra: list[str] | None = None) -> list[str]:
    """Sampler specs from a command-line list, deduplicated: `'ar;sjd:window=8,init=random;zipar'`, or with
    commas only, where a `key=value` piece belongs to the spec before it (`'ar,sjd:window=8,init=random,zipar'`);
    `extra` specs (a repeatable option) are appended. Each spec is checked (`get`), so a bad one fails here."""
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
    for spec in specs:
        get(spec)
    return specs


def _lantern(
    k: int = 1000,
    delta: float = 0.1,
    lam: float | None = None,
    bound: str = "draft",
    top: int = 8,
    **sjd: Any,
) -> SJD:
    return SJD(acceptance=Lantern(k=k, delta=delta, lam=lam, bound=bound, top=top), **sjd)


def _sjd(acceptance: str = "exact", **sjd: Any) -> SJD:
    return SJD(acceptance=ACCEPTANCE_RULES[acceptance](), **sjd)


def _mc_sjd(acceptance: str = "exact", **sjd: Any) -> SJD:
    return SJD(acceptance=ACCEPTANCE_RULES[acceptance](), coupling=True, **sjd)


def _zipar_sjd(w: int | None = None, schedule: str = "lumina", **sjd: Any) -> ZipAR:
    return ZipAR(w=w, schedule=schedule, verify=_sjd(**sjd))


def _zipar_lantern(w: int | None = None, schedule: str = "lumina", **lantern: Any) -> ZipAR:
    return ZipAR(w=w, schedule=schedule, verify=_lantern(**lantern))


ACCEPTANCE_RULES: dict[str, Callable[[], AcceptanceRule]] = {"exact": Exact, "lantern": Lantern}

WINDOW = Option("window", int, 16, "draft slots verified per forward", 1, MAX_SIZE)
INIT = Option("init", str, "random", "how new draft slots are guessed", choices=INIT_SCHEMES)
COUPLING = Option("coupling", bool, False, "couple re-drafts with the old drafts (MC-SJD, still exact)")
ACCEPTANCE = Option(
    "acceptance",
    str,
    "exact",
    "exact (lossless) or lantern (relaxed, its defaults)",
    choices=tuple(ACCEPTANCE_RULES),
)
W = Option(
    "w",
    int,
    None,
    "ZipAR's window size: row r+1 starts once row r has w-1 codes (llamagen schedule: w); none: 16 on "
    "grids wider than 32, else 8",
    2,
    MAX_SIZE,
    none=True,
)
SCHEDULE = Option(
    "schedule", str, "lumina", "whose row schedule: lumina (the paper's) or llamagen", choices=SCHEDULES
)
LANTERN = (
    Option("k", int, 1000, "nearest codebook neighbours a draft may claim", 1, MAX_SIZE),
    Option("delta", float, 0.1, "probability mass a draft may claim from its neighbours", 0.0, 1.0),
    Option("lam", float, None, "LANTERN++'s p'(x) <= lam * p(x), instead of delta", 1.0, 1e6, none=True),
    Option(
        "bound",
        str,
        "draft",
        "draft: LANTERN as published (delta bounds each draft's relaxed target); tv: delta bounds every "
        "committed token's total variation",
        choices=BOUNDS,
    ),
    Option("top", int, 8, "the proposal's most likely codes the bound=tv mixture covers", 1, MAX_SIZE),
)
SJD_OPTIONS = (WINDOW, INIT, COUPLING, ACCEPTANCE)

register("ar", AR, ())
register("sjd", _sjd, SJD_OPTIONS)
register(
    "sjd2",
    SJD2,
    (
        Option("window", int, 64, "cells predicted per forward", 2, MAX_SIZE),
        Option(
            "levels",
            int,
            None,
            "denoising steps from noise to clean (none: window // 16)",
            1,
            MAX_SIZE,
            none=True,
        ),
        Option("coupling", bool, True, "couple re-drafts with the old drafts (MC-SJD)"),
    ),
)
register("mc-sjd", _mc_sjd, (WINDOW, INIT, ACCEPTANCE))
register("lantern", _lantern, (*LANTERN, WINDOW, INIT, COUPLING))
register("zipar", ZipAR, (W, SCHEDULE))
register("zipar+sjd", _zipar_sjd, (W, SCHEDULE, *SJD_OPTIONS))
register("zipar+lantern", _zipar_lantern, (W, SCHEDULE, *LANTERN, WINDOW, INIT, COUPLING))
register(
    "sjd-pac",
    SJDPAC,
    (
        Option("window", int, 64, "inputs per forward, tree nodes included", 1, MAX_SIZE),
        Option("tree_width", int, 3, "candidates per tree depth (the main draft and its siblings)", 1, 64),
        Option(
            "tree_depth",
            int,
            3,
            "tree levels, the root included (siblings at the first tree_depth - 1 draft depths)",
            1,
            16,
        ),
        Option(
            "coupling",
            bool,
            True,
            "couple re-drafts with the old drafts (MC-SJD, the paper's adaptive continuation)",
        ),
        INIT,
    ),
)

__all__ = [
    "AR",
    "INIT_SCHEMES",
    "SJD",
    "SJD2",
    "SJDPAC",
    "AcceptanceRule",
    "DecodeStats",
    "DecodeTrace",
    "Exact",
    "ImageRandom",
    "Interrupted",
    "Lantern",
    "LogitsPolicy",
    "LogitsProcessor",
    "MAX_SIZE",
    "Option",
    "Sampler",
    "SamplingOptions",
    "Temperature",
    "TopK",
    "TopP",
    "ZipAR",
    "available",
    "get",
    "label",
    "options",
    "parse_options",
    "parse_specs",
    "register",
    "requirements",
    "sample",
]
