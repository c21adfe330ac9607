"""The training scaffold every stage shares: seed, threads, output folder, the budget loop, the log."""

import json
from dataclasses import dataclass

import pytest
import torch

from arjet.train.scaffold import TrainingRun, uses_bf16


@dataclass
class _Config:
    out: str
    seed: int = 3
    threads: int = torch.get_num_threads()  # the test process's own: nothing else changes
    max_steps: int = 5
    max_minutes: float = 60.0


def test_steps_stop_at_the_step_budget_and_count_what_was_done(tmp_path):
    run = TrainingRun(_Config(str(tmp_path / "out" / "stage")), "toy", show=False)
    assert (tmp_path / "out" / "stage").is_dir()
    assert torch.equal(torch.rand(3), torch.rand(3, generator=torch.Generator().manual_seed(3)))  # seeded
    assert list(run.steps()) == [0, 1, 2, 3, 4] and run.step == 5


def test_the_wall_clock_budget_ends_a_run_early(tmp_path):
    run = TrainingRun(_Config(str(tmp_path), max_steps=10**9, max_minutes=1e-9), "toy", show=False)
    assert list(run.steps()) == [] and run.step == 0


def test_records_go_to_the_log_one_line_each(tmp_path):
    run = TrainingRun(_Config(str(tmp_path)), "toy", log=tmp_path / "logs" / "log.jsonl", show=False)
    run.log({"step": 1, "loss": 2.5})
    run.log({"step": 2, "loss": 2.0})
    lines = (tmp_path / "logs" / "log.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]


@pytest.mark.parametrize(
    ("capability", "requested", "expected"),
    [("AVX512", True, True), ("AVX512", False, False), ("AVX2", True, False), ("DEFAULT", True, False)],
)
def test_bf16_autocast_only_where_the_cpu_runs_bfloat16_natively(
    monkeypatch, capability, requested, expected
):
    # with AVX2 kernels or fewer torch emulates bfloat16 (slower than float32), and some of its bfloat16
    # attention kernels fail outright under ATEN_CPU_CAPABILITY=avx2 / default on an AVX-512 machine
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert uses_bf16(requested, "cpu") is expected
