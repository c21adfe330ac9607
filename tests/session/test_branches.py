"""Tree inputs: sibling drafts at one position in branch slots, an ancestry instead of groups. Every query's
logits equal an uncached full forward over exactly the codes on its path (`reference.full_sequence_logits`)."""

import pytest
import torch

from arjet.session import DecodingSession
from arjet.testing import tiny_pipeline

from families import cfg_for
from reference import full_sequence_logits

GRID = (3, 3)
TOL = dict(atol=1e-4, rtol=1e-4)
# A tree after the committed cells 0..3 (cells 2 and 5 end a row: their inputs carry the row-end tokens).
# Query: (predicted cell, parent query, branch slot or -1); the code it feeds is the candidate for cell - 1.
TREE = [
    (4, None, -1),  # 0: the root, feeds the committed code of cell 3
    (5, 0, -1),  # 1: main candidate a for cell 4
    (5, 0, 0),  # 2: sibling a' for cell 4
    (6, 1, -1),  # 3: main b for cell 5, after a
    (6, 1, 1),  # 4: sibling b2 for cell 5, after a
    (6, 2, 2),  # 5: b' for cell 5, after a'
    (7, 3, -1),  # 6: main c for cell 6, after a, b
    (7, 5, 3),  # 7: c' for cell 6, after a', b'
]


def _setup(family, guided=None):
    guided = cfg_for(family, guided)
    pipe = tiny_pipeline(family, grid=GRID, vocab_size=8, logit_scale=3.0)
    prompts = ["a red circle left of a blue square", "green star"]
    prefix = pipe.encode_prompts(prompts, None, GRID, guided)
    scale = 3.0 if guided else None
    session = DecodingSession(pipe.session_adapter(), pipe.image_layout(GRID), prefix, scale)
    generator = torch.Generator().manual_seed(2)
    codes = torch.randint(0, 8, (2, *GRID), generator=generator)
    candidates = torch.randint(0, 8, (2, len(TREE)), generator=generator)  # the code each query feeds
    return pipe, prefix, session, codes, scale, candidates


def _tree_tensors(codes, candidates):
    flat = codes.flatten(1)
    cells = torch.tensor([cell for cell, _, _ in TREE]).expand(2, -1)
    inputs = candidates.clone()
    inputs[:, 0] = flat[:, 3]  # the root feeds a committed code
    branch = torch.tensor([b for _, _, b in TREE])
    sees = torch.zeros(len(TREE), len(TREE), dtype=torch.bool)
    for i in range(len(TREE)):
        node = i
        while node is not None:
            sees[i, node] = True
            node = TREE[node][1]
    return cells, inputs, branch, sees


def _path_codes(codes, inputs, query):
    """The grid a query sees: the committed codes, then the codes fed along its path."""
    grid = codes.clone().flatten(1)
    node = query
    while node is not None:
        cell = TREE[node][0] - 1
        grid[:, cell] = inputs[:, node]
        node = TREE[node][1]
    return grid.view_as(codes)


def _commit_first_cells(session, codes, upto):
    flat = codes.flatten(1)
    cells = torch.arange(1, upto + 1).expand(2, -1)
    session.logits(cells, flat[:, :upto])
    session.commit(torch.ones(2, upto, dtype=torch.bool))


@pytest.mark.parametrize("guided", [True, False])
def test_every_tree_query_sees_exactly_its_path(family, guided):
    pipe, prefix, session, codes, scale, candidates = _setup(family, guided)
    session.reserve_branches(4)
    _commit_first_cells(session, codes, 3)  # inputs of cells 0, 1, 2 in the cache: cells 0..3 known
    cells, inputs, branch, sees = _tree_tensors(codes, candidates)
    logits = session.logits(cells, inputs, branch=branch.expand(2, -1), sees=sees)
    for query, (cell, _, _) in enumerate(TREE):
        reference = full_sequence_logits(pipe, prefix, _path_codes(codes, inputs, query), scale)
        torch.testing.assert_close(logits[:, query], reference[:, cell], **TOL)
    session.check()


