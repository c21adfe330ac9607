"""The figures' labels: long sampler specs wrap at their own separators."""

import PIL.Image

from arjet.reports.plots import comparison_grid, wrap_spec


def test_a_long_spec_wraps_after_its_separators():
    assert wrap_spec("sjd") == "sjd"
    wrapped = wrap_spec("eagle:chain=jacobi,window=64,tree_depth=2")
    assert wrapped == "eagle:chain=jacobi,\nwindow=64,\ntree_depth=2"
    assert wrap_spec("lantern++:drafter=true") == "lantern++:\ndrafter=true"
    assert wrap_spec("x" * 30) == "x" * 30  # nothing to break at


def test_the_grid_labels_its_columns_with_wrapped_specs():
    image = PIL.Image.new("RGB", (16, 16))
    figure = comparison_grid([[image, image]], ["a red circle"], ["sjd", "eagle:chain=jacobi,window=64"])
    labels = [label.get_text() for label in figure.axes[0].get_xticklabels()]
    assert labels == ["sjd", "eagle:chain=jacobi,\nwindow=64"]
