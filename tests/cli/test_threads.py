"""Threads: `--threads` wins; otherwise one per core that other processes leave free (torch's default, one
per core, took 18 to 63 s per image instead of 1.6 s with another process busy on one of two cores), and
the process entry makes OpenMP's idle threads sleep. The decision is `arjet.machine`'s (a pipeline call
makes the same one: tests/pipelines/test_threads.py)."""

import os
import subprocess
import sys

import pytest
import torch

from arjet import machine
from arjet.cli import generate, main, threads
from arjet.pipelines.threads import PROCESS_THREADS


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("cores", "busy", "expected"),
    [(2, 1.0, 1), (2, 0.1, 2), (2, 0.25, 2), (2, 0.4, 1), (2, 1.8, 1), (16, 3.2, 13), (2, None, 2)],
)
def test_the_default_is_one_thread_per_free_core(cores, busy, expected):
    assert machine.free_threads(cores, busy) == expected


def _busy(monkeypatch, cores: int, busy: float) -> None:
    """Readings where other processes keep `busy` of `cores` cores busy, 1 s apart."""
    clock = iter(range(10_000))

    def read():
        t = next(clock)
        return machine.LoadReading((100.0 + busy * t, 5.0), float(t))

    monkeypatch.setattr(machine, "usable_cores", lambda: cores)
    monkeypatch.setattr(machine, "THREADS", machine.ThreadChooser(read=read, sleep=lambda seconds: 1 / 0))


def test_generate_leaves_a_busy_core_alone_unless_told(monkeypatch, tmp_path):
    """Another process keeps one of two cores busy: the decode runs on the other one alone; an explicit
    --threads always wins, and the command's count holds for its calls."""
    _busy(monkeypatch, cores=2, busy=1.0)
    monkeypatch.setattr(PROCESS_THREADS, "pinned", False)
    seen = []
    monkeypatch.setattr(
        generate, "load_pipeline", lambda args: seen.append(threads.apply_threads(args)) or 1 / 0
    )
    argv = ["generate", "a red circle", "--out", str(tmp_path / "x.png")]
    with pytest.raises(ZeroDivisionError):
        main(argv)
    with pytest.raises(ZeroDivisionError):
        main([*argv, "--threads", "2"])
    assert seen == [1, 2] and torch.get_num_threads() == 2 and PROCESS_THREADS.pinned


def test_free_cores_are_measured_from_the_commands_start(monkeypatch):
    """All cores were busy 1.5 s of the 1 s since the start, this process 0.5 s of it: others kept one of two
    cores busy, which leaves one thread."""
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    readings = iter([machine.LoadReading((100.0, 5.0), 10.0), machine.LoadReading((101.5, 5.5), 11.0)])
    monkeypatch.setattr(machine, "THREADS", machine.ThreadChooser(read=lambda: next(readings)))
    assert threads.default_threads() == 1


def test_a_short_span_keeps_the_previous_choice_and_only_a_first_choice_waits(monkeypatch):
    """Choosing adds no wait: a span too short to measure keeps the last choice; only a first choice that
    comes too soon waits the rest of `MIN_SPAN`, once."""
    monkeypatch.setattr(machine, "usable_cores", lambda: 4)
    times = iter([0.0, 0.05, 0.2, 0.25, 0.5])
    loads = iter([(0.0, 0.0), (0.1, 0.0), (0.4, 0.0), (0.4, 0.0), (0.4, 0.0)])
    waited = []
    chooser = machine.ThreadChooser(
        read=lambda: machine.LoadReading(next(loads), next(times)), sleep=waited.append
    )
    assert chooser.choose() == 2  # 0.05 s after the start: waits 0.15 s; 2 of 4 cores were busy
    assert waited == [pytest.approx(0.15)]
    assert chooser.choose() == 2  # 0.05 s later: too soon to measure, kept, no wait
    assert chooser.choose() == 4  # 0.3 s later: measured again, the others were idle meanwhile
    assert waited == [pytest.approx(0.15)]


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
