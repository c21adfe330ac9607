import torch

from arjet.testing import tiny_pipeline
from arjet.train.sequence import teacher_forced_logits

from reference import full_sequence_logits


def test_teacher_forced_logits_match_the_reference_forward(family):
    grid = (3, 3)
    pipe = tiny_pipeline(family, grid=grid, vocab_size=8, logit_scale=2.0)
    prefix = pipe.encode_prompts(
        ["a red circle", "green star on a blue background"], None, grid, guided=False
    )
    codes = torch.randint(0, 8, (2, *grid), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = teacher_forced_logits(pipe, prefix, codes)
    torch.testing.assert_close(
        ours.float(), full_sequence_logits(pipe, prefix, codes, None), atol=1e-4, rtol=1e-4
    )
