"""The drafter's own cache beside a session: step by step it computes what teacher forcing does, per CFG row,
with its logits mixed by the session's guidance scale."""

import pytest
import torch

from arjet.session import DecodingSession
from arjet.session.drafting import DraftingCache
from arjet.testing import tiny_drafter, tiny_pipeline

from families import cfg_for, guidance


def _session(pipe, guidance_scale):
    grid = (3, 3)
    guided = guidance_scale is not None
    prefix = pipe.encode_prompts(["a red circle"], None, grid, guided)
    return DecodingSession(
        pipe.session_adapter(), pipe.image_layout(grid), prefix, guidance_scale, drafter=pipe.drafter
    )


@pytest.mark.parametrize("guided", [False, True], ids=["no-cfg", "cfg"])
def test_the_cache_steps_as_teacher_forcing_does(family, guided):
    pipe = tiny_drafter(tiny_pipeline(family, grid=(3, 3)), fc_scale=2.0)
    session = _session(pipe, 3.0 if cfg_for(family, guided) else None)
    cache = DraftingCache(session)
    torch.manual_seed(0)
    length = 5
    hidden = torch.randn(session.rows, length, pipe.drafter.config.hidden_size)
    codes = torch.randint(0, session.vocab_size, (1, length))
    # a catch-up over the first three cells (a padding query in between), then two one-cell steps
    cells = torch.tensor([[0, 1, -1, 2]])
    first, _ = cache.forward(hidden[:, [0, 1, 1, 2]], codes[:, [0, 1, 1, 2]], cells)
    steps = [cache.forward(hidden[:, j : j + 1], codes[:, j : j + 1], torch.tensor([[j]]))[0] for j in (3, 4)]
    stepped = torch.cat([first[:, [0, 1, 3]], *steps], 1)

    embeds = session.both_halves(session.code_embeddings()[codes])
    with torch.no_grad():
        forced = pipe.drafter(embeds, hidden)
    expected = session.guide(session.adapter.code_logits(forced).float())
    assert torch.allclose(stepped, expected, atol=1e-4)


def test_a_stale_draft_is_overwritten_not_read(family):
    """A chain's pair at a cell that is later committed with another code is replaced by the catch-up."""
    pipe = tiny_drafter(tiny_pipeline(family, grid=(3, 3)))
    session = _session(pipe, guidance(family))
    torch.manual_seed(1)
    hidden = torch.randn(session.rows, 3, pipe.drafter.config.hidden_size)
    cache, fresh = DraftingCache(session), DraftingCache(session)
    cache.forward(hidden[:, :2], torch.tensor([[1, 2]]), torch.tensor([[0, 1]]))  # a draft's pair at cell 1
    one = cache.forward(hidden[:, 1:3], torch.tensor([[3, 0]]), torch.tensor([[1, 2]]))[0]
    fresh.forward(hidden[:, :1], torch.tensor([[1]]), torch.tensor([[0]]))
    two = fresh.forward(hidden[:, 1:3], torch.tensor([[3, 0]]), torch.tensor([[1, 2]]))[0]
    assert torch.allclose(one, two, atol=1e-5)


def test_tree_nodes_see_the_committed_cells_their_ancestors_and_themselves(family):
    """Branch slots: a level-2 node computes what teacher forcing of its own path does (committed pairs,
    its parent, itself), whatever its sibling branches hold and whatever stale pairs sit past the committed
    cells."""
    pipe = tiny_drafter(tiny_pipeline(family, grid=(3, 3)), fc_scale=2.0)
    session = _session(pipe, guidance(family))
    cache = DraftingCache(session, branches=4)
    torch.manual_seed(2)
    hidden = torch.randn(session.rows, 8, pipe.drafter.config.hidden_size)
    codes = torch.randint(0, session.vocab_size, (1, 8))
    cache.forward(hidden[:, :5], codes[:, :5], torch.tensor([[0, 1, 2, 3, 4]]))  # cells 3, 4: stale drafts
    committed = torch.tensor([3])
    cache.forward(hidden[:, :3], codes[:, :3], torch.tensor([[0, 1, 2]]))
    kwargs = dict(committed=committed, counted=torch.tensor([True]))
    # level 1: two siblings at cell 3 in branch slots 0 and 1; level 2: a child of slot 1 at cell 4
    cache.forward_branches(
        hidden[:, 5:7],
        codes[:, 5:7],
        torch.tensor([[3, 3]]),
        branch=torch.tensor([[0, 1]]),
        ancestors=torch.full((1, 2, 0), -1),
        **kwargs,
    )
    child, _ = cache.forward_branches(
        hidden[:, 7:8],
        codes[:, 7:8],
        torch.tensor([[4]]),
        branch=torch.tensor([[2]]),
        ancestors=torch.tensor([[[1]]]),
        **kwargs,
    )
    path = [0, 1, 2, 6, 7]
    embeds = session.both_halves(session.code_embeddings()[codes[:, path]])
    with torch.no_grad():
        forced = pipe.drafter(embeds, hidden[:, path])
    expected = session.guide(session.adapter.code_logits(forced).float())[:, -1:]
    assert torch.allclose(child, expected, atol=1e-4)
    assert session.drafter_passes.tolist() == [4]  # two catch-ups and two tree levels, each counted once


def test_a_session_without_a_drafter_is_refused():
    pipe = tiny_pipeline("emu3", grid=(3, 3))
    with pytest.raises(ValueError, match="no drafter"):
        DraftingCache(_session(pipe, None))


@pytest.mark.parametrize("sampler", ["eagle", "eagle2"])
def test_a_drafter_kept_in_float32_beside_a_bfloat16_model_drafts_deeper(sampler):
    """A folder whose model loads in its checkpoint's bfloat16 while its drafter stays float32: the
    drafter's own output (what it reads to draft a level deeper) goes to the model's head in the model's
    dtype, not in the drafter's."""
    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=8).to(torch.bfloat16)
    tiny_drafter(pipe)
    pipe.drafter.to(torch.float32)
    pipe.set_progress_bar_config(disable=True)
    out = pipe("a red circle", sampler=f"{sampler}:tree_depth=3", seed=0, output_type="latent")
    assert (out.codes >= 0).all()
