"""`arjet app`: where it listens is checked before any model loads (a bad host or a taken port was "Cannot
find empty port" after some fifteen seconds of Gradio's tries)."""

import socket

import pytest

from arjet.app import ui
from arjet.cli import main


@pytest.fixture
def no_demo(monkeypatch):
    monkeypatch.setattr(ui, "build_demo", lambda *a, **k: pytest.fail("built the demo before checking"))


@pytest.mark.parametrize("host", ["not a host!", "256.1.1.1", "no-such-host.invalid"])
def test_a_host_this_machine_cannot_resolve_is_refused(host, no_demo, capsys):
    assert main(["app", "--host", host]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"arjet app: error: --host {host!r} is not an address or a name this machine")
    assert "Traceback" not in error


def test_a_taken_port_is_refused(no_demo, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["app", "--port", str(port)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"arjet app: error: cannot listen on --host 127.0.0.1 --port {port} (")
