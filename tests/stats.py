"""Exact code distributions of tiny models and a goodness-of-fit test, for statistical sampler tests."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from scipy import stats as scipy_stats

from arjet.samplers import LogitsPolicy

from reference import full_sequence_logits

ENUMERATION_CHUNK = 4096  # sequences per reference forward


def exact_joint(pipe, prompt: str, grid: tuple[int, int], policy: LogitsPolicy, guidance_scale: float | None):
    """{codes tuple: probability} of the whole grid under the processed distribution, by enumeration; for a
    family with a preview grid (GLM-Image) the tuples hold the preview's codes, then the grid's (`drawn`)."""
    vocab = pipe.session_adapter().code_vocab_size
    preview = pipe.preview_grid(grid)
    before = 0 if preview is None else preview[0] * preview[1]
    cells = before + grid[0] * grid[1]
    sequences = torch.tensor(list(itertools.product(range(vocab), repeat=cells)))
    guided = guidance_scale is not None
    joint = {}
    for chunk in sequences.split(ENUMERATION_CHUNK):
        prefix = pipe.encode_prompts([prompt] * len(chunk), None, grid, guided)
        previews = None if preview is None else chunk[:, :before].reshape(-1, *preview)
        logits = full_sequence_logits(
            pipe, prefix, chunk[:, before:].reshape(-1, *grid), guidance_scale, preview_codes=previews
        )
        probs = policy.probs(logits).gather(-1, chunk[..., None]).squeeze(-1).prod(-1).double()
        joint.update({tuple(seq.tolist()): float(p) for seq, p in zip(chunk, probs, strict=True) if p > 0})
    return joint


def drawn(out) -> torch.Tensor:
    """`[N, cells]`: every code a pipeline call decoded per image, the preview grid's first (GLM-Image)."""
    codes = out.codes.flatten(1)
    return codes if out.preview_codes is None else torch.cat([out.preview_codes.flatten(1), codes], 1)


def goodness_of_fit(samples: torch.Tensor, exact: dict[tuple, float], min_expected: float = 5.0) -> float:
    """Chi-square p-value of samples `[S, N]` against `exact`; outcomes with small expected counts are pooled,
    and any sample outside the support gives p = 0."""
    total = samples.shape[0]
    counts: dict[tuple, int] = {}
    for row in samples.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    if any(key not in exact for key in counts):
        return 0.0
    observed, expected = [], []
    pooled_observed = pooled_expected = 0.0
    for key, p in exact.items():
        if p * total >= min_expected:
            observed.append(counts.get(key, 0))
            expected.append(p * total)
        else:
            pooled_observed += counts.get(key, 0)
            pooled_expected += p * total
    if pooled_expected > 0:
        observed.append(pooled_observed)
        expected.append(pooled_expected)
    expected = np.array(expected) * (total / np.sum(expected))
    return float(scipy_stats.chisquare(np.array(observed, dtype=float), expected).pvalue)


def chisquare_p_value(codes: torch.Tensor, expected: torch.Tensor) -> float:
    """Chi-square p-value of `codes` drawn from `expected`; 0 when a code outside its support was drawn."""
    counts = torch.bincount(codes, minlength=len(expected)).double()
    support = expected > 0
    if bool((counts[~support] > 0).any()):
        return 0.0
    return float(
        scipy_stats.chisquare(counts[support].numpy(), (expected[support] * len(codes)).numpy()).pvalue
    )


def two_sample_p_value(first: torch.Tensor, second: torch.Tensor, min_count: int = 10) -> float:
    """Whether two independent samples of codes `[S, N]` share their distribution at every position: the
    smallest of the N positions' two-sample chi-square p-values, times N (Bonferroni, capped at 1)."""
    vocab = int(max(first.max(), second.max())) + 1
    p_values = [
        _same_codes_p_value(first[:, k], second[:, k], vocab, min_count) for k in range(first.shape[1])
    ]
    return min(1.0, min(p_values) * len(p_values))


def _same_codes_p_value(first: torch.Tensor, second: torch.Tensor, vocab: int, min_count: int) -> float:
    """Two-sample chi-square p-value of one position's codes; codes drawn fewer than `min_count` times in
    both samples together are pooled into one column."""
    table = torch.stack([torch.bincount(s, minlength=vocab) for s in (first, second)]).numpy()
    rare = table.sum(0) < min_count
    table = np.column_stack([table[:, ~rare], table[:, rare].sum(1)])
    table = table[:, table.sum(0) > 0]  # the pooled column is empty when no code was rare
    if table.shape[1] < 2:
        return 1.0  # both samples drew one and the same code
    return float(scipy_stats.chi2_contingency(table, correction=False).pvalue)
