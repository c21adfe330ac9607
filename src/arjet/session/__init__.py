"""The decoding session: what samplers see of a model (see `session.py`)."""

from .adapter import ModelAdapter
from .cache import SlotCache
from .decoder import LlamaStackDecoder, StaticDecoder, TransformersDecoder
from .layout import ImageLayout, Prefix
from .session import DecodingSession

__all__ = [
    "DecodingSession",
    "ImageLayout",
    "LlamaStackDecoder",
    "ModelAdapter",
    "Prefix",
    "SlotCache",
    "StaticDecoder",
    "TransformersDecoder",
]
