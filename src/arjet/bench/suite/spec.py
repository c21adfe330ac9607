"""What a suite is made of: the runs and sections it measures, the figures it reads and the targets it sets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BenchRun:
    """One `run_bench` call on a section's pipeline: samplers side by side in one compile mode."""

    label: str
    samplers: tuple[str, ...]
    compile: str = "cuda-graphs"  # the pipeline's `compile=`: "none", "cuda-graphs" or "inductor-graphs"
    n: int = 1  # prompts
    batch_size: int = 1
    size: int | None = None  # square image side in pixels (None: the model's default)
    # one untimed call per sampler first (a run after another at the same size needs none)
    warmup: bool = True
    profile: tuple[str, ...] = ()  # samplers to run once more under the torch profiler (kernels per forward)


@dataclass(frozen=True)
class FloorShapes:
    """The shapes of `decoder_graph_floor`: a model's decoder, its cache and the query widths to time."""

    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_rows: int
    cache: int
    filled: int
    queries: tuple[int, ...] = (1, 16, 64)


@dataclass(frozen=True)
class ThroughputRun:
    """Images per second through the engine (`arjet bench --concurrency`): every sampler at every
    concurrency, `n` images each, steps captured as CUDA graphs."""

    samplers: tuple[str, ...]
    concurrencies: tuple[int, ...]
    n: int


@dataclass(frozen=True)
class Section:
    """What one child process measures: `runs` on a model (`model`: a built-in name; `arch`: a real-size
    architecture with random weights), or the graph floor of `floor` shapes."""

    name: str
    title: str
    timeout_s: int
    model: str | None = None
    arch: str | None = None
    dtype: str | None = None  # default: the model's (float32 for the built-in ones, bfloat16 for arch)
    size: int | None = None  # an arch's default image side (Janus builds its VQ for one size)
    runs: tuple[BenchRun, ...] = ()
    floor: FloorShapes | None = None
    throughput: ThroughputRun | None = None


@dataclass(frozen=True)
class Figure:
    """One number of a suite's results: `field` of `sampler`'s summary in run `run` of section `section`
    (for the graph floor, `sampler` is the query width as text and `field` is `graph_ms` or `eager_ms`; for
    an engine section, `run` is "concurrency N" and `field` a column of its throughput rows)."""

    section: str
    run: str
    sampler: str
    field: str

    def read(self, results: dict[str, Any]) -> float | None:
        section = results.get(self.section) or {}
        if section.get("floor") is not None and self.run == "floor":
            rows = {str(row["queries"]): row for row in section["floor"]}
            return (rows.get(self.sampler) or {}).get(self.field)
        if section.get("throughput") is not None and self.run.startswith("concurrency "):
            concurrency = int(self.run.removeprefix("concurrency "))
            row = next(
                (
                    r
                    for r in section["throughput"]
                    if r["sampler"] == self.sampler and r["concurrency"] == concurrency
                ),
                None,
            )
            return None if row is None else row.get(self.field)
        run = next((r for r in section.get("runs", []) if r["label"] == self.run), None)
        if run is None:
            return None
        row = next((s for s in run["summaries"] if s["sampler"] == self.sampler), None)
        return None if row is None else row.get(self.field)


@dataclass(frozen=True)
class Target:
    """`value` (divided by `per`, when given) must be at most `limit` (or at least it, with `at_least`)."""

    name: str
    value: Figure
    limit: float
    per: Figure | None = None
    at_least: bool = False
    unit: str = "x"

    def check(self, results: dict[str, Any]) -> dict[str, Any]:
        value = self.value.read(results)
        if value is not None and self.per is not None:
            base = self.per.read(results)
            value = None if not base else value / base
        met = None if value is None else (value >= self.limit if self.at_least else value <= self.limit)
        return {
            "target": self.name,
            "value": value,
            "limit": self.limit,
            "at_least": self.at_least,
            "unit": self.unit,
            "met": met,
        }


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    sections: tuple[Section, ...]
    targets: tuple[Target, ...] = ()
    budget_s: int = 480


# -- the suites ------------------------------------------------------------------------------------------
