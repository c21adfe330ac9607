"""The logits policy: temperature, top-k and top-p, applied identically wherever a distribution is formed.

Each processor is a small object `logits -> new logits` that validates its argument in `__init__`, never
edits its input, and is left out entirely at its identity setting. `LogitsPolicy` applies them in the
fixed order temperature -> top-k -> top-p (the order of transformers' `generate`) after the session has
already mixed CFG, then turns the result into probabilities. `temperature=0` means greedy: the
distribution becomes a point mass on the argmax, so every sampler (speculative ones included) reduces to
greedy decoding without a special case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


class LogitsProcessor:
    def __call__(self, logits: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError


class Temperature(LogitsProcessor):
    def __init__(self, temperature: float):
        if not isinstance(temperature, (int, float)) or not temperature > 0:
            raise ValueError(
                f"temperature must be a number > 0 for a Temperature processor, got {temperature!r} "
                "(temperature=0 means greedy and is handled by LogitsPolicy)"
            )
        self.temperature = float(temperature)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return logits / self.temperature


class TopK(LogitsProcessor):
    def __init__(self, top_k: int):
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k <= 0:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        self.top_k = top_k

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        k = min(self.top_k, logits.shape[-1])
        kth = logits.topk(k, dim=-1).values[..., -1:]
        return logits.masked_fill(logits < kth, float("-inf"))


class TopP(LogitsProcessor):
    def __init__(self, top_p: float):
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        self.top_p = float(top_p)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # drop a token when the mass strictly before it already reaches top_p (the top token always stays)
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= self.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        return logits.masked_fill(drop, float("-inf"))


@dataclass(frozen=True)
class LogitsPolicy:
    """Temperature / top-k / top-p as one object: `policy.probs(logits)` gives the processed distribution."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    processors: Sequence[LogitsProcessor] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0 or t != t:
            raise ValueError(f"temperature must be a number >= 0 (0 = greedy), got {t!r}")
        processors: list[LogitsProcessor] = []
        if t not in (0, 1):
            processors.append(Temperature(t))
        if self.top_k is not None:
            processors.append(TopK(self.top_k))
        if self.top_p is not None:
            top_p = TopP(self.top_p)
            if top_p.top_p < 1:
                processors.append(top_p)
        object.__setattr__(self, "processors", tuple(processors))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def soft(self) -> LogitsPolicy:
        """The distribution behind greedy decoding: the same top-k / top-p at temperature 1."""
        return LogitsPolicy(1.0, self.top_k, self.top_p)

    def process(self, logits: torch.Tensor) -> torch.Tensor:
        """Processed logits (`-inf` outside the top-k / top-p set); greedy keeps only the argmax."""
        logits = logits.float()
        if self.greedy:
            best = logits.argmax(-1, keepdim=True)
            return torch.full_like(logits, float("-inf")).scatter(-1, best, 0.0)
        for processor in self.processors:
            logits = processor(logits)
        return logits

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return self.process(logits).softmax(-1)
