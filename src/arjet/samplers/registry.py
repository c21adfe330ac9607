"""Samplers by name: `get("sjd")` builds the default configuration, `get("sjd:window=32,init=repeat_vertical")`
the one a spec describes.

An entry is a builder and the options it takes. Those options are the samplers' own declarations
(`options_of(SJD)`, see `arjet.samplers.options`), so a default is written once, on the sampler: a spec is
parsed against the entry's options, every option it leaves out takes its declared default, and the builder
gets them all. A composite entry (`zipar+lantern`) lists the options of each part and hands each part its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import checks
from .ar import AR
from .base import Sampler
from .eagle import Eagle
from .eagle2 import Eagle2
from .jacobi import AcceptanceRule, Exact
from .lantern import Lantern
from .options import MAX_SIZE, Option, options_of, parse_options
from .sjd import SJD
from .sjd2 import SJD2
from .sjd_pac import SJDPAC
from .zipar import ZipAR


@dataclass(frozen=True)
class Entry:
    build: Callable[..., Sampler]
    options: tuple[Option, ...] | None  # None: registered without a schema (spec values read untyped)


_REGISTRY: dict[str, Entry] = {}


def register(name: str, factory: Callable[..., Sampler], options: Sequence[Option] | None = None) -> None:
    """Register `factory` (a class or a callable taking keyword arguments) under `name`. `options` is its
    schema (types, ranges, defaults, help) for specs such as `"name:key=value"`: the factory then receives
    every option, those the spec leaves out at their defaults. Without a schema, spec values are read as
    true / false / none / numbers / text and the factory checks them."""
    _REGISTRY[name] = Entry(factory, tuple(options) if options is not None else None)


def available() -> list[str]:
    return sorted(_REGISTRY)


def options(name: str) -> tuple[Option, ...]:
    """The option schema of registered sampler `name` (empty when it takes none or has no schema)."""
    return _entry(name).options or ()


def get(sampler: str | Sampler) -> Sampler:
    """A sampler object from `"name"` or `"name:key=value,key=value"` (or the object itself, checked again:
    see `Part.validate`). Unknown, repeated or badly typed options raise a ValueError naming the option and
    what is allowed."""
    if not isinstance(sampler, str):
        if not isinstance(sampler, Sampler):
            raise ValueError(
                f"sampler must be a name or an arjet.samplers.Sampler object, got {checks.shown(sampler)}; "
                f"available names: {', '.join(available())}"
            )
        sampler.validate()
        return sampler
    name, colon, arguments = sampler.partition(":")
    name = name.strip()
    entry = _entry(name)
    try:
        if colon and not arguments.strip():
            raise ValueError(
                f"{checks.shown(sampler)} has a colon but no options; write {name!r} or {name}:key=value"
            )
        given = parse_options(arguments, entry.options) if arguments.strip() else {}
        defaults = {option.name: option.default for option in entry.options or ()}
        return entry.build(**(defaults | given))
    except (TypeError, ValueError) as error:
        raise ValueError(f"bad arguments for sampler {name!r}: {error}") from None


def label(sampler: str | Sampler) -> str:
    """How stats and reports name a sampler: its spec as given, without spaces (`"sjd:window=32"`), or an
    object's `name`."""
    if isinstance(sampler, str):
        name, colon, arguments = sampler.partition(":")
        pieces = [piece.strip().replace(" ", "") for piece in arguments.split(",") if piece.strip()]
        return name.strip() + (colon + ",".join(pieces) if pieces else "")
    return sampler.name


def _entry(name: str) -> Entry:
    if name not in _REGISTRY:
        raise ValueError(f"unknown sampler {checks.shown(name)}; available: {', '.join(available())}")
    return _REGISTRY[name]


# -- the built-in entries ----------------------------------------------------------------------------------
ACCEPTANCE_RULES: dict[str, Callable[[], AcceptanceRule]] = {"exact": Exact, "lantern": Lantern}
ACCEPTANCE = Option(
    "acceptance",
    str,
    "exact",
    "exact (lossless) or lantern (relaxed, its defaults)",
    choices=tuple(ACCEPTANCE_RULES),
)


def _split(options: dict[str, Any], part: type) -> tuple[dict[str, Any], dict[str, Any]]:
    """`options` as (those `part` declares, the rest)."""
    own = {option.name for option in options_of(part)}
    return {k: v for k, v in options.items() if k in own}, {k: v for k, v in options.items() if k not in own}


def _sjd(acceptance: str, **sjd: Any) -> SJD:
    return SJD(acceptance=ACCEPTANCE_RULES[acceptance](), **sjd)


