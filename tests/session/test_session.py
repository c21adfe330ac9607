"""The session's logits equal an uncached full forward of the same sequence, for every query pattern."""

import pytest
import torch

from arjet.session import DecodingSession
from arjet.testing import tiny_pipeline

from families import cfg_for
from reference import full_sequence_logits

GRID = (3, 3)
TOL = dict(atol=1e-4, rtol=1e-4)


def _setup(family, guided=None, prompts=("a red circle left of a blue square", "green star")):
    guided = cfg_for(family, guided)
    pipe = tiny_pipeline(family, grid=GRID, vocab_size=8, logit_scale=3.0)
    prefix = pipe.encode_prompts(list(prompts), None, GRID, guided)
    scale = 3.0 if guided else None
    session = DecodingSession(pipe.session_adapter(), pipe.image_layout(GRID), prefix, scale)
    codes = torch.randint(0, 8, (len(prompts), *GRID), generator=torch.Generator().manual_seed(1))
    return pipe, prefix, session, codes, scale


@pytest.mark.parametrize("guided", [True, False])
def test_ar_schedule_matches_full_forward(family, guided):
    pipe, prefix, session, codes, scale = _setup(family, guided)
    reference = full_sequence_logits(pipe, prefix, codes, scale)
    flat = codes.flatten(1)
    torch.testing.assert_close(session.first_logits, reference[:, 0], **TOL)  # cell 0 from the prefill
    for cell in range(1, flat.shape[1]):
        logits = session.logits(torch.full((2, 1), cell), flat[:, cell - 1 : cell])
        torch.testing.assert_close(logits[:, 0], reference[:, cell], **TOL)
        session.commit(torch.ones(2, 1, dtype=torch.bool))
    assert session.count == flat.shape[1]  # prefill + one forward per later cell
    assert session.forward_passes.tolist() == [flat.shape[1]] * 2


def test_windows_with_ragged_commits_match_full_forward(family):
    pipe, prefix, session, codes, scale = _setup(family)
    reference = full_sequence_logits(pipe, prefix, codes, scale)
    flat = codes.flatten(1)
    # a Jacobi window over cells 0..5: cell 0 from the prefill, inputs are the codes before each cell
    window = torch.arange(0, 6).expand(2, 6)
    inputs = torch.cat([torch.zeros(2, 1, dtype=torch.long), flat[:, :5]], 1)
    torch.testing.assert_close(session.logits(window, inputs), reference[:, :6], **TOL)
    # image 0 keeps 4 inputs (cells 0..3 predicted, codes 0..2 fed), image 1 keeps 2 (code 0 fed)
    session.commit(torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]], dtype=torch.bool))
    cells = torch.tensor([[4, 5, 6, 7, 8], [2, 3, 4, -1, -1]])
    inputs = torch.stack([flat[0, 3:8], torch.cat([flat[1, 1:4], torch.zeros(2, dtype=torch.long)])])
    logits = session.logits(cells, inputs)
    torch.testing.assert_close(logits[0], reference[0, 4:9], **TOL)
    torch.testing.assert_close(logits[1, :3], reference[1, 2:5], **TOL)
    assert session.count == 3


def test_queries_see_only_committed_cells_and_earlier_inputs(family):
    """ZipAR's pattern: row 1 advances while row 0 is unfinished; nothing attends to an empty cell."""
    pipe, prefix, session, codes, scale = _setup(family)
    flat = codes.flatten(1)
    session.logits(
        torch.arange(0, 3).expand(2, 3), torch.cat([torch.zeros(2, 1, dtype=torch.long), flat[:, :2]], 1)
    )
    session.commit(torch.ones(2, 3, dtype=torch.bool))  # cells 0, 1 are in the cache; cell 2 is not
    # one call: predict cell 4 (input: code of cell 3) -- cell 2 and row 0's end are absent
    logits = session.logits(torch.tensor([[4], [4]]), flat[:, 3:4])
    reference = full_sequence_logits(pipe, prefix, codes, scale, hidden_cells=(2,))
    torch.testing.assert_close(logits[:, 0], reference[:, 4], **TOL)


def test_ephemeral_inputs_are_private_and_cannot_be_committed(family):
    pipe, prefix, session, codes, scale = _setup(family)
    flat = codes.flatten(1)
    session.logits(
        torch.tensor([[0, 1], [0, 1]]), torch.cat([torch.zeros(2, 1, dtype=torch.long), flat[:, :1]], 1)
    )
    session.commit(torch.ones(2, 2, dtype=torch.bool))  # cell 0 in the cache
    # a placeholder at cell 3 (predicting 4) must not be seen by the real query at cell 1 -> predicting 2...
    cells = torch.tensor([[2, 4], [2, 4]])
    logits = session.logits(
        cells, torch.stack([flat[:, 1], flat[:, 3]], 1), ephemeral=torch.tensor([[0, 1], [0, 1]]).bool()
    )
    reference = full_sequence_logits(pipe, prefix, codes, scale)
    torch.testing.assert_close(logits[:, 0], reference[:, 2], **TOL)
    # ...and the placeholder itself sees cells 0, 1 but not cell 2
    hidden = full_sequence_logits(pipe, prefix, codes, scale, hidden_cells=(2,))
    torch.testing.assert_close(logits[:, 1], hidden[:, 4], **TOL)
    session.commit(torch.ones(2, 2, dtype=torch.bool))  # recorded on the device, raised when checked
    with pytest.raises(ValueError, match="ephemeral"):
        session.check()


