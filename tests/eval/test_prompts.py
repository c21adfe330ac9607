"""Prompt sets by name (read from ../shared/data/prompts via ARJET_PROMPTS_DIR) and from files."""

import json
import sys
import types

import pytest

from arjet.cli import main
from arjet.eval.prompts import PROMPT_SETS, available_prompt_sets, load_prompts

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
