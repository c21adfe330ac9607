"""Prompt sets by name (read from ../shared/data/prompts via ARJET_PROMPTS_DIR) and from files."""

import json
import os
import re
import sys
import types

import pytest

from arjet.cli import main
from arjet.data.prompts import PROMPT_SETS, available_prompt_sets, load_prompts

SIZES = {"parti": 1632, "geneval": 553, "drawbench": 200, "coco5k": 5000, "coco30k": 30000, "dpg": 1065}
FIRST = {
    "geneval": "a photo of a bench",
    "coco5k": "A city at night with people walking around.",
    "parti": "bond",
}


@pytest.mark.parametrize("name", sorted(SIZES))
def test_every_named_set_loads_whole_from_the_data_folder(prompts_dir, name):
    prompts = load_prompts(name)
    assert len(prompts) == SIZES[name]
    assert all(isinstance(p, str) and p.strip() == p and p for p in prompts)
    if name in FIRST:
        assert prompts[0] == FIRST[name]
    assert load_prompts(name, n=3) == prompts[:3]


def test_coco30k_keeps_captions_with_commas_whole(prompts_dir):
    prompts = load_prompts("coco30k")
    assert any("," in p for p in prompts) and len(prompts) == 30000


def test_the_data_folder_can_be_passed_instead_of_the_variable(prompts_dir, monkeypatch):
    monkeypatch.delenv("ARJET_PROMPTS_DIR")
    assert len(load_prompts("drawbench", data_dir=prompts_dir)) == 200


def test_a_missing_file_names_what_to_put_where(tmp_path, monkeypatch):
    monkeypatch.delenv("ARJET_PROMPTS_DIR", raising=False)
    with pytest.raises(
        FileNotFoundError,
        match=r"point data_dir \(or ARJET_PROMPTS_DIR\) at the folder that holds partiprompts/PartiPrompts.tsv",
    ):
        load_prompts("parti")
    monkeypatch.setenv("ARJET_PROMPTS_DIR", str(tmp_path))
    with pytest.raises(
        FileNotFoundError, match=f"expects the file {tmp_path}/geneval/evaluation_metadata.jsonl"
    ):
        load_prompts("geneval")


def test_unknown_sets_bad_n_and_more_than_the_set_holds(tmp_path):
    with pytest.raises(ValueError, match="unknown prompt set 'imagenet'.*coco30k"):
        load_prompts("imagenet")
    path = tmp_path / "p.txt"
    path.write_text("a red circle\n\n  a blue square  \n")
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        load_prompts(str(path), n=0)
    with pytest.warns(UserWarning, match="asked for 5 prompts but .* has 2; using all of them"):
        assert load_prompts(str(path), n=5) == ["a red circle", "a blue square"]


def test_prompt_files_of_every_format(tmp_path):
    (tmp_path / "p.tsv").write_text('Prompt\tCategory\na "quoted" cat\tAnimals\na dog\tAnimals\n')
    (tmp_path / "p.csv").write_text('\ufeffPrompt,Category\n"a cat, sitting",Animals\n')
    (tmp_path / "p.jsonl").write_text(
        json.dumps({"caption": "a cat"}) + "\n\n" + json.dumps({"text": "a dog"}) + "\n"
    )
    assert load_prompts(str(tmp_path / "p.tsv")) == ['a "quoted" cat', "a dog"]
    assert load_prompts(str(tmp_path / "p.csv")) == ["a cat, sitting"]
    assert load_prompts(str(tmp_path / "p.jsonl")) == ["a cat", "a dog"]
    (tmp_path / "p.json").write_text("[]")
    with pytest.raises(ValueError, match="unsupported prompt file"):
        load_prompts(str(tmp_path / "p.json"))
    (tmp_path / "bad.jsonl").write_text(json.dumps({"title": "x"}) + "\n")
    with pytest.raises(ValueError, match="none of the fields"):
        load_prompts(str(tmp_path / "bad.jsonl"))


BAD_FILES = [
    ("p.txt", b"a red circle\n\xff\xfe oops\n", "line 2: the byte 0xff is not UTF-8 text"),
    (
        "p.jsonl",
        b'{"prompt": "a"}\n{"prompt": "b"\n',
        "line 2 is not valid JSON (Expecting ',' delimiter at column 15)",
    ),
    ("p.jsonl", b'{"prompt": "a"}\n\n[1, 2]\n', "line 3: not a JSON object, got [1, 2]"),
    ("p.jsonl", b'{"prompt": 3}\n', "line 1: the field 'prompt' is 3, not text"),
    ("p.jsonl", b'{"prompt": "a \\udc80 b"}\n', "line 1 holds U+DC80 at character 2, a lone surrogate"),
    ("p.jsonl", b'{"title": "x"}\n', "line 1: a record has none of the fields"),
    ("p.csv", b"Prompt,Category\na cat,x\n,y\n", "line 3: a record has none of the fields"),
    ("p.tsv", b"Prompt\n\xe9t\xe9\n", "line 2: the byte 0xe9 is not UTF-8 text"),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_FILES, ids=[m[:28] for _, _, m in BAD_FILES])
def test_a_bad_prompt_file_is_named_with_its_line(name, content, message, tmp_path, capsys):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))} {re.escape(message)}"):
        load_prompts(str(path))
    assert main(["bench", "--prompts", str(path), "--n", "1", "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"arjet bench: error: {path} ") and "Traceback" not in error


def test_a_prompt_file_that_is_a_fifo_or_too_large_is_refused_before_reading(tmp_path):
    os.mkfifo(tmp_path / "fifo.txt")  # reading it would block until a writer came
    with pytest.raises(ValueError, match="fifo.txt is not a regular file"):
        load_prompts(str(tmp_path / "fifo.txt"))
    (tmp_path / "huge.txt").touch()
    os.truncate(tmp_path / "huge.txt", 2**40)  # sparse: a TiB of zero bytes, never read
    with pytest.raises(ValueError, match="huge.txt holds more than 268,435,456 bytes"):
        load_prompts(str(tmp_path / "huge.txt"))


def test_the_builtin_set_comes_from_the_data_module(monkeypatch):
    fake = types.ModuleType("arjet.data")
    fake.heldout_set = lambda n=None: [
        {"prompt": f"scene {i}", "scene": {}, "index": i} for i in range(n or 7)
    ]
    monkeypatch.setitem(sys.modules, "arjet.data", fake)
    assert load_prompts("shapes") == [f"scene {i}" for i in range(7)]
    assert load_prompts("shapes", n=2) == ["scene 0", "scene 1"]
    assert set(available_prompt_sets()) == {*PROMPT_SETS, "shapes"}


@pytest.mark.parametrize("command", ["eval", "bench"])
def test_the_command_line_names_its_own_option_for_the_data_folder(command, monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("ARJET_PROMPTS_DIR", raising=False)
    argv = [command, "--prompts", "parti", "--n", "2", "--device", "cpu"]
    assert main([*argv, "--out", str(tmp_path / "run")] if command == "eval" else argv) == 2
    error = capsys.readouterr().err
    assert (
        "point --data-dir (or ARJET_PROMPTS_DIR) at the folder that holds partiprompts/PartiPrompts.tsv"
        in error
    )
