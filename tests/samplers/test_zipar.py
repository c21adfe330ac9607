"""ZipAR's schedule and what each of its queries sees."""

import pytest
import torch

from arjet.samplers import SJD, ZipAR
from arjet.session import DecodingSession
from arjet.testing import tiny_pipeline

from families import all_cells, decoded_grids, guidance
from reference import full_sequence_logits

GRID = (3, 4)


def _pipe(family, num_layers=2):
    grid = (4, 4) if family == "janus" else GRID
    return tiny_pipeline(family, grid=grid, vocab_size=8, logit_scale=3.0, num_layers=num_layers), grid


def _lumina_passes(grid, w):
    return (grid[0] - 1) * min(w - 1, grid[1]) + grid[1]


@pytest.mark.parametrize("w", [2, 3, 4, 5, 9])
def test_forward_passes_follow_the_lumina_schedule(family, w):
    """Row r+1's column c comes out of the forward that gives row r's column c + w - 1 (the prefill, forward 1,
    gives cell 0). A preview grid (GLM-Image) is decoded on the same schedule first."""
    pipe, (height, width) = _pipe(family)
    out = pipe(["a red circle", "green star"], sampler=ZipAR(w=w), seed=0)
    lag = min(w - 1, width)
    expected = sum(_lumina_passes(grid, w) for grid in decoded_grids(pipe, (height, width)))
    assert [s.forward_passes for s in out.stats] == [expected, expected]
    before = expected - _lumina_passes((height, width), w)  # the preview grid's forwards
    commit_step = out.stats[0].commit_step
    for row in range(height):
        assert commit_step[row].tolist() == [before + row * lag + 1 + col for col in range(width)]


def test_forward_passes_follow_the_llamagen_schedule(family):
    """Row 0 alone, row 1 once row 0 is complete, later rows `w` codes behind the row above."""
    pipe, (height, width) = _pipe(family)
    out = pipe("a red circle", sampler=ZipAR(w=2, schedule="llamagen"), seed=0)
    before = out.stats[0].extra.get("preview_forward_passes", 0)
    commit_step = out.stats[0].commit_step - before
    assert commit_step[0].tolist() == [1 + col for col in range(width)]
    for row in range(1, height):
        assert commit_step[row].tolist() == [1 + width + (row - 1) * 2 + col for col in range(width)]
    assert out.stats[0].forward_passes - before == (height - 2) * 2 + 2 * width


@pytest.mark.parametrize(
    ("grid", "sampler", "forwards"),
    [
        ((48, 48), ZipAR(w=16), 753),  # the official Lumina-mGPT script's count for its 768-px grid
        ((24, 24), ZipAR(w=8, schedule="llamagen"), 224),  # the official LlamaGen script's 384-px grid
        ((16, 16), ZipAR(), 121),  # the built-in model's grid at the default w = 8
    ],
    ids=["lumina-48x48-w16", "llamagen-24x24-w8", "default-16x16"],
)
def test_forward_counts_of_the_official_scripts(grid, sampler, forwards):
    pipe = tiny_pipeline("janus", grid=grid, vocab_size=8, num_layers=1)
    out = pipe("a red circle", sampler=sampler, seed=0, output_type="latent")
    assert out.stats[0].forward_passes == forwards
    assert (out.codes >= 0).all()


def test_default_lead_follows_the_grid_width():
    assert ZipAR().lead(48) == 16 and ZipAR().lead(90) == 16 and ZipAR().lead(32) == 8
    with pytest.raises(ValueError, match="schedule must be one of lumina, llamagen"):
        ZipAR(schedule="spiral")


class _Spy:
    """Records every logits call of a session together with the logits it returned."""

    def __init__(self, grid):
        self.grid = grid  # the grid whose calls it records (not a preview grid decoded before it)
        self.calls = []

    def install(self, monkeypatch):
        original = DecodingSession.logits

        def logits(session, cells, codes, ephemeral=None, group=None, **kwargs):
            out = original(session, cells, codes, ephemeral, group, **kwargs)
            ephemeral = torch.zeros_like(cells, dtype=torch.bool) if ephemeral is None else ephemeral
            group = torch.zeros_like(cells) if group is None else group
            if session.grid == self.grid:
                self.calls.append((cells.clone(), codes.clone(), ephemeral.clone(), group.clone(), out))
            return out

        monkeypatch.setattr(DecodingSession, "logits", logits)


def _visible_inputs(cells, codes, ephemeral, group, query: int) -> dict[int, int]:
    """{cell: code} of this call's inputs that `query` may see: inputs sit one cell before their query,
    at or before the query's own input, in group 0 or the query's group; an ephemeral one only for itself."""
    cell = int(cells[query])
    seen = {}
    for other in range(len(cells)):
        slot = int(cells[other]) - 1
        if slot < 0 or slot > cell - 1:
            continue
        if int(group[other]) not in (0, int(group[query])):
            continue
        if bool(ephemeral[other]) and other != query:
            continue
        seen[slot] = int(codes[other])
    return seen


