"""`arjet app`: where it listens is checked before any model loads (a bad host or a taken port was "Cannot
find empty port" after some fifteen seconds of Gradio's tries)."""

import socket
from dataclasses import replace

import pytest

from arjet.app import ui
from arjet.cli import main
from arjet.limits import DEMO_ENGINE


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


def test_a_model_folder_that_does_not_load_is_refused_before_listening(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ui, "serve", lambda *a, **k: pytest.fail("listened before loading the models"))
    (tmp_path / "notes.txt").write_text("not a model")
    assert main(["app", "--model", str(tmp_path), "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert (
        error.startswith(f"arjet app: error: {tmp_path} holds neither model_index.json")
        and error.count("\n") == 1
    )


def test_a_model_folder_with_a_file_cut_short_is_refused_in_one_line_before_the_demo(
    no_demo, tmp_path, capsys
):
    import shutil

    from arjet.builtin import assets_dir

    shutil.copytree(assets_dir() / "shapes", tmp_path / "cut")
    weights = tmp_path / "cut" / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert main(["app", "--model", "shapes", "--model", str(tmp_path / "cut"), "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(
        f"arjet app: error: --model '{tmp_path / 'cut'}': {weights} is not a readable safetensors file"
    )
    assert error.count("\n") == 1


def test_a_model_that_cannot_decode_is_refused_in_one_line_before_listening(
    overflowing_model, monkeypatch, capsys
):
    monkeypatch.setattr(ui, "serve", lambda *a, **k: pytest.fail("listened before the warm-up"))
    argv = ["app", "--model", str(overflowing_model), "--device", "cpu", "--lanes", "1"]
    assert main([*argv, "--port", str(_free_port())]) == 2
    error = capsys.readouterr().err
    assert error.startswith(
        f"arjet app: error: model '{overflowing_model}' cannot decode: the model's logits are not finite"
    )
    assert error.count("\n") == 1 and "Traceback" not in error


def test_every_engine_is_warmed_up_before_the_demo_listens(monkeypatch):
    from arjet.engine import Engine

    events = []
    monkeypatch.setattr(Engine, "warm_up", lambda self, sampler, **k: events.append(("warm", sampler)))
    monkeypatch.setattr(ui, "serve", lambda demo, host, port: events.append(("serve", port)))
    assert main(["app", "--model", "shapes", "--device", "cpu", "--port", str(_free_port())]) == 0
    assert [event[0] for event in events] == ["warm", "serve"] and events[0][1] == "sjd"


def test_each_models_engine_is_derived_from_the_demos_settings(monkeypatch):
    """`--lanes` visitors at once: each model's engine has room for a comparison's two images of each, a
    queue of four per visitor, and no time limit of its own (each request carries the page's)."""
    from arjet.engine import Engine

    configs = []
    monkeypatch.setattr(Engine, "warm_up", lambda self, sampler, **k: configs.append(self.config))
    monkeypatch.setattr(ui, "serve", lambda demo, host, port: None)
    argv = ["app", "--model", "shapes", "--device", "cpu", "--port", str(_free_port())]
    assert main(argv) == 0 and main([*argv, "--lanes", "3", "--time-limit", "5"]) == 0
    lanes = DEMO_ENGINE.lanes
    assert configs == [
        replace(DEMO_ENGINE, lanes=2 * lanes, max_queue=4 * lanes, time_limit=None),
        replace(DEMO_ENGINE, lanes=6, max_queue=12, time_limit=None),
    ]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