def test_cell_zero_needs_no_forward_pass_of_its_own(family):
    """Cell 0 is predicted by the prefill: a query for it costs an image no forward pass (a call runs the
    model anyway, its shapes being fixed, but nothing of it is used)."""
    _, _, session, _, _ = _setup(family)
    logits = session.logits(torch.zeros(2, 1, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long))
    torch.testing.assert_close(logits[:, 0], session.first_logits)
    assert session.forward_passes.tolist() == [1, 1]  # the prefill only


def _fill_weights(pipe, value):
    with torch.no_grad():
        for weight in pipe.model.parameters():
            weight.fill_(value)


def test_prefill_logits_that_are_not_finite_are_flagged_and_raised_at_the_status_read():
    """The flag is set on the device by the prefill; the session reads nothing itself, the next status read
    (`check`) raises."""
    pipe, prefix, session, _, scale = _setup("janus")
    session.check()  # sound weights: no flag
    _fill_weights(pipe, float("nan"))
    session = DecodingSession(pipe.session_adapter(), pipe.image_layout(GRID), prefix, scale)
    with pytest.raises(ValueError, match=r"the model's logits are not finite \(NaN or inf\): its weights"):
        session.check()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 3e38])
@pytest.mark.parametrize("sampler", ["ar", "sjd:window=3", "zipar:w=2"])
def test_a_call_on_a_model_whose_logits_are_not_finite_fails_instead_of_decoding_code_zero(sampler, value):
    """NaN or infinite weights set after loading (or finite ones so large the forward overflows) used to
    decode every code as 0, silently."""
    pipe = tiny_pipeline("janus", grid=GRID, vocab_size=8, logit_scale=3.0)
    pipe.set_progress_bar_config(disable=True)
    _fill_weights(pipe, value)
    with pytest.raises(ValueError, match=r"the model's logits are not finite \(NaN or inf\)"):
        pipe("a red circle", sampler=sampler, seed=0, output_type="latent")


@pytest.mark.parametrize("sampler", ["ar", "sjd:window=3", "zipar:w=2"])
def test_logits_that_overflow_only_on_image_codes_fail_the_call(sampler):
    """Huge finite weights in Janus's generation aligner leave the prompt's prefill finite (it embeds text)
    and overflow on the first image code's embedding: every step's logits are flagged, not only the
    prefill's, or the call decodes code 0 everywhere and succeeds."""
    pipe = tiny_pipeline("janus", grid=GRID, vocab_size=8, logit_scale=3.0)
    pipe.set_progress_bar_config(disable=True)
    with torch.no_grad():
        for weight in pipe.model.model.generation_aligner.parameters():
            weight.fill_(3e38)
    with pytest.raises(ValueError, match=r"the model's logits are not finite \(NaN or inf\)"):
        pipe("a red circle", sampler=sampler, seed=0, output_type="latent")


def test_bad_query_shapes_are_rejected():
    _, _, session, _, _ = _setup("janus")
    with pytest.raises(ValueError, match="batch=2"):
        session.logits(torch.zeros(3, 1, dtype=torch.long), torch.zeros(3, 1, dtype=torch.long))


def test_groups_keep_drafts_of_different_rows_apart(family):
    """Two windows in one call: row 1's query must not see row 0's uncommitted input."""
    pipe, prefix, session, codes, scale = _setup(family)
    flat = codes.flatten(1)
    session.logits(
        torch.arange(0, 4).expand(2, 4), torch.cat([torch.zeros(2, 1, dtype=torch.long), flat[:, :3]], 1)
    )
    session.commit(
        torch.tensor([[1, 1, 0, 0]] * 2, dtype=torch.bool)
    )  # cells 0 (fed) and 1 known; input of 1 kept
    # group 1 predicts cell 2 from code 1; group 2 predicts cell 4 from code 3 and must not see code 1's input
    cells, inputs = torch.tensor([[2, 4]] * 2), torch.stack([flat[:, 1], flat[:, 3]], 1)
    logits = session.logits(cells, inputs, group=torch.tensor([[1, 2]] * 2))
    reference = full_sequence_logits(pipe, prefix, codes, scale)
    torch.testing.assert_close(logits[:, 0], reference[:, 2], **TOL)
    hidden = full_sequence_logits(pipe, prefix, codes, scale, hidden_cells=(1, 2))
    torch.testing.assert_close(logits[:, 1], hidden[:, 4], **TOL)


def test_group_zero_inputs_are_shared_with_every_group(family):
    pipe, prefix, session, codes, scale = _setup(family)
    flat = codes.flatten(1)
    session.logits(
        torch.arange(0, 2).expand(2, 2), torch.cat([torch.zeros(2, 1, dtype=torch.long), flat[:, :1]], 1)
    )
    session.commit(torch.ones(2, 2, dtype=torch.bool))  # code 0 in the cache, cell 1 decoded
    cells, inputs = torch.tensor([[2, 4]] * 2), torch.stack([flat[:, 1], flat[:, 3]], 1)
    logits = session.logits(cells, inputs, group=torch.tensor([[0, 2]] * 2))
    hidden = full_sequence_logits(pipe, prefix, codes, scale, hidden_cells=(2,))
    torch.testing.assert_close(logits[:, 1], hidden[:, 4], **TOL)  # sees code 1 (group 0), not cell 2
