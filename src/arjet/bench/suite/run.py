"""Running a suite: each section in a spawned child process with a time limit, the report after each."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .report import codes_target, write_report
from .spec import BenchRun, Section, Suite, ThroughputRun


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

    def write() -> dict[str, Any]:
        report = {
            "suite": suite.name,
            "description": suite.description,
            "commit": commit,
            "seconds": time.monotonic() - started,
            "environment": next((r["environment"] for r in results.values() if r.get("environment")), {}),
            "tests": read_junit(tests) if tests is not None else None,
            "targets": [*(target.check(results) for target in suite.targets), codes_target(results)],
            "sections": results,
        }
        (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
        write_report(report, out / "report.md")
        return report

    report = write()  # the tests' outcome, before any section (and the whole report when none is chosen)
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
        report = write()
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

    from ...machine import end_with_parent

    end_with_parent()  # a killed suite leaves no section running on the GPU
    result: dict[str, Any] = {"runs": [], "floor": None, "error": None, "environment": {}}

    def save() -> None:
        Path(path).write_text(json.dumps(result))

    try:
        if section.floor is not None:
            from ..floor import decoder_graph_floor

            floors = decoder_graph_floor(**asdict(section.floor), device=device)
            result["floor"] = [asdict(f) for f in floors]
            result["environment"] = {
                "device": device,
                "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name(device),
            }
            save()
        if section.runs or section.throughput:
            pipe = _section_pipeline(section, device)
            for run in section.runs:
                result["runs"].append(_bench_run(pipe, section, run))
                result["environment"] = result["runs"][-1].pop("environment")
                save()
                print(f"[{section.name}] {run.label}: done", flush=True)
            if section.throughput is not None:
                from ..speed import environment

                result["environment"] = environment(pipe, {"compile": _engine_compile(device)})
                result["throughput"] = []
                for rows in _throughput_rows(pipe, section.throughput, device):
                    result["throughput"] += rows  # saved per concurrency: a section stopped keeps them
                    save()
    except Exception:  # noqa: BLE001 (recorded in the report)
        result["error"] = traceback.format_exc(limit=8)
        print(result["error"], flush=True)
    save()


def _section_pipeline(section: Section, device: str):
    from ...pipelines.loading import torch_dtype

    if section.arch is not None:
        from ...presets import random_pipeline

        dtype = torch_dtype(section.dtype) if section.dtype else None
        return random_pipeline(
            section.arch, device=device, dtype=dtype, height=section.size, width=section.size
        )
    from ...builtin import load_model

    return load_model(section.model, device=device, dtype=section.dtype)


def _bench_run(pipe, section: Section, run: BenchRun) -> dict[str, Any]:
    import warnings

    from ...data.prompts import load_prompts
    from ..samplers import run_bench

    prompts = load_prompts("shapes", run.n)
    begin = time.monotonic()
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
        "seconds": time.monotonic() - begin,  # the whole run: warm-up calls (compiling), calls, profiles
        "environment": result.environment,
    }


def _throughput_rows(pipe, run: ThroughputRun, device: str) -> Iterator[list[dict[str, Any]]]:
    """`run_throughput` at each concurrency in turn with `max(n, concurrency)` images (every lane used once):
    the rows of each concurrency as it finishes."""
    import warnings

    from ...data.prompts import load_prompts
    from ..throughput import run_throughput

    with warnings.catch_warnings():  # a random model's word-level vocabulary: words do not change the cost
        warnings.filterwarnings("ignore", message=r"prompt .*the text tokenizer does not know")
        for concurrency in run.concurrencies:
            prompts = load_prompts("shapes", max(run.n, concurrency))
            result = run_throughput(
                pipe, run.samplers, prompts, [concurrency], compile=_engine_compile(device), progress=False
            )
            yield result.to_dict()["rows"]


def _engine_compile(device: str) -> str | bool:
    """The engine sections' mode: captured steps on a GPU."""
    return "cuda-graphs" if device.startswith("cuda") else False


def _capture_per_call(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per sampler, what the CUDA-graph runner did in an average call (`CAPTURE_KEYS`), and the device time of
    one replayed step (`ms_per_replay`: replays after the first of each graph, which runs inside its capture)."""
    from ...session.capture import CAPTURE_KEYS

    totals: dict[str, dict[str, float]] = {}
    calls: dict[str, set] = {}
    for record in records:
        if "graph_captures" not in record:
            continue
        spec = record["sampler"]
        calls.setdefault(spec, set()).add(record["call"])
        sums = totals.setdefault(spec, dict.fromkeys(CAPTURE_KEYS, 0.0))
        for key in CAPTURE_KEYS:
            # the call's figure, shared over its images (graph memory: absent from records made before it)
            sums[key] += record.get(key, 0) / record["call_images"]
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
            pipe.interrupt = True
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
