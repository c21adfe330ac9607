"""The decoding session: what samplers see of a model (see `session.py`)."""

from .adapter import ModelAdapter
from .cache import SlotCache
from .decoder import CompiledDecoder, LlamaStackDecoder, StaticDecoder, TransformersDecoder
from .drafter import Drafter
from .layout import ImageLayout, Prefix
from .session import DecodingSession

__all__ = [
    "CompiledDecoder",
    "DecodingSession",
    "Drafter",
    "ImageLayout",
    "LlamaStackDecoder",
    "ModelAdapter",
    "Prefix",
    "SlotCache",
    "StaticDecoder",
    "TransformersDecoder",
]
