"""Samplers by name: `get("sjd")` builds the default configuration, `get("sjd:window=32,init=repeat_vertical")`
the one a spec describes.

An entry is a builder and the options it takes. Those options are the samplers' own declarations
(`options_of(SJD)`, see `arjet.samplers.options`), so a default is written once, on the sampler: a spec is
parsed against the entry's options, every option it leaves out takes its declared default, and the builder
gets them all.

Composites: `method[+verifier][+rule]`. A method (`METHODS`) holds the part after its `+` (`SLOTS`): ZipAR
its verifier (`+sjd`, whose windows advance its rows), any sampler that verifies with an acceptance rule
its rule (`+lantern`). `zipar+sjd`, `sjd+lantern`, `sjd-pac+lantern`, `eagle+lantern`, `eagle2+lantern`,
`zipar+sjd+lantern` are built by one `compose`; a composite takes the options of all its parts, each handed
to the part that declares it (`zipar+sjd+lantern:w=2,window=4,k=4`). `get` and `options` take any
composite; `available()` lists the registered names. The paper names are aliases of one canonical spec,
with the same options and errors: `lantern` is `sjd+lantern` (`eagle2+lantern` with `drafter=true`),
`lantern++` is `sjd-pac+lantern` (`eagle+lantern` with `drafter=true`; both from `lantern.FORMS`),
`zipar+lantern` is `zipar+sjd+lantern`, `gsd` is `sjd+gsd`, `cool-sd` is `eagle+cool-sd`, and
`sjd:acceptance=lantern` is `sjd+lantern` (likewise `acceptance=gsd` and `acceptance=entropy`: `sjd+entropy`).
`mc-sjd` is a method of its own (`MCSJD`: `sjd` with `coupling=true`). COOL-SD's annealed rule reads each
draft's position along a drafter's chain, so only `eagle` and `eagle2` take it (`eagle+cool-sd`,
`eagle2+cool-sd`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import checks
from .ar import AR
from .base import Part, Sampler
from .cool_sd import CoolSD
from .eagle import Eagle
from .eagle2 import Eagle2
from .entropy import Entropy
from .gsd import GSD
from .jacobi import RuleSampler
from .lantern import DRAFTER, FORMS, Form, Lantern, refusal
from .mc_sjd import MCSJD
from .options import Option, options_of, parse_options
from .pjd import PJD
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
    """The option schema of sampler `name`, registered or a composite (empty when it takes none or has no
    schema)."""
    return _entry(name).options or ()


def fresh(part: Part) -> Part:
    """A frozen dataclass `part` made again from its fields (and its frozen parts likewise), so that options
    forced onto the caller's object while a call decodes with the copy (`object.__setattr__`, past the
    frozen dataclass) are neither used unchecked nor seen: a frozen sampler's options are read at every
    step. Its other fields are the same objects; a part that is not frozen is its caller's to change."""
    if not dataclasses.is_dataclass(part) or not type(part).__dataclass_params__.frozen:
        return part
    values = {f.name: getattr(part, f.name) for f in dataclasses.fields(part) if f.init}
    return dataclasses.replace(part, **{name: fresh(v) for name, v in values.items() if isinstance(v, Part)})


