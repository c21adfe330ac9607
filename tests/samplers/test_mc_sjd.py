"""`mc-sjd` has a class of its own: `MCSJD`, an `SJD` whose re-drafts are always coupled, named `mc-sjd`
wherever a sampler is named; with the maximal coupling it decodes exactly what `SJD(coupling=True)` decodes,
with `coupling=gumbel` its re-drafts share per-cell Gumbel noise that moves on with every committed code
(its chi-square tests are in `test_lossless.py`)."""

import dataclasses

import pytest
import torch

from arjet import samplers
from arjet.samplers import MCSJD, SJD, ZipAR, jacobi, options_of
from arjet.samplers import sjd as sjd_module
from arjet.samplers.mc_sjd import GumbelStepper, advanced_noise
from arjet.testing import tiny_pipeline


def test_mc_sjd_is_an_sjd_that_couples_and_says_so():
    sampler = samplers.get("mc-sjd")
    assert sampler == MCSJD() and isinstance(sampler, SJD) and sampler.coupling == "maximal"
    assert samplers.label(MCSJD()) == "mc-sjd" and samplers.label(SJD(coupling=True)) == "sjd"
    assert samplers.get("mc-sjd:window=4,init=repeat_vertical") == MCSJD(window=4, init="repeat_vertical")
    assert samplers.get("mc-sjd:coupling=gumbel").coupling == "gumbel"
    assert [option.name for option in options_of(MCSJD)] == [
        "window",
        "init",
        "coupling",
    ]  # reuse is no option


def test_mc_sjd_refuses_to_be_uncoupled():
    with pytest.raises(ValueError, match="mc-sjd always couples its re-drafts, got coupling=False"):
        MCSJD(coupling=False)
    with pytest.raises(ValueError, match="coupling must be one of maximal, gumbel; got 'exact'"):
        MCSJD(coupling="exact")
    with pytest.raises(ValueError, match="mc-sjd couples its re-drafts, so it reuses none, got reuse=0.5"):
        MCSJD(reuse=0.5)
    with pytest.raises(ValueError, match="always couples"):
        dataclasses.replace(MCSJD(), coupling=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        MCSJD().window = 4  # type: ignore[misc]


def test_zipar_takes_mc_sjd_as_its_verifier():
    """ZipAR verifies with any `SJD`; the coupled one is one."""
    assert ZipAR(w=2, verify=MCSJD(window=3)).verify.coupling == "maximal"


def test_zipar_refuses_a_gumbel_verifier_when_it_is_made():
    """ZipAR's rows re-draft through `jacobi.redraft` with the verifier's `coupling`; the Gumbel coupling needs
    mc-sjd's own stepper (its noise), so the sampler is refused before any model work."""
    with pytest.raises(ValueError, match="zipar's rows re-draft independently or with the maximal coupling"):
        ZipAR(w=2, verify=MCSJD(window=3, coupling="gumbel"))


def test_mc_sjd_decodes_the_codes_of_sjd_with_coupling_under_its_own_name():
    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=8, logit_scale=3.0)
    runs = {
        spec: pipe(["a red circle"] * 2, sampler=spec, seed=[3, 4], output_type="latent", guidance_scale=2.0)
        for spec in (
            MCSJD(window=4),
            SJD(window=4, coupling=True),
            SJD(window=4),
            MCSJD(4, coupling="gumbel"),
        )
    }
    coupled, plain, independent, gumbel = runs.values()
    assert torch.equal(coupled.codes, plain.codes)
    assert [stats.sampler for stats in coupled.stats] == ["mc-sjd"] * 2
    assert [stats.sampler for stats in plain.stats] == ["sjd"] * 2
    assert [stats.forward_passes for stats in coupled.stats] == [
        stats.forward_passes for stats in plain.stats
    ]
    assert not torch.equal(independent.codes, coupled.codes)  # control: coupling changes the draws
    assert not torch.equal(gumbel.codes, coupled.codes)  # and the Gumbel coupling draws otherwise


_redraft = jacobi.redraft


