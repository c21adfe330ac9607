"""The decoding session: what samplers see of a model (see `session.py`)."""

from .adapter import DraftHead, ModelAdapter, NoisyEmbeddings
from .cache import SlotCache
from .decoder import CompiledDecoder, LlamaStackDecoder, StaticDecoder, TransformersDecoder
from .layout import ImageLayout, Prefix
from .session import DecodingSession

__all__ = [
    "CompiledDecoder",
    "DecodingSession",
    "DraftHead",
    "ImageLayout",
    "LlamaStackDecoder",
    "ModelAdapter",
    "NoisyEmbeddings",
    "Prefix",
    "SlotCache",
    "StaticDecoder",
    "TransformersDecoder",
]
