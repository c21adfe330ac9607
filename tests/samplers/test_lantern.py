import pytest
import torch

from arjet.samplers import SJD, Lantern, ZipAR
from arjet.samplers.lantern import neighbour_table
from arjet.testing import tiny_pipeline


class _Context:
    def __init__(self, codebook):
        self.codebook = codebook


def _problem(seed, vocab=12, one_hot=False):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(vocab, generator=g) * 3, -1)
    if one_hot:
        q = torch.zeros(vocab)
        q[torch.randint(vocab, (1,), generator=g)] = 1
    else:
        q = torch.softmax(torch.randn(vocab, generator=g) * 3, -1)
    return p, q, torch.randn(vocab, 4, generator=g)


def _tv(a, b):
    return 0.5 * (a - b).abs().sum().item()


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("delta", [0.05, 0.2])
def test_relaxed_target_is_a_distribution_within_delta_of_p(seed, delta):
    p, q, codebook = _problem(seed, one_hot=seed % 2 == 0)
    target = Lantern(k=4, delta=delta, top=12).target(p[None], q[None], _Context(codebook))[0]
    assert target.min() >= 0 and abs(target.sum().item() - 1) < 1e-5
    assert _tv(target, p) <= delta + 1e-6


def test_point_mass_draft_gets_exactly_lanterns_target():
    p, q, codebook = _problem(3, one_hot=True)
    x = int(q.argmax())
    target = Lantern(k=5, delta=0.3).target(p[None], q[None], _Context(codebook))[0]
    neighbours = neighbour_table(codebook, 5)[x]
    expected = p.clone()
    claimed = neighbours[p[neighbours].cumsum(0) <= 0.3]  # the distance-ordered prefix within the budget
    expected[x] += p[claimed].sum()
    expected[claimed] = 0
    torch.testing.assert_close(target, expected)


def test_committed_token_distribution_stays_within_delta():
    """Speculative sampling against the relaxed target, with a sampled (not point-mass) proposal: the
    committed token's distribution, computed exactly, is the relaxed target, hence within delta of p."""
    from arjet.samplers.speculative import residual

    p, q, codebook = _problem(11)
    target = Lantern(k=4, delta=0.15, top=12).target(p[None], q[None], _Context(codebook))[0]
    committed = torch.zeros_like(p, dtype=torch.float64)
    rest = residual(target, q)
    rest = rest / rest.sum()
    for x in range(len(p)):
        accept = min(1.0, float(target[x] / q[x]))
        committed[x] += q[x] * accept
        committed += q[x] * (1 - accept) * rest.double()
    assert _tv(committed.float(), p) <= 0.15 + 1e-5
    torch.testing.assert_close(committed.float(), target, atol=1e-5, rtol=0)


def test_lambda_form_caps_the_claimed_mass():
    p, q, codebook = _problem(5, one_hot=True)
    x = int(q.argmax())
    target = Lantern(k=6, lam=2.0).target(p[None], q[None], _Context(codebook))[0]
    assert target[x] <= 2.0 * p[x] + 1e-6


def test_neighbour_table_is_nearest_first_and_cached():
    codebook = torch.tensor([[0.0], [1.0], [3.0], [10.0]])
    table = neighbour_table(codebook, 2)
    assert table.tolist() == [[1, 2], [0, 2], [1, 0], [2, 1]]
    assert neighbour_table(codebook.clone(), 2) is table
    assert neighbour_table(codebook, 99).shape == (4, 3)  # capped at V - 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(k=0), "k .* must be an integer >= 1"),
        (dict(delta=-0.1), "delta .* must be a number >= 0"),
        (dict(lam=0.5), "lam must be a number >= 1"),
    ],
)
def test_bad_lantern_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Lantern(**kwargs)


def test_lantern_without_a_codebook_is_refused():
    p, q, _ = _problem(0)
    with pytest.raises(ValueError, match="needs the image tokenizer's codebook"):
        Lantern().target(p[None], q[None], _Context(None))


def test_lantern_accepts_more_than_sjd_on_a_model(family):
    pipe = tiny_pipeline(family, grid=(4, 4) if family == "janus" else (3, 4), vocab_size=16, logit_scale=2.0)
    kwargs = dict(num_images_per_prompt=16, seed=0, output_type="latent")
    exact = pipe("a red circle", sampler=SJD(window=4), **kwargs).stats
    relaxed = pipe("a red circle", sampler=SJD(window=4, acceptance=Lantern(k=8, delta=0.4)), **kwargs).stats
    assert sum(s.forward_passes for s in relaxed) < sum(s.forward_passes for s in exact)


def test_a_pipeline_refuses_lantern_without_a_codebook_before_any_model_work(monkeypatch):
    pipe = tiny_pipeline("emu3", grid=(2, 3), vocab_size=8)
    monkeypatch.delattr(type(pipe.image_tokenizer), "codebook")
    monkeypatch.setattr(pipe, "encode_prompts", lambda *a, **k: pytest.fail("encoded before the check"))
    for sampler in ("lantern", "zipar+lantern", SJD(window=3, acceptance=Lantern(k=2))):
        with pytest.raises(
            ValueError, match="lantern acceptance rule, which needs the image tokenizer's codebook"
        ):
            pipe("a red circle", sampler=sampler)


def test_zipar_with_lantern_relaxes_each_row_window(family):
    pipe = tiny_pipeline(family, grid=(4, 4) if family == "janus" else (3, 4), vocab_size=16, logit_scale=2.0)
    kwargs = dict(num_images_per_prompt=16, seed=0, output_type="latent")
    verified = pipe("a red circle", sampler=ZipAR(w=2, verify=SJD(window=3)), **kwargs)
    exact_rule = ZipAR(w=2, verify=SJD(window=3, acceptance=Lantern(k=8, delta=0.0)))
    assert torch.equal(pipe("a red circle", sampler=exact_rule, **kwargs).codes, verified.codes)
    relaxed = pipe(
        "a red circle", sampler=ZipAR(w=2, verify=SJD(window=3, acceptance=Lantern(k=8, delta=0.4))), **kwargs
    )
    assert (relaxed.codes >= 0).all()
    assert sum(s.forward_passes for s in relaxed.stats) < sum(s.forward_passes for s in verified.stats)