def get(sampler: str | Sampler) -> Sampler:
    """A sampler object from `"name"` or `"name:key=value,key=value"` (or the object, checked again: see
    `Part.validate`; a frozen one as a `fresh` copy). Unknown, repeated or badly typed options raise a ValueError naming the option and what
    is allowed."""
    if not isinstance(sampler, str):
        if not isinstance(sampler, Sampler):
            raise ValueError(
                f"sampler must be a name or an arjet.samplers.Sampler object, got {checks.shown(sampler)}; "
                f"available names: {', '.join(available())}"
            )
        sampler = fresh(sampler)
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
    """The registered entry `name`, or the composite it names."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if "+" not in name:
        raise ValueError(f"unknown sampler {checks.shown(name)}; available: {', '.join(available())}")
    return _composite(_chain(name))


# -- composites: method[+verifier][+rule] ------------------------------------------------------------------
METHODS: dict[str, type[Sampler]] = {
    "ar": AR,
    "sjd": SJD,
    "mc-sjd": MCSJD,
    "sjd-pac": SJDPAC,
    "sjd2": SJD2,
    "zipar": ZipAR,
    "eagle": Eagle,
    "eagle2": Eagle2,
    "pjd": PJD,
}


@dataclass(frozen=True)
class Slot:
    """Where a `holder` keeps the part written after it: its field `field`, one of `parts` (by name)."""

    holder: type[Part]
    field: str
    parts: Mapping[str, type[Part]]


RULES: dict[str, type[Part]] = {"lantern": Lantern, "gsd": GSD, "entropy": Entropy}  # any verifier's

SLOTS = (
    Slot(ZipAR, "verify", {"sjd": SJD}),  # the verifier: each row advances by a verified SJD window
    # a drafter's chain or tree numbers its draft positions, which COOL-SD's annealed rule reads
    *(Slot(drafted, "acceptance", RULES | {"cool-sd": CoolSD}) for drafted in (Eagle, Eagle2)),
    Slot(RuleSampler, "acceptance", RULES),  # the acceptance rule of a verifying sampler
)
COMPOSITES = "a composite is method[+verifier][+rule], e.g. zipar+sjd+lantern"


def _slot(holder: type[Part]) -> Slot | None:
    return next((slot for slot in SLOTS if issubclass(holder, slot.holder)), None)


def _chain(name: str) -> tuple[type[Part], ...]:
    """The parts composite `name` writes, outermost first, each one that the part before it holds."""
    first, *rest = name.split("+")
    if first not in METHODS:
        raise ValueError(
            f"unknown sampler {checks.shown(name)}: no method {checks.shown(first)} ({COMPOSITES}); "
            f"methods: {', '.join(METHODS)}"
        )
    chain, held = [METHODS[first]], first
    for part in rest:
        slot = _slot(chain[-1])
        if slot is None or part not in slot.parts:
            takes = " or ".join(f"+{fit}" for fit in slot.parts) if slot else "no part"
            raise ValueError(
                f"unknown sampler {checks.shown(name)}: {held} takes {takes} after it, not "
                f"{checks.shown('+' + part)} ({COMPOSITES})"
            )
        chain.append(slot.parts[part])
        held = part
    return tuple(chain)


def _schema(chain: Sequence[type[Part]]) -> tuple[Option, ...]:
    """The options of every part of `chain`, in its order; no two parts may declare the same name."""
    schema = tuple(option for part in chain for option in options_of(part))
    names = [option.name for option in schema]
    if len(set(names)) < len(names):
        raise TypeError(f"the parts {[part.__name__ for part in chain]} declare an option twice: {names}")
    return schema


def compose(chain: Sequence[type[Part]], options: Mapping[str, Any]) -> Sampler:
    """The sampler `chain` (outermost part first) builds: each part made from the `options` it declares,
    holding the part after it in its slot (`zipar+sjd+lantern` is `ZipAR(verify=SJD(acceptance=Lantern()))`)."""
    built: Any = None  # the method at the end: `_chain` starts every chain with one
    for part in reversed(chain):
        slot = _slot(part)
        held = {} if built is None or slot is None else {slot.field: built}
        own = {option.name: options[option.name] for option in options_of(part) if option.name in options}
        built = part(**own, **held)
    return built


def _composite(chain: tuple[type[Part], ...]) -> Entry:
    def build(**options: Any) -> Sampler:
        return compose(chain, options)

    return Entry(build, _schema(chain))


# -- the built-in entries ----------------------------------------------------------------------------------
# `sjd:acceptance=lantern` is `sjd+lantern` at the rule's defaults: the parts each choice adds
ACCEPTANCE_PARTS: dict[str, tuple[type[Part], ...]] = {
    "exact": (),
    "lantern": (Lantern,),
    "gsd": (GSD,),
    "entropy": (Entropy,),
}
ACCEPTANCE = Option(
    "acceptance",
    str,
    "exact",
    "exact (lossless), or a relaxed rule at its defaults: lantern, gsd, entropy",
    choices=tuple(ACCEPTANCE_PARTS),
)


def _accepting(chain: tuple[type[Part], ...]) -> Entry:
    """`chain` with the `acceptance` option: `exact` builds it as it is, `lantern` with `+lantern`."""

    def build(acceptance: str, **options: Any) -> Sampler:
        return compose((*chain, *ACCEPTANCE_PARTS[acceptance]), options)

    return Entry(build, (*_schema(chain), ACCEPTANCE))


def _form(name: str, form: Form) -> Entry:
    """A paper name of LANTERN's rule (`lantern.FORMS`): its Jacobi form's canonical spec, or with
    `drafter=true` its drafter form's. It takes the options of both (the parts they share first, the rule's;
    its own `window` in place of the Jacobi form's), and refuses one the chosen form lacks away from its
    default."""
    jacobi, drafted = _chain(form.jacobi), _chain(form.drafted)
    shared = [part for part in jacobi if part in drafted]
    first = _schema(shared) + tuple(
        form.window if form.window is not None and option.name == "window" else option
        for option in _schema([part for part in jacobi if part not in shared])
    )
    seen = {option.name for option in first}
    later = [
        option
        for option in _schema([part for part in drafted if part not in shared])
        if option.name not in seen
    ]
    schema = (*first, DRAFTER, *later)

    def build(drafter: bool, **options: Any) -> Sampler:
        chain = drafted if drafter else jacobi
        takes = {option.name for option in _schema(chain)}
        for option in schema:  # `options` holds every option but `drafter`, each at its default if not given
            value = options.get(option.name, option.default)
            if option.name not in takes and option is not form.window and value != option.default:
                raise ValueError(refusal(name, option.name, value, drafter))
        kept = {key: value for key, value in options.items() if key in takes}
        if form.window is not None and kept.get("window") is None:
            kept.pop("window", None)  # none: the built method's own default
        return compose(chain, kept)

    return Entry(build, schema)


# a registered paper name -> the composite it builds (COOL-SD's paper drafts with EAGLE-1: `eagle`)
ALIASES = {"zipar+lantern": "zipar+sjd+lantern", "gsd": "sjd+gsd", "cool-sd": "eagle+cool-sd"}
_REGISTRY.update(
    {name: _composite(_chain(name)) for name in ("ar", "eagle", "eagle2", "sjd2", "zipar")}
    | {name: _accepting(_chain(name)) for name in ("sjd", "mc-sjd", "sjd-pac", "zipar+sjd", "pjd")}
    | {name: _form(name, form) for name, form in FORMS.items()}
    | {name: _composite(_chain(spec)) for name, spec in ALIASES.items()}
)
