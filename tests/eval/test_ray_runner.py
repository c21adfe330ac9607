"""`arjet eval --ray` on a local Ray instance: 32 prompts over two workers equal a one-process run image for
image, with a worker killed (its process, by pid) halfway."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from arjet.cli import main
from arjet.eval.ray_runner import WORKER_NAME
from arjet.testing import WORDS, tiny_pipeline

from ports import free_port

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'arjet[ray]')")
pytestmark = pytest.mark.slow
PROMPTS = [f"{WORDS[i % len(WORDS)]} {WORDS[(3 * i + 1) % len(WORDS)]}" for i in range(32)]
TIMING = ("seconds",)  # the only per-image field allowed to differ between equivalent runs


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray-eval")
    tiny_pipeline("janus", grid=(4, 4), vocab_size=16, logit_scale=3.0).save_pretrained(root / "model")
    (root / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    return root


def eval_args(root: Path, out: Path, *extra: str) -> list[str]:
    """One thread everywhere (another count rounds float32 sums differently); no metrics (not under test)."""
    return [
        "eval", "--model", str(root / "model"), "--device", "cpu", "--prompts", str(root / "prompts.txt"),
        "--n", "32", "--samplers", "ar", "--fid-features", "none", "--clip-model", "none", "--no-progress",
        "--threads", "1", "--out", str(out), *extra,
    ]  # fmt: skip


def per_image(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def images(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "images").rglob("*.png"))}


def wait_for(condition, what: str, seconds: float = 120.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def named_actor(name: str):
    try:
        return ray.get_actor(name)
    except ValueError:  # not created yet
        return None


def test_two_workers_with_one_killed_equal_a_one_process_run(setup, local_ray):
    alone, on_ray = setup / "alone", setup / "ray"
    assert main(eval_args(setup, alone)) == 0
    codes = []
    run = threading.Thread(
        target=lambda: codes.append(main(eval_args(setup, on_ray, "--ray", "--workers", "2")))
    )
    run.start()
    worker = wait_for(lambda: named_actor(WORKER_NAME.format(rank=1)), "worker 1")
    first = ray.get(worker.pid.remote())
    log = on_ray / "records" / "process-1.jsonl"
    wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 3, "worker 1's third image")
    os.kill(first, signal.SIGKILL)
    run.join(timeout=600)
    assert codes == [0]
    logs = {p.name: len(p.read_text().splitlines()) for p in (on_ray / "records").glob("*.jsonl")}
    assert logs == {
        "process-0.jsonl": 16,
        "process-1.jsonl": 16,
    }  # each image once, the killed share finished
    assert per_image(on_ray) == per_image(alone)
    assert images(on_ray) == images(alone)
    assert len(images(on_ray)) == 32


def test_a_real_clusters_address_passes_the_address_check(local_ray):
    """The check that refuses another service's port (it must answer as a gRPC server) takes Ray's GCS."""
    from arjet.eval.ray_cluster import check_address

    check_address(ray.get_runtime_context().gcs_address)


def test_workers_the_cluster_cannot_hold_are_refused_in_one_line_before_any_starts(
    setup, local_ray, tmp_path, capsys
):
    """Ray would wait for them without end (or kill the run after minutes): one line naming both sides."""
    have = ray.cluster_resources()
    cpus, gpus = int(have["CPU"]), int(have.get("GPU", 0))
    for extra, need in [
        (
            ("--workers", str(cpus + 1)),
            f"{cpus + 1} Ray workers of 1 CPU and 0 GPUs each need {cpus + 1} CPUs",
        ),
        (("--workers", "1", "--worker-gpus", str(gpus + 1)), f"1 Ray worker needs 1 CPU and {gpus + 1} GPU"),
    ]:
        assert main(eval_args(setup, tmp_path / "out", "--ray", *extra)) == 2
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and need in error and "`ray start --address HEAD`" in error, error


@pytest.mark.parametrize("command", ["eval", "serve"])
def test_without_ray_the_option_says_what_to_install(setup, tmp_path, monkeypatch, capsys, command):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    serve = ["serve", "--ray", "--model", str(setup / "model"), "--port", str(free_port())]
    assert main(eval_args(setup, tmp_path / "out", "--ray") if command == "eval" else serve) == 2
    error = capsys.readouterr().err.strip()
    assert error.endswith("--ray needs it: pip install 'arjet[ray]'")
    assert len(error.splitlines()) == 1
    assert not (tmp_path / "out").exists()
