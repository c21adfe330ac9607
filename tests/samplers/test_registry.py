"""The sampler registry: a spec's errors quote what it was given in a short excerpt, so a message stays a
line however long the spec (the command line, the pipe and the server all show it)."""

import pytest

from arjet import samplers
from arjet.samplers.options import parse_options

LONG = 900_000
SHORT_MESSAGE = 300  # characters: the option list and an excerpt of each value, never the input

LONG_SPECS = {
    "unknown name": "x" * LONG,
    "choice value": "sjd:init=" + "x" * LONG,
    "integer value": "sjd:window=" + "9" * LONG,
    "option name": "sjd:" + "k" * LONG + "=1",
    "commas": "sjd:" + "," * LONG,
    "repeated option": "sjd:" + ",".join(["window=1"] * (LONG // 9)),
    "blank options": "sjd:" + " " * LONG,
    "boolean value": "sjd:coupling=" + "x" * LONG,
    "float value": "lantern:delta=" + "1" * LONG + "x",
}


@pytest.mark.parametrize("spec", LONG_SPECS.values(), ids=LONG_SPECS.keys())
def test_a_long_spec_is_refused_with_a_short_message(spec):
    with pytest.raises(ValueError) as refused:
        samplers.get(spec)
    message = str(refused.value)
    assert len(message) < SHORT_MESSAGE, message
    assert "..." in message  # an excerpt, cut in the middle


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x" * LONG, "unknown sampler 'xxxxx"),
        ("sjd:init=" + "x" * LONG, "init must be one of random, repeat_horizontal"),
        ("sjd:window=" + "9" * LONG, "window must be an integer from 1 to 16384, got '99999"),
        ("sjd:" + "k" * LONG + "=1", "no option 'kkkkk"),
        ("sjd:" + "," * LONG, "options look like 'key=value,key=value', got ',,,,,"),
        ("sjd:" + ",".join(["window=1"] * (LONG // 9)), "option window is given twice in 'window=1,window=1"),
    ],
)
def test_the_short_message_still_names_what_is_wrong(spec, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        samplers.get(spec)


def test_a_short_spec_is_quoted_whole():
    """The control: a spec of ordinary length is quoted as it was given, nothing cut."""
    with pytest.raises(
        ValueError, match="option window is given twice in 'window=16,window=32'; give it once"
    ):
        samplers.get("sjd:window=16,window=32")
    with pytest.raises(ValueError, match="unknown sampler 'bogus'; available: ar,"):
        samplers.get("bogus")


def test_a_long_repeated_key_without_a_schema_is_cut_too():
    """A sampler registered without a schema reads any key, so a repeated one may be of any length."""
    key = "k" * LONG
    with pytest.raises(ValueError) as refused:
        parse_options(f"{key}=1,{key}=2", None)
    assert len(str(refused.value)) < SHORT_MESSAGE and "is given twice" in str(refused.value)
