"""`run_bench`: every sampler on the same prompts and seeds; sampler lists as the commands read them."""

import pytest

from arjet.eval.bench import run_bench
from arjet.samplers import parse_specs
from arjet.testing import tiny_pipeline


def test_the_same_prompt_and_seed_reach_every_sampler():
    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=8)
    result = run_bench(pipe, ["ar", "sjd"], ["a", "b"], seed=5, warmup=False, progress=False)
    seeds = {(r["sampler"], r["prompt"]): r["seed"] for r in result.records}
    assert seeds == {("ar", "a"): 5, ("sjd", "a"): 5, ("ar", "b"): 6, ("sjd", "b"): 6}


def test_sampler_lists():
    assert parse_specs("sjd,zipar") == ["sjd", "zipar"]
    assert parse_specs("sjd:window=8,init=random;ar") == ["sjd:window=8,init=random", "ar"]
    assert parse_specs("ar,sjd:window=8,init=random,zipar:w=4") == [
        "ar",
        "sjd:window=8,init=random",
        "zipar:w=4",
    ]
    with pytest.raises(ValueError, match="names no sampler"):
        parse_specs(" , ")
