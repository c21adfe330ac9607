"""The built-in procedural text-to-image domain: coloured shapes, their renders and prompts; and the
prompt sets by name or file (`arjet.data.prompts`: `load_prompts`, not imported with the package)."""

from .dataset import ShapesDataset, heldout_set, render_reference, split_item, to_tensor, write_heldout
from .shapes import (
    BACKGROUND_COLORS,
    BACKGROUNDS,
    COLORS,
    NUMBERS,
    SHAPES,
    SIZES,
    Background,
    Scene,
    Shape,
    describe,
    render,
    render_bytes,
    sample_scene,
)

__all__ = [
    "BACKGROUNDS",
    "BACKGROUND_COLORS",
    "COLORS",
    "NUMBERS",
    "SHAPES",
    "SIZES",
    "Background",
    "Scene",
    "Shape",
    "ShapesDataset",
    "describe",
    "heldout_set",
    "render",
    "render_bytes",
    "render_reference",
    "sample_scene",
    "split_item",
    "to_tensor",
    "write_heldout",
]