# -- the Gumbel coupling's noise -----------------------------------------------------------------------------
def test_the_noise_moves_up_by_the_committed_cells_and_the_rows_past_them_are_fresh():
    noise = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)  # [B, L, V]
    fresh = -noise - 1
    moved = advanced_noise(noise, torch.tensor([1, 3]), fresh)
    assert torch.equal(moved[0], torch.cat([noise[0, 1:], fresh[0, 3:]]))
    assert torch.equal(moved[1], torch.cat([noise[1, 3:], fresh[1, 1:]]))
    assert torch.equal(advanced_noise(noise, torch.tensor([0, 4]), fresh), torch.stack([noise[0], fresh[1]]))


class _Recording(GumbelStepper):
    """Every other step narrowed to one code (as an engine narrows a window), recording `(n, noise)` around
    each step."""

    def step(self):
        self.window = 1 if self.window > 1 else self.reach
        before = (self.n.clone(), self.noise.clone())
        super().step()
        self.records.append((self.window, *before, self.n.clone(), self.noise.clone()))


@dataclasses.dataclass(frozen=True)
class _Recorded(MCSJD):
    records: list = dataclasses.field(default_factory=list, compare=False)

    def stepper(self, decode):
        stepper = _Recording(self, decode)
        stepper.records = self.records
        return stepper


def test_every_committed_code_replaces_its_cells_noise_one_code_steps_included():
    """The official code shifts its noise table only after steps that commit more than one code, so its
    one-code phases draw consecutive codes with the same noise. Here the noise of a cell goes with the cell:
    after each step, window or one-code, row `j` is the old row `j + advanced` and the rows past it are new."""
    sampler = _Recorded(window=4, coupling="gumbel")
    pipe = tiny_pipeline("emu3", grid=(3, 4), vocab_size=8, logit_scale=3.0)
    pipe(["a red circle"] * 2, sampler=sampler, seed=[1, 2], output_type="latent")
    assert {window for window, *_ in sampler.records} == {1, 4}
    for window, n, noise, n_after, noise_after in sampler.records:
        advanced = n_after - n
        if window == 1:
            assert torch.equal(advanced, (n < 12).long())
        for image, moved in enumerate(advanced.tolist()):
            kept = noise.shape[1] - moved
            assert torch.equal(noise_after[image, :kept], noise[image, moved:])
            assert not torch.isin(noise_after[image, kept:], noise[image]).any()


def _collision_rate(spec, monkeypatch) -> float:
    """The share of re-drafted cells whose new draft equals their old one, over a decode of 8 images."""
    same = []

    def counting(p, drafts, *, advanced, **kwargs):
        next_drafts, proposals, carried = _redraft(p, drafts, advanced=advanced, **kwargs)
        slots = drafts.codes.shape[-1]
        source = advanced[:, None] + torch.arange(slots)  # the old slot of each new slot's cell
        old = drafts.codes.gather(1, source.clamp(max=slots - 1))
        valid = carried & (source < slots)
        same.append(((next_drafts == old) & valid).sum() / valid.sum().clamp(min=1))
        return next_drafts, proposals, carried

    monkeypatch.setattr(sjd_module, "redraft", counting)
    pipe = tiny_pipeline("emu3", grid=(4, 4), vocab_size=16, logit_scale=6.0)
    pipe(["a red circle"] * 8, sampler=spec, seed=list(range(8)), output_type="latent")
    return float(torch.stack(same).mean())


def test_coupled_redrafts_keep_more_drafts_than_independent_ones(monkeypatch):
    """Collision rate of re-drafts on a sharp tiny model: either coupling keeps far more of them than
    independent draws do (measured when written: 0.06 independent, 0.59 maximal, 0.40 gumbel)."""
    rates = {spec: _collision_rate(spec, monkeypatch) for spec in ("sjd", "mc-sjd", "mc-sjd:coupling=gumbel")}
    assert min(rates["mc-sjd"], rates["mc-sjd:coupling=gumbel"]) > rates["sjd"] + 0.1, rates
