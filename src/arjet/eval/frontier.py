"""The speed-quality frontier across finished `arjet eval` runs: every sampler's point, the points no other
beats on both axes, and `ar`'s run-to-run spread.

    points = load_points(["runs/frontier-200", "runs/frontier-seed1000-200", "runs/shapes-ar-seed1000-200"])
    frontier = Frontier.of(points, timed="frontier-200")

Glossary:
    point     one sampler at one seed in one run: its mean FID, CLIP score, forward passes and s / image.
    front     the points that no other point beats on both axes at once (fewer forwards or seconds AND a
              better quality), each axis pair on its own.
    spread    the lowest and highest quality `ar` reached over every run and seed given: a sampler inside it
              is as good as `ar` is from one run to the next.
    timed     the one run whose seconds are compared: seconds of runs that shared the cores differently are
              not comparable, forward passes always are.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import checks
from ..reports import plots
from ..reports.tables import markdown_table, number, ratio
from .settings import METRICS_FILE

QUALITIES = {"fid": "FID", "clip_score": "CLIP score"}  # metric -> label
LOWER_IS_BETTER = {"fid": True, "clip_score": False}


@dataclass(frozen=True)
class Point:
    """One sampler at one seed in one run (the run folder's name)."""

    sampler: str
    seed: int
    run: str
    fid: float | None
    clip_score: float | None
    forward_passes: float
    seconds: float | None


def load_points(runs: Sequence[str | os.PathLike]) -> list[Point]:
    """The points of finished eval run folders (each with `metrics.json`), in the order given; a sampler at a
    seed that several runs hold is taken from the first of them. ValueError naming the file for one that is
    not such a run's."""
    points = []
    for run in runs:
        path = Path(run) / METRICS_FILE
        if not path.is_file():
            raise ValueError(f"{str(run)!r} is not a finished `arjet eval` run: it has no {METRICS_FILE}")
        metrics = checks.read_json(path)
        rows = metrics.get("samplers") if isinstance(metrics, dict) else None
        settings = metrics.get("settings", {}) if isinstance(metrics, dict) else None
        seeds = settings.get("seeds", [0]) if isinstance(settings, dict) else None
        if (
            not isinstance(rows, list)
            or not isinstance(seeds, list)
            or not all(map(checks.is_integer, seeds))
        ):
            raise ValueError(f"{path} is not an `arjet eval` metrics file (no samplers list or seeds)")
        if len(seeds) != 1:
            raise ValueError(f"{str(run)!r} averages seeds {seeds}: give runs of one seed each")
        points += [
            _point(row, seeds[0], Path(run).name, f"{path}, samplers[{i}]") for i, row in enumerate(rows)
        ]
    if not points:
        raise ValueError(f"no sampler results in the runs given: {[str(run) for run in runs]}")
    first = {(point.sampler, point.seed): point for point in reversed(points)}
    return [point for point in points if first[point.sampler, point.seed] is point]


def _point(row: Any, seed: int, run: str, where: str) -> Point:
    """One row of a metrics file, its figures checked: finite numbers (forward passes > 0), or none."""
    if not isinstance(row, dict) or not isinstance(row.get("sampler"), str):
        raise ValueError(f"{where} is not a sampler's row (an object with a `sampler` name)")

    def figure(key: str, required: bool = False) -> float | None:
        value = row.get(key)
        if value is None and not required:
            return None
        if not checks.is_number(value) or not math.isfinite(value) or value < 0 or (required and value == 0):
            wanted = "a number > 0" if required else "a finite number >= 0 or null"
            raise ValueError(f"{where}: {key} must be {wanted}, got {checks.shown(value)}")
        return float(value)

    return Point(
        sampler=row["sampler"],
        seed=seed,
        run=run,
        fid=figure("fid"),
        clip_score=figure("clip_score"),
        forward_passes=figure("forward_passes", required=True),  # type: ignore[arg-type]
        seconds=figure("seconds"),
    )


def pareto(
    points: Sequence[Point], cost: Callable[[Point], float], gain: Callable[[Point], float]
) -> list[Point]:
    """The points no other point dominates (cost <= and gain >=, one of them strictly), by increasing cost."""
    ordered = sorted(points, key=lambda p: (cost(p), -gain(p)))
    front: list[Point] = []
    for point in ordered:
        if not front or gain(point) > gain(front[-1]):
            front.append(point)
    return front


def quality(metric: str) -> Callable[[Point], float]:
    """The metric as a gain: higher is better (FID negated)."""
    sign = -1.0 if LOWER_IS_BETTER[metric] else 1.0
    return lambda point: sign * getattr(point, metric)


@dataclass
class Frontier:
    """Points, fronts per (speed axis, quality metric), and `ar`'s spread per metric."""

    points: list[Point]
    timed: str | None
    spread: dict[str, tuple[float, float]] = field(default_factory=dict)
    fronts: dict[tuple[str, str], list[Point]] = field(default_factory=dict)

    @classmethod
    def of(cls, points: Sequence[Point], timed: str | None = None) -> Frontier:
        """`timed`: the run whose seconds go on the seconds axis (default: the run holding most samplers)."""
        runs = [point.run for point in points]
        timed = timed or max(dict.fromkeys(runs), key=runs.count)
        if timed not in runs:
            raise ValueError(f"timed run {timed!r} is not among the runs: {sorted(set(runs))}")
        frontier = cls(list(points), timed)
        for metric in QUALITIES:
            scored = [p for p in points if getattr(p, metric) is not None]
            ar = [getattr(p, metric) for p in scored if p.sampler == "ar"]
            if ar:
                frontier.spread[metric] = (min(ar), max(ar))
            for axis, cost in frontier.axes().items():
                frontier.fronts[axis, metric] = pareto(
                    [p for p in scored if axis == "forward_passes" or frontier.is_timed(p)],
                    cost,
                    quality(metric),
                )
        return frontier

    def is_timed(self, point: Point) -> bool:
        return point.run == self.timed and point.seconds is not None

    @staticmethod
    def axes() -> dict[str, Callable[[Point], float]]:
        return {"forward_passes": lambda p: p.forward_passes, "seconds": lambda p: p.seconds or 0.0}

    def inside_spread(self, point: Point) -> bool:
        """Whether every metric the point has lies inside `ar`'s spread (or beats it)."""
        for metric, (low, high) in self.spread.items():
            value = getattr(point, metric)
            if value is None:
                continue
            if (value > high) if LOWER_IS_BETTER[metric] else (value < low):
                return False
        return True

    def table(self) -> str:
        """Markdown: one row per point, fastest first, with its compression against `ar` of its seed."""
        ar = {p.seed: p.forward_passes for p in self.points if p.sampler == "ar"}
        on_front = {id(p) for front in self.fronts.values() for p in front}
        rows = []
        for p in sorted(self.points, key=lambda p: (p.forward_passes, p.sampler, p.seed)):
            base = ar.get(p.seed) or next(iter(ar.values()), None)
            rows.append(
                (
                    f"`{p.sampler}`",
                    str(p.seed),
                    p.run,
                    number(p.fid, 2),
                    number(p.clip_score, 2),
                    number(p.forward_passes, 1),
                    ratio(base / p.forward_passes if base else None),
                    number(p.seconds, 3) if self.is_timed(p) else "n/a",
                    "yes" if self.inside_spread(p) else "no",
                    "yes" if id(p) in on_front else "",
                )
            )
        header = (
            "sampler",
            "seed",
            "run",
            "FID",
            "CLIP score",
            "forward passes",
            "codes / forward vs ar",
            "s / image",
            "inside ar's spread",
            "on a front",
        )
        return markdown_table(header, rows, numeric=(False, True, False, True, True, True, True, True))

    def page(self) -> str:
        """`frontier.md`: the figure, what its axes and shading mean, and the table."""
        runs = sorted({p.run for p in self.points})
        spread = ", ".join(
            f"{QUALITIES[m]} {low:.2f} to {high:.2f}" for m, (low, high) in self.spread.items()
        )
        return (
            "# The speed-quality frontier\n\n![FID and CLIP score against forward passes and seconds](frontier.png)\n\n"
            f"Runs: {', '.join(f'`{run}`' for run in runs)}. Seconds are `{self.timed}`'s only (the others "
            f"ran on cores shared differently). `ar`'s spread over these runs and seeds: {spread or 'none'}. "
            "A point is on a front when no other point has fewer forward passes (or seconds) and a better FID "
            "(or CLIP score) at once.\n\n" + self.table() + "\n"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "timed": self.timed,
            "spread": {metric: list(bounds) for metric, bounds in self.spread.items()},
            "points": [vars(p) for p in self.points],
            "fronts": {
                f"{axis}/{metric}": [(p.sampler, p.seed, p.run) for p in front]
                for (axis, metric), front in self.fronts.items()
            },
        }


def write(frontier: Frontier, out: str | os.PathLike) -> Path:
    """`frontier.png`, `frontier.md` (the table) and `frontier.json` into folder `out`; returns the figure's
    path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    points = [vars(p) | {"seconds": p.seconds if frontier.is_timed(p) else None} for p in frontier.points]
    fronts = {key: [vars(p) for p in front] for key, front in frontier.fronts.items()}
    figure = plots.frontier(points, fronts, frontier.spread)
    figure.savefig(out / "frontier.png", dpi=110)
    (out / "frontier.md").write_text(frontier.page())
    (out / "frontier.json").write_text(json.dumps(frontier.to_dict(), indent=2) + "\n")
    return out / "frontier.png"
