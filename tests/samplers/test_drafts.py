"""SJD's draft initialisation schemes: each reads the neighbour it names, and falls back only when it is unknown."""

import pytest
import torch

from arjet.samplers.drafts import INIT_SCHEMES, check_scheme, initial_draft

WIDTH, VOCAB = 4, 10
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
    assert [check_scheme(s) for s in INIT_SCHEMES] == list(INIT_SCHEMES)
    with pytest.raises(ValueError, match="unknown draft init scheme 'spiral'"):
        check_scheme("spiral")
