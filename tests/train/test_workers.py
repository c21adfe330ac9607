"""Worker processes end with their parent: `arjet train clip` is killed while its data-loader workers render,
and the workers must be gone soon after (before the fix they waited forever to hand over their last batch,
~700 MB each)."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads children from /proc")

# a bound on waiting for processes to appear or vanish on a busy machine, not a timing: beside another test
# worker and a full suite run, the first test here took 46 s in all, against a bound of 60 s for each wait
WAIT_SECONDS = 180


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):  # the process ended meanwhile
            found.update(int(child) for child in task.read_text().split())
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended; only its exit status waits to be read


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {WAIT_SECONDS} s")
        time.sleep(0.2)


def test_train_clip_workers_end_when_their_parent_is_killed(tmp_path):
    argv = [sys.executable, "-m", "arjet", "train", "clip", "--out", str(tmp_path / "clip"), "--log",
            str(tmp_path / "log.jsonl"), "--images", "50000", "--workers", "2", "--threads", "1",
            "--max-steps", "1", "--eval-every", "0", "--eval-scenes", "0"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    parent = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    try:
        _wait_for(lambda: len(workers.update(_children(parent.pid)) or workers) >= 2, "two workers started")
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        _wait_for(lambda: not any(_alive(pid) for pid in workers), "the workers ended")
    finally:
        parent.kill()
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_process_ends_when_its_parent_is_gone(tmp_path):
    """The same for any helper that calls `arjet.machine.end_with_parent()`: a middle process starts a
    grandchild and is killed; the grandchild, whose own work would last minutes, ends."""
    pid_file = tmp_path / "pid"
    grandchild_code = (
        "import os, time; from arjet.machine import end_with_parent; end_with_parent(); "
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    )
    script = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {grandchild_code!r}]); time.sleep(600)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    middle = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        _wait_for(lambda: pid_file.is_file() and pid_file.read_text(), "the grandchild started")
        grandchild = int(pid_file.read_text())
        assert _alive(grandchild)
        middle.kill()
        middle.wait()
        _wait_for(lambda: not _alive(grandchild), "the grandchild ended")
    finally:
        middle.kill()
