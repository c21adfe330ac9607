"""Benchmark suites: sections in child processes with time limits, targets read from the results, the report."""

import json

import pytest
import torch

from arjet.bench.suite import (
    SUITES,
    BenchRun,
    Figure,
    Section,
    Suite,
    Target,
    codes_match,
    read_junit,
    run_section,
    run_suite,
    write_report,
)

SHAPES_RUN = BenchRun("batch 1 eager", ("ar", "sjd"), compile="none", n=1, warmup=False)


def _summary(sampler: str, **figures) -> dict:
    row = {
        "sampler": sampler,
        "images": 1,
        "forward_passes": 10.0,
        "tokens": 16.0,
        "seconds": 1.0,
        "accepted_per_step": 1.0,
        "peak_memory_mb": None,
    }
    return {**row, **figures}


def _results() -> dict:
    run = {
        "label": "r",
        "compile": "cuda-graphs",
        "summaries": [_summary("ar", ms_per_forward=4.0), _summary("sjd", ms_per_forward=5.0)],
    }
    return {
        "m": {"runs": [run], "floor": None},
        "f": {"runs": [], "floor": [{"queries": 1, "graph_ms": 3.2}]},
    }


def test_figures_and_targets_read_the_results():
    results = _results()
    assert Figure("m", "r", "sjd", "ms_per_forward").read(results) == 5.0
    assert Figure("f", "floor", "1", "graph_ms").read(results) == 3.2
    assert Figure("m", "r", "zipar", "ms_per_forward").read(results) is None
    assert Figure("absent", "r", "ar", "ms_per_forward").read(results) is None
    ratio = Target(
        "sjd over ar",
        Figure("m", "r", "sjd", "ms_per_forward"),
        1.25,
        per=Figure("m", "r", "ar", "ms_per_forward"),
    ).check(results)
    assert ratio["value"] == pytest.approx(1.25) and ratio["met"] is True
    floor = Target(
        "ar over floor",
        Figure("m", "r", "ar", "ms_per_forward"),
        1.2,
        per=Figure("f", "floor", "1", "graph_ms"),
    ).check(results)
    assert floor["value"] == pytest.approx(1.25) and floor["met"] is False
    at_least = Target("x", Figure("m", "r", "ar", "ms_per_forward"), 5.0, at_least=True).check(results)
    assert at_least["met"] is False
    missing = Target("y", Figure("m", "r", "zipar", "ms_per_forward"), 1.0).check(results)
    assert missing["value"] is None and missing["met"] is None


def test_figures_read_an_engine_sections_throughput_rows():
    rows = [
        {"sampler": s, "concurrency": c, "images_per_second": v}
        for s, c, v in (("ar", 8, 10.0), ("adaptive", 8, 25.0), ("adaptive", 1, 4.0))
    ]
    results = {"e": {"runs": [], "floor": None, "throughput": rows}}
    ratio = Target(
        "adaptive over ar",
        Figure("e", "concurrency 8", "adaptive", "images_per_second"),
        2.0,
        per=Figure("e", "concurrency 8", "ar", "images_per_second"),
        at_least=True,
    ).check(results)
    assert ratio["value"] == pytest.approx(2.5) and ratio["met"] is True
    assert Figure("e", "concurrency 32", "ar", "images_per_second").read(results) is None


def test_captured_codes_are_compared_with_the_eager_run_of_the_same_label():
    section = {
        "runs": [
            {"label": "384 px eager", "compile": "none", "codes": {"ar": ["a", "b"], "sjd": ["c"]}},
            {
                "label": "384 px cuda-graphs",
                "compile": "cuda-graphs",
                "codes": {"ar": ["a", "b"], "sjd": ["x"]},
            },
            {
                "label": "768 px cuda-graphs",
                "compile": "cuda-graphs",
                "codes": {"ar": ["z"]},
            },  # no eager twin
        ]
    }
    assert codes_match(section) == {"384 px cuda-graphs: ar": True, "384 px cuda-graphs: sjd": False}
    compiled = {"label": "384 px inductor-graphs", "compile": "inductor-graphs", "codes": {"ar": ["a", "q"]}}
    section["runs"].append(compiled)
    assert codes_match(section, "inductor-graphs") == {"384 px inductor-graphs: ar": False}
    assert "384 px inductor-graphs: ar" not in codes_match(section)  # the target counts plain captures only


