"""`zipar`: ZipAR spatial parallel decoding (He et al., ICML 2025), and `zipar+sjd`, its verified form.

Rows decode in parallel once the row above is far enough ahead; every running row advances in the same
forward. Plain ZipAR samples one code per row per forward (lossy: a row sees only part of the row above).
With `verify=SJD(...)` each running row advances by a verified SJD window instead: lossless with respect
to the context the schedule gives each cell. Two published schedules, for ZipAR's window size `w`:

- `schedule="lumina"` (default; the paper's Lumina-mGPT script): row `r + 1` starts once row `r` has
  `w - 1` codes, so row `r + 1`'s column `c` comes out of the same forward as row `r`'s column `c + w - 1`.
  A 48x48 grid with `w = 16` takes `(H - 1)(w - 1) + W = 753` forwards, the prefill included.
- `schedule="llamagen"` (the LlamaGen script): row 0 alone, row 1 once row 0 is complete, then row `r + 1`
  once row `r` has `w` codes: `(H - 2) w + 2 W` forwards (224 on LlamaGen's 24x24 grid with `w = 8`).

`w = None` takes the scripts' defaults: 16 on grids wider than 32 codes (Lumina-mGPT's 48), 8 otherwise
(LlamaGen's 24). A lag of at least the width is plain raster decoding, so `zipar` is then exactly `ar`.

What arjet does differently from both scripts, on purpose: no query ever attends to an empty cache slot
(LlamaGen's static cache attends to zeros and stale slots); a started row's first input is the latest
committed code of the row above standing in for the missing last cell (Lumina feeds the row-end token
alone; LlamaGen a copy of the latest code of row `r - 2`), visible to that query only; the real last code
of a row is fed (and, with row-end tokens, their keys recomputed) as soon as it exists; positions are the
true raster ones; batches of any size with per-image random streams; grids and row-end tokens come from
the session, never hard-coded.
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


SCHEDULES = ("lumina", "llamagen")


@dataclass
class ZipAR:
    """`w`: ZipAR's window size (None: 16 on grids wider than 32 codes, else 8); `schedule`: `"lumina"` (row
    `r + 1` starts after `w - 1` codes of row `r`) or `"llamagen"` (row 1 after row 0, then after `w`
    codes); `verify`: an `SJD` whose window each row advances by (its acceptance rule applies)."""

    w: int | None = None
    verify: SJD | None = None
    schedule: str = "lumina"
    name: ClassVar[str] = "zipar"

    def __post_init__(self) -> None:
        checks.optional_integer("ZipAR's window size w", self.w, 2)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"ZipAR's schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.verify is not None and not isinstance(self.verify, SJD):
            raise ValueError(f"verify must be an SJD sampler or None, got {self.verify!r}")
        if self.verify is not None:
            self.name = "zipar+sjd"

    @property
    def parts(self) -> tuple[tuple[str, SJD], ...]:
        """Its verifying SJD, whose needs are the sampler's (see `arjet.samplers.base.requirements`)."""
        return () if self.verify is None else (("verifier", self.verify),)

    def check_grid(self, grid: tuple[int, int], max_window: int | None = None) -> None:
        """Refuse a verify window the grid cannot use. `w` needs no bound: it is a lag that allocates
        nothing, and any `w >= W` is raster order."""
        if self.verify is not None:
            self.verify.check_grid(grid, max_window)

    def window_size(self, width: int) -> int:
        """`w`, or the scripts' default for a grid `width` codes wide."""
        return self.w if self.w is not None else (16 if width > 32 else 8)

    def lags(self, grid: tuple[int, int]) -> list[int]:
        """Codes row `r - 1` needs before row `r` starts, for `r = 1 .. H - 1`."""
        height, width = grid
        w = self.window_size(width)
        if self.schedule == "lumina":
            return [w - 1] * (height - 1)
        return [width] + [w] * (height - 2) if height > 1 else []

    def run(
        self, session: DecodingSession, policy: LogitsPolicy, rng: ImageRandom, trace: DecodeTrace
    ) -> None:
        config = (
            self.verify.config() if self.verify is not None else WindowConfig(1, "random", False, Exact())
        )
        lanes = Lanes.rows(session.grid, self.lags(session.grid))
        run_windows(session, policy, rng, trace, lanes, config)
