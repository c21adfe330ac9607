"""The suite's report: `report.md` rendered from the contents of `report.json`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...limits import CAPTURED_CHOICES
from ...reports.tables import markdown_table, number, significant
from ..speed import SamplerSummary

CAPTURED = CAPTURED_CHOICES  # the captured modes, from limits.py (no torch here)


def codes_target(results: dict[str, Any]) -> dict[str, Any]:
    """Captured runs whose codes equal the eager run's of the same images (seeds, sampler, size). Runs of
    compiled kernels are not counted: inductor's fused kernels round differently from eager's."""
    matches = [same for section in results.values() for same in codes_match(section).values()]
    return {
        "target": "captured and eager codes equal (runs x samplers compared)",
        "value": sum(matches) if matches else None,
        "limit": len(matches),
        "at_least": True,
        "unit": "",
        "met": all(matches) if matches else None,
    }


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
    if section.get("throughput"):
        lines += [_throughput_table(section["throughput"]), ""]
    matches = {**codes_match(section), **codes_match(section, "inductor-graphs")}
    for run in section.get("runs", []):
        lines += [f"### {run['label']}", "", _run_table(run), ""]
        if run.get("seconds") is not None:
            warm = "its untimed first call per sampler included" if run["warmup"] else "no untimed first call"
            lines += [f"{run['seconds']:.0f} s in all ({warm}).", ""]
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

    from ..samplers import BenchResult

    known = {f.name for f in fields(SamplerSummary)}
    summaries = [SamplerSummary(**{k: v for k, v in s.items() if k in known}) for s in run["summaries"]]
    table = BenchResult(summaries, []).table().splitlines()
    if run["compile"] not in CAPTURED:
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


def codes_match(section: dict[str, Any], mode: str = "cuda-graphs") -> dict[str, bool]:
    """Per run in compile `mode` and sampler: do its codes equal the eager run's of the same label (same
    seeds)?"""
    eager = {
        r["label"].removesuffix(" eager"): r["codes"]
        for r in section.get("runs", [])
        if r["compile"] == "none"
    }
    matches = {}
    for run in section.get("runs", []):
        base = eager.get(run["label"].removesuffix(f" {mode}"))
        if run["compile"] != mode or base is None:
            continue
        for sampler, codes in run["codes"].items():
            if sampler in base:
                matches[f"{run['label']}: {sampler}"] = base[sampler] == codes
    return matches


def _throughput_table(rows: list[dict[str, Any]]) -> str:
    from ..throughput import ThroughputResult, ThroughputRow

    return ThroughputResult([ThroughputRow(**row) for row in rows]).table()
