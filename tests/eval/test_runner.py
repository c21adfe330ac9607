"""`arjet eval` end to end on a tiny pipeline: outputs, resume after a kill, two processes, bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arjet.cli import main
from arjet.cli.eval import parse_seeds
from arjet.cli.options import parse_specs as parse_sampler_specs
from arjet.eval.records import RecordLog, read_records
from arjet.testing import tiny_pipeline

from .conftest import colour_squares, fake_data_module, to_pil
from ports import free_port

SAMPLERS = "ar,sjd:window=4,zipar"
PROMPTS = ["a red square", "a blue circle", "a green triangle", "a yellow star", "a white cat"]
TIMING = ("seconds",)  # the only per-image fields allowed to differ between equivalent runs


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_clip_dir):
    root = tmp_path_factory.mktemp("eval")
    tiny_pipeline("janus", grid=(4, 4), vocab_size=16, logit_scale=3.0).save_pretrained(root / "model")
    (root / "real").mkdir()
    for k, image in enumerate(
        to_pil(colour_squares(["red", "blue", "green", "yellow"] * 3, seed=3, size=12))
    ):
        image.save(root / "real" / f"{k}.png")
    (root / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    return root, tiny_clip_dir


def eval_args(setup, out, *extra):
    """Every run on one thread, in this process or another: their images are compared byte for byte, and
    another thread count rounds float32 sums differently (a run otherwise takes the cores left free)."""
    root, clip = setup
    return [
        "--model", str(root / "model"), "--device", "cpu", "--prompts", str(root / "prompts.txt"),
        "--seeds", "0,1", "--samplers", SAMPLERS, "--fid-features", f"domain:{clip}",
        "--clip-model", f"domain:{clip}", "--reference-dir", str(root / "real"),
        "--stats-cache", str(root / "cache"), "--no-progress", "--threads", "1", "--out", str(out), *extra,
    ]  # fmt: skip


# `arjet eval` in a process that dies like a killed one after saving its n-th image (before its record)
CRASH_AFTER = """
import os, sys
from arjet.cli import main
from arjet.eval import runner
left, save = int(sys.argv[1]), runner.save_image
def save_then_die(*args, **kwargs):
    global left
    save(*args, **kwargs)
    left -= 1
    if left == 0:
        os._exit(75)  # no clean-up at all, like a kill
