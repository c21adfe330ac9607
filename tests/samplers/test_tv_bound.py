"""The relaxed rules' per-position total-variation bound (`AcceptanceRule.tv_bound`): the derived bound's maths
on random slots, each rule's bound against what one slot commits (by enumeration), and the bound a decode
accumulates in its stats."""

import pytest
import torch

from arjet.samplers import GSD, SJD, SJDPAC, Entropy, Exact, Lantern, LogitsPolicy
from arjet.samplers.jacobi import RuleContext, residual
from arjet.testing import tiny_pipeline


def _tv(a, b):
    return 0.5 * (a.double() - b.double()).abs().sum(-1)


def _slot(seed, vocab=12, point_mass=False):
    """A random target `p` and a stale proposal `q` (a point mass: an initial guess), and a codebook."""
    g = torch.Generator().manual_seed(seed)
    logits = 2 * torch.randn(vocab, generator=g)
    p = logits.softmax(-1)
    if point_mass:
        q = torch.zeros(vocab).index_fill_(0, torch.randint(vocab, (1,), generator=g), 1.0)
    else:
        q = (logits + 1.5 * torch.randn(vocab, generator=g)).softmax(-1)
    return p, q, RuleContext(torch.randn(vocab, 3, generator=g))


def _output(q, accept, rest):
    """What one slot commits: draft y ~ q passes with probability accept[y], else a draw from rest[y] (`[V, V]`
    rows, unnormalised)."""
    rest = rest.double() / rest.double().sum(-1, keepdim=True).clamp(min=1e-300)
    q, accept = q.double(), accept.double()
    return q * accept + ((q * (1 - accept))[:, None] * rest).sum(0)


def _committed(rule, p, q, context):
    """The exact distribution of the code a slot commits when `rule` verifies a draft `~ q`."""
    vocab = p.shape[-1]
    drafts = torch.arange(vocab)
    t_x, rest = rule.verify(p.expand(vocab, vocab), q.expand(vocab, vocab), drafts, context)
    accept = torch.where(q > 0, t_x / q.clamp(min=1e-30), 0.0).clamp(max=1.0)
    return _output(q, accept, rest)


# -- the derived bound ------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(40))
def test_the_derived_bound_holds_with_the_exact_residual(seed):
    """Any acceptance a >= a* = min(1, p/q), rejections resampled from norm(max(0, p - q)): TV(P, p) <=
    sum_y q |a - a*| (the bound is the gain in acceptance rate, and is reached)."""
    p, q, _ = _slot(seed)
    exact = torch.where(q > 0, p / q, 1.0).clamp(max=1.0)
    g = torch.Generator().manual_seed(1000 + seed)
    relaxed = exact + (1 - exact) * torch.rand(p.shape, generator=g)
    committed = _output(q, relaxed, residual(p, q).expand(len(p), -1))
    bound = (q.double() * (relaxed - exact).double().abs()).sum()
    assert _tv(committed, p) <= bound + 1e-6
    assert _tv(_output(q, exact, residual(p, q).expand(len(p), -1)), p) < 1e-6  # a = a*: exact


def test_a_rule_resampling_from_its_own_target_can_break_the_derived_bound():
    """Negative control: verifying against a relaxed target t and resampling from t's residual commits t
    exactly, whose distance from p the derived bound (through a = min(1, t/q)) does not see: with a point-mass
    draft on a code where t and p agree the bound is 0, and TV(t, p) is not."""
    violations = 0
    for seed in range(40):
        p, q, _ = _slot(seed, point_mass=True)
        g = torch.Generator().manual_seed(2000 + seed)
        t = (p.log() + torch.randn(p.shape, generator=g)).softmax(-1)
        t = t * (1 - p[q.argmax()]) / (1 - t[q.argmax()])  # t agrees with p on the drafted code
        t[q.argmax()] = p[q.argmax()]
        own = torch.where(q > 0, t / q, 1.0).clamp(max=1.0)
        exact = torch.where(q > 0, p / q, 1.0).clamp(max=1.0)
        committed = _output(q, own, residual(t, q).expand(len(p), -1))
        bound = (q.double() * (own - exact).double().abs()).sum()
        violations += bool(_tv(committed, p) > bound + 1e-3)
    assert violations >= 30