def test_a_kept_main_line_and_a_fed_again_side_path_match_full_forward(family):
    """Commit the main line (root, a, b); then, after a fresh tree call, keep only the root and feed the side
    path a', b' again as ordinary inputs: the next query sees exactly the side path."""
    pipe, prefix, session, codes, scale, candidates = _setup(family)
    session.reserve_branches(4)
    _commit_first_cells(session, codes, 3)
    cells, inputs, branch, sees = _tree_tensors(codes, candidates)
    session.logits(cells, inputs, branch=branch.expand(2, -1), sees=sees)
    session.commit(torch.tensor([[1, 1, 0, 1, 0, 0, 0, 0]] * 2, dtype=torch.bool))
    main = _path_codes(codes, inputs, 6)
    logits = session.logits(torch.tensor([[7, 8]] * 2), torch.stack([inputs[:, 6], candidates[:, 0]], 1))
    reference = full_sequence_logits(pipe, prefix, main, scale)
    torch.testing.assert_close(logits[:, 0], reference[:, 7], **TOL)

    _, prefix, session, codes, scale, candidates = _setup(family)
    session.reserve_branches(4)
    _commit_first_cells(session, codes, 3)
    cells, inputs, branch, sees = _tree_tensors(codes, candidates)
    session.logits(cells, inputs, branch=branch.expand(2, -1), sees=sees)
    session.commit(torch.tensor([[1, 0, 0, 0, 0, 0, 0, 0]] * 2, dtype=torch.bool))  # the root only
    side = _path_codes(codes, inputs, 7)
    refed = torch.stack([inputs[:, 2], inputs[:, 5], inputs[:, 7]], 1)  # a', b', then c' as a draft
    logits = session.logits(torch.tensor([[5, 6, 7]] * 2), refed)
    reference = full_sequence_logits(pipe, prefix, side, scale)
    torch.testing.assert_close(logits, reference[:, 5:8], **TOL)
    session.check()


def test_branch_misuse_is_flagged(family):
    _, _, session, codes, _, candidates = _setup(family)
    session.reserve_branches(2)
    _commit_first_cells(session, codes, 3)
    cells, inputs, branch, sees = _tree_tensors(codes, candidates)
    session.logits(cells, inputs, branch=branch.clamp(max=1).expand(2, -1), sees=sees)
    session.commit(torch.ones(2, len(TREE), dtype=torch.bool))  # commits branch inputs
    with pytest.raises(ValueError, match="branch input was committed"):
        session.check()

    _, _, session, codes, _, candidates = _setup(family)
    session.reserve_branches(2)  # the tree needs 4
    _commit_first_cells(session, codes, 3)
    session.logits(cells, inputs, branch=branch.expand(2, -1), sees=sees)
    with pytest.raises(ValueError, match="outside the reserved branch slots"):
        session.check()


def test_branches_are_reserved_before_the_first_query_and_sees_excludes_groups():
    _, _, session, codes, _, _ = _setup("janus")
    first = session.first_logits.clone()
    session.reserve_branches(3)
    torch.testing.assert_close(session.first_logits, first)
    assert session.count == 1 and session.forward_passes.tolist() == [1, 1]  # the prefill, counted once
    cells, inputs = torch.tensor([[1, 2]] * 2), codes.flatten(1)[:, :2]
    with pytest.raises(ValueError, match="either group or sees"):
        session.logits(cells, inputs, group=torch.zeros(2, 2, dtype=torch.long), sees=torch.ones(2, 2))
    with pytest.raises(ValueError, match="sees must be"):
        session.logits(cells, inputs, sees=torch.ones(3, 3))
    session.logits(cells, inputs)
    with pytest.raises(RuntimeError, match="before the session's first logits call"):
        session.reserve_branches(5)
