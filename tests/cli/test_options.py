"""What the commands share: sampler lists as `--samplers` reads them, the sampling options and a server's
engine as the command line gives them."""

import argparse
from dataclasses import replace

import pytest

from arjet.cli.options import (
    add_sampling_arguments,
    add_server_arguments,
    parse_specs,
    sampling_options,
    server_engine,
)
from arjet.limits import DEMO_ENGINE, MAX_LANES, SERVE_ENGINE
from arjet.samplers import SamplingOptions


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


def _sampling_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_sampling_arguments(parser)
    return parser.parse_args(argv)


def test_the_sampling_options_left_out_are_the_models_where_its_defaults_are_given():
    # a model whose generation config sets every number (as GLM-Image's does)
    model = SamplingOptions(guidance_scale=5.0, temperature=0.9, top_k=50, top_p=0.95)
    assert sampling_options(_sampling_args(), model) == model
    given = _sampling_args("--temperature", "0.7", "--top-k", "3")
    assert sampling_options(given, model) == replace(model, temperature=0.7, top_k=3)
    # without the model's: None numbers (the model's, once a pipeline resolves them) and temperature 1
    assert sampling_options(_sampling_args()) == SamplingOptions()
    assert sampling_options(given) == SamplingOptions(temperature=0.7, top_k=3)
    with pytest.raises(ValueError, match="temperature=1e-45 scales the logits"):
        sampling_options(_sampling_args("--temperature", "1e-45"))


@pytest.mark.parametrize("defaults", [SERVE_ENGINE, DEMO_ENGINE])
def test_a_servers_engine_is_its_defaults_with_what_the_command_line_sets(defaults, capsys):
    parser = argparse.ArgumentParser()
    helps = {"lanes": "lanes", "max_queue": "queue", "time_limit": "seconds"}
    add_server_arguments(parser, port=1, models="models", defaults=defaults, helps=helps)
    assert server_engine(parser.parse_args([]), defaults) == defaults
    given = parser.parse_args(["--lanes", "3", "--time-limit", "5", "--max-graphs", "9"])
    assert server_engine(given, defaults, compile="inductor") == replace(
        defaults, lanes=3, time_limit=5.0, compile="inductor", max_graphs=9
    )
    assert "captured step graphs each engine keeps" in parser.format_help()
    assert f"(default {defaults.lanes})" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--lanes", str(MAX_LANES + 1)])
    assert f"must be an integer from 1 to {MAX_LANES}" in capsys.readouterr().err