RULES = [
    GSD(),
    GSD(group=5, prob_gap=0.3, distance=None),
    GSD(group=25, distance=2.0),
    Entropy(),
    Entropy(e=1.0, lam=2.0),  # stricter than SJD where H > 1, noise reversed where H > 2
    Entropy(temperature=True),
    Lantern(k=4, delta=0.2),
    Lantern(k=4, lam=2.0),
    Lantern(k=4, delta=0.2, bound="tv", top=12),
]


@pytest.mark.parametrize("rule", RULES, ids=repr)
@pytest.mark.parametrize("point_mass", [False, True], ids=["sampled", "point-mass"])
def test_each_rule_commits_within_its_bound(rule, point_mass):
    for seed in range(25):
        p, q, context = _slot(seed, point_mass=point_mass)
        bound = rule.tv_bound(p, q, context)
        assert 0 <= bound <= 1 + 1e-6
        assert _tv(_committed(rule, p, q, context), p) <= bound + 1e-5


@pytest.mark.parametrize("rule", [rule for rule in RULES if not isinstance(rule, Lantern)], ids=repr)
def test_a_rules_acceptance_is_what_its_verify_passes(rule):
    p, q, context = _slot(3)
    vocab = len(p)
    t_x, _ = rule.verify(p.expand(vocab, vocab), q.expand(vocab, vocab), torch.arange(vocab), context)
    torch.testing.assert_close(t_x / q, rule.acceptance(p, q, context))


def test_the_exact_rule_reports_zero():
    p, q, context = _slot(0)
    assert Exact().tv_bound(p, q, context) == 0
    assert GSD(group=1).tv_bound(p, q, context) == pytest.approx(0, abs=1e-7)  # a group of one is SJD


@pytest.mark.parametrize("chunk", [1, 5, 12, 64])
def test_gsds_bound_summed_in_chunks_of_codes_is_the_formula(chunk, monkeypatch):
    """GSD sums its bound over the codes a chunk at a time (every code's group at once is [..., V, group]):
    the same sum as the base formula over every code's acceptance, whatever the chunk."""
    from arjet.samplers import gsd
    from arjet.samplers.jacobi import AcceptanceRule

    monkeypatch.setattr(gsd, "BOUND_CHUNK", chunk)
    for seed in range(5):
        p, q, context = _slot(seed)
        p, q = torch.stack([p, p.roll(1)]), torch.stack([q, q.roll(2)])  # [2, V]: a batch of slots
        for rule in (GSD(group=5, prob_gap=0.3, distance=None), GSD(group=25, distance=2.0)):
            torch.testing.assert_close(
                rule.tv_bound(p, q, context), AcceptanceRule.tv_bound(rule, p, q, context)
            )


# -- the decode's stats ----------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["janus", "glm_image"])
def test_the_stats_report_the_bound_per_image(family):
    grid = (4, 4)
    pipe = tiny_pipeline(family, grid=grid, vocab_size=16, logit_scale=3.0)

    def stats(sampler):
        return pipe(["a red circle", "a blue square"], sampler=sampler, seed=0, output_type="latent").stats

    assert all(s.extra["tv_bound"] == s.extra["tv_bound_max"] == 0 for s in stats("sjd"))
    assert all("tv_bound" not in s.extra for s in stats("ar"))  # it verifies nothing
    for sampler in ("sjd+entropy", SJDPAC(window=9, tree_width=2, acceptance=Entropy()), "sjd+lantern"):
        for s in stats(sampler):
            bound, worst = s.extra["tv_bound"], s.extra["tv_bound_max"]
            assert 0 < worst <= 1 and worst <= bound <= s.tokens
    if family == "glm_image":  # the preview grid's bound and the target grid's add up
        solo = SJD(acceptance=Entropy())
        one = stats(solo)[0]
        assert one.extra["tv_bound"] > one.extra["tv_bound_max"] > 0


