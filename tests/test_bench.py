import json

import pytest

from arjet.bench import run_bench
from arjet.cli import main
from arjet.samplers import parse_specs
from arjet.testing import tiny_pipeline


def test_bench_cli_prints_the_table_and_writes_json(family, tmp_path, capsys):
    grid = (4, 4) if family == "janus" else (3, 4)
    tiny_pipeline(family, grid=grid, vocab_size=16, logit_scale=3.0).save_pretrained(tmp_path / "model")
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
        "| sampler | forward passes | step compression | s / image | latency speedup | accepted / step "
        "| peak memory (MB) |"
    )
    assert header in printed
    assert printed.count("\n| ") >= 1 + 4  # the header and one row per sampler
    result = json.loads((tmp_path / "bench.json").read_text())
    rows = {row["sampler"]: row for row in result["samplers"]}
    assert list(rows) == ["ar", "sjd:window=4", "zipar:w=2", "lantern:k=4,delta=0.1"]
    for row in rows.values():
        for key in ("forward_passes", "step_compression", "seconds", "latency_speedup", "peak_memory_mb"):
            assert key in row
    assert rows["ar"]["step_compression"] == 1.0 and rows["ar"]["forward_passes"] == grid[0] * grid[1]
    lag = 2
    assert rows["zipar:w=2"]["forward_passes"] == (grid[0] - 1) * lag + grid[1]
    assert len(result["images"]) == 8 and {"prompt", "seed", "seconds"} <= set(result["images"][0])
    assert result["environment"]["device"] == "cpu"


def test_the_same_prompt_and_seed_reach_every_sampler():
    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=8)
    result = run_bench(pipe, ["ar", "sjd"], ["a", "b"], seed=5, warmup=False, progress=False)
    seeds = {(r["sampler"], r["prompt"]): r["seed"] for r in result.records}
    assert seeds == {("ar", "a"): 5, ("sjd", "a"): 5, ("ar", "b"): 6, ("sjd", "b"): 6}


def test_sampler_lists():
    assert parse_specs("sjd,zipar") == ["sjd", "zipar"]
    assert parse_specs("sjd:window=8,init=random;ar") == ["sjd:window=8,init=random", "ar"]
    assert parse_specs("ar,sjd:window=8,init=random,zipar:w=4") == [
        "ar",
        "sjd:window=8,init=random",
        "zipar:w=4",
    ]
    with pytest.raises(ValueError, match="names no sampler"):
        parse_specs(" , ")


def test_unknown_sampler_fails_before_loading(capsys):
    assert main(["bench", "--samplers", "ar,warp", "--model", "/nonexistent"]) == 2
    assert "unknown sampler 'warp'" in capsys.readouterr().err
