"""`arjet.cli.types`: argparse converters that say what is wrong in the library's own words."""

import argparse

import pytest

from arjet.cli import types


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (types.int_type(1), "0", "must be an integer >= 1, got '0'"),
        (types.int_type(1), "1.5", "must be an integer >= 1, got '1.5'"),
        (types.int_type(1), "1_6", "must be an integer >= 1, got '1_6'"),
        (types.int_type(1), "\uff18", "must be an integer >= 1, got '\uff18'"),
        (types.float_type(0.0), "nan", "must be a finite number >= 0, got 'nan'"),
        (types.float_type(0.0), "1e400", "must be a finite number >= 0, got '1e400'"),
        (types.float_type(0.0), "1_0", "must be a finite number >= 0, got '1_0'"),
        (types.bool_type(), "maybe", "must be true or false, got 'maybe'"),
        (types.device_type(), "bogus", "device 'bogus' is not a torch device"),
        (types.device_type(), "tpu", "device 'tpu'"),
    ],
)
def test_argparse_types_raise_argparse_errors(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse(text)


def test_argparse_types_return_the_values():
    assert types.int_type(1, 8)(" 8 ") == 8 and types.float_type(0.0)("2.5") == 2.5
    assert types.bool_type()("yes") is True and types.device_type()("cpu") == "cpu"
