"""`--ray`'s checks before Ray is asked (an address where nothing listens, a form Ray does not take), before
any actor starts (resources the cluster lacks), and its one-line errors; no Ray is started here (a fake
`ray` stands in where one is joined)."""

import contextlib
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from arjet.cli import main
from arjet.eval import ray_cluster, ray_runner
from arjet.eval.ray_cluster import ClusterTooSmall, Room, check_address, split_address

from ports import free_port

EVAL = [
    "eval",
    "--samplers",
    "ar",
    "--n",
    "1",
    "--fid-features",
    "none",
    "--clip-model",
    "none",
    "--no-progress",
]


def refused_address() -> str:
    """A loopback port nothing listens on (bound once to find it free, then closed)."""
    return f"127.0.0.1:{free_port()}"


def one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    error = captured.err.strip()
    assert len(error.splitlines()) == 1 and "Traceback" not in error, captured.err
    assert "serving" not in captured.out
    return error


def fake_ray(cpus: float, gpus: float = 0.0, **more) -> SimpleNamespace:
    """A `ray` joined to a cluster of `cpus` and `gpus`, which fails the test if an actor starts."""
    resources = {"CPU": cpus, "memory": 1e9, **({"GPU": gpus} if gpus else {})}

    def no_actor(*args, **kwargs):
        pytest.fail("an actor was asked for")

    return SimpleNamespace(
        cluster_resources=lambda: resources, remote=no_actor, is_initialized=lambda: True, **more
    )


@pytest.mark.parametrize(
    "address, where",
    [
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("ray://head:10001", ("head", 10001)),
        ("[::1]:6379", ("::1", 6379)),
    ],
)
def test_the_address_forms_ray_takes_are_split(address, where):
    assert split_address(address) == where
    assert split_address("auto") is None and split_address("local") is None


@pytest.mark.parametrize(
    "address", ["garbage", "host:", ":6379", "host:0", "host:65536", "http://host:1", "h:x"]
)
def test_another_form_is_refused_naming_the_forms(address):
    with pytest.raises(
        ValueError, match=r"give host:port .* ray://host:port \(Ray Client\), auto .* or local"
    ):
        split_address(address)


def test_an_address_where_nothing_listens_is_refused_at_once():
    address = refused_address()
    start = time.monotonic()
    with pytest.raises(
        ConnectionError, match=f"at --ray-address {address} \\(connection refused.*ray start --head"
    ):
        check_address(address)
    assert time.monotonic() - start < 2


