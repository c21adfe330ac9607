"""Image sizes: defaults, Emu3's aspect ratios, Lumina-mGPT's non-square sizes (the refusals are in
test_contract's bad-input tests)."""

import pytest

from arjet.pipelines.emu3 import size_from_aspect_ratio
from arjet.testing import tiny_pipeline


@pytest.mark.parametrize(
    ("ratio", "size"),
    [
        ("1:1", (720, 720)),
        ("16:9", (544, 960)),  # Emu3's calculate_generate_size: round(9 * 60 / 8) = 68 rows, 120 columns
        ("9:16", (960, 544)),
        ("4:3", (624, 832)),
    ],
)
def test_emu3_aspect_ratio_sizes_at_the_default_area(ratio, size):
    assert size_from_aspect_ratio(ratio, 720 * 720, 8) == size


@pytest.mark.parametrize(("ratio", "grid"), [("1:1", (2, 2)), ("2:1", (1, 3)), ("1:2", (3, 1))])
def test_emu3_pipeline_takes_an_aspect_ratio(ratio, grid):
    pipe = tiny_pipeline("emu3", grid=(2, 2), vocab_size=6)  # image_area 16 px, 2-px codes
    out = pipe("a red circle", aspect_ratio=ratio, seed=0)
    assert out.codes.shape == (1, *grid)
    assert out.images[0].size == (2 * grid[1], 2 * grid[0])  # PIL: (width, height)
    height, width = size_from_aspect_ratio(ratio, pipe.config.image_area, 2)
    assert pipe.check_inputs("a red circle", aspect_ratio=ratio).grid == (height // 2, width // 2)
    same = pipe("a red circle", height=height, width=width, seed=0)
    assert (same.codes == out.codes).all()


def test_emu3_any_size_on_the_code_grid():
    pipe = tiny_pipeline("emu3", grid=(2, 2), vocab_size=6)
    out = pipe("a red circle", height=2, width=8, seed=0)
    assert out.codes.shape == (1, 1, 4) and out.images[0].size == (8, 2)


def test_lumina_non_square_sizes_within_its_area():
    pipe = tiny_pipeline("lumina_mgpt", grid=(3, 3), vocab_size=6)  # 96-px model: <= 96x96 px, ratio <= 4
    out = pipe("a red circle", height=32, width=96, seed=0)
    assert out.codes.shape == (1, 1, 3) and out.images[0].size == (96, 32)
    assert pipe.check_inputs("a red circle", height=32, width=128).grid == (1, 4)  # ratio 4 is allowed


def test_default_size_is_used_for_none_only(family):
    pipe = tiny_pipeline(family, grid=(2, 2), vocab_size=6)
    default = pipe.default_size()
    assert pipe.check_inputs("a red circle").grid == (2, 2)
    assert pipe.check_inputs("a red circle", height=default[0]).grid == (2, 2)
    assert pipe.check_inputs("a red circle", width=None, height=None).grid == (2, 2)
