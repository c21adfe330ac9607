"""The frontier across eval runs: which points it keeps, `ar`'s spread, which seconds it compares, and the
files and command that write it."""

import json
import os
import re

import pytest

from arjet.cli.main import main
from arjet.eval.frontier import Frontier, Point, load_points, pareto, quality, write


def run_folder(root, name, seed, rows):
    """A finished run's `metrics.json` as `arjet eval` writes it: rows of (sampler, fid, clip, forwards, s)."""
    folder = root / name
    folder.mkdir()
    samplers = [
        {"sampler": s, "fid": fid, "clip_score": clip, "forward_passes": forwards, "seconds": seconds}
        for s, fid, clip, forwards, seconds in rows
    ]
    metrics = {"command": "arjet eval ...", "settings": {"seeds": [seed]}, "samplers": samplers}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return folder


@pytest.fixture
def runs(tmp_path):
    main_run = run_folder(
        tmp_path,
        "main",
        0,
        [
            ("ar", 50.0, 67.0, 256.0, 2.0),
            ("fast-bad", 70.0, 60.0, 60.0, 0.5),  # cheapest, worst: on the front all the same
            ("good", 46.0, 67.5, 80.0, 1.0),
            ("dominated", 48.0, 66.0, 90.0, 1.1),  # beaten by `good` on forwards, seconds and both metrics
            ("slow-best", 44.0, 68.5, 120.0, 3.0),
        ],
    )
    second = run_folder(
        tmp_path, "seed1000", 1000, [("ar", 45.0, 68.0, 256.0, 9.0), ("good", 47.0, 66.9, 79.0, 0.1)]
    )
    return [main_run, second]


def test_a_sampler_at_a_seed_in_several_runs_is_taken_from_the_first(runs, tmp_path):
    again = run_folder(tmp_path, "again", 0, [("ar", 10.0, 10.0, 256.0, 1.0), ("new", 47.0, 67.0, 70.0, 1.0)])
    points = load_points([*runs, again])
    assert [(p.sampler, p.seed, p.run) for p in points if p.sampler in ("ar", "new")] == [
        ("ar", 0, "main"),
        ("ar", 1000, "seed1000"),
        ("new", 0, "again"),
    ]


def test_the_front_keeps_exactly_the_points_nothing_beats_on_both_axes():
    points = [Point(s, 0, "r", fid, None, forwards, None) for s, fid, forwards in
              [("a", 60.0, 50.0), ("b", 50.0, 60.0), ("c", 55.0, 70.0), ("d", 40.0, 100.0), ("e", 40.0, 120.0)]]  # fmt: skip
    front = pareto(points, lambda p: p.forward_passes, quality("fid"))
    assert [p.sampler for p in front] == ["a", "b", "d"]  # c: worse than b at more cost; e: d's FID, dearer


def test_ar_spread_spans_every_run_and_seed_and_decides_inside(runs):
    frontier = Frontier.of(load_points(runs))
    assert frontier.spread == {"fid": (45.0, 50.0), "clip_score": (67.0, 68.0)}
    inside = {(p.sampler, p.seed): frontier.inside_spread(p) for p in frontier.points}
    assert inside[("good", 0)] and inside[("slow-best", 0)]  # FID below the spread beats it: inside
    assert not inside[("dominated", 0)] and not inside[("fast-bad", 0)] and not inside[("good", 1000)]


def test_seconds_are_compared_within_the_timed_run_only(runs):
    frontier = Frontier.of(load_points(runs))
    assert frontier.timed == "main"  # the run holding most samplers
    by_seconds = [p.sampler for p in frontier.fronts["seconds", "fid"]]
    assert by_seconds == ["fast-bad", "good", "slow-best"]  # seed 1000's 0.1 s ran on other cores: not here
    by_forwards = [(p.sampler, p.seed) for p in frontier.fronts["forward_passes", "fid"]]
    assert by_forwards == [("fast-bad", 0), ("good", 1000), ("good", 0), ("slow-best", 0)]
    other = Frontier.of(load_points(runs), timed="seed1000").fronts["seconds", "fid"]
    assert [p.sampler for p in other] == ["good", "ar"]


