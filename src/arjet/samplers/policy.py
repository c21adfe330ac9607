"""The logits policy: temperature, top-k and top-p, applied identically wherever a distribution is formed.

Each processor is a small object `logits -> new logits` that validates its argument in `__init__`, never
edits its input, and is left out entirely at its identity setting. `LogitsPolicy` applies them in the
fixed order temperature -> top-k -> top-p (the order of transformers' `generate`) after the session has
already mixed CFG, then turns the result into probabilities. `temperature=0` means greedy: the
distribution becomes a point mass on the argmax, so every sampler (speculative ones included) reduces to
greedy decoding without a special case.

`SamplingOptions` is the value the rest of arjet passes around: the four numbers that shape the target
distribution (guidance, temperature, top-k, top-p), validated once where they enter (`pipe(...)`, the
command line, the evaluation runner, the demo).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from .. import checks
from ..limits import MAX_LOGIT_SCALE


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
        if not checks.is_integer(top_k) or top_k <= 0:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        self.top_k = top_k

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        k = min(self.top_k, logits.shape[-1])
        kth = logits.topk(k, dim=-1).values[..., -1:]
        return logits.masked_fill(logits < kth, float("-inf"))


class TopP(LogitsProcessor):
    """Nucleus sampling: keep the most likely codes whose mass before each is below `top_p`, so always at
    least the most likely one (a `top_p` so small it is 0 in float32 keeps just that one: greedy)."""

    def __init__(self, top_p: float):
        if not checks.is_number(top_p) or not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        self.top_p = float(top_p)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # drop a token when the mass strictly before it already reaches top_p
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= self.top_p
        # the most likely token always stays (transformers' min_tokens_to_keep=1): the mass before it is 0,
        # which a top_p below float32's smallest number (1e-300) would reach, emptying the distribution
        drop_sorted[..., 0] = False
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
        if not checks.is_number(t) or t < 0 or t != t:
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
        return LogitsPolicy(temperature=1.0, top_k=self.top_k, top_p=self.top_p)

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


@dataclass(frozen=True)
class SamplingOptions:
    """The numbers that shape the target distribution every sampler must respect, checked when made.

    `guidance_scale`: CFG (1 disables it; None: the pipeline's default); `temperature`: 0 = greedy;
    `top_k`: None = the pipeline's default; `top_p`: in (0, 1], None or 1 = off. Infinities and NaN are
    refused (`guidance_scale=inf` would turn every mixed logit into NaN), and so are finite values that
    overflow once combined: the logits are scaled by about `guidance_scale / temperature`, which must stay
    at most `MAX_LOGIT_SCALE` (1e30) for float32 logits to stay finite (`temperature=1e-45` would otherwise
    give NaN probabilities and a grey image).

    The one declaration of these four values: a pipeline call (`GenerationInputs.sampling`), the engine's
    groups (`GroupKey.sampling`, `Engine.submit(sampling=...)`) and the adaptive mode's choices carry it
    whole; `names()` lists them and `from_kwargs` builds one from keyword arguments of those names."""

    guidance_scale: float | None = None
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        guidance, temperature = self.guidance_scale, self.temperature
        if guidance is not None:
            checks.number("guidance_scale", guidance, 0.0, note="1 disables CFG")
        checks.number("temperature", temperature, 0.0, note="0 = greedy")
        if self.top_p is not None and (not checks.is_number(self.top_p) or not 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        scale = max(1.0, guidance or 1.0) / (temperature or 1.0)
        if not scale <= MAX_LOGIT_SCALE:
            given = f"temperature={temperature!r}" + (
                f" with guidance_scale={guidance!r}" if guidance is not None else ""
            )
            raise ValueError(
                f"{given} scales the logits by {scale:.3g}, which overflows float32 logits (grey images); keep "
                f"max(guidance_scale, 1) / temperature <= {MAX_LOGIT_SCALE:g} (temperature=0 means greedy)"
            )
        self.policy()  # checks top_k

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The four values' names, as keyword arguments of `pipe(...)` and `Engine.submit` spell them."""
        return tuple(item.name for item in fields(cls))

    @classmethod
    def from_kwargs(
        cls, values: Mapping[str, Any], defaults: SamplingOptions | None = None
    ) -> SamplingOptions:
        """The options named in `values`, the others at their defaults: the class's, or `defaults`' (which
        also fill a guidance scale, top-k or top-p given as None); ValueError naming any other key. Made
        once, from the merged values, so its checks see the numbers the decode will use."""
        unknown = sorted(set(values) - set(cls.names()))
        if unknown:
            raise ValueError(
                f"unexpected sampling option(s) {', '.join(unknown)}; the sampling options are "
                f"{', '.join(cls.names())}"
            )
        if defaults is None:
            return cls(**values)
        given = {name: value for name, value in values.items() if value is not None or name == "temperature"}
        return cls(**{**defaults.kwargs(), **given})

    def resolved(self, defaults: SamplingOptions) -> SamplingOptions:
        """These options with `defaults`' guidance scale, top-k and top-p where they leave them out (None);
        the temperature is always these options' own."""
        return SamplingOptions.from_kwargs(self.kwargs(), defaults)

    def policy(self) -> LogitsPolicy:
        """Temperature, top-k and top-p as the logits policy samplers apply (CFG is the session's)."""
        return LogitsPolicy(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)

    def kwargs(self) -> dict[str, Any]:
        """The pipeline call's keyword arguments (`pipe(prompt, **options.kwargs())`)."""
        return asdict(self)
