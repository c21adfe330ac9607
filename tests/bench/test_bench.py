"""`run_bench`: every sampler on the same prompts and seeds."""

import pytest

from arjet.bench.samplers import run_bench
from arjet.bench.speed import load_warning, timing_warnings
from arjet.testing import tiny_pipeline


def test_the_same_prompt_and_seed_reach_every_sampler():
    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=8)
    result = run_bench(pipe, ["ar", "sjd"], ["a", "b"], seed=5, warmup=False, progress=False)
    seeds = {(r["sampler"], r["prompt"]): r["seed"] for r in result.records}
    assert seeds == {("ar", "a"): 5, ("sjd", "a"): 5, ("ar", "b"): 6, ("sjd", "b"): 6}


def test_a_batched_bench_times_whole_calls():
    """With `batch_size`, each call decodes several images: a forward's cost is the call's seconds over its
    forwards (the batch runs until its slowest image is done), and images / s counts every call once."""
    pipe = tiny_pipeline("emu3", grid=(3, 4), vocab_size=8, logit_scale=3.0)
    prompts = ["a red circle", "a blue square", "a green star"]
    result = run_bench(
        pipe, ["ar", "sjd:window=3"], prompts, seed=2, warmup=False, progress=False, batch_size=2
    )
    sjd = [r for r in result.records if r["sampler"] == "sjd:window=3"]
    assert [r["call"] for r in sjd] == [0, 0, 1] and [r["call_images"] for r in sjd] == [2, 2, 1]
    assert [r["seed"] for r in sjd] == [2, 3, 4]
    first = sjd[0]
    assert first["seconds"] == first["call_seconds"] / 2
    assert first["call_forward_passes"] == max(r["forward_passes"] for r in sjd[:2])
    summary = next(s for s in result.summaries if s.sampler == "sjd:window=3")
    calls = [
        (sjd[0]["call_seconds"], sjd[0]["call_forward_passes"]),
        (sjd[2]["seconds"], sjd[2]["forward_passes"]),
    ]
    assert summary.ms_per_forward == pytest.approx(sum(c[0] for c in calls) / sum(c[1] for c in calls) * 1e3)
    assert summary.images_per_second == pytest.approx(3 / sum(c[0] for c in calls))
    assert result.environment["batch_size"] == 2
    # the same seeds give the same codes whether the images are decoded one by one or two at a time
    alone = run_bench(pipe, ["sjd:window=3"], prompts, seed=2, warmup=False, progress=False)
    assert [r["codes_sha1"] for r in alone.records] == [r["codes_sha1"] for r in sjd]


def test_a_bad_batch_size_is_refused():
    pipe = tiny_pipeline("janus")
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        run_bench(pipe, ["ar"], ["a"], warmup=False, progress=False, batch_size=0)


def _records(sampler, seconds, passes=100):
    return [{"sampler": sampler, "seconds": s, "forward_passes": passes} for s in seconds]


QUIET = {"device": "cpu", "others_busy_cores": 0.1, "torch_threads": 1, "usable_cores": 2}


def test_timings_far_apart_or_a_busy_machine_are_flagged():
    steady = _records("ar", [1.0, 1.1, 0.95]) + _records("sjd", [0.5, 0.55], passes=40)
    assert timing_warnings(steady, QUIET) == []
    (spread,) = timing_warnings(_records("ar", [1.0, 3.2]), QUIET)
    assert spread == (
        "ar: a forward took from 10 to 32 ms between its calls (3.2x apart), so its seconds are not trustworthy"
    )
    (busy,) = timing_warnings(steady, {**QUIET, "others_busy_cores": 1.3})
    assert busy.startswith("other processes kept 1.3 of the 2 cores busy while this ran on 1 thread(s)")
    assert timing_warnings(steady, {**QUIET, "torch_threads": 2, "others_busy_cores": 0.9}) != []
    assert timing_warnings(steady, {**QUIET, "device": "cuda", "others_busy_cores": 1.9}) == []


@pytest.mark.parametrize(
    ("cores", "threads", "busy", "device", "warned"),
    [
        # issue 33: a load average of 4.2 on 2 cores, the bench on 1 thread. The scheduler kept its thread on
        # one core and the others on the other: 1.0 busy, which the old rule (others beyond the free cores
        # by a quarter core: > 1.25) never flagged
        (2, 1, 1.0, "cpu", True),
        (2, 1, 0.8, "cpu", True),
        (2, 1, 0.7, "cpu", False),  # a core and a third left free for a one-thread run: quiet enough
        (2, 2, 0.3, "cpu", True),
        (2, 2, 0.2, "cpu", False),  # the system's own noise
        (16, 16, 0.2, "cpu", False),
        (16, 4, 11.5, "cpu", False),
        (16, 4, 12.0, "cpu", True),
        (2, 8, 0.3, "cpu", True),  # more threads than cores: every core was needed
        (2, 1, 1.0, "cpu:0", True),  # the same device, spelled with its index
        (2, 1, 1.9, "cuda", False),  # a GPU's seconds do not wait for the CPU's cores
        (2, 1, None, "cpu", False),  # not measured (not Linux)
    ],
)
def test_the_load_warning_fires_when_others_keep_the_cores_busy(cores, threads, busy, device, warned):
    environment = {
        "device": device,
        "others_busy_cores": busy,
        "torch_threads": threads,
        "usable_cores": cores,
    }
    warning = load_warning(environment)
    assert (warning is not None) == warned
    if warned:
        assert warning.startswith(f"other processes kept {busy:.1f} of the {cores} cores busy while this ran")
        assert timing_warnings([], environment) == [warning]


def test_a_bench_records_the_load_it_ran_under():
    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=8)
    result = run_bench(pipe, ["ar"], ["a", "b"], warmup=False, progress=False)
    environment = result.to_dict()["environment"]
    assert {"others_busy_cores", "usable_cores", "torch_threads"} <= set(environment)
    assert result.to_dict()["warnings"] == timing_warnings(result.records, environment)