def test_the_gpu_suites_name_sections_their_targets_read():
    for suite in SUITES.values():
        names = {section.name for section in suite.sections}
        runs = {(s.name, r.label) for s in suite.sections for r in s.runs} | {
            (s.name, "floor") for s in suite.sections if s.floor
        }
        runs |= {
            (s.name, f"concurrency {c}")
            for s in suite.sections
            if s.throughput
            for c in s.throughput.concurrencies
        }
        for target in suite.targets:
            for figure in filter(None, (target.value, target.per)):
                assert figure.section in names and (figure.section, figure.run) in runs, target.name
        assert sum(s.timeout_s for s in suite.sections) >= suite.budget_s  # the budget, not the limits, binds


def test_the_proof_suite_measures_the_issues_sections_and_the_default_mode():
    from arjet.bench.suite.gpu import default_mode

    suite = SUITES["gpu-proof"]
    assert [s.name for s in suite.sections] == [
        "shapes",
        "shapes-engine",
        "graph-floor",
        "janus-pro-7b",
        "lumina-mgpt-7b",
    ]
    assert default_mode() == "cuda-graphs"  # `pipe(...)` captures its steps on a GPU unless told otherwise
    default = suite.targets[0]
    assert "default mode (cuda-graphs)" in default.name and default.value.run == "batch 1 cuda-graphs"
    assert default.per.run == "batch 1 eager"
    modes = {r.compile for s in suite.sections for r in s.runs}
    assert modes == {"none", "cuda-graphs", "inductor-graphs"}
    assert SUITES["gpu-proof"].sections[1].throughput.concurrencies == (1, 8)


def test_a_suite_of_no_sections_reports_its_tests(tmp_path):
    junit = tmp_path / "tests.xml"
    junit.write_text(
        '<testsuite tests="2" failures="0" errors="0" skipped="0"><testcase classname="t" name="a"/>'
        '<testcase classname="t" name="b"/></testsuite>'
    )
    report = run_suite(SUITES["gpu-proof"], tmp_path / "out", sections=[], tests=junit, log=lambda _: None)
    assert report["sections"] == {} and report["tests"]["tests"] == 2
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "2 tests: 2 passed, 0 failed" in markdown and "| not measured |" in markdown


def test_a_section_records_its_runs_and_codes(tmp_path):
    path = tmp_path / "section.json"
    run_section(
        Section("shapes", "built-in", 60, model="shapes", runs=(SHAPES_RUN,)), str(path), device="cpu"
    )
    result = json.loads(path.read_text())
    assert result["error"] is None and result["environment"]["device"] == "cpu"
    (run,) = result["runs"]
    assert [s["sampler"] for s in run["summaries"]] == ["ar", "sjd"]
    assert run["summaries"][0]["forward_passes"] == 256 and len(run["codes"]["sjd"][0]) == 40  # a SHA-1
    assert run["capture"] == {}  # eager: nothing captured


def test_a_failing_section_is_recorded_not_raised(tmp_path):
    path = tmp_path / "section.json"
    run_section(Section("bad", "no model", 60, model="no-such-model", runs=(SHAPES_RUN,)), str(path), "cpu")
    result = json.loads(path.read_text())
    assert "no-such-model" in result["error"] and result["runs"] == []


