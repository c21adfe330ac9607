"""`zipar`: ZipAR spatial parallel decoding (He et al., ICML 2025), and `zipar+sjd`, its verified form.

Row `r + 1` starts once row `r` has `w` codes; every active row then advances in the same forward. Plain
ZipAR samples one code per row per forward (lossy: a row sees only part of the row above). With
`verify=SJD(...)` each active row advances by a verified SJD window instead: lossless with respect to
the context the schedule gives each cell. `w >= W` is plain raster decoding (row `r + 1` waits for row
`r` to finish), so `zipar` is then exactly `ar` in distribution. Row ends and structural tokens come from
the session, never from a hard-coded grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from .. import checks
from .base import DecodeTrace
from .policy import LogitsPolicy
from .random import ImageRandom
from .sjd import SJD
from .speculative import Exact
from .windows import Lanes, WindowConfig, run_windows

if TYPE_CHECKING:
    from ..session import DecodingSession


@dataclass
class ZipAR:
    """`w`: codes row `r` must have before row `r + 1` starts (ZipAR's local window size; None = half the
    grid width); `verify`: an `SJD` whose window each row advances by (its acceptance rule applies)."""

    w: int | None = None
    verify: SJD | None = None
    name: ClassVar[str] = "zipar"

    def __post_init__(self) -> None:
        checks.optional_integer("ZipAR's window size w", self.w, 1)
        if self.verify is not None and not isinstance(self.verify, SJD):
            raise ValueError(f"verify must be an SJD sampler or None, got {self.verify!r}")
        if self.verify is not None:
            self.name = "zipar+sjd"

    @property
    def needs_codebook(self) -> bool:
        return self.verify is not None and self.verify.needs_codebook

    def check_grid(self, grid: tuple[int, int], max_window: int | None = None) -> None:
        """Refuse a verify window the grid cannot use. `w` needs no bound: it is a lag that allocates
        nothing, and any `w >= W` is raster order."""
        if self.verify is not None:
            self.verify.check_grid(grid, max_window)

    def lag(self, width: int) -> int:
        return self.w if self.w is not None else max(1, width // 2)

    def run(
        self, session: DecodingSession, policy: LogitsPolicy, rng: ImageRandom, trace: DecodeTrace
    ) -> None:
        config = (
            self.verify.config() if self.verify is not None else WindowConfig(1, "random", False, Exact())
        )
        lanes = Lanes.rows(session.grid, self.lag(session.grid[1]))
        run_windows(session, policy, rng, trace, lanes, config)
