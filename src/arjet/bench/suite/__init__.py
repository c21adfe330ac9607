"""Benchmark suites: fixed lists of measurements, each section in a child process of its own, and one report
that sets every figure against its target.

    arjet bench --suite gpu --out runs/gpu-check        # ~8 minutes on one H100
    arjet bench --suite gpu-quick --out runs/gpu-quick  # the same sections at smaller sizes, ~4 minutes
    arjet bench --suite gpu-proof --out runs/gpu-proof  # the GPU-proof issue's sections, ~6 minutes on one H200

A suite is data (`spec.py`): `Section`s (a model, and the `BenchRun`s or the graph floor measured on it) and
`Target`s (a figure, or the ratio of two, against a limit); `gpu.py` holds the GPU suites. `run.py` runs a
section in a spawned child process with a time limit, so a crash, a hung kernel or a failed capture ends
that section only; a section writes its results after every run, so one stopped at its limit still reports
what it finished, and the suite as a whole keeps to a time budget (a section that no longer fits is skipped
and said so). Real-size architectures run with random weights (`arjet.presets`): their per-forward costs
are the real ones, but their acceptance says nothing about a trained model's, so acceptance figures come
from the built-in models. `report.py` writes `report.md` (targets, tests, one table per run, kernel
profiles) from `report.json` (everything).
"""

from .gpu import SUITES, get_suite
from .report import codes_match, write_report
from .run import read_junit, run_section, run_suite
from .spec import BenchRun, Figure, FloorShapes, Section, Suite, Target, ThroughputRun

__all__ = [
    "SUITES",
    "BenchRun",
    "Figure",
    "FloorShapes",
    "Section",
    "Suite",
    "Target",
    "ThroughputRun",
    "codes_match",
    "get_suite",
    "read_junit",
    "run_section",
    "run_suite",
    "write_report",
]
