"""`arjet serve`: the API key from the environment or a file (`--api-key` still works, with a warning that
`ps` shows it), checked before any model loads; the engines warmed up before the server listens."""

from dataclasses import replace

import pytest
import torch
import uvicorn
from fastapi.testclient import TestClient

from arjet import builtin
from arjet.cli import main
from arjet.cli.serve import API_KEY_VARIABLE
from arjet.engine import Engine
from arjet.limits import SERVE_ENGINE
from arjet.testing import tiny_pipeline

from ports import free_port


@pytest.fixture
def started(monkeypatch):
    """`arjet serve` with a tiny model and no listening: records the app it would serve and the order of
    warm-up and listening."""
    events = []
    pipe = tiny_pipeline("emu3", grid=(3, 5), vocab_size=8, logit_scale=3.0)
    monkeypatch.setattr(builtin, "load_model", lambda source, device=None, quantization=None: pipe)
    monkeypatch.setattr(Engine, "warm_up", lambda self, *a, **k: events.append("warm_up"))
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: events.append(app))
    monkeypatch.delenv(API_KEY_VARIABLE, raising=False)
    return events


def _serve(*arguments: str) -> int:
    return main(["serve", "--port", str(free_port()), *arguments])


def _authorised(app, key: str | None) -> int:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return TestClient(app).get("/v1/models", headers=headers).status_code


def test_the_key_comes_from_the_environment(started, monkeypatch, capsys):
    monkeypatch.setenv(API_KEY_VARIABLE, "sesame\n")
    assert _serve() == 0
    warmed, app = started
    assert warmed == "warm_up"  # before it listens
    assert (
        _authorised(app, None) == 401
        and _authorised(app, "wrong") == 401
        and _authorised(app, "sesame") == 200
    )
    assert "warning" not in capsys.readouterr().err


def test_the_key_comes_from_a_file(started, tmp_path, monkeypatch):
    monkeypatch.setenv(API_KEY_VARIABLE, "from-the-environment")
    (tmp_path / "key").write_text("from-the-file\nignored\n")
    assert _serve("--api-key-file", str(tmp_path / "key")) == 0
    app = started[-1]
    assert _authorised(app, "from-the-file") == 200 and _authorised(app, "from-the-environment") == 401


def test_a_key_on_the_command_line_works_with_a_warning(started, capsys):
    assert _serve("--api-key", "sesame") == 0
    assert _authorised(started[-1], "sesame") == 200
    error = capsys.readouterr().err
    assert error.startswith(
        "arjet serve: warning: --api-key shows the key to every user of this machine (in `ps`)"
    )


def test_no_key_leaves_the_routes_open(started):
    assert _serve() == 0
    assert _authorised(started[-1], None) == 200


def test_each_engine_takes_on_the_servers_defaults_and_what_the_command_line_sets(started, monkeypatch):
    configs = []
    monkeypatch.setattr(Engine, "warm_up", lambda self, *a, **k: configs.append(self.config))
    assert _serve() == 0 and _serve("--lanes", "3", "--max-queue", "5", "--compile", "inductor") == 0
    assert configs == [SERVE_ENGINE, replace(SERVE_ENGINE, lanes=3, max_queue=5, compile="inductor")]


