"""The decoding session: what samplers see of a model (see `session.py`)."""

from .adapter import ModelAdapter
from .cache import SlotCache
from .layout import ImageLayout, Prefix
from .session import DecodingSession

__all__ = ["DecodingSession", "ImageLayout", "ModelAdapter", "Prefix", "SlotCache"]
