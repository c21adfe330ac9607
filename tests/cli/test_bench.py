"""`arjet bench`: the table and its JSON, random-weight architectures, and its checks before any model work."""

import json
import warnings

import pytest
from small_presets import small_preset

import arjet.presets
from arjet.cli import main
from arjet.presets import PRESETS
from arjet.testing import tiny_pipeline

from families import all_cells, decoded_grids

NEW_COLUMNS = "| ms / forward | floor ms / forward | x floor |"


def test_bench_cli_prints_the_table_and_writes_json(family, tmp_path, capsys):
    grid = (4, 4) if family == "janus" else (3, 4)
    pipe = tiny_pipeline(family, grid=grid, vocab_size=16, logit_scale=3.0)
    pipe.save_pretrained(tmp_path / "model")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red circle\na blue square on a green background\n")
    code = main(
        [
            "bench",
            "--model",
            str(tmp_path / "model"),
            "--device",
            "cpu",
            "--prompts",
            str(prompts),
            "--n",
            "2",
            "--samplers",
            "sjd:window=4;zipar:w=2;lantern:k=4,delta=0.1",
            "--json",
            str(tmp_path / "bench.json"),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    header = (
        "| sampler | forward passes | step compression | s / image | images / s | latency speedup | accepted / step "
        "| peak memory (MB) |"
    )
    assert header in printed and header + NEW_COLUMNS.removeprefix("|") in printed
    assert printed.count("\n| ") >= 1 + 4  # the header and one row per sampler
    assert "floor: the weights one forward reads" in printed
    result = json.loads((tmp_path / "bench.json").read_text())
    rows = {row["sampler"]: row for row in result["samplers"]}
    assert list(rows) == ["ar", "sjd:window=4", "zipar:w=2", "lantern:k=4,delta=0.1"]
    for row in rows.values():
        for key in ("forward_passes", "step_compression", "seconds", "latency_speedup", "peak_memory_mb"):
            assert key in row
    assert rows["ar"]["step_compression"] == 1.0 and rows["ar"]["forward_passes"] == all_cells(pipe, grid)
    lag = 1  # zipar:w=2 starts the next row after w - 1 codes (the Lumina-mGPT schedule), on every grid
    zipar = sum((height - 1) * lag + width for height, width in decoded_grids(pipe, grid))
    assert rows["zipar:w=2"]["forward_passes"] == zipar
    assert len(result["images"]) == 8 and {"prompt", "seed", "seconds", "floor_ms"} <= set(
        result["images"][0]
    )
    assert result["environment"]["device"] == "cpu"
    _check_floor_columns(result)


def _check_floor_columns(result: dict) -> None:
    env = result["environment"]
    assert env["copy_bandwidth_gb_s"] > 0 and env["forward_weight_bytes"] > 0 and env["mean_kv_bytes"] > 0
    for row in result["samplers"]:
        assert row["ms_per_forward"] == pytest.approx(row["seconds"] / row["forward_passes"] * 1e3)
        assert row["floor_ms"] > 0
        # a tiny model's forward is all overhead: far slower than reading its few kB at memory speed
        assert (
            row["floor_ratio"] == pytest.approx(row["ms_per_forward"] / row["floor_ms"])
            and row["floor_ratio"] > 1
        )


def test_unknown_sampler_fails_before_loading(capsys):
    assert main(["bench", "--samplers", "ar,warp", "--model", "/nonexistent"]) == 2
    assert "unknown sampler 'warp'" in capsys.readouterr().err


def test_bench_times_glm_image_at_a_scaled_down_size(monkeypatch, capsys):
    """`--arch glm-image`'s builder, code path and both stages, at a scaled-down size: the bench times the AR
    stage (a 2x2 preview grid, then the 2x2 codes of 64 px) and says so in its table."""
    monkeypatch.setitem(PRESETS, "small-glm-image", small_preset("glm-image"))
    args = ["bench", "--arch", "small-glm-image", "--random-weights", "--device", "cpu", "--n", "1"]
    assert main([*args, "--samplers", "sjd:window=3;sjd-pac", "--height", "64", "--width", "64"]) == 0
    printed = capsys.readouterr().out
    assert "(small-glm-image, random weights, torch.float32)" in printed
    rows = [line for line in printed.splitlines() if line.startswith("| ar |")]
    assert rows and rows[0].split("|")[2].strip() == "8.0"  # forward passes: 4 + 4 codes


def test_bench_times_a_random_weight_architecture(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "small-janus", small_preset("janus-pro-1b"))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red circle\na purple elephant on a ladder\n")  # the second has unknown words
    out = tmp_path / "bench.json"
    args = [
        "bench",
        "--arch",
        "small-janus",
        "--random-weights",
        "--device",
        "cpu",
        "--prompts",
        str(prompts),
    ]
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "error", message="prompt .*the text tokenizer does not know"
        )  # none per prompt
        code = main([*args, "--n", "2", "--samplers", "sjd:window=4", "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "(small-janus, random weights, torch.float32)" in printed and NEW_COLUMNS in printed
    assert "note: 1 of 2 prompts have words outside the random model's small vocabulary" in printed
    result = json.loads(out.read_text())
    assert result["environment"]["arch"] == "small-janus"
    assert [row["sampler"] for row in result["samplers"]] == ["ar", "sjd:window=4"]
    assert result["samplers"][0]["forward_passes"] == 4  # 2x2 codes
    _check_floor_columns(result)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--arch", "janus-pro-7b"],
            "--arch janus-pro-7b builds the architecture with random weights: add --random-weights",
        ),
        (
            ["--random-weights"],
            "--random-weights needs --arch NAME, one of emu3-gen, glm-image, janus-pro-1b, janus-pro-7b, lumina",
        ),
        (["--arch", "janus-pro-7b", "--random-weights", "--model", "shapes"], "pass either --model"),
        (
            ["--arch", "gpt-5", "--random-weights"],
            "unknown architecture 'gpt-5'; choose one of emu3-gen, glm-image, janus-pro-1b",
        ),
        (
            ["--arch", "janus-pro-7b", "--random-weights", "--height", "0"],
            "--height must be a positive number",
        ),
    ],
)
def test_arch_errors_come_before_any_model_work(args, message, monkeypatch, capsys):
    def no_model(*_, **__):
        raise AssertionError("a model was built")

    monkeypatch.setattr(arjet.presets, "random_pipeline", no_model)
    assert main(["bench", *args]) == 2
    assert message in capsys.readouterr().err


