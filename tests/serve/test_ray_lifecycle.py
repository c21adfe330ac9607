"""`arjet serve --ray`'s start and stop on a cluster that outlives the command, with Serve and Ray faked (no
Ray started): its app deleted when the command stops, and a proxy port Serve ignored refused before the app
is deployed (the ninth re-probe's K2)."""

import socket
from types import SimpleNamespace

import pytest

from arjet.serve import ray_app


@pytest.fixture
def fake_serve(monkeypatch):
    """Serve's calls `run` makes, recorded."""
    calls = []
    serve = SimpleNamespace(
        start=lambda http_options: calls.append(("start", http_options["port"])),
        run=lambda app, name, route_prefix, blocking: calls.append(("run", name)) or "handle",
        delete=lambda name: calls.append(("delete", name)),
    )
    monkeypatch.setattr(ray_app, "import_serve", lambda: serve)
    monkeypatch.setattr(ray_app, "connect", lambda address: SimpleNamespace())
    return calls


def test_stopping_the_command_deletes_its_app_from_the_cluster(fake_serve, monkeypatch):
    def interrupted(seconds):
        raise KeyboardInterrupt

    with socket.create_server(("127.0.0.1", 0)) as proxy:
        port = proxy.getsockname()[1]
        monkeypatch.setattr(ray_app.time, "sleep", interrupted)  # Ctrl-C while it serves
        with pytest.raises(KeyboardInterrupt):
            ray_app.run("app", "127.0.0.1", port)
    assert fake_serve == [("start", port), ("run", "arjet"), ("delete", "arjet")]


def test_a_port_serve_ignored_is_refused_before_the_app_is_deployed(fake_serve, monkeypatch):
    monkeypatch.setattr(ray_app, "PROXY_SECONDS", 0.5)
    with socket.create_server(("127.0.0.1", 0)) as free:
        port = free.getsockname()[1]  # closed again: nothing listens there, as when Serve kept another port
    with pytest.raises(ValueError, match=f"^Ray Serve does not listen on 127.0.0.1:{port}: it already runs"):
        ray_app.check_proxy("127.0.0.1", port, seconds=0.5)
    ready = []
    with pytest.raises(ValueError, match="keeps the first port it was given"):
        ray_app.run("app", "127.0.0.1", port, ready=lambda: ready.append(True), blocking=False)
    assert fake_serve == [("start", port)] and not ready  # no app deployed, no "serving ... at" line
