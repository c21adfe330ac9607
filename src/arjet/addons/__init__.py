"""A model's add-ons, pipeline components beside its backbone: the drafter (an EAGLE-style head, trained by
`arjet train drafter` or read from LANTERN's releases) and SJD2's noise conditioning. A session holds them
as what it declares (`arjet.session.adapter.DraftHead`, `NoisyEmbeddings`)."""

from .drafter import Drafter
from .lantern_drafter import convert_lantern_drafter, read_lantern_drafter
from .noise import NoiseConditioning

__all__ = ["Drafter", "NoiseConditioning", "convert_lantern_drafter", "read_lantern_drafter"]