def test_the_json_path_is_checked_before_any_model_work(tmp_path, capsys):
    blocker = tmp_path / "file.txt"
    blocker.write_text("")
    for bad, message in (
        (tmp_path, "is a folder"),
        (blocker / "bench.json", "is a file, so no folder can be made"),
    ):
        assert main(["bench", "--model", "/nonexistent", "--json", str(bad)]) == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--suite", "nope", "--out", "x"], "unknown suite 'nope'; choose one of gpu, gpu-quick, gpu-proof"),
        (["--suite", "gpu"], "--suite gpu writes a report folder: pass --out DIR"),
        (
            ["--suite", "gpu", "--out", "x", "--samplers", "ar"],
            "sets its own models, samplers and sizes; drop --samplers",
        ),
        (["--suite", "gpu", "--out", "x", "--device", "cpu"], "it needs a CUDA device, got --device cpu"),
        (["--suite", "gpu", "--out", "/proc/self/run"], "--out '/proc/self/run': no file can be written in"),
        (["--sections", "shapes"], "--sections goes with --suite NAME"),
        (["--budget-minutes", "3"], "--budget-minutes goes with --suite NAME"),
    ],
)
def test_suite_options_are_checked_before_anything_runs(args, message, monkeypatch, capsys):
    import arjet.bench.suite

    monkeypatch.setattr(arjet.bench.suite, "run_suite", lambda *a, **k: pytest.fail("the suite ran"))
    assert main(["bench", *args]) == 2
    assert message in capsys.readouterr().err