@pytest.mark.slow
def test_each_cell_stays_within_the_reported_bound_on_a_model():
    """End to end (exact marginals by enumeration): every cell's committed-code distribution is within the
    mean reported per-image bound of p's (a cell's TV <= the image's TV <= E[sum of per-position bounds])."""
    from stats import exact_joint

    grid, vocab = (2, 2), 4
    pipe = tiny_pipeline("janus", grid=grid, vocab_size=vocab, logit_scale=3.0)
    policy = LogitsPolicy(temperature=0.8, top_k=3)
    prompt = "a red circle left of a blue square"
    marginals = torch.zeros(grid[0] * grid[1], vocab, dtype=torch.float64)
    for codes, probability in exact_joint(pipe, prompt, grid, policy, 3.0).items():
        marginals[torch.arange(len(codes)), torch.tensor(codes)] += probability
    sampling = {"guidance_scale": 3.0, "temperature": 0.8, "top_k": 3}
    for rule in (Entropy(e=2.0), GSD(group=3, prob_gap=0.5, distance=None)):
        sampler = SJD(window=3, acceptance=rule)
        out = pipe(
            prompt, sampler=sampler, num_images_per_prompt=4000, seed=0, output_type="latent", **sampling
        )
        codes = out.codes.flatten(1)
        found = torch.stack([torch.bincount(c, minlength=vocab).double() for c in codes.T]) / len(codes)
        worst = float(_tv(found, marginals).max())
        bound = sum(s.extra["tv_bound"] for s in out.stats) / len(out.stats)
        assert worst <= bound + 0.02, (rule, worst, bound)  # 4000 draws: noise ~0.015


# -- the rules' own maths ----------------------------------------------------------------------------------
def test_gsds_group_is_the_rank_window_kept_by_both_filters():
    """Codes by ascending p: 5, 4, 3, 2, 1, 0. Draft 2 (rank 3) with group=4 looks at ranks 1..4 (codes 4, 3,
    2, 1); code 1 differs in p by more than prob_gap, code 4 is far in the codebook: G = {3, 2}."""
    p = torch.tensor([0.40, 0.30, 0.12, 0.10, 0.05, 0.03])
    q = torch.tensor([0.10, 0.10, 0.30, 0.30, 0.10, 0.10])
    line = torch.tensor([[0.0], [0.1], [0.2], [0.3], [5.0], [0.5]])  # mean squared norm ~4.2
    context = RuleContext(line)
    rule = GSD(group=4, prob_gap=0.15, distance=0.1)
    a = rule.acceptance(p, q, context)
    assert a[2].item() == pytest.approx((0.12 + 0.10) / (0.30 + 0.30))
    assert rule.passing(p, q, torch.tensor(2), context).item() == pytest.approx(a[2].item())
    assert GSD(group=4, prob_gap=0.15, distance=None).acceptance(p, q, context)[2].item() == pytest.approx(
        (0.12 + 0.10 + 0.05) / 0.7
    )
    assert a[0].item() == 1.0  # the top code's window is cut at the top: ranks 3..5 only
    torch.testing.assert_close(GSD(group=1).acceptance(p, q, context), (p / q).clamp(max=1))  # SJD


def test_the_entropy_rule_has_its_published_closed_form():
    """accept iff r > (H/e)(0.5 + (u - 0.5)(1 - H/lam)); with H = e and lam -> inf it is SJD's u < r."""
    p = torch.tensor([0.5, 0.25, 0.125, 0.125])
    q = torch.tensor([0.25, 0.25, 0.25, 0.25])
    entropy = float(Entropy.entropy(p))
    ratio = (p / q).clamp(max=1)
    sjd_like = Entropy(e=entropy, lam=1e6).acceptance(p, q, RuleContext())
    torch.testing.assert_close(sjd_like, ratio, atol=1e-4, rtol=0)
    u = torch.linspace(0.0005, 0.9995, 1000)[:, None]
    rule = Entropy(e=2.0, lam=4.0)
    accepted = ratio > (entropy / 2.0) * (0.5 + (u - 0.5) * (1 - entropy / 4.0))
    torch.testing.assert_close(
        rule.acceptance(p, q, RuleContext()), accepted.float().mean(0), atol=2e-3, rtol=0
    )


@pytest.mark.parametrize(
    ("entropy", "multiplier"), [(0.0, 3.1), (3.0, 2.5 / 2.718281828 + 0.6), (8.0, 0.7737)]
)
def test_the_temperature_rule_multiplies_the_temperature(entropy, multiplier):
    p = torch.tensor([0.7, 0.2, 0.1])
    tempered = Entropy(temperature=True).verified(p, torch.tensor([entropy]))
    expected = (p.log() / multiplier).softmax(-1)
    torch.testing.assert_close(tempered, expected, atol=2e-4, rtol=0)
