"""`mc-sjd` has a class of its own: `MCSJD`, an `SJD` whose re-drafts are always coupled, named `mc-sjd`
wherever a sampler is named; it decodes exactly what `SJD(coupling=True)` decodes."""

import dataclasses

import pytest
import torch

from arjet import samplers
from arjet.samplers import MCSJD, SJD, ZipAR, options_of
from arjet.testing import tiny_pipeline


def test_mc_sjd_is_an_sjd_that_couples_and_says_so():
    sampler = samplers.get("mc-sjd")
    assert sampler == MCSJD() and isinstance(sampler, SJD) and sampler.coupling is True
    assert samplers.label(MCSJD()) == "mc-sjd" and samplers.label(SJD(coupling=True)) == "sjd"
    assert samplers.get("mc-sjd:window=4,init=repeat_vertical") == MCSJD(window=4, init="repeat_vertical")
    assert [option.name for option in options_of(MCSJD)] == ["window", "init"]  # coupling is no option


def test_mc_sjd_refuses_to_be_uncoupled():
    with pytest.raises(ValueError, match="mc-sjd always couples its re-drafts, got coupling=False"):
        MCSJD(coupling=False)
    with pytest.raises(ValueError, match="always couples"):
        dataclasses.replace(MCSJD(), coupling=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        MCSJD().window = 4  # type: ignore[misc]


def test_zipar_takes_mc_sjd_as_its_verifier():
    """ZipAR verifies with any `SJD`; the coupled one is one."""
    assert ZipAR(w=2, verify=MCSJD(window=3)).verify.coupling is True


def test_mc_sjd_decodes_the_codes_of_sjd_with_coupling_under_its_own_name():
    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=8, logit_scale=3.0)
    runs = {
        spec: pipe(["a red circle"] * 2, sampler=spec, seed=[3, 4], output_type="latent", guidance_scale=2.0)
        for spec in (MCSJD(window=4), SJD(window=4, coupling=True), SJD(window=4))
    }
    coupled, plain, independent = runs.values()
    assert torch.equal(coupled.codes, plain.codes)
    assert [stats.sampler for stats in coupled.stats] == ["mc-sjd"] * 2
    assert [stats.sampler for stats in plain.stats] == ["sjd"] * 2
    assert [stats.forward_passes for stats in coupled.stats] == [
        stats.forward_passes for stats in plain.stats
    ]
    assert not torch.equal(independent.codes, coupled.codes)  # control: coupling changes the draws
