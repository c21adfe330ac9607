"""ZipAR's schedule and what each of its queries sees."""

import pytest
import torch

from arjet.samplers import SJD, ZipAR
from arjet.session import DecodingSession
from arjet.testing import tiny_pipeline

from reference import full_sequence_logits

GRID = (3, 4)


def _pipe(family, num_layers=2):
    grid = (4, 4) if family == "janus" else GRID
    return tiny_pipeline(family, grid=grid, vocab_size=8, logit_scale=3.0, num_layers=num_layers), grid


@pytest.mark.parametrize("w", [1, 2, 3, 4, 9])
def test_forward_passes_follow_the_schedule(family, w):
    pipe, (height, width) = _pipe(family)
    out = pipe(["a red circle", "green star"], sampler=ZipAR(w=w), seed=0)
    lag = min(w, width)
    expected = (height - 1) * lag + width  # row r+1 starts w forwards after row r
    assert [s.forward_passes for s in out.stats] == [expected, expected]
    commit_step = out.stats[0].commit_step
    for row in range(height):
        assert commit_step[row].tolist() == [row * lag + 1 + col for col in range(width)]


class _Spy:
    """Records every logits call of a session together with the logits it returned."""

    def __init__(self):
        self.calls = []

    def install(self, monkeypatch):
        original = DecodingSession.logits

        def logits(session, cells, codes, ephemeral=None, group=None):
            out = original(session, cells, codes, ephemeral, group)
            self.calls.append(
                (cells.clone(), codes.clone(), None if ephemeral is None else ephemeral.clone(), out)
            )
            return out

        monkeypatch.setattr(DecodingSession, "logits", logits)


def test_each_query_sees_exactly_the_cells_decoded_before_it(family, monkeypatch):
    """Compare every ZipAR query with a full forward over exactly the cells decoded when it ran (plus, for a
    row start, the placeholder standing in for the missing cell before it): no empty cell is ever seen.

    One transformer layer, so a cached key depends on its own token only; with more layers a cell's keys
    also carry the context it had when it was fed, as in every KV-cached ZipAR."""
    pipe, grid = _pipe(family, num_layers=1)
    height, width = grid
    spy = _Spy()
    spy.install(monkeypatch)
    snapshots = [torch.full((1, height * width), -1)]

    def record(p, step, timestep, tensors):
        snapshots.append(tensors["codes"].flatten(1).clone())
        return tensors

    out = pipe("a red circle", sampler=ZipAR(w=2), seed=3, guidance_scale=3.0, callback_on_step_end=record)
    final = out.codes.flatten(1)
    prefix = pipe.encode_prompts(["a red circle"], None, grid, guided=True)
    checked = 0
    for (cells, codes, ephemeral, logits), known in zip(spy.calls, snapshots, strict=False):
        for j, cell in enumerate(cells[0].tolist()):
            if cell <= 0 or (known[0, cell] >= 0):
                continue  # cell 0 comes from the prefill; already-decoded cells are only fed, not predicted
            sequence = final.clone()
            hidden = tuple(c for c in range(cell) if known[0, c] < 0)
            if ephemeral is not None and ephemeral[0, j]:
                sequence[0, cell - 1] = codes[0, j]  # the placeholder code at the missing predecessor
                hidden = tuple(c for c in hidden if c != cell - 1)
            reference = full_sequence_logits(pipe, prefix, sequence.view(1, *grid), 3.0, hidden_cells=hidden)
            torch.testing.assert_close(logits[0, j], reference[0, cell], atol=1e-4, rtol=1e-4)
            checked += 1
    assert checked == height * width - 1


def test_verified_zipar_rows_advance_by_windows(family):
    pipe, grid = _pipe(family)
    plain = pipe("a red circle", sampler=ZipAR(w=2), seed=0, temperature=0)
    verified = pipe("a red circle", sampler=ZipAR(w=2, verify=SJD(window=3)), seed=0, temperature=0)
    assert verified.codes.shape == plain.codes.shape
    assert max(max(s.accepted_per_step) for s in verified.stats) >= 1
    assert verified.stats[0].tokens == grid[0] * grid[1]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_window_size_is_rejected(bad):
    with pytest.raises(ValueError, match="w must be an integer >= 1"):
        ZipAR(w=bad)