runner.save_image = save_then_die
sys.exit(main(["eval", *sys.argv[2:]]))
"""


def subprocess_env(**extra):
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **extra}


@pytest.fixture(scope="module")
def uninterrupted(setup):
    out = setup[0] / "uninterrupted"
    assert main(["eval", *eval_args(setup, out)]) == 0
    return out


def per_image(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def quality(out: Path) -> dict[str, float]:
    """Every figure of metrics.json that does not depend on timing, as {"sampler/figure": value}."""
    rows = json.loads((out / "metrics.json").read_text())["samplers"]
    keep = ("images", "fid", "clip_score", "forward_passes", "step_compression", "accepted_per_step")
    return {f"{row['sampler']}/{k}": row[k] for row in rows for k in keep}


def images(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "images").rglob("*.png"))}


def test_a_run_writes_images_records_metrics_table_and_plots(uninterrupted, capsys):
    out = uninterrupted
    records = per_image(out)
    assert len(records) == 3 * len(PROMPTS) * 2
    first = records[0]
    for key in (
        "sampler",
        "prompt",
        "seed",
        "index",
        "forward_passes",
        "image",
        "accepted_histogram",
        "commit_step",
    ):
        assert key in first
    assert first["accepted_histogram"] == {"1": 16} and len(first["commit_step"]) == 4
    assert json.loads((out / "records.jsonl").read_text().splitlines()[0])["seconds"] > 0
    sjd = [r for r in records if r["sampler"] == "sjd:window=4"]
    assert all(sum(int(k) * v for k, v in r["accepted_histogram"].items()) == 16 for r in sjd)
    assert (first["sampler"], first["index"], first["seed"], first["generator_seed"]) == ("ar", 0, 0, 0)
    assert [r["sampler"] for r in records[:: 2 * len(PROMPTS)]] == ["ar", "sjd:window=4", "zipar"]
    assert all((out / r["image"]).is_file() for r in records)
    assert len(images(out)) == len(records)
    rows = {row["sampler"]: row for row in json.loads((out / "metrics.json").read_text())["samplers"]}
    assert rows["ar"]["forward_passes"] == 16 and rows["ar"]["step_compression"] == 1.0
    assert rows["zipar"]["step_compression"] == pytest.approx(16 / rows["zipar"]["forward_passes"])
    for row in rows.values():
        assert row["fid"] > 0 and 0 <= row["clip_score"] <= 100 and row["latency_speedup"] > 0
    report = (out / "report.md").read_text()
    assert (
        "| sampler | images | FID | CLIP score | forward passes | step compression | s / image | images / s | latency speedup |"
        in report
    )
    assert "arjet eval --model" in report and f"--samplers {SAMPLERS}" in report
    for name in ("speed_quality", "accepted_per_step", "commit_steps", "grid"):
        assert (out / "plots" / f"{name}.png").stat().st_size > 5000
        assert f"plots/{name}.png" in report
    assert json.loads((out / "config.json").read_text())["seeds"] == [0, 1]


def test_the_same_command_again_skips_finished_images(setup, uninterrupted, capsys, monkeypatch):
    before = images(uninterrupted)
    calls = []
    from arjet.eval import runner

    monkeypatch.setattr(runner._Worker, "_generate", lambda self, *a: calls.append(a))
    assert main(["eval", *eval_args(setup, uninterrupted)]) == 0
    assert not calls and images(uninterrupted) == before
    assert "ar: 10 images, 16.0 forward passes" in capsys.readouterr().out


@pytest.mark.slow
def test_a_run_killed_midway_and_resumed_equals_an_uninterrupted_run(setup, uninterrupted):
    out = setup[0] / "killed"
    command = [sys.executable, "-c", CRASH_AFTER, "13", *eval_args(setup, out)]
    killed = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True)
    assert killed.returncode == 75, killed.stderr[-2000:]
    assert len(read_records(out)) == 12  # the 13th image was saved, its record never written
    assert len(list((out / "images").rglob("*.png"))) == 13
    assert not (out / "metrics.json").exists()
    with open(out / "records" / "process-0.jsonl", "ab") as log:  # and a record cut short by the kill
        log.write(b'{"sampler": "sjd:window=4", "index": 1, "se')
    stale = next((out / "images").rglob("*.png")).parent / ".0001.png.arjet-x1y2z3.tmp"  # an image cut short
    stale.write_bytes(b"\x89PNG")
    assert main(["eval", *eval_args(setup, out)]) == 0
    assert not stale.exists()
    assert per_image(out) == per_image(uninterrupted)
    assert quality(out) == pytest.approx(quality(uninterrupted))
    assert images(out) == images(uninterrupted)


@pytest.mark.slow
def test_a_batched_run_keeps_its_lanes_full_and_equals_one_image_at_a_time(setup, uninterrupted):
    """`--batch-size 3`: `ar` and `sjd` decode through the engine (lanes refilled as images finish),
    `zipar` in calls of three; every image and record is that of the one-at-a-time run, killed midway and
    resumed too. The engine's records time each image by the wall time since the one before it."""
    out = setup[0] / "batched"
    command = [sys.executable, "-c", CRASH_AFTER, "7", *eval_args(setup, out, "--batch-size", "3")]
    killed = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True)
    assert killed.returncode == 75, killed.stderr[-2000:]
    assert main(["eval", *eval_args(setup, out, "--batch-size", "3")]) == 0
    assert images(out) == images(uninterrupted)
    timing = (*TIMING, "batch_size", "latency_seconds")
    strip = lambda rows: [{k: v for k, v in row.items() if k not in timing} for row in rows]  # noqa: E731
    assert strip(per_image(out)) == strip(per_image(uninterrupted))
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    engine_rows = [row for row in rows if row["sampler"] != "zipar"]
    assert all(row["batch_size"] == 3 and row["latency_seconds"] > 0 for row in engine_rows)