@pytest.mark.parametrize(
    ("arguments", "environment", "message"),
    [
        (["--api-key", " "], None, "the API key from --api-key is empty"),
        ([], " ", f"the API key from {API_KEY_VARIABLE} is empty"),
        (["--api-key-file", "{empty}"], None, "the API key from --api-key-file .* is empty"),
        (["--api-key-file", "{missing}"], None, "No such file or directory: .*missing"),
        (["--api-key-file", "{empty}", "--api-key", "k"], None, "--api-key-file or --api-key, not both"),
    ],
)
def test_a_bad_key_is_refused_before_any_model_loads(
    arguments, environment, message, tmp_path, monkeypatch, capsys
):
    import re

    monkeypatch.setattr(builtin, "load_model", lambda *a, **k: pytest.fail("loaded a model first"))
    if environment is None:
        monkeypatch.delenv(API_KEY_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(API_KEY_VARIABLE, environment)
    (tmp_path / "empty").write_text("\n")
    paths = {"empty": str(tmp_path / "empty"), "missing": str(tmp_path / "missing")}
    assert _serve(*[argument.format(**paths) for argument in arguments]) == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith("arjet serve: error: ") and re.search(message, error), error


def test_a_model_folder_with_a_file_cut_short_is_refused_in_one_line_before_any_model_loads(
    tmp_path, monkeypatch, capsys
):
    import shutil

    monkeypatch.setattr(builtin, "load_model", lambda *a, **k: pytest.fail("loaded a model first"))
    shutil.copytree(builtin.assets_dir() / "shapes", tmp_path / "cut")
    weights = tmp_path / "cut" / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert _serve("--model", "shapes", "--model", str(tmp_path / "cut"), "--device", "cpu") == 2
    error = capsys.readouterr().err
    assert error.startswith(
        f"arjet serve: error: --model '{tmp_path / 'cut'}': {weights} is not a readable safetensors file"
    )
    assert error.count("\n") == 1


def _fifo(folder) -> str:
    import os

    os.mkfifo(folder / "fifo")
    return str(folder / "fifo")


def _written(folder, name: str, data: bytes) -> str:
    (folder / name).write_bytes(data)
    return str(folder / name)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda folder: "/dev/zero", "--api-key-file /dev/zero is not a regular file"),
        (_fifo, "--api-key-file .*fifo is not a regular file"),
        (
            lambda folder: _written(folder, "latin1", b"\xffkey\n"),
            "--api-key-file .*latin1 is not UTF-8 text \\(the byte 0xff at offset 0\\)",
        ),
        (
            lambda folder: _written(folder, "long", b"k" * 5000),
            "--api-key-file .*long is larger than 4,096 bytes",
        ),
    ],
    ids=["device", "fifo", "not-utf8", "too-long"],
)
def test_a_key_file_that_is_no_plain_short_text_file_is_refused_at_once(
    make, message, tmp_path, monkeypatch, capsys
):
    """/dev/zero would be read until memory runs out and a FIFO would block the start: both are refused
    before they are opened; a file that is not UTF-8 or is longer than any key is refused naming the option
    and the file."""
    import re

    monkeypatch.setattr(builtin, "load_model", lambda *a, **k: pytest.fail("loaded a model first"))
    monkeypatch.delenv(API_KEY_VARIABLE, raising=False)
    assert _serve("--api-key-file", make(tmp_path)) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("arjet serve: error: ")
    assert re.search(message, error), error


def test_a_key_file_of_exactly_the_bound_is_read(started, tmp_path):
    from arjet.cli.serve import MAX_KEY_FILE_BYTES

    key = "k" * 100
    (tmp_path / "key").write_text(key + "\n" + "#" * (MAX_KEY_FILE_BYTES - len(key) - 1))
    assert _serve("--api-key-file", str(tmp_path / "key")) == 0
    assert _authorised(started[-1], key) == 200


def test_a_model_that_cannot_decode_is_refused_in_one_line_at_its_warm_up(
    overflowing_model, monkeypatch, capsys, caplog
):
    """Its warm-up decode fails (non-finite logits): one line naming the folder and the cause, exit 2, as
    `arjet generate` on it; no traceback, and nothing in the engine's log (the error is the caller's)."""
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: pytest.fail("listened"))
    monkeypatch.delenv(API_KEY_VARIABLE, raising=False)
    assert _serve("--model", str(overflowing_model), "--device", "cpu", "--lanes", "1") == 2
    error = capsys.readouterr().err
    assert error.startswith(
        f"arjet serve: error: --model '{overflowing_model}' cannot decode: the model's logits are not finite"
    )
    assert error.count("\n") == 1 and "Traceback" not in error
    assert [record.getMessage() for record in caplog.records if record.levelname == "ERROR"] == []


def test_serve_on_ray_hands_quantize_to_every_replica_and_refuses_a_scheme_it_cannot_run(monkeypatch, capsys):
    """`--quantize` reached no replica on Ray (they loaded the float weights); a scheme the replicas'
    device cannot run is refused before Ray starts."""
    pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'arjet[ray]')")
    pytest.importorskip("torchao", reason="quantization needs torchao (pip install 'arjet[quant]')")
    from arjet.serve import ray_app

    built = {}
    monkeypatch.setattr(ray_app, "build_app", lambda models, *a, **k: built.update(models))
    monkeypatch.setattr(ray_app, "run", lambda *a, **k: None)  # no Ray: what it would be given is enough
    assert _serve("--ray", "--quantize", "int8") == 0
    assert built == {"shapes": ray_app.ServedModel("shapes", later_stage=False, quantization="int8")}
    built.clear()
    assert _serve("--ray", "--quantize", "int4") == 2
    assert "int4 quantization has no kernel on cpu" in capsys.readouterr().err and not built
    if not torch.cuda.is_available():  # GPU replicas may be on other machines: each checks its own device
        assert _serve("--ray", "--quantize", "int4", "--replica-gpus", "1") == 0
        assert built["shapes"].quantization == "int4"