@pytest.mark.slow
def test_a_suite_runs_sections_apart_and_reports_every_outcome(tmp_path):
    """One section measures, one fails, one outlives its limit, and the next still runs: the report says
    which, and the targets read what was measured."""
    suite = Suite(
        "test",
        "a CPU suite",
        (
            Section("shapes", "built-in", 120, model="shapes", runs=(SHAPES_RUN,)),
            Section("bad", "no model", 60, model="no-such-model", runs=(SHAPES_RUN,)),
            Section("slow", "outlives its limit", 1, model="shapes", runs=(SHAPES_RUN,)),
            Section("late", "past the budget", 120, model="shapes", runs=(SHAPES_RUN,)),
        ),
        (
            Target(
                "sjd fewer passes",
                Figure("shapes", SHAPES_RUN.label, "sjd", "step_compression"),
                1.0,
                at_least=True,
            ),
            Target("bad", Figure("bad", SHAPES_RUN.label, "ar", "ms_per_forward"), 1.0),
        ),
        budget_s=10_000,
    )
    junit = tmp_path / "tests.xml"
    junit.write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
        '<testcase classname="t" name="ok"/><testcase classname="t" name="bad"><failure/></testcase>'
        '<testcase classname="t" name="skip"><skipped/></testcase></testsuite></testsuites>'
    )
    lines: list[str] = []
    report = run_suite(suite, tmp_path / "out", budget_s=10_000, tests=junit, device="cpu", log=lines.append)
    status = {name: s["status"] for name, s in report["sections"].items()}
    assert status == {"shapes": "ok", "bad": "failed", "slow": "timeout", "late": "ok"}
    assert report["targets"][0]["met"] is True and report["targets"][1]["met"] is None
    assert report["tests"] == {
        "file": str(junit),
        "tests": 3,
        "failures": 1,
        "errors": 0,
        "skipped": 1,
        "failed": ["t::bad"],
    }
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| sjd fewer passes |" in markdown and "1 passed, 1 failed" in markdown and "t::bad" in markdown
    assert "## slow: outlives its limit" in markdown and "stopped at its limit of 1 s" in markdown
    assert json.loads((tmp_path / "out" / "report.json").read_text())["suite"] == "test"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.json", "report.md"]
    assert any(line.startswith("[slow] timeout") for line in lines)


def test_a_section_that_no_longer_fits_the_budget_is_skipped(tmp_path):
    suite = Suite("test", "budget", (Section("late", "never runs", 120, model="shapes", runs=(SHAPES_RUN,)),))
    report = run_suite(suite, tmp_path, budget_s=30, device="cpu", log=lambda _: None)
    assert report["sections"]["late"]["status"] == "skipped"
    assert "skipped in 0 s: 30 s of the budget left" in (tmp_path / "report.md").read_text()


def test_unknown_sections_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="unknown section.*nope.*choose from shapes"):
        run_suite(SUITES["gpu"], tmp_path / "x", sections=["nope"])
    assert not (tmp_path / "x").exists()


def test_a_missing_junit_file_is_reported():
    assert "did not finish" in read_junit("/nonexistent.xml")["error"]


def test_the_report_renders_from_its_json(tmp_path):
    report = {
        "suite": "gpu",
        "description": "d",
        "commit": "abc",
        "seconds": 3.0,
        "environment": {"gpu": "NVIDIA H100", "torch": "2.11"},
        "tests": None,
        "targets": [
            {"target": "t", "value": 1.1, "limit": 1.25, "at_least": False, "unit": "x", "met": True}
        ],
        "sections": {
            "m": {
                "name": "m",
                "title": "model",
                "status": "ok",
                "seconds": 2.0,
                "error": None,
                "floor": None,
                "runs": [
                    {
                        "label": "r",
                        "compile": "cuda-graphs",
                        "codes": {},
                        "summaries": [_summary("ar")],
                        "capture": {
                            "ar": {
                                "graph_captures": 2,
                                "graph_replays": 10,
                                "eager_steps": 4,
                                "capture_seconds": 0.5,
                                "replay_seconds": 0.008,
                                "ms_per_replay": 1.0,
                            }
                        },
                    }
                ],
            }
        },
    }
    write_report(report, tmp_path / "report.md")
    text = (tmp_path / "report.md").read_text()
    assert "Commit abc; NVIDIA H100, torch 2.11" in text and "| t | 1.1x | <= 1.25x | yes |" in text
    assert (
        "- `ar`, per call: 2 graphs captured, 4 eager warm-up steps, 10 replays (1 ms each on the device)"
        in text
    )


