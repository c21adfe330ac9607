"""`run_bench`: every sampler on the same prompts and seeds."""

from arjet.eval.bench import run_bench
from arjet.testing import tiny_pipeline


def test_the_same_prompt_and_seed_reach_every_sampler():
    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=8)
    result = run_bench(pipe, ["ar", "sjd"], ["a", "b"], seed=5, warmup=False, progress=False)
    seeds = {(r["sampler"], r["prompt"]): r["seed"] for r in result.records}
    assert seeds == {("ar", "a"): 5, ("sjd", "a"): 5, ("ar", "b"): 6, ("sjd", "b"): 6}
