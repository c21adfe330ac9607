"""Benchmark suites: fixed lists of measurements, each section in a child process of its own, and one report
that sets every figure against its target.

    arjet bench --suite gpu --out runs/gpu-check        # ~8 minutes on one H100
    arjet bench --suite gpu-quick --out runs/gpu-quick  # the same sections at smaller sizes, ~4 minutes

A suite is data: `Section`s (a model, and the `BenchRun`s or the graph floor measured on it) and `Target`s
(a figure, or the ratio of two, against a limit). A section runs in a spawned child process with a time
limit, so a crash, a hung kernel or a failed capture ends that section only; it writes its results after
every run, so a section stopped at its limit still reports what it finished. The suite as a whole keeps
to a time budget: a section that no longer fits is skipped and said so. Real-size architectures run with
random weights (`arjet.presets`), which accept few drafts: their figures are per-forward costs; acceptance
figures come from the built-in models only.

The report is `report.md` (targets, tests, one table per run) and `report.json` (everything, from which
`write_report` renders the markdown again).
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..reports.tables import markdown_table, number, significant
from .speed import SamplerSummary

SHAPES_PROMPTS = 6


@dataclass(frozen=True)
class BenchRun:
    """One `run_bench` call on a section's pipeline: samplers side by side in one compile mode."""

    label: str
    samplers: tuple[str, ...]
    compile: str = "cuda-graphs"  # "none" or "cuda-graphs" (the pipeline's `compile=`)
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


@dataclass(frozen=True)
class Figure:
    """One number of a suite's results: `field` of `sampler`'s summary in run `run` of section `section`
    (for the graph floor, `sampler` is the query width as text and `field` is `graph_ms` or `eager_ms`)."""

    section: str
    run: str
    sampler: str
    field: str

    def read(self, results: dict[str, Any]) -> float | None:
        section = results.get(self.section) or {}
        if section.get("floor") is not None and self.run == "floor":
            rows = {str(row["queries"]): row for row in section["floor"]}
            return (rows.get(self.sampler) or {}).get(self.field)
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
def _modes(
    label: str, samplers: tuple[str, ...], profile: tuple[str, ...] = (), **kwargs: Any
) -> tuple[BenchRun, BenchRun]:
    """The same run eagerly and as captured CUDA graphs (the second with the kernel profiles, if any)."""
    return (
        BenchRun(f"{label} eager", samplers, compile="none", **kwargs),
        BenchRun(f"{label} cuda-graphs", samplers, compile="cuda-graphs", profile=profile, **kwargs),
    )


LUMINA_SAMPLERS = ("ar", "sjd", "sjd-pac", "zipar")
BUILTIN_SAMPLERS = ("ar", "sjd", "mc-sjd", "sjd-pac")
LUMINA_FLOOR = FloorShapes(
    layers=32, hidden=4096, ffn=11008, heads=32, kv_heads=32, head_rows=8192, cache=2400, filled=1200
)


