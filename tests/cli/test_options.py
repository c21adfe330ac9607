"""What the commands share: sampler lists as `--samplers` reads them."""

import pytest

from arjet.cli.options import parse_specs


def test_sampler_lists():
    assert parse_specs("sjd,zipar") == ["sjd", "zipar"]
    assert parse_specs("sjd:window=8,init=random;ar") == ["sjd:window=8,init=random", "ar"]
    assert parse_specs("ar,sjd:window=8,init=random,zipar:w=4") == [
        "ar",
        "sjd:window=8,init=random",
        "zipar:w=4",
    ]
    assert parse_specs("sjd", ["ar", "sjd"]) == ["sjd", "ar"]  # repeats dropped, order kept
    with pytest.raises(ValueError, match="names no sampler"):
        parse_specs(" , ")


def test_every_spec_of_a_list_is_checked():
    with pytest.raises(ValueError, match="coupling must be true or false"):
        parse_specs("ar;sjd:coupling=maybe")