def test_write_leaves_the_plot_the_table_and_the_figures(runs, tmp_path):
    frontier = Frontier.of(load_points(runs))
    figure = write(frontier, tmp_path / "out")
    assert figure.stat().st_size > 10_000
    table = (tmp_path / "out" / "frontier.md").read_text()
    assert table.startswith("# The speed-quality frontier\n\n![") and "Seconds are `main`'s only" in table
    assert "| `good` | 0 | main | 46.00 | 67.50 | 80.0 | 3.20x | 1.000 | yes | yes |" in table
    assert "| `good` | 1000 | seed1000 | 47.00 | 66.90 | 79.0 | 3.24x | n/a | no | yes |" in table
    assert "| `dominated` | 0 | main | 48.00 | 66.00 | 90.0 | 2.84x | 1.100 | no |  |" in table
    saved = json.loads((tmp_path / "out" / "frontier.json").read_text())
    assert saved["timed"] == "main" and saved["spread"]["fid"] == [45.0, 50.0]
    assert ["slow-best", 0, "main"] in saved["fronts"]["forward_passes/clip_score"]


def test_the_command_writes_the_frontier(runs, tmp_path, capsys):
    assert main(["frontier", *map(str, runs), "--out", str(tmp_path / "cmd")]) == 0
    assert (tmp_path / "cmd" / "frontier.png").is_file()
    assert "frontier.md" in capsys.readouterr().out


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda root: [root], "is not a finished `arjet eval` run: it has no metrics.json"),
        (lambda root: [run_folder(root, "two", 0, [])], "no sampler results in the runs given"),
    ],
)
def test_bad_runs_are_refused_with_the_reason(tmp_path, make, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        load_points(make(tmp_path))


def test_a_run_of_several_seeds_and_an_unknown_timed_run_are_refused(runs, tmp_path, capsys):
    folder = run_folder(tmp_path, "many", 0, [("ar", 50.0, 67.0, 256.0, 2.0)])
    metrics = json.loads((folder / "metrics.json").read_text())
    (folder / "metrics.json").write_text(json.dumps(metrics | {"settings": {"seeds": [0, 1]}}))
    with pytest.raises(ValueError, match=r"averages seeds \[0, 1\]: give runs of one seed each"):
        load_points([folder])
    assert main(["frontier", *map(str, runs), "--out", str(tmp_path / "x"), "--timed", "nope"]) == 2
    assert "timed run 'nope' is not among the runs: ['main', 'seed1000']" in capsys.readouterr().err


@pytest.mark.parametrize(
    "metrics, error",
    [
        ({}, "is not an `arjet eval` metrics file (no samplers list or seeds)"),
        ([], "is not an `arjet eval` metrics file"),
        (None, "is not an `arjet eval` metrics file"),
        ({"samplers": {}, "settings": {"seeds": [0]}}, "is not an `arjet eval` metrics file"),
        ({"samplers": [], "settings": {"seeds": ["0"]}}, "is not an `arjet eval` metrics file"),
        ({"samplers": [5], "settings": {}}, "samplers[0] is not a sampler's row"),
        ({"samplers": [{"sampler": "ar"}]}, "samplers[0]: forward_passes must be a number > 0, got None"),
        (
            {"samplers": [{"sampler": "ar", "forward_passes": -1}]},
            "forward_passes must be a number > 0, got -1",
        ),
        (
            {"samplers": [{"sampler": "ar", "forward_passes": 0}]},
            "forward_passes must be a number > 0, got 0",
        ),
        (
            {"samplers": [{"sampler": "a", "forward_passes": 9, "fid": "x"}]},
            "fid must be a finite number >= 0",
        ),
    ],
)
def test_a_metrics_file_of_another_shape_is_refused_naming_it(tmp_path, capsys, metrics, error):
    """The sixth re-probe's X6: such files gave KeyError / TypeError tracebacks."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.json").write_text(json.dumps(metrics))
    assert main(["frontier", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 2
    message = capsys.readouterr().err
    assert message.startswith(f"arjet frontier: error: {tmp_path / 'run'}") and error in message, message
    assert message.count("\n") == 1


def test_a_metrics_file_with_nan_forwards_huge_or_a_fifo_is_refused(tmp_path):
    (tmp_path / "nan").mkdir()
    (tmp_path / "nan" / "metrics.json").write_text('{"samplers": [{"sampler": "ar", "forward_passes": NaN}]}')
    with pytest.raises(ValueError, match="forward_passes must be a number > 0, got nan"):
        load_points([tmp_path / "nan"])
    (tmp_path / "huge").mkdir()
    (tmp_path / "huge" / "metrics.json").touch()
    os.truncate(tmp_path / "huge" / "metrics.json", 2**40)
    with pytest.raises(ValueError, match="metrics.json holds more than"):
        load_points([tmp_path / "huge"])
