"""The adaptive mode's cost model: what it measures, and which window it picks at each load."""

import pytest

from arjet.engine.cost import CostModel

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
