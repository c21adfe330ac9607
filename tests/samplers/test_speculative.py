"""The accept / resample / couple maths every lossless sampler shares, checked exactly and by simulation.

The simulations draw many independent single-token problems at once; each has a deliberately wrong variant
(the bugs the literature's code and its ports have shipped) that the same test must reject.
"""

import numpy as np
import pytest
import torch

from arjet.samplers import sample
from arjet.samplers.jacobi import Drafts, Exact, RuleContext, couple, passes, residual, verify

from stats import chisquare_p_value

DRAWS = 200_000
# t is a top-k-filtered target with zeros; q spreads mass over the whole vocabulary, as random drafts do
TARGET = torch.tensor([0.55, 0.3, 0.15, 0.0, 0.0], dtype=torch.float64)
PROPOSAL = torch.tensor([0.1, 0.15, 0.25, 0.2, 0.3], dtype=torch.float64)


def _uniforms(seed: int, count: int = 3) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.rand(DRAWS, generator=generator, dtype=torch.float64) for _ in range(count)]


def _speculative(target, proposal, seed, resample_from=None, tested_q=None):
    """One speculative step per draw: x ~ proposal, accepted with min(1, t(x)/q(x)), else resampled."""
    u_draft, u_accept, u_resample = _uniforms(seed)
    t, q = target.expand(DRAWS, -1), proposal.expand(DRAWS, -1)
    drafts = sample(q, u_draft)
    tested = q if tested_q is None else tested_q.expand(DRAWS, -1)
    accepted = passes(t, tested, drafts, u_accept)
    fallback = residual(t, tested) if resample_from is None else resample_from.expand(DRAWS, -1)
    return torch.where(accepted, drafts, sample(fallback, u_resample))


@pytest.mark.parametrize("seed", range(20))
def test_accept_or_resample_gives_exactly_the_target(seed):
    """min(t, q) accepted + (1 - sum min(t, q)) * norm(max(0, t - q)) == t, for any pair of distributions."""
    generator = torch.Generator().manual_seed(seed)
    t = torch.rand(6, generator=generator, dtype=torch.float64) ** 3
    q = torch.rand(6, generator=generator, dtype=torch.float64) ** 3
    t[seed % 6] = 0.0  # a filtered-out code
    q[(seed + 1) % 6] = 0.0  # a code the proposal never drafts
    t, q = t / t.sum(), q / q.sum()
    rest = residual(t, q)
    committed = torch.minimum(t, q) + (1 - torch.minimum(t, q).sum()) * rest / rest.sum()
    torch.testing.assert_close(committed, t, rtol=0, atol=1e-12)


def test_residual_of_identical_distributions_falls_back_to_the_target():
    torch.testing.assert_close(residual(TARGET, TARGET.clone()), TARGET)


def test_verification_stops_at_the_first_failed_or_unusable_slot():
    target = torch.tensor([[[0.5, 0.5], [0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]])
    drafts = Drafts(torch.zeros(1, 4, dtype=torch.long), torch.tensor([[[1.0, 0.0]] * 4]))
    usable = torch.tensor([[True, True, True, False]])

    def accepted(u):
        verdict = verify(target, drafts, usable=usable, rule=Exact(), context=RuleContext(), u_accept=u)
        return verdict.accepted.item(), verdict.rejected.item()

    assert accepted(torch.tensor([[0.1, 0.2, 0.9, 0.0]])) == (2, True)
    assert accepted(torch.tensor([[0.1, 0.2, 0.3, 0.0]])) == (3, False)  # stopped by the unusable slot
    assert accepted(torch.tensor([[0.7, 0.2, 0.3, 0.0]])) == (0, True)


def test_simulated_speculative_step_matches_the_target():
    assert chisquare_p_value(_speculative(TARGET, PROPOSAL, seed=0), TARGET) > 1e-3


def test_point_mass_drafts_match_the_target():
    """SJD's initial guesses are point masses: accepted with probability t(x), else drawn from t without x."""
    for code in range(len(TARGET)):
        point = torch.nn.functional.one_hot(torch.tensor(code), len(TARGET)).double()
        assert chisquare_p_value(_speculative(TARGET, point, seed=code), TARGET) > 1e-3


@pytest.mark.parametrize(
    "wrong",
    ["resample from the target", "q taken before top-k"],
)
def test_negative_control_wrong_speculative_steps_are_rejected(wrong):
    if wrong == "resample from the target":
        codes = _speculative(TARGET, PROPOSAL, seed=0, resample_from=TARGET)
    else:
        # drafts come from the filtered proposal, but the test divides by the unfiltered one
        filtered = torch.where(TARGET > 0, PROPOSAL, 0.0)
        codes = _speculative(TARGET, filtered / filtered.sum(), seed=0, tested_q=PROPOSAL)
    assert chisquare_p_value(codes, TARGET) < 1e-12


def _coupled(p, previous_q, seed, wrong=False):
    u_previous, u_keep, u_draw = _uniforms(seed)
    q = previous_q.expand(DRAWS, -1)
    previous = sample(q, u_previous)
    if wrong:  # keep with min(1, p/q), else draw from p itself instead of the residual
        kept = passes(p.expand(DRAWS, -1), q, previous, u_keep)
        return previous, torch.where(kept, previous, sample(p.expand(DRAWS, -1), u_draw))
    return previous, couple(p.expand(DRAWS, -1), previous, q, u_keep, u_draw)


def test_coupled_redraft_has_marginal_p_and_is_maximally_coupled():
    previous, new = _coupled(TARGET, PROPOSAL, seed=1)
    assert chisquare_p_value(new, TARGET) > 1e-3
    # maximal coupling: the old draft survives with probability sum_x min(p(x), q(x))
    overlap = float(torch.minimum(TARGET, PROPOSAL).sum())
    kept = float((new == previous).double().mean())
    assert abs(kept - overlap) < 5 * np.sqrt(overlap * (1 - overlap) / DRAWS)


def test_negative_control_coupling_without_the_residual_is_rejected():
    _, new = _coupled(TARGET, PROPOSAL, seed=1, wrong=True)
    assert chisquare_p_value(new, TARGET) < 1e-12