@contextlib.contextmanager
def listening(reply: bytes | None):
    """A local server that sends `reply` (None: nothing) to its first connection; its address."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer():
        connection, _ = server.accept()
        with connection:
            if reply is not None:
                connection.sendall(reply)
            connection.recv(1024)  # hold it open until the client has read

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    with server:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    thread.join(timeout=5)


def test_an_address_that_answers_as_grpc_is_taken():
    with listening(ray_cluster.EMPTY_SETTINGS) as address:  # a gRPC server's preface: a SETTINGS frame
        check_address(address)
    check_address(None)  # Ray's own choice
    check_address("auto")


@pytest.mark.parametrize(
    "reply",
    [b"HTTP/1.0 400 Bad Request\r\n\r\n", b"-ERR unknown command 'PRI'\r\n", None],
    ids=["web-server", "redis", "silent"],
)
def test_an_address_another_service_holds_is_refused(reply):
    """The eighth re-probe's K1: a web server's port passed the TCP check, then Ray retried it without end."""
    with listening(reply) as address, pytest.raises(ConnectionError) as refused:
        check_address(address, seconds=0.5)
    assert str(refused.value).startswith(
        f"cannot reach the Ray cluster at --ray-address {address} (something"
    )
    assert "does not answer as Ray's gRPC server does" in str(refused.value)


@pytest.mark.parametrize(
    "failure, reason",
    [
        (TimeoutError(), "no answer within 5 s"),
        (socket.gaierror(-2, "Name or service not known"), "no such host"),
    ],
)
def test_a_silent_or_unknown_host_is_refused_naming_what_failed(monkeypatch, failure, reason):
    asked = []

    def connection(where, timeout):
        asked.append(timeout)
        raise failure

    monkeypatch.setattr(ray_cluster.socket, "create_connection", connection)
    with pytest.raises(ConnectionError, match=f"head:6379 \\({reason}"):
        check_address("ray://head:6379")
    assert asked == [ray_cluster.CONNECT_SECONDS]  # bounded


def test_room_the_cluster_has_passes_and_room_it_lacks_is_refused_naming_both():
    Room(2, 1.0, 0.0, "Ray worker", "--workers").check(fake_ray(2))
    Room(4, 0.5, 0.25, "replica", "--replicas").check(fake_ray(2, 1))
    with pytest.raises(ClusterTooSmall) as refused:
        Room(1, 1.0, 1.0, "Ray worker", "--workers, --worker-gpus").check(fake_ray(2))
    assert str(refused.value) == (
        "1 Ray worker needs 1 CPU and 1 GPU; the Ray cluster has 2 CPUs and 0 GPUs (on the nodes it has now); "
        "ask for less (--workers, --worker-gpus), or add nodes with `ray start --address HEAD` on more machines"
    )
    with pytest.raises(
        ClusterTooSmall, match="100000 replicas of 2 CPUs and 0 GPUs each need 200000 CPUs and 0 GPUs in all;"
    ):
        Room(100000, 2.0, 0.0, "replica", "--replicas").check(fake_ray(2))


def test_an_eval_pool_refuses_room_the_cluster_lacks_before_any_actor(monkeypatch, tmp_path):
    ray = fake_ray(2)
    monkeypatch.setattr(ray_runner, "import_ray", lambda: ray)
    monkeypatch.setattr(ray_runner, "connect", lambda address: ray)
    settings = SimpleNamespace(samplers=("ar",))
    pool = ray_runner.RayPool(3, settings, ["a"], tmp_path, threads=1, device="cpu")
    with pytest.raises(ClusterTooSmall, match="3 Ray workers of 1 CPU and 0 GPUs each need 3 CPUs"), pool:
        pass
    assert pool.actors == []


def test_a_worker_lost_twice_is_one_line_and_the_run_resumable(monkeypatch, tmp_path, capsys):
    class Died(Exception):
        pass

    def get(calls):
        raise Died("the actor died unexpectedly")

    ray = fake_ray(2, get=get, exceptions=SimpleNamespace(RayActorError=Died))
    actor = SimpleNamespace(run=SimpleNamespace(remote=lambda *args: "call"))
    monkeypatch.setattr(ray_runner, "import_ray", lambda: ray)
    pool = ray_runner.RayPool(1, SimpleNamespace(samplers=("ar",)), ["a"], tmp_path, threads=1, device="cpu")
    pool.actors = [actor]
    with pytest.raises(ray_runner.WorkerLost, match="died twice while generating 'ar' \\(Died\\).*resumes"):
        pool.run("ar", ["job"], 1)

    class LosingPool:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def run(self, spec, jobs, batch_size):
            raise ray_runner.WorkerLost(f"a Ray worker died twice while generating {spec!r}")

    monkeypatch.setattr(ray_runner, "RayPool", LosingPool)
    assert main([*EVAL, "--ray", "--out", str(tmp_path / "run")]) == 2
    assert one_line_error(capsys) == "arjet eval: error: a Ray worker died twice while generating 'ar'"


def test_eval_refuses_an_address_in_one_line_before_any_work(tmp_path, capsys):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'arjet[ray]')")
    address = refused_address()
    start = time.monotonic()
    assert main([*EVAL, "--ray", "--ray-address", address, "--out", str(tmp_path / "run")]) == 2
    assert f"cannot reach the Ray cluster at --ray-address {address} (connection refused" in one_line_error(
        capsys
    )
    assert main([*EVAL, "--ray", "--ray-address", "garbage", "--out", str(tmp_path / "run")]) == 2
    assert "--ray-address 'garbage' is not an address of a Ray cluster; give host:port" in one_line_error(
        capsys
    )
    assert time.monotonic() - start < 30 and not (tmp_path / "run").exists()


@pytest.fixture
def serve_on_ray(monkeypatch):
    """What `arjet serve --ray` would hand to `ray_app.run` (no Ray is started)."""
    pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'arjet[ray]')")
    from arjet.serve import ray_app

    given = []
    monkeypatch.setattr(ray_app, "run", lambda *args, **kwargs: given.append(kwargs))
    return given


def test_serve_refuses_an_address_in_one_line_without_claiming_to_serve(serve_on_ray, capsys):
    address = refused_address()
    assert main(["serve", "--ray", "--ray-address", address, "--port", str(free_port())]) == 2
    assert f"--ray-address {address} (connection refused: nothing listens there)" in one_line_error(capsys)
    assert main(["serve", "--ray", "--ray-address", "garbage", "--port", str(free_port())]) == 2
    assert "ray://host:port (Ray Client), auto (a running cluster) or local" in one_line_error(capsys)
    assert serve_on_ray == []


def test_serve_asks_the_cluster_for_every_replica_and_announces_only_once_serve_has_the_app(
    serve_on_ray, capsys
):
    assert main(["serve", "--ray", "--replicas", "3", "--replica-gpus", "1", "--port", str(free_port())]) == 0
    (given,) = serve_on_ray
    room = given["room"]
    assert (room.units, room.cpus, room.gpus) == (3, 1.0, 1.0)
    assert "serving" not in capsys.readouterr().out
    given["ready"]()
    assert capsys.readouterr().out.startswith("serving shapes on Ray at http://127.0.0.1:")
    serve_on_ray.clear()
    assert (
        main(["serve", "--ray", "--min-replicas", "2", "--max-replicas", "8", "--port", str(free_port())])
        == 0
    )
    assert serve_on_ray[0]["room"].units == 2  # the autoscaler's minimum


def test_serve_refuses_replicas_given_both_ways(serve_on_ray, capsys):
    arguments = ["serve", "--ray", "--replicas", "2", "--min-replicas", "1", "--max-replicas", "2"]
    assert main([*arguments, "--port", str(free_port())]) == 2
    assert "give --replicas N (a fixed count) or --min-replicas A --max-replicas B" in one_line_error(capsys)
    assert serve_on_ray == []


def test_serve_joins_the_cluster_and_checks_its_room_before_serve_starts(monkeypatch):
    pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'arjet[ray]')")
    from arjet.serve import ray_app

    def serve_asked(*args, **kwargs):
        pytest.fail("Serve was asked to start")

    fake_serve = SimpleNamespace(start=serve_asked, run=serve_asked)
    joined = []
    monkeypatch.setattr(ray_app, "import_serve", lambda: fake_serve)
    monkeypatch.setattr(ray_app, "connect", lambda address: joined.append(address) or fake_ray(2))
    with pytest.raises(ClusterTooSmall, match="2 replicas of 1 CPU and 1 GPU each"):
        ray_app.run(
            None, "127.0.0.1", 1, address="head:6379", room=Room(2, 1.0, 1.0, "replica", "--replicas")
        )
    assert joined == ["head:6379"]


@pytest.mark.parametrize(
    "command, knobs",
    [
        (["serve", "--port", "PORT"], ["--ray-address", "127.0.0.1:1"]),
        (["serve", "--port", "PORT"], ["--replica-cpus", "2"]),
        (["serve", "--port", "PORT"], ["--replica-gpus", "1", "--replicas", "2"]),
        ([*EVAL, "--out", "OUT"], ["--ray-address", "auto"]),
        ([*EVAL, "--out", "OUT"], ["--workers", "4"]),
        ([*EVAL, "--out", "OUT"], ["--worker-gpus", "1"]),
    ],
)
def test_ray_knobs_without_ray_are_refused_not_ignored(command, knobs, tmp_path, capsys):
    """Without --ray the command would run here and drop them (the probe's B7: `serve --ray-address ADDR`
    served locally although nothing listened at ADDR): refused in one line, before any model loads."""
    fill = {"OUT": str(tmp_path / "run"), "PORT": str(free_port())}
    command = [fill.get(part, part) for part in command]
    assert main([*command, *knobs]) == 2
    error = one_line_error(capsys)
    assert f"{knobs[0]}" in error and "--ray (without it" in error
    assert not (tmp_path / "run").exists()