def test_batch_size_decodes_several_prompts_per_call(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = main(
        ["bench", "--device", "cpu", "--n", "2", "--batch-size", "2", "--samplers", "ar", "--out", str(out)]
    )
    assert code == 0 and "| images / s |" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["environment"]["batch_size"] == 2 and [r["call_images"] for r in result["images"]] == [2, 2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "1,4", "--batch-size", "2"], "--concurrency measures the engine"),
        (["--plot", "x.png"], "--plot draws the --concurrency measurement"),
        (["--samplers", "ar,adaptive"], "unknown sampler 'adaptive'"),
        (["--concurrency", "1,1"], "names a value twice"),
        (["--concurrency", "0"], "must be an integer from 1"),
    ],
)
def test_concurrency_options_are_checked_before_any_model_work(args, message, capsys):
    assert main(["bench", "--model", "/nonexistent", *args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_concurrency_measures_the_engine_and_draws_the_plot(tmp_path, capsys):
    out, plot = tmp_path / "tp.json", tmp_path / "tp.png"
    code = main(["bench", "--device", "cpu", "--n", "2", "--samplers", "ar,adaptive", "--concurrency", "1,2",
                 "--out", str(out), "--plot", str(plot)])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "| sampler | concurrency | images / s | vs ar |" in printed and "steps by window" in printed
    rows = json.loads(out.read_text())["rows"]
    assert [(r["sampler"], r["concurrency"]) for r in rows] == [
        ("ar", 1),
        ("adaptive", 1),
        ("ar", 2),
        ("adaptive", 2),
    ]
    assert plot.stat().st_size > 1000


def test_bench_warns_in_one_line_when_its_seconds_are_not_trustworthy(tmp_path, monkeypatch, capsys):
    from arjet import machine

    tiny_pipeline("janus", grid=(2, 2), vocab_size=8).save_pretrained(tmp_path / "model")
    monkeypatch.setattr(machine, "others_busy", lambda reading, seconds: 1.5)  # as with `yes` on one of two
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    argv = ["bench", "--model", str(tmp_path / "model"), "--n", "2", "--samplers", "ar", "--threads", "1"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "| ar |" in captured.out
    warned = [line for line in captured.err.splitlines() if line.startswith("arjet bench: warning: ")]
    assert any(
        "other processes kept 1.5 of the 2 cores busy while this ran on 1 thread(s)" in w for w in warned
    )


@pytest.mark.parametrize("extra", [[], ["--concurrency", "1"], ["--json"]], ids=["table", "engine", "json"])
def test_bench_warns_when_others_keep_the_one_other_core_busy(extra, tmp_path, monkeypatch, capsys):
    """Issue 33: a load average of 4.2 on 2 cores gave no warning. With the bench on 1 thread, the others
    kept the other core busy (1.0 of 2): that is a busy machine too, on every path of the command."""
    from arjet import machine

    tiny_pipeline("janus", grid=(2, 2), vocab_size=8).save_pretrained(tmp_path / "model")
    monkeypatch.setattr(machine, "others_busy", lambda reading, seconds: 1.0)
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    argv = ["bench", "--model", str(tmp_path / "model"), "--n", "2", "--samplers", "ar", "--threads", "1"]
    assert main([*argv, *extra]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "other processes kept" in line]
    assert warned == [
        "arjet bench: warning: other processes kept 1.0 of the 2 cores busy while this ran on 1 thread(s): the "
        "seconds and latency speedups measure the machine's load as much as the samplers; rerun when the "
        "machine is quiet"
    ]


def test_bench_times_a_quantized_random_weight_architecture(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "small-janus", small_preset("janus-pro-1b"))
    out = tmp_path / "bench.json"
    argv = ["bench", "--arch", "small-janus", "--random-weights", "--device", "cpu", "--quantize", "int8"]
    assert main([*argv, "--n", "1", "--samplers", "ar", "--json", str(out)]) == 0
    assert "(small-janus, random weights, int8 over torch.float32)" in capsys.readouterr().out
    assert json.loads(out.read_text())["environment"]["quantization"] == "int8"