def _gpu_sections(quick: bool) -> tuple[Section, ...]:
    small = 256 if quick else 384
    return (
        Section(
            "shapes",
            "built-in model (8.6 M parameters, float32)",
            150,
            model="shapes",
            runs=(
                *_modes("batch 1", BUILTIN_SAMPLERS, ("ar", "sjd"), n=4 if quick else SHAPES_PROMPTS),
                *_modes("batch 8", ("ar", "sjd", "mc-sjd"), n=8, batch_size=8),
            ),
        ),
        Section(
            "shapes-sjd2",
            "built-in model fine-tuned for SJD2 (float32)",
            75,
            model="shapes-sjd2",
            runs=_modes("batch 1", ("ar", "sjd2"), n=4 if quick else SHAPES_PROMPTS),
        ),
        Section(
            "lumina-mgpt-7b",
            "Lumina-mGPT-7B architecture, random weights (bfloat16)",
            240 if quick else 330,
            arch="lumina-mgpt-7b-768",
            runs=(
                *_modes(f"{small} px", LUMINA_SAMPLERS, ("ar", "sjd", "sjd-pac"), size=small),
                *(() if quick else (BenchRun("768 px cuda-graphs", ("ar",), size=768, warmup=False),)),
            ),
        ),
        Section(
            "graph-floor", "minimal decoder of Lumina-mGPT-7B shapes (graph floor)", 90, floor=LUMINA_FLOOR
        ),
        Section(
            "janus-pro-7b",
            "Janus-Pro-7B architecture, random weights (bfloat16)",
            150,
            arch="janus-pro-7b",
            size=small,
            runs=_modes(f"{small} px", ("ar", "sjd")),
        ),
        Section(
            "emu3-gen",
            "Emu3-Gen architecture at a small size, random weights (bfloat16)",
            150,
            arch="emu3-gen",
            runs=_modes("192 px" if not quick else "128 px", ("ar", "sjd"), size=128 if quick else 192),
        ),
    )


def _gpu_targets(quick: bool) -> tuple[Target, ...]:
    small = f"{256 if quick else 384} px cuda-graphs"
    graphs = "batch 1 cuda-graphs"
    speedup = [
        Target(
            f"built-in `{s}`: latency speedup / step compression",
            Figure(section, graphs, s, "latency_speedup"),
            0.8,
            per=Figure(section, graphs, s, "step_compression"),
            at_least=True,
        )
        for section, s in (
            ("shapes", "sjd"),
            ("shapes", "mc-sjd"),
            ("shapes", "sjd-pac"),
            ("shapes-sjd2", "sjd2"),
        )
    ]
    lumina_ar = (
        [
            Target(
                "Lumina-mGPT-7B 768 px: `ar` ms / forward over the graph floor (1 query)",
                Figure("lumina-mgpt-7b", "768 px cuda-graphs", "ar", "ms_per_forward"),
                1.25,
                per=Figure("graph-floor", "floor", "1", "graph_ms"),
            )
        ]
        if not quick
        else []
    )
    return (
        *lumina_ar,
        Target(
            "Lumina-mGPT-7B: `sjd` window forward over an `ar` forward (replayed steps)",
            Figure("lumina-mgpt-7b", small, "sjd", "ms_per_replay"),
            1.25,
            per=Figure("lumina-mgpt-7b", small, "ar", "ms_per_replay"),
        ),
        Target(
            "Lumina-mGPT-7B: `sjd-pac` 64-input forward over an `ar` forward (replayed steps)",
            Figure("lumina-mgpt-7b", small, "sjd-pac", "ms_per_replay"),
            1.4,
            per=Figure("lumina-mgpt-7b", small, "ar", "ms_per_replay"),
        ),
        Target(
            "Janus-Pro-7B: `ar` ms / forward",
            Figure("janus-pro-7b", small, "ar", "ms_per_forward"),
            8.0,
            unit=" ms",
        ),
        Target(
            "built-in: `ar` ms / forward", Figure("shapes", graphs, "ar", "ms_per_forward"), 2.0, unit=" ms"
        ),
        *speedup,
        Target(
            "built-in, batch 8: `sjd` images / s over `ar` images / s",
            Figure("shapes", "batch 8 cuda-graphs", "sjd", "images_per_second"),
            2.0,
            per=Figure("shapes", "batch 8 cuda-graphs", "ar", "images_per_second"),
            at_least=True,
        ),
    )


SUITES: dict[str, Suite] = {
    "gpu": Suite(
        "gpu",
        "captured decode step and real-size speed on one GPU",
        _gpu_sections(False),
        _gpu_targets(False),
        budget_s=480,
    ),
    "gpu-quick": Suite(
        "gpu-quick", "the gpu suite at smaller sizes", _gpu_sections(True), _gpu_targets(True), budget_s=240
    ),
}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; choose one of {', '.join(SUITES)}")
    return SUITES[name]


