"""`arjet serve`: the OpenAI images API over arjet's continuous-batching engines (see `openai_api.py`)."""

from .openai_api import ApiError, ImagesRequest, create_app

__all__ = ["ApiError", "ImagesRequest", "create_app"]
