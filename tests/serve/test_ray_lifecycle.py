"""`arjet serve --ray`'s start and stop on a cluster that outlives the command, with Serve and Ray faked (no
Ray started): its app deleted when the command stops, and a proxy port Serve ignored refused before the app
is deployed (the ninth re-probe's K2)."""

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

    monkeypatch.setattr(ray_app, "serving_address", lambda: ("127.0.0.1", 8000))
    monkeypatch.setattr(ray_app.time, "sleep", interrupted)  # Ctrl-C while it serves
    with pytest.raises(KeyboardInterrupt):
        ray_app.run("app", "127.0.0.1", 8000)
    assert fake_serve == [("start", 8000), ("run", "arjet"), ("delete", "arjet")]


def test_a_port_serve_ignored_is_refused_before_the_app_is_deployed(fake_serve, monkeypatch):
    monkeypatch.setattr(ray_app, "serving_address", lambda: ("127.0.0.1", 8000))  # Serve kept its first port
    with pytest.raises(
        ValueError, match="^Ray Serve already runs on this Ray cluster with its HTTP proxy on 127.0.0.1:8000"
    ):
        ray_app.check_proxy("127.0.0.1", 8001, ("127.0.0.1", 8000))
    ready = []
    with pytest.raises(ValueError, match="--host 127.0.0.1 --port 8000, or stop Serve there"):
        ray_app.run("app", "127.0.0.1", 8001, ready=lambda: ready.append(True), blocking=False)
    assert fake_serve == [("start", 8001)] and not ready  # no app deployed, no "serving ... at" line
    ray_app.check_proxy("127.0.0.1", 8000, ("127.0.0.1", 8000))  # the address it runs on: taken
    ray_app.check_proxy("127.0.0.1", 8001, None)  # a Ray that does not say: not refused


def test_the_address_serve_runs_on_is_read_from_ray(monkeypatch):
    """Against a real (not started) Serve client object: the function reads what Ray keeps."""
    from types import SimpleNamespace

    import ray.serve.context as context

    client = SimpleNamespace(http_config=SimpleNamespace(host="127.0.0.1", port=8123))
    monkeypatch.setattr(context, "_get_global_client", lambda: client)
    assert ray_app.serving_address() == ("127.0.0.1", 8123)
