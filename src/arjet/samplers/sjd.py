"""`sjd`: Speculative Jacobi Decoding (Teng et al., ICLR 2025), optionally with coupled drafts (MC-SJD).

Lossless: with the exact acceptance rule the codes have exactly the distribution of `ar` under the same
processed `p` (CFG, temperature, top-k, top-p), for every batch size; each image commits its own number
of tokens per forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from .. import checks
from .base import DecodeTrace
from .drafts import check_scheme
from .policy import LogitsPolicy
from .random import ImageRandom
from .speculative import AcceptanceRule, Exact
from .windows import Lanes, WindowConfig, run_windows

if TYPE_CHECKING:
    from ..session import DecodingSession


def check_window(window: int) -> int:
    return checks.integer("window", window, 1)


def check_size_fits(
    name: str, value: int, default: int, grid: tuple[int, int], limit: int | None = None
) -> None:
    """Refuse a size option (`window`, `w`) larger than the grid has cells (or than `default`, when the
    grid is smaller) or than an operator's `limit`: its memory and work grow with it, not with the image."""
    cells = grid[0] * grid[1]
    allowed = max(cells, default) if limit is None else min(max(cells, default), limit)
    if value > allowed:
        why = (
            f"the limit of {limit}"
            if limit is not None and allowed == limit
            else f"the {cells} cells of this {grid[0]}x{grid[1]} grid"
        )
        raise ValueError(f"{name}={value} is larger than {why}; use {name} <= {allowed}")


@dataclass
class SJD:
    """`window`: slots verified per forward (default 16); `init`: how new slots are guessed (`random`,
    `repeat_horizontal`, `repeat_vertical`, `sample_horizontal`, `sample_vertical`); `coupling`: keep a
    re-drafted slot's old draft with probability `min(1, p_t(x)/p_{t-1}(x))` (MC-SJD, still lossless);
    `acceptance`: `Exact()` (lossless) or a relaxed rule such as `Lantern(k, delta)`."""

    window: int = 16
    init: str = "random"
    coupling: bool = False
    acceptance: AcceptanceRule = field(default_factory=Exact)
    name: ClassVar[str] = "sjd"

    def __post_init__(self) -> None:
        check_window(self.window)
        check_scheme(self.init)
        checks.boolean("coupling", self.coupling)
        if not callable(getattr(self.acceptance, "target", None)):
            raise ValueError(
                f"acceptance must be an acceptance rule such as Exact() or Lantern(), got {self.acceptance!r}"
            )

    def check_grid(self, grid: tuple[int, int], max_window: int | None = None) -> None:
        """Refuse a window the grid cannot use (see `check_size_fits`), before any work."""
        check_size_fits("window", self.window, type(self).window, grid, max_window)

    @property
    def parts(self) -> tuple[tuple[str, AcceptanceRule], ...]:
        """Its acceptance rule, whose needs are the sampler's (see `arjet.samplers.base.requirements`)."""
        return (("acceptance rule", self.acceptance),)

    def config(self) -> WindowConfig:
        return WindowConfig(self.window, self.init, self.coupling, self.acceptance)

    def run(
        self, session: DecodingSession, policy: LogitsPolicy, rng: ImageRandom, trace: DecodeTrace
    ) -> None:
        lanes = Lanes.whole_image(session.num_cells)
        run_windows(session, policy, rng, trace, lanes, self.config())
