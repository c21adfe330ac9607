import pytest
import torch

from arjet import samplers
from arjet.samplers import SJD
from arjet.testing import tiny_pipeline

from families import all_cells


@pytest.mark.parametrize("window", [0, -2, 1.5, True])
def test_bad_window_is_rejected(window):
    with pytest.raises(ValueError, match="window must be an integer from 1 to 16384"):
        SJD(window=window)


def test_unknown_init_scheme_lists_the_choices():
    with pytest.raises(ValueError, match="init must be one of random, repeat_horizontal, .*; got 'diagonal'"):
        SJD(init="diagonal")


def test_registry_names_and_arguments():
    assert {"ar", "sjd", "mc-sjd", "lantern", "zipar", "zipar+sjd", "zipar+lantern"} <= set(
        samplers.available()
    )
    sampler = samplers.get("sjd:window=8,init=repeat_vertical,coupling=true")
    assert (sampler.window, sampler.init, sampler.coupling) == (8, "repeat_vertical", True)
    assert samplers.get("zipar+lantern:w=3,delta=0.2").verify.acceptance.delta == 0.2
    with pytest.raises(ValueError, match="bad arguments for sampler 'sjd'"):
        samplers.get("sjd:nope=1")
    with pytest.raises(ValueError, match="key=value"):
        samplers.get("sjd:window")


def test_each_image_commits_its_own_number_of_tokens(family):
    grid = (4, 4) if family == "janus" else (3, 4)
    # peaky enough that drafts are sometimes rejected, not so peaky that every image decodes the same codes
    pipe = tiny_pipeline(family, grid=grid, vocab_size=16, logit_scale=3.0)
    out = pipe(["a red circle", "green star on a blue background"] * 3, sampler=SJD(window=5), seed=0)
    passes = [s.forward_passes for s in out.stats]
    traces = [s.accepted_per_step for s in out.stats]
    assert len(set(map(tuple, traces))) > 1  # ragged: no min over the batch
    for stat in out.stats:
        assert sum(stat.accepted_per_step) == stat.tokens == all_cells(pipe, grid)
        # one entry per forward pass: the prefill commits cell 0, every later forward at least one cell
        assert len(stat.accepted_per_step) == stat.forward_passes
        assert stat.commit_step.max() == stat.forward_passes
    # a batch member decodes exactly as it would alone
    alone = pipe("green star on a blue background", sampler=SJD(window=5), seed=3)
    assert torch.equal(alone.codes[0], out.codes[3]) and alone.stats[0].forward_passes == passes[3]


def test_greedy_sjd_reproduces_greedy_ar(family):
    grid = (4, 4) if family == "janus" else (3, 4)
    pipe = tiny_pipeline(family, grid=grid, vocab_size=16, logit_scale=3.0)
    ar = pipe(["a red circle", "green star"], temperature=0).codes
    for sampler in (SJD(window=4), SJD(window=6, init="sample_vertical", coupling=True)):
        assert torch.equal(pipe(["a red circle", "green star"], sampler=sampler, temperature=0).codes, ar)


def test_stats_name_the_full_spec_and_print_in_one_short_line():
    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=8)
    (stat,) = pipe("a red circle", sampler="sjd: window=4, init=random", seed=0).stats
    assert stat.sampler == "sjd:window=4,init=random"
    text = repr(stat)
    assert text.startswith("DecodeStats(sampler='sjd:window=4,init=random', forward_passes=")
    assert "commit_step=<3x3>" in text and "\n" not in text and len(text) < 200
    assert pipe("a red circle", sampler=SJD(window=4), seed=0).stats[0].sampler == "sjd"