def _mc_sjd(**options: Any) -> SJD:
    return _sjd(coupling=True, **options)


DRAFTER = Option(
    "drafter",
    bool,
    False,
    "propose with the pipeline's trained drafter (pipe.drafter) instead of Jacobi drafts",
)
_JACOBI_ONLY = ("init", "coupling")  # options of Jacobi drafts, which a drafter's proposals replace


def _option(part: type, name: str) -> Option:
    return next(option for option in options_of(part) if option.name == name)


def _default(part: type, name: str) -> Any:
    return _option(part, name).default


def _drafter_form(name: str, options: dict[str, Any], jacobi: type, also: tuple[str, ...] = ()) -> None:
    """Refuse Jacobi-draft options (and `also`) set away from their defaults together with `drafter=true`."""
    for key in (*_JACOBI_ONLY, *also):
        if key in options and options[key] != _default(jacobi, key):
            raise ValueError(f"{key} applies to Jacobi drafts; {name} with drafter=true takes no {key}")


_TREE_ONLY = tuple(option.name for option in options_of(Eagle2))


def _lantern(drafter: bool = False, **options: Any) -> SJD | Eagle2:
    """LANTERN's relaxed rule over SJD's Jacobi drafts, or with `drafter` over a drafter's dynamic tree (as
    the paper, which drafts EAGLE-2's)."""
    rule, rest = _split(options, Lantern)
    tree, sjd = _split(rest, Eagle2)
    if drafter:
        _drafter_form("lantern", sjd, SJD, also=("window",))
        return Eagle2(acceptance=Lantern(**rule), **tree)
    for key in _TREE_ONLY:
        if key in tree and tree[key] != _default(Eagle2, key):
            raise ValueError(f"{key} shapes a drafter's tree; lantern takes it with drafter=true only")
    return SJD(acceptance=Lantern(**rule), **sjd)


LANTERN_PP_WINDOW = Option(
    "window",
    int,
    None,
    "inputs per forward, tree nodes included (none: sjd-pac's default, or eagle's with drafter=true)",
    minimum=2,
    maximum=MAX_SIZE,
    none=True,
)


CHAIN = _option(Eagle, "chain")


def _lantern_pp(
    drafter: bool = False, window: int | None = None, chain: str = CHAIN.default, **options: Any
) -> SJDPAC | Eagle:
    """LANTERN++: LANTERN's rule on a static tree, over a drafter's proposals (`drafter`, on `eagle`'s tree
    with its `chain`) or, training-free, over SJD-PAC's Jacobi drafts."""
    rule, tree = _split(options, Lantern)
    acceptance = Lantern(**rule)
    if drafter:
        _drafter_form("lantern++", tree, SJDPAC)
        shape = {key: tree[key] for key in ("tree_width", "tree_depth")}
        return Eagle(window=window or _default(Eagle, "window"), chain=chain, acceptance=acceptance, **shape)
    if chain != CHAIN.default:
        raise ValueError(
            f"chain={chain} chooses what a drafter drafts; lantern++ takes it with drafter=true only"
        )
    return SJDPAC(window=window or _default(SJDPAC, "window"), acceptance=acceptance, **tree)


def _zipar_sjd(**options: Any) -> ZipAR:
    zipar, verify = _split(options, ZipAR)
    return ZipAR(verify=_sjd(**verify), **zipar)


def _zipar_lantern(**options: Any) -> ZipAR:
    zipar, verify = _split(options, ZipAR)
    return ZipAR(verify=_lantern(**verify), **zipar)


register("ar", AR, ())
register("sjd", _sjd, (*options_of(SJD), ACCEPTANCE))
register("mc-sjd", _mc_sjd, (*options_of(SJD, frozenset({"coupling"})), ACCEPTANCE))
register(
    "lantern",
    _lantern,
    (*options_of(Lantern), *options_of(SJD), DRAFTER, *options_of(Eagle2)),
)
register("sjd-pac", SJDPAC, options_of(SJDPAC))
register("eagle", Eagle, options_of(Eagle))
register("eagle2", Eagle2, options_of(Eagle2))
register(
    "lantern++",
    _lantern_pp,
    (*options_of(Lantern), LANTERN_PP_WINDOW, *options_of(SJDPAC, frozenset({"window"})), DRAFTER, CHAIN),
)
register("sjd2", SJD2, options_of(SJD2))
register("zipar", ZipAR, options_of(ZipAR))
register("zipar+sjd", _zipar_sjd, (*options_of(ZipAR), *options_of(SJD), ACCEPTANCE))
register("zipar+lantern", _zipar_lantern, (*options_of(ZipAR), *options_of(Lantern), *options_of(SJD)))