@pytest.mark.parametrize(
    "sampler",
    [
        ZipAR(w=3),
        ZipAR(w=3, verify=SJD(window=3)),
        ZipAR(w=2, schedule="llamagen"),
        SJD(window=3, init="repeat_vertical"),
    ],
    ids=repr,
)
def test_each_query_sees_exactly_the_cells_decoded_before_it(family, sampler, monkeypatch):
    """Compare every query with a full forward over exactly what it may see: the cells decoded before the
    forward, plus this forward's inputs in its own row (the row's drafts; for a row start, the placeholder
    standing in for the missing cell before it). No empty cell and no other row's draft is ever seen.

    One transformer layer, so a cached key depends on its own token only; with more layers a cell's keys
    also carry the context it had when it was fed, as in every KV-cached ZipAR."""
    pipe, grid = _pipe(family, num_layers=1)
    height, width = grid
    spy = _Spy(grid)
    spy.install(monkeypatch)
    snapshots = []  # the decoded state after each commit: cell 0 (from the prefill), then each forward

    def record(p, step, timestep, tensors):
        if tuple(tensors["codes"].shape[1:]) == grid:  # not the preview grid decoded before it
            snapshots.append(tensors["codes"].flatten(1).clone())
        return tensors

    scale = guidance(family)
    out = pipe("a red circle", sampler=sampler, seed=3, guidance_scale=scale, callback_on_step_end=record)
    final = out.codes.flatten(1)
    before = 0 if out.preview_codes is None else out.preview_codes[0].numel()  # the reference's preview cells
    prefix = pipe.encode_prompts(["a red circle"], None, grid, guided=scale is not None)
    predicted = set()
    assert len(spy.calls) == len(snapshots) - 1  # one forward per step
    for (cells, codes, ephemeral, group, logits), known in zip(spy.calls, snapshots, strict=False):
        for query, cell in enumerate(cells[0].tolist()):
            if cell <= 0 or cell >= height * width or known[0, cell] >= 0:
                continue  # cell 0 comes from the prefill; decoded cells (and row-end feeds) are not predicted
            sequence = final.clone()
            visible = {c for c in range(cell) if known[0, c] >= 0}
            for slot, code in _visible_inputs(cells[0], codes[0], ephemeral[0], group[0], query).items():
                sequence[0, slot] = code
                visible.add(slot)
            hidden = tuple(before + c for c in range(cell) if c not in visible)
            reference = full_sequence_logits(
                pipe,
                prefix,
                sequence.view(1, *grid),
                scale,
                hidden_cells=hidden,
                preview_codes=out.preview_codes,
            )
            torch.testing.assert_close(logits[0, query], reference[0, before + cell], atol=1e-4, rtol=1e-4)
            predicted.add(cell)
    assert predicted == set(range(1, height * width))


def test_verified_zipar_rows_advance_by_windows(family):
    pipe, grid = _pipe(family)
    plain = pipe("a red circle", sampler=ZipAR(w=2), seed=0, temperature=0)
    verified = pipe("a red circle", sampler=ZipAR(w=2, verify=SJD(window=3)), seed=0, temperature=0)
    assert verified.codes.shape == plain.codes.shape
    assert max(max(s.accepted_per_step) for s in verified.stats) >= 1
    assert verified.stats[0].tokens == all_cells(pipe, grid)


@pytest.mark.parametrize("bad", [0, 1, -1, 2.5, True])
def test_bad_lead_is_rejected(bad):
    with pytest.raises(ValueError, match="w must be an integer from 2 to 16384"):
        ZipAR(w=bad)


@pytest.mark.parametrize(("schedule", "raster_from"), [("lumina", 1), ("llamagen", 0)])
def test_raster_order_starts_at_the_lag_of_a_full_row(schedule, raster_from):
    """The lumina schedule starts a row after `w - 1` codes of the row above, so raster order (one code per
    forward, as `ar`) needs `w >= W + 1`; llamagen's lag is `w`, so `w >= W`."""
    grid = (3, 4)
    pipe = tiny_pipeline("emu3", grid=grid, vocab_size=8)
    cells = grid[0] * grid[1]

    def passes(w):
        out = pipe("a red circle", sampler=ZipAR(w=w, schedule=schedule), seed=0, output_type="latent")
        return out.stats[0].forward_passes

    assert passes(grid[1] + raster_from) == cells == passes(grid[1] + raster_from + 5)
    assert passes(grid[1] + raster_from - 1) < cells
