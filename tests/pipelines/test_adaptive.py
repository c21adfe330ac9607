"""`sampler="adaptive"`: the cost model (what it measures, which window it picks at each load), and a
pipeline call's choice of one exact window for its batch, measured once and kept on the pipeline."""

import pytest
import torch

from arjet.pipelines import adaptive
from arjet.pipelines.adaptive import CostModel
from arjet.testing import tiny_pipeline

TIMES = {(1, 1): 1.0, (1, 4): 1.2, (1, 16): 2.0, (8, 1): 2.0, (8, 4): 5.0, (8, 16): 12.0}
CODES = {1: 1.0, 4: 2.0, 16: 4.0}  # codes per forward pass over whole images


@pytest.mark.parametrize(("size", "busy", "expected"), [(1, 1, 16), (8, 8, 1), (8, 2, 1)])
def test_it_picks_the_window_with_the_most_codes_per_second(size, busy, expected):
    """Alone, 4 codes in 2 s beat 2 in 1.2 s and 1 in 1 s; in a bucket of eight lanes, a 16-window step
    costs 6x an AR step for 4x its codes, a 4-window step 2.5x for 2x (however many lanes are busy)."""
    assert CostModel(TIMES, CODES).choose(size, busy) == expected


def test_on_a_tie_it_picks_the_narrower_window():
    assert CostModel({(1, 1): 1.0, (1, 4): 2.0}, {1: 1.0, 4: 2.0}).choose(1, 1) == 1


def test_measure_times_every_shape_and_asks_each_window_for_its_yield():
    steps, asked = [], []

    def step(size, window):
        steps.append((size, window))

    def codes_per_pass(window):
        asked.append(window)
        return {4: 2.5, 16: 3.0}[window]

    model = CostModel.measure(step, [1, 2], [1, 4, 16], codes_per_pass, repeats=2)
    assert sorted(model.times) == sorted((size, window) for size in (1, 2) for window in (1, 4, 16))
    assert all(steps.count(shape) == 3 for shape in model.times)  # one untimed, two timed
    assert asked == [4, 16] and model.codes == {1: 1.0, 4: 2.5, 16: 3.0}  # AR commits one code a pass


@pytest.mark.parametrize(
    ("times", "codes", "message"),
    [
        (TIMES, {1: 1.0, 4: 2.0}, r"needed for the windows \[1, 4, 16\]"),
        ({**TIMES, (1, 4): 0.0}, CODES, "must be positive"),
        (TIMES, {**CODES, 16: float("nan")}, "must be positive"),
    ],
)
def test_bad_measurements_are_refused(times, codes, message):
    with pytest.raises(ValueError, match=message):
        CostModel(times, codes)


# -- sampler="adaptive" in a pipeline call -------------------------------------------------------------------
PROMPTS = ["a red circle left of a blue square", "a blue square"]


@pytest.fixture
def counted_runs(monkeypatch):
    """The windows measured, call by call."""
    measured = []
    runs = adaptive.window_runs

    def counted(pipe, prompts, windows, **call):
        measured.append(list(windows))
        return runs(pipe, prompts, windows, **call)

    monkeypatch.setattr(adaptive, "window_runs", counted)
    return measured


def _window(stats) -> int:
    label = stats.sampler
    assert label.startswith("adaptive (mc-sjd:window=") and label.endswith(")"), label
    return int(label[len("adaptive (mc-sjd:window=") : -1])


def test_adaptive_in_a_pipeline_call_is_the_chosen_exact_window(family, counted_runs):
    """Its codes are MC-SJD's at the window it chose (the stats name it), and the choice is measured once for
    that grid, batch and sampling options, then kept on the pipeline."""
    pipe = tiny_pipeline(family, grid=(3, 3), vocab_size=8, logit_scale=3.0)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(PROMPTS, sampler="adaptive", seed=5, output_type="latent")
    window = _window(out.stats[0])
    assert all(_window(stats) == window for stats in out.stats) and window in adaptive.WINDOWS
    fixed = pipe(PROMPTS, sampler=f"mc-sjd:window={window}", seed=5, output_type="latent")
    assert torch.equal(out.codes, fixed.codes)
    assert counted_runs == [list(adaptive.WINDOWS)]
    again = pipe(PROMPTS[::-1], sampler="adaptive", seed=6, output_type="latent")
    assert counted_runs == [list(adaptive.WINDOWS)] and _window(again.stats[0]) == window  # kept
    pipe(PROMPTS[0], sampler="adaptive", seed=5, output_type="latent")  # another batch: measured again
    pipe(PROMPTS, sampler="adaptive", seed=5, temperature=0.5, output_type="latent")  # other options too
    assert len(counted_runs) == 3 and len(pipe._adaptive_windows) == 3


def test_the_choice_is_the_window_with_the_most_codes_per_second():
    """From one decode per window: a step's seconds per step and codes per image per step."""
    runs = {
        1: adaptive.WindowRun(tokens=18, forward_passes=18, steps=9, seconds=0.9),  # 20 codes/s
        4: adaptive.WindowRun(tokens=18, forward_passes=8, steps=4, seconds=0.6),  # 30 codes/s
        16: adaptive.WindowRun(tokens=18, forward_passes=6, steps=3, seconds=0.9),  # 20 codes/s
    }
    cost = adaptive.batch_cost(runs, batch=2)
    assert cost.choose(2, 2) == 4
    assert [round(cost.rate(2, 2, window)) for window in (1, 4, 16)] == [20, 30, 20]


def test_a_bad_adaptive_call_is_refused_before_any_measurement():
    """As for every sampler; the widest window stays within an operator's `max_window`."""
    pipe = tiny_pipeline("emu3", grid=(3, 3), vocab_size=8)
    with pytest.raises(ValueError, match="temperature"):
        pipe("a", sampler="adaptive", temperature=-1.0)
    assert pipe._adaptive_windows is None
    assert adaptive.widest_spec(8) == "mc-sjd:window=8" and adaptive.widest_spec() == "mc-sjd:window=16"
