"""Threads: `--threads` wins; otherwise one per core that other processes leave free (torch's default, one
per core, took 18 to 63 s per image instead of 1.6 s with another process busy on one of two cores), and
the process entry makes OpenMP's idle threads sleep."""

import os
import subprocess
import sys

import pytest
import torch

from arjet import machine
from arjet.cli import generate, main, threads


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("cores", "busy", "expected"),
    [(2, 1.0, 1), (2, 0.1, 2), (2, 0.25, 2), (2, 0.4, 1), (2, 1.8, 1), (16, 3.2, 13), (2, None, 2)],
)
def test_the_default_is_one_thread_per_free_core(cores, busy, expected, monkeypatch):
    monkeypatch.setattr(machine, "usable_cores", lambda: cores)
    monkeypatch.setattr(machine, "others_busy", lambda reading, seconds: busy)
    monkeypatch.setattr(machine, "busy_cores", lambda interval=0.2: busy)
    assert threads.default_threads() == expected


def test_generate_leaves_a_busy_core_alone_unless_told(monkeypatch, tmp_path):
    """Another process keeps one of two cores busy: the decode runs on the other one alone; an explicit
    --threads always wins."""
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    monkeypatch.setattr(machine, "others_busy", lambda reading, seconds: 1.0)
    monkeypatch.setattr(machine, "busy_cores", lambda interval=0.2: 1.0)
    seen = []
    monkeypatch.setattr(
        generate, "load_pipeline", lambda args: seen.append(threads.apply_threads(args)) or 1 / 0
    )
    argv = ["generate", "a red circle", "--out", str(tmp_path / "x.png")]
    with pytest.raises(ZeroDivisionError):
        main(argv)
    with pytest.raises(ZeroDivisionError):
        main([*argv, "--threads", "2"])
    assert seen == [1, 2]


def test_free_cores_are_measured_from_the_commands_start(monkeypatch):
    readings = iter([(100.0, 5.0), (101.5, 5.5)])  # all cores busy 1.5 s, this process 0.5 s of it
    monkeypatch.setattr(machine, "cpu_seconds", lambda: next(readings))
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    clock = iter([10.0, 11.0])
    monkeypatch.setattr(threads.time, "perf_counter", lambda: next(clock))
    threads.mark_start()
    assert threads.free_cores() == pytest.approx(1.0)  # others kept one core busy for the second


def test_others_busy_subtracts_this_process():
    start = machine.cpu_seconds()
    if start is None:
        pytest.skip("no /proc/stat here")
    assert machine.others_busy(start, 0.0) is None
    busy = machine.busy_cores(0.05)
    assert busy is not None and 0.0 <= busy <= machine.usable_cores() + 0.5


@pytest.mark.parametrize(("given", "expected"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_the_process_entry_makes_openmp_wait_passively_before_torch_loads(given, expected):
    probe = (
        "import os, sys\nimport arjet.cli\ncli = sys.modules['arjet.cli.main']\n"
        "cli.main = lambda: print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules) or 0\n"
        "cli.entry()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update({"OMP_WAIT_POLICY": given} if given else {})
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [expected, "False"]
