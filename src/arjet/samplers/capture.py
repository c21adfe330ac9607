"""Moved to `arjet.session.capture` (beside the decoder it captures); this re-export goes once every importer
uses the new home."""

from ..session.capture import (
    CAPTURE_KEYS,
    CAPTURED_MODES,
    CAPTURED_SPAN_SIZES,
    COMPILE_MODES,
    COMPILED_MODES,
    CudaGraphRunner,
    compile_mode,
)

__all__ = [
    "CAPTURED_MODES",
    "CAPTURED_SPAN_SIZES",
    "CAPTURE_KEYS",
    "COMPILED_MODES",
    "COMPILE_MODES",
    "CudaGraphRunner",
    "compile_mode",
]
