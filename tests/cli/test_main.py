"""The front door: `arjet` and `python -m arjet`, help without heavy imports, the version, the listing
commands, warnings as one line, the old spellings of unified options, readable JSON."""

import json
import subprocess
import sys
import warnings

import pytest

import arjet
from arjet import samplers
from arjet.cli import main
from arjet.cli.main import COMMANDS, build_parser
from arjet.cli.options import json_text

HEAVY = ("torch", "diffusers", "transformers", "gradio", "open_clip")


def _run(*code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *code], capture_output=True, text=True, timeout=300)


def test_help_imports_nothing_heavy():
    """`arjet --help` and `arjet generate --help` build every parser without torch, diffusers or transformers
    (the imports that made them take seconds); each command imports those in `run`."""
    probe = (
        "import sys\nfrom arjet.cli.main import build_parser\nparser = build_parser()\n"
        "for argv in (['--help'], ['generate', '--help'], ['train', 'ar', '--help']):\n"
        "    try:\n        parser.parse_args(argv)\n    except SystemExit:\n        pass\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    done = _run("-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_python_m_arjet_is_the_command_line():
    done = _run("-m", "arjet", "--version")
    assert done.returncode == 0 and done.stdout.strip() == f"arjet {arjet.__version__}"
    done = _run("-m", "arjet", "generate", "--temperature", "nan")
    assert done.returncode == 2 and "arjet generate: error: argument --temperature" in done.stderr


def test_every_command_and_option_is_described():
    parser = build_parser()
    commands = [action for action in parser._actions if action.dest == "command"][0].choices
    assert len(commands) == len(COMMANDS) == 12
    parsers = dict(commands)
    for name, command in commands.items():  # and the stages of `arjet train`
        for action in command._actions:
            if isinstance(action.choices, dict):
                parsers.update({f"{name} {stage}": sub for stage, sub in action.choices.items()})
    for name, command in parsers.items():
        assert command.description, name
        assert [a.dest for a in command._actions if not a.help] == [], name


def test_samplers_lists_names_options_and_needs(capsys):
    assert main(["samplers"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == samplers.available()
    sjd = next(line for line in lines if line.startswith("sjd "))
    assert "window=16 (int 1..16384)" in sjd and "acceptance=exact (exact | lantern | gsd | entropy)" in sjd
    assert next(line for line in lines if line.startswith("sjd2 ")).endswith("needs noise_conditioning")
    assert next(line for line in lines if line.startswith("lantern ")).endswith("needs codebook")
    assert main(["samplers", "zipar"]) == 0
    explained = capsys.readouterr().out
    assert "w (int, 2..16384 | none, default none): ZipAR's window size" in explained
    assert explained.splitlines()[-1].startswith(
        "Steps run as --compile says (default auto): on a GPU captured"
    )
    assert main(["samplers", "warp"]) == 2
    assert "unknown sampler 'warp'; available: ar," in capsys.readouterr().err


def test_models_lists_builtins_and_architectures(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "shapes-sjd2" in out and "noise_conditioning" in out and "the default" in out
    assert (
        "janus-pro-7b        deepseek-community/Janus-Pro-7B: 30 x 4096 decoder, 24x24 codes at 384 px" in out
    )


def test_a_warning_prints_as_one_line(monkeypatch, capsys):
    from arjet.cli import samplers as samplers_command

    def warn(args):
        warnings.warn("something to know\n  on two lines", UserWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(samplers_command, "run", warn)
    assert main(["samplers"]) == 0
    assert capsys.readouterr().err == "arjet samplers: warning: something to know on two lines\n"


def test_old_spellings_still_work_with_a_note(tmp_path, capsys, monkeypatch):
    from arjet.eval import runner

    monkeypatch.setattr(runner, "_load_pipeline", lambda *a: pytest.fail("the bad seed reached the model"))
    argv = [
        "eval",
        "--prompts",
        "shapes",
        "--n",
        "2",
        "--out",
        str(tmp_path / "run"),
        "--seeds",
        str(2**63 - 1),
    ]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "arjet eval: note: --seeds is deprecated; use --seed" in error and "--seeds + 1 < 2**63" in error
    assert main(["domain-report", "--json", str(tmp_path)]) == 2
    error = capsys.readouterr().err.splitlines()
    assert error[0].startswith("arjet domain-report: note: `--json") and "use --out" in error[0]
    assert error[1].startswith("arjet domain-report: error: --json") and "is a folder" in error[1]


def test_json_for_people_keeps_number_lists_on_one_line():
    text = json_text({"stats": [{"accepted_per_step": [1, 2, 3], "sampler": "sjd"}], "out": "x.png"})
    assert '"accepted_per_step": [1, 2, 3]' in text and json.loads(text)["stats"][0]["sampler"] == "sjd"
    assert len(text.splitlines()) == 9
