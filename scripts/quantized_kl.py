"""The quality cost of quantized weights on the built-in model: the mean KL divergence of its next-code
distribution, float32 against a quantized copy, over held-out prompts. Each prompt's codes are drawn by the
float model with `ar` (seed i); both models then score every cell of those codes, teacher-forced, with the
model's guidance (temperature 1, no top-k): KL(float || quantized) per cell, averaged over cells and prompts.

PYTHONPATH=src python scripts/quantized_kl.py int8 [N]    # N held-out prompts (default 16)
PYTHONPATH=src python scripts/quantized_kl.py bfloat16     # the same against bfloat16 weights, for scale
"""

import json
import sys

import torch

import arjet
from arjet.data import heldout_set
from arjet.session import DecodingSession


def next_code_log_probs(pipe, prompt: str, codes: torch.Tensor) -> torch.Tensor:
    """`[cells, V]`: the guided next-code log-probabilities at every cell of `codes [H, W]`."""
    grid = tuple(codes.shape)
    scale = pipe.checkpoint_guidance_scale()
    prefix = pipe.encode_prompts([prompt], None, grid, scale != 1)
    session = DecodingSession(
        pipe.session_adapter(), pipe.image_layout(grid), prefix, scale if scale != 1 else None
    )
    cells = codes.numel()
    session.reserve(cells)
    fed = codes.reshape(1, -1)[:, :-1]
    rest = session.logits(torch.arange(1, cells)[None], fed)
    return torch.cat([session.first_logits[:, None], rest], 1)[0].log_softmax(-1)


def main(scheme: str, n: int) -> None:
    float_pipe = arjet.load()
    quantized = arjet.load(dtype=torch.bfloat16) if scheme == "bfloat16" else arjet.load(quantization=scheme)
    for pipe in (float_pipe, quantized):
        pipe.set_progress_bar_config(disable=True)
    prompts = [item["prompt"] for item in heldout_set(n)]
    per_prompt = []
    with torch.no_grad():
        for seed, prompt in enumerate(prompts):
            codes = float_pipe(prompt, seed=seed, output_type="latent").codes[0]
            p = next_code_log_probs(float_pipe, prompt, codes)
            q = next_code_log_probs(quantized, prompt, codes)
            per_prompt.append(float((p.exp() * (p - q)).sum(-1).mean()))
    record = {
        "scheme": scheme,
        "prompts": len(prompts),
        "mean_kl_nats": sum(per_prompt) / len(per_prompt),
        "max_prompt_kl_nats": max(per_prompt),
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "int8", int(sys.argv[2]) if len(sys.argv) > 2 else 16)
