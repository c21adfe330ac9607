"""The per-image random streams: uniform, independent across images and draws, and batch-independent."""

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats

from arjet.samplers import ImageRandom
from arjet.samplers.decode import KEY_LIMIT, image_keys, seed_keys


def _streams(seeds):
    return ImageRandom.from_keys(seed_keys(seeds))


def test_uniforms_are_uniform_and_in_the_open_interval():
    draws = _streams(range(8)).uniform(50_000).flatten()
    assert float(draws.min()) > 0 and float(draws.max()) < 1
    counts = np.histogram(draws.numpy(), bins=100, range=(0, 1))[0]
    assert scipy_stats.chisquare(counts).pvalue > 1e-4


def test_draws_are_uncorrelated_across_images_elements_and_calls():
    rng = _streams(range(64))
    first, second = rng.uniform(4096), rng.uniform(4096)
    pairs = {
        "next element": (first[:, :-1], first[:, 1:]),
        "next image": (first[:-1], first[1:]),
        "next call": (first, second),
    }
    for name, (a, b) in pairs.items():
        correlation = np.corrcoef(a.flatten().numpy(), b.flatten().numpy())[0, 1]
        assert abs(correlation) < 0.01, name  # ~260k pairs: the standard error is 0.002


def test_low_bits_of_consecutive_seeds_are_unrelated():
    """Seeds 0, 1, 2, ... differ in a few bits only; their first draws must still look independent."""
    firsts = _streams(range(20_000)).uniform(1)[:, 0]
    counts = np.histogram(firsts.numpy(), bins=50, range=(0, 1))[0]
    assert scipy_stats.chisquare(counts).pvalue > 1e-4


def test_normals_have_unit_variance():
    draws = _streams(range(4)).normal(50_000).flatten().double()
    assert abs(float(draws.mean())) < 0.02 and abs(float(draws.std()) - 1) < 0.02
    assert scipy_stats.kstest(draws.numpy()[:20_000], "norm").pvalue > 1e-4


def test_an_image_draws_the_same_alone_or_in_a_batch():
    together = _streams([1, 2, 3])
    alone = _streams([2])
    for shape in ((5,), (2, 3), (7,)):
        assert torch.equal(together.uniform(*shape)[1], alone.uniform(*shape)[0])
    assert torch.equal(together.normal(4)[1], alone.normal(4)[0])


def test_the_draw_counter_advances_in_place():
    rng = _streams([0])
    counter = rng.counter
    rng.uniform(3)
    rng.normal(2)
    assert rng.counter is counter and int(counter) == 2


def test_keys_come_from_seeds_or_generators_alike():
    seeds = [5, 6]
    from_generators = image_keys([torch.Generator().manual_seed(s) for s in seeds], 2)
    assert torch.equal(seed_keys(seeds), from_generators)
    assert bool(((from_generators >= 0) & (from_generators <= KEY_LIMIT - 1)).all())
    single = image_keys(torch.Generator().manual_seed(5), 3)
    assert single.shape == (3,) and len(set(single.tolist())) == 3  # one generator: one draw per image
    with pytest.raises(ValueError, match="one per image"):
        image_keys([torch.Generator()], 2)