# -- running ---------------------------------------------------------------------------------------------
def run_suite(
    suite: Suite,
    out: Path,
    *,
    sections: Sequence[str] | None = None,
    budget_s: float | None = None,
    tests: Path | None = None,
    device: str = "cuda",
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run `suite`'s sections (or the named ones) one child process each, writing `out/report.md` and
    `out/report.json` after every section (so a run stopped from outside keeps what it measured).
    `tests`: a JUnit XML file of a test run to include (e.g. `pytest -m cuda`)."""
    names = [s.name for s in suite.sections]
    chosen = list(names if sections is None else sections)
    unknown = [name for name in chosen if name not in names]
    if unknown:
        raise ValueError(
            f"unknown section(s) {', '.join(unknown)} of suite {suite.name!r}; choose from {', '.join(names)}"
        )
    out.mkdir(parents=True, exist_ok=True)
    budget = suite.budget_s if budget_s is None else budget_s
    started = time.monotonic()
    results: dict[str, Any] = {}
    commit = _commit()
    report: dict[str, Any] = {}
    for section in (s for s in suite.sections if s.name in chosen):
        left = budget - (time.monotonic() - started)
        if left < min(section.timeout_s, 60):
            results[section.name] = _status(section, "skipped", 0.0, f"{left:.0f} s of the budget left")
            log(f"[{section.name}] skipped: {left:.0f} s of the budget left")
        else:
            timeout = min(section.timeout_s, left)
            log(f"[{section.name}] {section.title} (at most {timeout:.0f} s)")
            results[section.name] = result = _run_child(section, out, device, timeout)
            error = result["error"]
            log(
                f"[{section.name}] {result['status']} in {result['seconds']:.0f} s"
                + (f": {error.strip().splitlines()[-1]}" if error else "")
            )
        report = {
            "suite": suite.name,
            "description": suite.description,
            "commit": commit,
            "seconds": time.monotonic() - started,
            "environment": next((r["environment"] for r in results.values() if r.get("environment")), {}),
            "tests": read_junit(tests) if tests is not None else None,
            "targets": [*(target.check(results) for target in suite.targets), _codes_target(results)],
            "sections": results,
        }
        (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
        write_report(report, out / "report.md")
    return report


def _run_child(section: Section, out: Path, device: str, timeout: float) -> dict[str, Any]:
    """`run_section` in a spawned process (a fresh CUDA context), stopped after `timeout` seconds."""
    path = out / f".section-{section.name}.json"
    path.unlink(missing_ok=True)
    begin = time.monotonic()
    child = multiprocessing.get_context("spawn").Process(
        target=run_section, args=(section, str(path), device)
    )
    child.start()
    child.join(timeout)
    status, error = "ok", None
    if child.is_alive():
        child.terminate()
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join()
        status, error = "timeout", f"stopped at its limit of {timeout:.0f} s"
    elif child.exitcode != 0:
        status, error = "failed", f"exit code {child.exitcode}"
    result = json.loads(path.read_text()) if path.is_file() else {}
    path.unlink(missing_ok=True)
    if result.get("error"):
        status, error = "failed", result["error"]
    seconds = time.monotonic() - begin
    return {**_status(section, status, seconds, error), **result, "status": status, "error": error}


def _codes_target(results: dict[str, Any]) -> dict[str, Any]:
    """Captured runs whose codes equal the eager run's of the same images (seeds, sampler, size)."""
    matches = [same for section in results.values() for same in codes_match(section).values()]
    return {
        "target": "captured and eager codes equal (runs x samplers compared)",
        "value": sum(matches) if matches else None,
        "limit": len(matches),
        "at_least": True,
        "unit": "",
        "met": all(matches) if matches else None,
    }


def _status(section: Section, status: str, seconds: float, error: str | None) -> dict[str, Any]:
    return {
        "name": section.name,
        "title": section.title,
        "status": status,
        "seconds": seconds,
        "error": error,
        "runs": [],
        "floor": None,
    }


def run_section(section: Section, path: str, device: str = "cuda") -> None:
    """Measure one section and write its results to `path` (after every run, so a stopped section keeps what
    it finished). Runs in the suite's child process; an exception is recorded, not raised."""
    import traceback

    import torch

    result: dict[str, Any] = {"runs": [], "floor": None, "error": None, "environment": {}}

    def save() -> None:
        Path(path).write_text(json.dumps(result))

    try:
        if section.floor is not None:
            from .floor import decoder_graph_floor

            floors = decoder_graph_floor(**asdict(section.floor), device=device)
            result["floor"] = [asdict(f) for f in floors]
            result["environment"] = {
                "device": device,
                "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name(device),
            }
            save()
        if section.runs:
            pipe = _section_pipeline(section, device)
            for run in section.runs:
                result["runs"].append(_bench_run(pipe, section, run))
                result["environment"] = result["runs"][-1].pop("environment")
                save()
                print(f"[{section.name}] {run.label}: done", flush=True)
    except Exception:  # noqa: BLE001 (recorded in the report)
        result["error"] = traceback.format_exc(limit=8)
        print(result["error"], flush=True)
    save()


def _section_pipeline(section: Section, device: str):
    from ..pipelines.loading import torch_dtype

    if section.arch is not None:
        from ..presets import random_pipeline

        dtype = torch_dtype(section.dtype) if section.dtype else None
        return random_pipeline(
            section.arch, device=device, dtype=dtype, height=section.size, width=section.size
        )
    from ..builtin import load_model

    return load_model(section.model, device=device, dtype=section.dtype)


def _bench_run(pipe, section: Section, run: BenchRun) -> dict[str, Any]:
    import warnings

    from .bench import run_bench
    from .prompts import load_prompts

    prompts = load_prompts("shapes", run.n)
    call: dict[str, Any] = {"compile": run.compile}
    if run.size is not None:
        call.update(height=run.size, width=run.size)
    with warnings.catch_warnings():  # a random model's word-level vocabulary: words do not change the cost
        warnings.filterwarnings("ignore", message=r"prompt .*the text tokenizer does not know")
        result = run_bench(
            pipe,
            run.samplers,
            prompts,
            seed=0,
            warmup=run.warmup,
            progress=False,
            arch=section.arch,
            batch_size=run.batch_size,
            **call,
        )
    codes: dict[str, list[str]] = {}
    for record in result.records:
        codes.setdefault(record["sampler"], []).append(record["codes_sha1"])
    capture = _capture_per_call(result.records)
    summaries = [asdict(s) for s in result.summaries]
    for summary in summaries:
        summary["ms_per_replay"] = capture.get(summary["sampler"], {}).get("ms_per_replay")
    profiles = {spec: _kernel_profile(pipe, prompts[0], spec, call) for spec in run.profile}
    return {
        **asdict(run),
        "summaries": summaries,
        "codes": codes,
        "capture": capture,
        "profiles": profiles,
        "environment": result.environment,
    }


def _capture_per_call(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per sampler, what the CUDA-graph runner did in an average call (`CAPTURE_KEYS`), and the device time of
    one replayed step (`ms_per_replay`: replays after the first of each graph, which runs inside its capture)."""
    from ..samplers.capture import CAPTURE_KEYS

    totals: dict[str, dict[str, float]] = {}
    calls: dict[str, set] = {}
    for record in records:
        if "graph_captures" not in record:
            continue
        spec = record["sampler"]
        calls.setdefault(spec, set()).add(record["call"])
        sums = totals.setdefault(spec, dict.fromkeys(CAPTURE_KEYS, 0.0))
        for key in CAPTURE_KEYS:
            sums[key] += record[key] / record["call_images"]  # the call's figure, shared over its images
    per_call = {}
    for spec, sums in totals.items():
        timed = sums["graph_replays"] - sums["graph_captures"]
        per_call[spec] = {key: value / len(calls[spec]) for key, value in sums.items()}
        per_call[spec]["ms_per_replay"] = sums["replay_seconds"] / timed * 1e3 if timed > 0 else None
    return per_call


def _kernel_profile(
    pipe, prompt: str, spec: str, call: dict[str, Any], steps: int = 40, top: int = 15
) -> dict[str, Any]:
    """The first `steps` decode steps of `spec`, eagerly, under the torch profiler: the GPU time and kernel
    launches per forward pass, and the kernels that take the most of it. A captured step replays these same
    kernels; its `ms_per_replay` over this GPU time is what the gaps between them cost."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    def stop(pipe, step, forward_passes, tensors):
        if forward_passes > steps:  # the prefill is the first forward pass
            pipe._interrupt = True
        return tensors

    eager = {**call, "compile": "none"}
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        out = pipe(prompt, sampler=spec, seed=0, output_type="latent", callback_on_step_end=stop, **eager)
        torch.cuda.synchronize()
    passes = out.stats[0].forward_passes  # the prefill reads the weights once too: it counts as one
    kernels = [e for e in profiler.key_averages() if e.self_device_time_total > 0]
    total_us = sum(e.self_device_time_total for e in kernels)
    rows = sorted(kernels, key=lambda e: -e.self_device_time_total)[:top]
    return {
        "forward_passes": passes,
        "gpu_ms_per_forward": total_us / passes / 1e3,
        "kernels_per_forward": sum(e.count for e in kernels) / passes,
        "top": [
            {
                "kernel": e.key[:120],
                "per_forward": e.count / passes,
                "ms_per_forward": e.self_device_time_total / passes / 1e3,
                "share": e.self_device_time_total / total_us,
            }
            for e in rows
        ],
    }


def _commit() -> str | None:
    """The checkout's commit (`-dirty` with uncommitted changes), or None outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def read_junit(path: Path) -> dict[str, Any]:
    """Counts and failures of a JUnit XML test report (pytest's `--junitxml`)."""
    if not Path(path).is_file():
        return {"file": str(path), "error": "no such file (the test run did not finish)"}
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {
        key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")
    }
    failed = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in root.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    return {"file": str(path), **counts, "failed": failed}


# -- the report ------------------------------------------------------------------------------------------
def write_report(report: dict[str, Any], path: Path) -> None:
    """`report.md` from a suite's `report.json` contents."""
    env = report.get("environment") or {}
    lines = [
        f"# arjet bench --suite {report['suite']}",
        "",
        f"{report['description']}. Commit {report.get('commit') or 'unknown'}; {env.get('gpu', env.get('device', '?'))}, "
        f"torch {env.get('torch', '?')}; {report['seconds']:.0f} s in all.",
        "",
        "## Targets",
        "",
    ]
    rows = []
    for t in report["targets"]:
        sign = ">=" if t["at_least"] else "<="
        value = "not measured" if t["value"] is None else f"{t['value']:.3g}{t['unit']}"
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        rows.append((t["target"], value, f"{sign} {t['limit']:g}{t['unit']}", met))
    lines += [markdown_table(("target", "measured", "limit", "met"), rows), ""]
    tests = report.get("tests")
    if tests:
        lines += ["## Tests", ""]
        if tests.get("error"):
            lines.append(f"{tests['file']}: {tests['error']}")
        else:
            lines.append(
                f"{tests['tests']} tests: {tests['tests'] - tests['failures'] - tests['errors'] - tests['skipped']} "
                f"passed, {tests['failures']} failed, {tests['errors']} errors, {tests['skipped']} skipped."
            )
            lines += [f"- failed: `{name}`" for name in tests["failed"]]
        lines.append("")
    for section in report["sections"].values():
        lines += _section_lines(section)
    Path(path).write_text("\n".join(lines) + "\n")


def _section_lines(section: dict[str, Any]) -> list[str]:
    lines = [f"## {section['name']}: {section['title']}", ""]
    error = section.get("error")
    lines += [
        f"{section['status']} in {section['seconds']:.0f} s"
        + (f": {error.strip().splitlines()[-1]}" if error else "."),
        "",
    ]
    if section.get("floor"):
        rows = [(str(f["queries"]), number(f["eager_ms"]), number(f["graph_ms"])) for f in section["floor"]]
        lines += [markdown_table(("query tokens", "eager ms", "CUDA graph ms"), rows, [True, True, True]), ""]
    matches = codes_match(section)
    for run in section.get("runs", []):
        lines += [f"### {run['label']}", "", _run_table(run), ""]
        for sampler, counts in run.get("capture", {}).items():
            same = {True: "; codes equal eager's", False: "; **codes differ from eager's**", None: ""}[
                matches.get(f"{run['label']}: {sampler}")
            ]
            lines.append(
                f"- `{sampler}`, per call: {significant(counts['graph_captures'])} graphs captured, "
                f"{significant(counts['eager_steps'])} eager warm-up steps, {significant(counts['graph_replays'])} "
                f"replays ({significant(counts['ms_per_replay'])} ms each on the device), "
                f"{significant(counts['capture_seconds'])} s in warm-up and capture{same}"
            )
        if run.get("capture"):
            lines.append("")
        for sampler, profile in run.get("profiles", {}).items():
            lines += _profile_lines(sampler, profile)
    return lines


def _run_table(run: dict[str, Any]) -> str:
    """The bench table of a run (`arjet bench`'s columns), plus the device time of a replayed step."""
    from dataclasses import fields

    from .bench import BenchResult

    known = {f.name for f in fields(SamplerSummary)}
    summaries = [SamplerSummary(**{k: v for k, v in s.items() if k in known}) for s in run["summaries"]]
    table = BenchResult(summaries, []).table().splitlines()
    if run["compile"] != "cuda-graphs":
        return "\n".join(table)
    table[0] += " ms / replayed step |"
    table[1] += " ---: |"
    for i, s in enumerate(run["summaries"]):
        table[2 + i] += f" {significant(s.get('ms_per_replay'))} |"
    return "\n".join(table)


def _profile_lines(sampler: str, profile: dict[str, Any]) -> list[str]:
    rows = [
        (f"`{k['kernel']}`", number(k["per_forward"], 1), number(k["ms_per_forward"], 3), f"{k['share']:.0%}")
        for k in profile["top"]
    ]
    return [
        f"Kernels of `{sampler}` (eager, first {profile['forward_passes']} forward passes under the torch profiler): "
        f"{profile['gpu_ms_per_forward']:.3g} ms of GPU time and {profile['kernels_per_forward']:.0f} kernels per "
        "forward pass.",
        "",
        markdown_table(("kernel", "per forward", "ms per forward", "share"), rows, [False, True, True, True]),
        "",
    ]


def codes_match(section: dict[str, Any]) -> dict[str, bool]:
    """Per captured run and sampler: do its codes equal the eager run's of the same label (same seeds)?"""
    eager = {
        r["label"].removesuffix(" eager"): r["codes"]
        for r in section.get("runs", [])
        if r["compile"] == "none"
    }
    matches = {}
    for run in section.get("runs", []):
        base = eager.get(run["label"].removesuffix(" cuda-graphs"))
        if run["compile"] != "cuda-graphs" or base is None:
            continue
        for sampler, codes in run["codes"].items():
            if sampler in base:
                matches[f"{run['label']}: {sampler}"] = base[sampler] == codes
    return matches


__all__ = [
    "BenchRun",
    "Figure",
    "FloorShapes",
    "SUITES",
    "Section",
    "Suite",
    "Target",
    "get_suite",
    "read_junit",
    "run_section",
    "run_suite",
    "write_report",
]
