"""A pipeline call's CPU threads: chosen as the command line chooses them (one per core other processes leave
free), for the call only; the user's own choice (`threads=`, `torch.set_num_threads`) stands."""

import pytest
import torch

from arjet import machine
from arjet.pipelines.threads import PROCESS_THREADS, ProcessThreads
from arjet.testing import tiny_pipeline

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def two_threads():
    """The process runs on two threads (restored after the test) on a machine of two usable cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _process(monkeypatch, busy: float) -> ProcessThreads:
    """The process's thread state as arjet would find it now (restored after the test), with other processes keeping `busy` of two
    cores busy (readings 1 s apart, so every choice measures)."""
    clock = iter(range(10_000))

    def read():
        t = next(clock)
        return machine.LoadReading((busy * t, 0.0), float(t))

    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    process = PROCESS_THREADS
    monkeypatch.setattr(process, "chooser", machine.ThreadChooser(read=read, sleep=lambda seconds: 1 / 0))
    monkeypatch.setattr(process, "seen", torch.get_num_threads())
    monkeypatch.setattr(process, "pinned", False)
    return process


def _threads_seen(pipe, **kwargs) -> set[int]:
    """torch's thread counts during a call's decode steps."""
    seen = set()

    def record(pipe, step, forward_passes, tensors):
        seen.add(torch.get_num_threads())

    pipe("a red circle", seed=0, output_type="latent", callback_on_step_end=record, **kwargs)
    return seen


@pytest.fixture(scope="module")
def pipe():
    return tiny_pipeline("janus", grid=(2, 2), vocab_size=8)


@pytest.mark.parametrize(("busy", "expected"), [(1.0, 1), (0.1, 2)])
def test_a_call_runs_on_the_free_cores_and_restores_the_process_count(pipe, monkeypatch, busy, expected):
    _process(monkeypatch, busy)
    assert _threads_seen(pipe) == {expected}
    assert torch.get_num_threads() == 2


def test_the_count_is_restored_when_the_call_raises(pipe, monkeypatch):
    _process(monkeypatch, busy=1.0)

    def fail(pipe, step, forward_passes, tensors):
        assert torch.get_num_threads() == 1
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        pipe("a red circle", seed=0, output_type="latent", callback_on_step_end=fail)
    assert torch.get_num_threads() == 2


def test_an_explicit_argument_wins_on_any_load(pipe, monkeypatch):
    _process(monkeypatch, busy=1.0)
    assert _threads_seen(pipe, threads=2) == {2}
    _process(monkeypatch, busy=0.0)
    assert _threads_seen(pipe, threads=1) == {1}
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("threads", [0, -1, 1025, 1.5, True, "2"])
def test_a_bad_thread_count_is_refused_by_name(pipe, threads):
    with pytest.raises(ValueError, match=f"threads must be an integer from 1 to 1024, got {threads!r}"):
        pipe.check_inputs("a red circle", threads=threads)


def test_the_users_own_setting_stands(pipe, monkeypatch):
    """`torch.set_num_threads` after arjet first looked: the call keeps the user's count, even when busy."""
    _process(monkeypatch, busy=1.0)
    torch.set_num_threads(3)
    assert _threads_seen(pipe) == {3}
    assert torch.get_num_threads() == 3


def test_a_count_set_before_arjet_looked_caps_the_call(monkeypatch):
    """arjet cannot tell a count set before it first looked from torch's own: it never raises it."""
    torch.set_num_threads(1)
    process = _process(monkeypatch, busy=0.0)  # both cores free
    assert process.for_call(None, CPU) == 1


def test_the_command_lines_count_holds_for_its_calls(monkeypatch):
    process = _process(monkeypatch, busy=1.0)
    process.pin(2)
    assert process.for_call(None, CPU) is None and process.for_call(1, CPU) == 1


def test_a_gpu_call_leaves_the_cpu_threads_alone(monkeypatch):
    process = _process(monkeypatch, busy=1.0)
    assert process.for_call(None, torch.device("cuda")) is None
    assert process.for_call(None, CPU) == 1


def test_overlapping_calls_share_the_first_ones_count_and_the_last_restores(monkeypatch):
    process = _process(monkeypatch, busy=1.0)
    with process.during_call(None, CPU) as outer:
        with process.during_call(None, CPU) as inner:
            assert outer == inner == torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_the_built_in_model_beside_a_busy_process_decodes_on_fewer_threads(builtin_pipe, monkeypatch):
    """End to end on the built-in model: another process busy on one of two cores leaves the call one
    thread; with both cores free it takes two."""
    _process(monkeypatch, busy=1.0)
    assert _threads_seen(builtin_pipe, sampler="sjd") == {1}
    _process(monkeypatch, busy=0.0)
    assert _threads_seen(builtin_pipe, sampler="sjd") == {2}
    assert torch.get_num_threads() == 2
