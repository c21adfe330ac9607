"""The adaptive mode's cost model: which window it picks, and how it learns what each one is worth."""

import pytest

from arjet.engine.cost import CostModel

TIMES = {(1, 1): 1.0, (1, 4): 1.2, (1, 16): 2.0, (8, 1): 2.0, (8, 4): 5.0, (8, 16): 12.0}
YIELDS = {1: 1.0, 4: 2.0, 16: 4.0}  # codes per lane and step, once warm


def _run(model, size, busy, steps, yields):
    """`steps` choices, each observed with the step time of its shape and the window's yield."""
    chosen = []
    for _ in range(steps):
        window = model.choose(size, busy)
        model.observe(size, window, TIMES[(size, window)], yields[window])
        chosen.append(window)
    return chosen


def test_every_window_is_tried_in_a_burst_first_widest_first():
    model = CostModel(TIMES, burst=4, warm=2)
    chosen = _run(model, 1, 1, 8, YIELDS)
    assert chosen == [16] * 4 + [4] * 4
    assert model.codes == YIELDS


def test_a_windows_yield_is_learnt_from_warm_steps_only():
    """A widened window's first steps guess from stale drafts: they do not count."""
    model = CostModel(TIMES, burst=4, warm=2, smoothing=1.0)
    yields = iter([1.0, 1.0, 3.0, 3.5])  # the burst's cold steps, then its warm ones
    for _ in range(4):
        window = model.choose(1, 1)
        model.observe(1, window, 2.0, next(yields))
    assert window == 16 and model.codes[16] == 3.5


@pytest.mark.parametrize(("size", "busy", "expected"), [(1, 1, 16), (8, 8, 1)])
def test_it_picks_the_window_with_the_most_codes_per_second(size, busy, expected):
    """Alone, 4 codes in 2 s beat 2 in 1.2 s and 1 in 1 s; eight lanes at once, a 16-window step costs 6x
    an AR step for 4x its codes, a 4-window step 2.5x for 2x."""
    model = CostModel(TIMES, burst=2, warm=1, probe_every=10_000)
    chosen = _run(model, size, busy, 40, YIELDS)
    assert set(chosen[-20:]) == {expected}


def test_probes_back_off_while_they_confirm_the_choice():
    model = CostModel(TIMES, burst=2, warm=1, probe_every=8, max_probe_every=32)
    chosen = _run(model, 8, 8, 200, YIELDS)
    probes = [i for i in range(1, len(chosen)) if chosen[i] != 1 and chosen[i - 1] == 1]
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0]  # ever rarer, up to the cap
    assert model.probe_every == 32
    assert sum(window == 1 for window in chosen[50:]) / len(chosen[50:]) > 0.85


def test_a_probe_that_changes_the_choice_brings_probing_back():
    model = CostModel(TIMES, burst=2, warm=1, probe_every=4, smoothing=1.0)
    _run(model, 1, 1, 60, {1: 1.0, 4: 1.1, 16: 1.1})  # wide windows that do not pay: AR, probed ever rarer
    assert model.best(1, 1) == 1 and model.probe_every > 4
    intervals = []
    for _ in range(300):  # the drafts got good: a probe finds that 16 pays now
        _run(model, 1, 1, 1, YIELDS)
        intervals.append(model.probe_every)
    assert model.best(1, 1) == 16 and 4 in intervals  # the switch brought probing back to its base


def test_a_burst_must_outlast_its_warm_up():
    with pytest.raises(ValueError, match="warm must be below burst"):
        CostModel(TIMES, burst=2, warm=2)
