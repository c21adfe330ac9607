"""What every sampler, and every rule a sampler is built from, declares.

A sampler is a dataclass whose options are its fields (`arjet.samplers.options.option`), a `name`, the
capabilities it needs from a model (`requires`), the parts it is built from (`parts`, e.g. SJD's acceptance
rule), a check of its sizes against the grid (`check_grid`) and `run(decode)`: decode every cell of every
image of the session's grid, recording each commit in `decode.trace`. Every member has a default here, so
code that uses a sampler reads them directly and never probes for them.

The built-in samplers and rules are frozen dataclasses: an option is checked when the object is made and
cannot change afterwards (`dataclasses.replace(sampler, window=32)` makes a new, checked one), so a decode
never meets a value its checks did not see. `validate` runs those checks again; `arjet.samplers.get` calls
it on every object it is given, for a sampler class of one's own that is not frozen.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

from .options import check_options

if TYPE_CHECKING:
    from .decode import Decode, Stepper


class Part:
    """A sampler or a rule a sampler is built from. Dataclass subclasses get `validate`d when they are made."""

    name: ClassVar[str] = ""
    # capabilities the model must offer (see `arjet.pipelines.base.CAPABILITIES`): "codebook", ...
    requires: ClassVar[frozenset[str]] = frozenset()

    @property
    def parts(self) -> tuple[tuple[str, Part], ...]:
        """`(role, part)` pairs whose needs are this one's too (see `requirements`)."""
        return ()

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every declared option against its declaration, then every part; ValueError naming the
        option and what it allows. A subclass that checks how its options go together extends this (calling
        it first, or after checking what `parts` reads)."""
        if dataclasses.is_dataclass(self):
            check_options(self)
        for _, part in self.parts:
            part.validate()

    def check_grid(
        self, grid: tuple[int, int], max_window: int | None = None, *, vocab_size: int | None = None
    ) -> None:
        """Refuse, before any model work, sizes this grid (`(H, W)` codes), an operator's `max_window` or a
        vocabulary of `vocab_size` codes cannot take, so that no step's shape grows past them; ValueError
        naming the options, their values and the bound. Here: every part's check (a subclass that checks
        sizes of its own calls this too)."""
        for _, part in self.parts:
            part.check_grid(grid, max_window, vocab_size=vocab_size)


class Sampler(Part):
    """A decoding algorithm over the session's grid of image codes (see `arjet.session`). A `continuous`
    sampler decodes through a `Stepper` whose lane views step some images alone (`stepper(decode)`), so a
    continuous-batching engine can start an image in a lane while the others keep decoding."""

    continuous: ClassVar[bool] = False

    def run(self, decode: Decode) -> None:
        """Decode every cell of every image, recording each commit in `decode.trace`."""
        raise NotImplementedError(f"{type(self).__name__} does not implement run(decode)")

    def stepper(self, decode: Decode) -> Stepper:
        """The decode's state and step (a `continuous` sampler's, not yet started)."""
        raise NotImplementedError(f"{type(self).__name__} is not a continuous sampler")


def requirements(part: Part) -> dict[str, str]:
    """What `part` needs from the model: `{capability: who needs it}`, from its own `requires` (who = "") and
    its parts', e.g. `{"codebook": "the lantern acceptance rule"}` for `SJD(acceptance=Lantern())`."""
    needs = dict.fromkeys(part.requires, "")
    for role, child in part.parts:
        for capability, who in requirements(child).items():
            needs.setdefault(capability, who or f"the {child.name} {role}")
    return needs