def test_capture_counts_are_per_call_and_replays_are_timed_after_capture():
    from arjet.bench.suite.run import _capture_per_call

    def record(call, images, captures, replays, replay_seconds):
        counts = dict(
            graph_captures=captures,
            graph_replays=replays,
            eager_steps=2 * captures,
            capture_seconds=0.1,
            replay_seconds=replay_seconds,
        )
        return {"sampler": "sjd", "call": call, "call_images": images, **counts}

    # call 0 decodes two images (both records carry the call's counts), call 1 one image
    records = [record(0, 2, 2, 12, 0.010), record(0, 2, 2, 12, 0.010), record(1, 1, 4, 24, 0.020)]
    counts = _capture_per_call(records)["sjd"]
    assert counts["graph_captures"] == 3 and counts["graph_replays"] == 18 and counts["eager_steps"] == 6
    # the first replay of each graph runs inside its capture and is not timed: (12 - 2) + (24 - 4) timed
    assert counts["ms_per_replay"] == pytest.approx(30 / 30)


@pytest.mark.cuda
def test_a_section_captures_on_the_gpu(tmp_path):
    path = tmp_path / "section.json"
    runs = (
        BenchRun("b eager", ("ar", "sjd"), compile="none", n=2, batch_size=2),
        BenchRun("b cuda-graphs", ("ar", "sjd"), n=2, batch_size=2, profile=("sjd",)),
    )
    run_section(Section("shapes", "built-in", 60, model="shapes", runs=runs), str(path), device="cuda")
    result = json.loads(path.read_text())
    assert result["error"] is None and torch.cuda.get_device_name() == result["environment"]["gpu"]
    assert codes_match(result) == {"b cuda-graphs: ar": True, "b cuda-graphs: sjd": True}
    captured = result["runs"][1]
    assert captured["capture"]["sjd"]["graph_replays"] > 0
    assert all(s["ms_per_replay"] > 0 for s in captured["summaries"])
    profile = captured["profiles"]["sjd"]
    assert profile["gpu_ms_per_forward"] > 0 and profile["kernels_per_forward"] > 10
    assert 0 < sum(k["share"] for k in profile["top"]) <= 1 + 1e-9
    write_report(
        {
            "suite": "t",
            "description": "d",
            "seconds": 1.0,
            "targets": [],
            "tests": None,
            "sections": {
                "shapes": {**result, "name": "shapes", "title": "t", "status": "ok", "seconds": 1.0}
            },
        },
        tmp_path / "report.md",
    )
    assert "Kernels of `sjd` (eager, first" in (tmp_path / "report.md").read_text()


@pytest.mark.slow
def test_a_throughput_section_reports_the_engine_at_each_concurrency(tmp_path):
    from arjet.bench.suite import ThroughputRun

    path = tmp_path / "section.json"
    section = Section(
        "engine", "built-in", 120, model="shapes", throughput=ThroughputRun(("ar",), (1, 2), n=1)
    )
    run_section(section, str(path), device="cpu")
    result = json.loads(path.read_text())
    assert result["error"] is None
    assert result["environment"]["device"] == "cpu"  # the report names the machine of an engine section too
    assert [(row["sampler"], row["concurrency"], row["images"]) for row in result["throughput"]] == [
        ("ar", 1, 1),
        ("ar", 2, 2),
    ]
    report = {
        "suite": "t",
        "description": "d",
        "seconds": 1.0,
        "targets": [],
        "tests": None,
        "sections": {"engine": {**result, "name": "engine", "title": "t", "status": "ok", "seconds": 1.0}},
    }
    write_report(report, tmp_path / "report.md")
    assert "| ar | 2 |" in (tmp_path / "report.md").read_text()