@pytest.mark.slow
def test_two_processes_under_accelerate_launch_equal_one_process(setup, uninterrupted):
    out = setup[0] / "two-processes"
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launch += [
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
    ]
    result = subprocess.run(
        [*launch, "-m", "arjet", "eval", *eval_args(setup, out)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    logs = {p.name: len(p.read_text().splitlines()) for p in (out / "records").glob("*.jsonl")}
    assert logs == {"process-0.jsonl": 15, "process-1.jsonl": 15}  # each sampler's 10 images split 5 + 5
    assert per_image(out) == per_image(uninterrupted)
    assert quality(out) == pytest.approx(quality(uninterrupted))
    assert images(out) == images(uninterrupted)
    assert result.stdout.count("| `zipar` |") == 1  # one table, from the main process


def test_an_out_dir_holding_other_settings_is_refused(setup, uninterrupted, capsys):
    code = main(["eval", *eval_args(setup, uninterrupted), "--seeds", "0,1,2"])
    assert code == 2
    error = capsys.readouterr().err
    assert "already holds an evaluation run with different settings" in error
    assert "seeds: [0, 1] there, [0, 1, 2] now" in error and "pass a new --out (e.g. " in error


def test_without_ar_the_ratios_are_left_empty_and_metrics_can_be_skipped(setup, tmp_path, capsys):
    out = tmp_path / "no-ar"
    args = eval_args(setup, out, "--samplers", "zipar:w=2", "--n", "2", "--seeds", "0")
    args += ["--fid-features", "none", "--clip-model", "none"]
    assert main(["eval", *args]) == 0
    printed = capsys.readouterr().out
    assert "note: no `ar` run: step compression and latency speedup left empty" in printed
    (row,) = json.loads((out / "metrics.json").read_text())["samplers"]
    assert row["step_compression"] is None and row["latency_speedup"] is None and row["fid"] is None
    assert "| `zipar:w=2` | 2 | n/a | n/a | 7.0 | n/a |" in (out / "report.md").read_text()


def test_the_builtin_prompts_are_scored_against_the_domain_renders(setup, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "arjet.data", fake_data_module("red"))
    args = eval_args(setup, tmp_path / "shapes", "--prompts", "shapes", "--n", "3", "--samplers", "ar")
    no_reference = [a for a in args if a not in ("--reference-dir", str(setup[0] / "real"))]
    assert main(["eval", *no_reference]) == 0
    metrics = json.loads((tmp_path / "shapes" / "metrics.json").read_text())
    assert (
        metrics["scoring"]["reference"]["source"]
        == "renders of the first 3 held-out scenes of the built-in domain"
    )
    assert metrics["settings"]["prompts"] == "shapes" and metrics["samplers"][0]["fid"] is not None


def test_bad_input_gives_clear_errors(setup, tmp_path, capsys):
    root, _ = setup
    cases = [
        (["--prompts", "imagenet"], "unknown prompt set 'imagenet'"),
        (["--samplers", "ar,warp"], "unknown sampler 'warp'"),
        (["--seeds", "zero"], "--seeds takes integers"),
        (["--reference-dir", str(tmp_path / "nowhere")], "reference image folder"),
        (["--fid-features", f"domain:{tmp_path}"], "lacks open_clip_config.json"),
        (["--clip-model", "clip-l"], "unknown CLIP 'clip-l'"),
    ]
    for extra, message in cases:
        assert main(["eval", *eval_args(setup, tmp_path / "bad"), *extra]) == 2, extra
        assert message in capsys.readouterr().err, extra
    no_reference = [
        a for a in eval_args(setup, tmp_path / "bad") if a not in ("--reference-dir", str(root / "real"))
    ]
    assert main(["eval", *no_reference]) == 2
    assert "FID needs real reference images: pass --reference-dir" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()  # nothing is written before the checks pass


def test_more_prompts_than_the_set_holds_is_refused_naming_its_size(setup, tmp_path, capsys):
    """`--n 1000000000` ran all of the set's prompts with a note: now it is refused, naming the set's size."""
    args = eval_args(setup, tmp_path / "all", "--n", "50", "--samplers", "ar", "--seeds", "0")
    assert main(["eval", *args, "--fid-features", "none"]) == 2
    error = capsys.readouterr().err
    assert f"error: --n 50 is more than the {len(PROMPTS)} prompts of " in error
    assert f"pass --n {len(PROMPTS)} or fewer" in error and not (tmp_path / "all").exists()
    args = eval_args(setup, tmp_path / "all", "--n", str(len(PROMPTS)), "--samplers", "ar", "--seeds", "0")
    assert main(["eval", *args, "--fid-features", "none"]) == 0
    assert json.loads((tmp_path / "all" / "config.json").read_text())["n"] == len(PROMPTS)


def test_sampler_and_seed_lists():
    assert parse_sampler_specs("ar,sjd,zipar") == ["ar", "sjd", "zipar"]
    assert parse_sampler_specs("ar,sjd:window=8,init=random,zipar:w=2") == [
        "ar",
        "sjd:window=8,init=random",
        "zipar:w=2",
    ]
    assert parse_sampler_specs("sjd:window=8,init=random;ar", ["lantern:k=4,delta=0.1", "ar"]) == [
        "sjd:window=8,init=random", "ar", "lantern:k=4,delta=0.1",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="names no sampler"):
        parse_sampler_specs(" , ")
    assert parse_seeds("0") == [0] and parse_seeds("3,1-2,10") == [3, 1, 2, 10]
    for text in ("1,1", "3,1-3"):  # a run of fewer seeds than typed passed for the one asked for
        with pytest.raises(ValueError, match=r"lists seed (1|3) more than once"):
            parse_seeds(text)
    for text in ("1_0", "\uff11", "0-\u0663", "1e3"):  # every integer option reads ASCII digits only
        with pytest.raises(ValueError, match="--seed takes integers >= 0"):
            parse_seeds(text)
    with pytest.raises(ValueError, match="--seeds lists no seed"):
        parse_seeds(",", option="--seeds")


def test_a_record_cut_short_is_skipped_and_cut_off_before_appending(tmp_path):
    log = RecordLog(tmp_path, rank=0)
    log.append({"sampler": "ar", "index": 0, "seed": 0})
    with open(log.path, "ab") as handle:
        handle.write(b'{"sampler": "ar", "ind')
    assert read_records(tmp_path) == [{"sampler": "ar", "index": 0, "seed": 0}]
    RecordLog(tmp_path, rank=0).append({"sampler": "ar", "index": 1, "seed": 0})
    assert [r["index"] for r in read_records(tmp_path)] == [0, 1]
    assert log.path.read_text().count("\n") == 2


def test_a_records_log_of_more_than_a_gibibyte_is_refused_before_reading(tmp_path):
    """The sixth re-probe's X5: a 1 TiB (sparse) log was read whole on resume, a MemoryError traceback."""
    log = RecordLog(tmp_path, rank=0)
    log.append({"sampler": "ar", "index": 0, "seed": 0})
    os.truncate(log.path, 2**40)
    with pytest.raises(ValueError, match=r"process-0.jsonl holds more than 1,073,741,824 bytes"):
        read_records(tmp_path)
    with pytest.raises(ValueError, match=r"holds more than 1,073,741,824 bytes"):
        RecordLog(tmp_path, rank=0)


def test_a_builtin_model_is_recorded_by_its_name(tmp_path):
    out = tmp_path / "builtin"
    (tmp_path / "prompts.txt").write_text("a red circle\n")
    args = ["--device", "cpu", "--prompts", str(tmp_path / "prompts.txt"), "--n", "1", "--samplers", "ar"]
    args += ["--fid-features", "none", "--clip-model", "none", "--no-progress", "--out", str(out)]
    assert main(["eval", *args]) == 0
    assert json.loads((out / "metrics.json").read_text())["settings"]["model"] == "shapes"
    assert "model `shapes` (JanusPipeline" in (out / "report.md").read_text()
