"""SJD's draft initialisation schemes: each reads the neighbour it names, and falls back only when it is unknown.

`initial_draft` below is the reference, one cell at a time; `fill_guesses` (what the samplers run) guesses a
whole window's fresh slots at once and is tested equal to guessing them one after the other."""

import pytest
import torch

from arjet.samplers import SJD
from arjet.samplers.jacobi import INIT_SCHEMES, fill_guesses, random_codes

WIDTH, VOCAB = 4, 10


def initial_draft(scheme, cells, board, top1, width, vocab_size, u):
    """A draft code `[B]` for each cell `[B]`: the scheme's neighbour, else its fallbacks, else random."""
    random = random_codes(u, vocab_size)
    if scheme == "random":
        return random
    horizontal = _neighbour(board, cells - 1, random)
    if scheme == "repeat_horizontal":
        return horizontal
    if scheme == "sample_horizontal":
        return _neighbour(top1, cells - 1, horizontal)
    vertical = _neighbour(board, cells - width, horizontal)
    if scheme == "repeat_vertical":
        return vertical
    return _neighbour(top1, cells - width, vertical)  # sample_vertical


def _neighbour(values, source, fallback):
    found = values.gather(1, source.clamp(min=0)[:, None]).squeeze(1)
    return torch.where((source >= 0) & (found >= 0), found, fallback)


# a 3x4 grid: row 0 decoded, row 1 half decoded (codes), and a different latest argmax per cell (top1)
BOARD = torch.tensor([[1, 2, 3, 4, 5, 6, -1, -1, -1, -1, -1, -1]])
TOP1 = torch.tensor([[7, 8, 9, 0, 1, 2, 3, -1, -1, -1, -1, -1]])


def _draft(scheme: str, cell: int, u: float = 0.55) -> int:
    return int(initial_draft(scheme, torch.tensor([cell]), BOARD, TOP1, WIDTH, VOCAB, torch.tensor([u]))[0])


@pytest.mark.parametrize(
    "scheme,cell,expected",
    [
        ("random", 6, 5),  # floor(0.55 * 10)
        ("repeat_horizontal", 6, 6),  # the committed code on the left
        ("repeat_horizontal", 8, 5),  # left unknown: random
        ("sample_horizontal", 7, 3),  # the latest argmax on the left
        ("sample_horizontal", 8, 5),  # no argmax on the left, no code on the left: random
        ("repeat_vertical", 6, 3),  # the committed code above
        ("repeat_vertical", 10, 5),  # above and left unknown: random
        ("sample_vertical", 6, 9),  # the latest argmax above
        ("sample_vertical", 9, 2),  # above cell 9 is cell 5
        ("sample_vertical", 11, 5),  # no argmax or code above, nothing on the left: random
    ],
)
def test_each_scheme_reads_its_neighbour(scheme, cell, expected):
    assert _draft(scheme, cell) == expected


def test_vertical_schemes_fall_back_to_the_left_neighbour():
    board = BOARD.clone()
    board[0, 2] = -1  # nothing known above cell 6
    top1 = torch.full_like(TOP1, -1)
    for scheme in ("repeat_vertical", "sample_vertical"):
        draft = initial_draft(scheme, torch.tensor([6]), board, top1, WIDTH, VOCAB, torch.tensor([0.55]))
        assert int(draft[0]) == 6  # the committed code on the left


def test_random_drafts_cover_the_image_vocabulary_uniformly():
    u = torch.linspace(0, 1, 10_001, dtype=torch.float64)[:-1]
    cells = torch.full((len(u),), 0)
    codes = initial_draft("random", cells, BOARD.expand(len(u), -1), TOP1.expand(len(u), -1), WIDTH, VOCAB, u)
    assert torch.bincount(codes, minlength=VOCAB).tolist() == [1000] * VOCAB


def test_every_scheme_is_known_and_others_are_refused():
    assert [SJD(init=scheme).init for scheme in INIT_SCHEMES] == list(INIT_SCHEMES)
    with pytest.raises(ValueError, match="init must be one of random, repeat_horizontal.*; got 'spiral'"):
        SJD(init="spiral")


def _sequential(scheme, cells, board, top1, u):
    """The reference: guess one slot after the other, each guess written to the board before the next."""
    board = board.clone()
    guesses = []
    for j, cell in enumerate(cells.tolist()):
        guess = initial_draft(scheme, torch.tensor([cell]), board, top1, WIDTH, VOCAB, u[j : j + 1])
        board[0, cell] = guess
        guesses.append(int(guess[0]))
    return guesses


@pytest.mark.parametrize("scheme", INIT_SCHEMES)
@pytest.mark.parametrize("first", [0, 1, 3])
def test_filling_a_lane_at_once_equals_guessing_slot_by_slot(scheme, first):
    """A lane of 7 slots from cell 5 on (a 4-wide grid, so slots see fresh slots above them as well as on
    their left), the first `first` slots kept: the vectorised fill gives the sequential guesses."""
    u = torch.rand(7, generator=torch.Generator().manual_seed(first), dtype=torch.float64)
    cells = torch.arange(5, 12)
    kept = torch.tensor([3, 1, 4, 1, 5, 9, 2])[:first]
    board = torch.cat([BOARD[:, :5], torch.full((1, 7), -1)], 1)
    board[0, 5 : 5 + first] = kept
    drafts = torch.zeros(1, 1, 7, dtype=torch.long)
    drafts[0, 0, :first] = kept
    fresh = (torch.arange(7) >= first)[None, None]
    guesses, drawn = fill_guesses(
        scheme,
        drafts,
        fresh=fresh,
        cells=cells[None, None],
        board=board,
        top1=TOP1,
        width=WIDTH,
        vocab_size=VOCAB,
        u=u[None, None],
    )
    expected = kept.tolist() + _sequential(scheme, cells[first:], board, TOP1, u[first:])
    assert guesses[0, 0].tolist() == expected
    assert not drawn[0, 0, :first].any()
    if scheme == "random":
        assert drawn[0, 0, first:].all()


def test_only_guesses_that_are_random_codes_are_declared_uniform():
    # row 0 unknown: the first fresh slot has nothing on its left, so repeat_horizontal draws it at random and
    # the slots after it repeat that code (point masses: their value follows from the one before)
    board = torch.full((1, 12), -1)
    u = torch.full((1, 1, 4), 0.55, dtype=torch.float64)
    guesses, drawn = fill_guesses(
        "repeat_horizontal",
        torch.zeros(1, 1, 4, dtype=torch.long),
        fresh=torch.ones(1, 1, 4, dtype=torch.bool),
        cells=torch.arange(0, 4)[None, None],
        board=board,
        top1=None,
        width=WIDTH,
        vocab_size=VOCAB,
        u=u,
    )
    assert guesses.tolist() == [[[5, 5, 5, 5]]] and drawn.tolist() == [[[True, False, False, False]]]
