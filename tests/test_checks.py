"""`arjet.checks`: the one module of argument checks every entry point uses."""

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from arjet import checks


@pytest.mark.parametrize(
    ("check", "value", "message"),
    [
        (lambda v: checks.integer("n", v, 1), True, "n must be an integer >= 1, got True"),
        (lambda v: checks.integer("n", v, 1), 1.0, "n must be an integer >= 1, got 1.0"),
        (
            lambda v: checks.integer("port", v, 1, 65535),
            70000,
            "port must be an integer from 1 to 65535, got 70000",
        ),
        (lambda v: checks.number("t", v, 0.0), math.nan, "t must be a finite number >= 0, got nan"),
        (lambda v: checks.number("t", v, 0.0), math.inf, "t must be a finite number >= 0, got inf"),
        (lambda v: checks.number("t", v, 0.0), "1", "t must be a finite number >= 0, got '1'"),
        (
            lambda v: checks.number("p", v, 0.0, 1.0, exclusive_minimum=True),
            0.0,
            r"p must be a finite number in \(0, 1\]",
        ),
        (lambda v: checks.boolean("coupling", v), "maybe", "coupling must be True or False, got 'maybe'"),
        (lambda v: checks.choice("init", v, ("a", "b")), "c", "init must be one of a, b; got 'c'"),
        (lambda v: checks.seed("seed", v), -1, r"seed must be an integer from 0 to 2\*\*63 - 1, got -1"),
        (lambda v: checks.seed("seed", v), 2**63, r"seed must be an integer from 0 to 2\*\*63 - 1"),
        (lambda v: checks.seed("seed", v, 3), 2**63 - 2, r"seed \+ 2 < 2\*\*63"),
    ],
)
def test_checks_name_the_argument_the_value_and_what_is_allowed(check, value, message):
    with pytest.raises(ValueError, match=message):
        check(value)


@pytest.mark.parametrize(
    "check",
    [
        lambda v: checks.seed("seed", v),
        lambda v: checks.integer("n", v, 1, 10),
        lambda v: checks.number("t", v, 0.0, 1.0),
        lambda v: checks.choice("init", v, ("a", "b")),
    ],
)
@pytest.mark.parametrize("value", [10**4000, "x" * 100_000, list(range(10**5))])
def test_an_error_quotes_a_huge_value_in_a_line(check, value):
    """A 4,001-digit seed was quoted whole in its error (the probe's doubtful case), as were long strings."""
    with pytest.raises(ValueError) as error:
        check(value)
    assert len(str(error.value)) < 300 and "..." in str(error.value)


def test_valid_values_pass_through():
    assert checks.integer("n", 3, 1) == 3 and checks.number("t", 0, 0.0) == 0.0
    assert checks.seed("seed", 2**63 - 1) == 2**63 - 1 and checks.seed("seed", 2**63 - 3, 3) == 2**63 - 3
    assert checks.optional_integer("w", None, 1) is None


@pytest.mark.parametrize("text", ["1_6", "\uff18", "\u0661\u0666", "0x10", "16.0", "", " ", "1" * 5000])
def test_integers_are_read_from_ascii_digits_only(text):
    """Python's int() takes "1_6" and other scripts' digits; a command line or a spec must not. 5,000 digits:
    more than Python converts, so no bound could admit it."""
    assert checks.integer_from_text(text) is None


@pytest.mark.parametrize(("text", "value"), [(" 16 ", 16), ("-3", -3), ("+7", 7)])
def test_integers_in_ascii_digits_are_read(text, value):
    assert checks.integer_from_text(text) == value


@pytest.mark.parametrize("text", ["1_0.5", "\uff18.5", "1e", "0x1p3", "", "one"])
def test_numbers_are_read_from_ascii_only(text):
    assert math.isnan(checks.number_from_text(text))


@pytest.mark.parametrize(("text", "value"), [("0.5", 0.5), ("-2e3", -2000.0), (".5", 0.5), ("inf", math.inf)])
def test_numbers_in_ascii_are_read(text, value):
    assert checks.number_from_text(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "1" * 900_000 + "x",
        "1" * 450_000 + "." + "1" * 450_000 + "x",
        "1" * 450_000 + "e" + "1" * 450_000 + "x",
    ],
)
def test_a_long_run_of_digits_that_ends_badly_is_refused_without_backtracking(text):
    """Digits matched by two adjacent repeats (`[0-9]+\\.?[0-9]*`) backtrack over every split of the run: this
    would take hours for 900,000 digits (a sampler spec in a request body); it returns at once."""
    assert math.isnan(checks.number_from_text(text))


def test_shown_quotes_a_value_cut_to_a_short_excerpt():
    assert checks.shown("sjd") == "'sjd'" and checks.shown([1, 2]) == "[1, 2]"
    long = checks.shown("a" * 900_000 + "z")
    assert len(long) < 70 and long.startswith("'aaa") and long.endswith("az'") and "..." in long
    assert len(checks.shown([[["x" * 1000] * 1000] * 1000])) < 100


def test_cuda_devices_must_exist_here():
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(ValueError, match="device 'cuda:99'"):
        checks.check_device(f"cuda:{99 if count < 99 else count}")
    if count == 0:
        with pytest.raises(ValueError, match="this machine has no CUDA GPU; use cpu"):
            checks.check_device("cuda")
    assert checks.check_device("cpu") == "cpu"


@pytest.mark.parametrize("text", ["cpu:99", "cpu:1"])
def test_a_cpu_has_one_device_index(text):
    """torch takes `cpu:99` and runs on the one CPU anyway: a typo (or a GPU's index) is refused, naming what
    there is."""
    kind = text.partition(":")[0]
    with pytest.raises(ValueError, match=f"device '{text}': this machine has one {kind} device, {kind} "):
        checks.check_device(text)
    assert checks.check_device("cpu:0") == "cpu:0"


def test_json_values_are_read_with_their_errors_named():
    assert checks.json_value(b'{"a": [1, {"b": "[[[["}]}', "x") == {"a": [1, {"b": "[[[["}]}
    assert checks.json_depth(checks.json_value('[[["]]]]]"]], {"a": []}]', "x")) == 3  # not in strings
    assert checks.json_depth(7) == 0 and checks.json_depth({}) == 1
    deep = "[" * checks.MAX_JSON_DEPTH + "]" * checks.MAX_JSON_DEPTH
    assert checks.json_value(deep, "x") is not None
    cases = [
        ("[" * 100_000 + "]" * 100_000, "the file holds JSON nested deeper than 64 levels"),
        ('{"a": ' * 2000 + "1" + "}" * 2000, "the file holds JSON nested deeper than 64 levels"),
        ('{"a": 1', "the file is not valid JSON (Expecting ',' delimiter at column 8)"),
        ("{}\n{", "the file is not valid JSON (Extra data at line 2, column 1)"),
        (b"\xff{}", "the file is not UTF-8 text (the byte 0xff at offset 0)"),
        ("1" * 5000, "the file is not JSON that arjet can read (Exceeds the limit"),
    ]
    for data, message in cases:
        with pytest.raises(ValueError, match="^" + re.escape(message)):
            checks.json_value(data, "the file")


def test_json_files_are_read_by_name(tmp_path):
    (tmp_path / "ok.json").write_text('{"a": 1}')
    assert checks.read_json(tmp_path / "ok.json") == {"a": 1}
    (tmp_path / "deep.json").write_text("[" * 3000 + "]" * 3000)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'deep.json'} holds JSON nested deeper")):
        checks.read_json(tmp_path / "deep.json")
    with pytest.raises(FileNotFoundError):
        checks.read_json(tmp_path / "missing.json")
    (tmp_path / "lines.jsonl").write_text('{"a": 1}\n\n[2]\n' + "[" * 70 + "]" * 70 + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'lines.jsonl'}, line 4 holds JSON nested")):
        checks.read_json_lines(tmp_path / "lines.jsonl")
    (tmp_path / "lines.jsonl").write_text('{"a": 1}\n\n[2]\n')
    assert checks.read_json_lines(tmp_path / "lines.jsonl") == [{"a": 1}, [2]]  # blank lines skipped


def _checkpoint(folder: Path) -> Path:
    from safetensors.torch import save_file

    (folder / "model").mkdir(parents=True)
    (folder / "model_index.json").write_text('{"model": ["transformers", "X"]}')
    (folder / "model" / "config.json").write_text('{"hidden_size": 8}')
    save_file({"w": torch.zeros(64, 64)}, str(folder / "model" / "model.safetensors"))
    torch.save({"w": torch.zeros(64, 64)}, folder / "model" / "extra.bin")
    return folder


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda f: (f / "model_index.json").write_text("[" * 5000),
            "model_index.json holds JSON nested deeper",
        ),
        (
            lambda f: (f / "model" / "config.json").write_text('{"a": ' * 3000),
            "config.json holds JSON nested",
        ),
        (lambda f: (f / "model" / "config.json").write_text("{"), "config.json is not valid JSON"),
        (
            lambda f: _truncate(f / "model" / "model.safetensors"),
            "model.safetensors is not a readable safetensors",
        ),
        (lambda f: _truncate(f / "model" / "extra.bin"), "extra.bin is a torch file cut short or damaged"),
        (
            lambda f: _shard_index(f, "../../../../../etc/passwd"),
            "names the shard '../../../../../etc/passwd', which is not a file inside its folder",
        ),
        (
            lambda f: _shard_index(f, "/etc/passwd"),
            "names the shard '/etc/passwd', which is not a file inside",
        ),
        (lambda f: _shard_index(f, ["x"]), "names the shard ['x'], which is not a file inside its folder"),
        (
            lambda f: _shard_index(f, "sub/fifo.safetensors", _fifo),
            "'sub/fifo.safetensors', which is not a regular",
        ),
        (lambda f: _replace(f / "model" / "config.json", os.mkfifo), "config.json is not a regular file"),
        (
            lambda f: _replace(f / "model" / "config.json", lambda p: p.symlink_to("/dev/zero")),
            "config.json is not a regular file",
        ),
        (
            lambda f: _replace(f / "model" / "tokenizer.json", os.mkfifo),
            "tokenizer.json is not a regular file",
        ),
        (lambda f: _replace(f / "model" / "tokenizer.model", os.mkfifo), "tokenizer.model is not a regular"),
        (
            lambda f: os.truncate(f / "model" / "config.json", 2**40),
            "config.json holds more than 268,435,456",
        ),
        (
            lambda f: _sparse(f / "model" / "chat_template.jinja"),
            "chat_template.jinja holds more than 268,435,456",
        ),
        (
            lambda f: _sparse(f / "model" / "additional_chat_templates" / "tool.jinja"),
            "tool.jinja holds more than 268,435,456",
        ),
        (lambda f: _sparse(f / "model" / "merges.txt"), "merges.txt holds more than 268,435,456"),
        (
            lambda f: _replace_folder(f / "model", os.mkfifo),
            "model is not a folder (it is a file, FIFO, socket, device or broken link): model_index.json names "
            "'model' as a component",
        ),
        (
            lambda f: _replace_folder(f / "model", lambda p: p.symlink_to("/dev/zero")),
            "model is not a folder",
        ),
        (lambda f: _replace_folder(f / "model", lambda p: p.symlink_to(f / "gone")), "model is not a folder"),
    ],
    ids=["deep-index", "deep-config", "bad-config", "cut-safetensors", "cut-torch-zip", "shard-climbs"]
    + ["shard-absolute", "shard-not-a-name", "shard-fifo", "config-fifo", "config-dev-zero", "tokenizer-fifo"]
    + ["sentencepiece-fifo", "config-1-TiB-sparse", "chat-template-1-TiB", "nested-template-1-TiB"]
    + ["merges-1-TiB", "component-fifo", "component-dev-zero", "component-broken-link"],
)
def test_a_checkpoint_folder_with_a_file_cut_short_or_malformed_is_named(tmp_path, damage, message):
    folder = _checkpoint(tmp_path / "model")
    checks.check_checkpoint_files("--model", folder)  # whole: nothing to say
    damage(folder)
    with pytest.raises(ValueError, match=f"^--model '{re.escape(str(folder))}': .*{re.escape(message)}"):
        checks.check_checkpoint_files("--model", folder)


def _shard_index(folder: Path, shard, make=None) -> None:
    """An index naming `model.safetensors` (the checkpoint's own file) and `shard`, made by `make` if given."""
    index = {"metadata": {}, "weight_map": {"a.weight": "model.safetensors", "b.weight": shard}}
    (folder / "model" / "model.safetensors.index.json").write_text(json.dumps(index))
    if make is not None:
        make(folder / "model" / shard)


def _replace_folder(path: Path, make) -> None:
    """`path`, a component folder, replaced by what `make` makes in its place."""
    shutil.rmtree(path)
    make(path)


def _sparse(path: Path) -> None:
    """A 1 TiB file of zero bytes that takes no disk (a tokenizer library would read it whole)."""
    path.parent.mkdir(exist_ok=True)
    path.touch()
    os.truncate(path, 2**40)


def _fifo(path: Path) -> None:
    path.parent.mkdir(exist_ok=True)
    os.mkfifo(path)


def _replace(path: Path, make) -> None:
    """`path` (a file of the checkpoint, or a new one) made anew by `make(path)`: a FIFO, a symlink."""
    path.unlink(missing_ok=True)
    make(path)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_output_paths(tmp_path):
    (tmp_path / "file").write_text("")
    assert checks.output_file("--out", str(tmp_path / "x.png"), image=True) == tmp_path / "x.png"
    with pytest.raises(ValueError, match="the folder .*new' does not exist; create it first"):
        checks.output_file("--out", str(tmp_path / "new" / "x.png"), image=True)
    assert checks.output_file("--log", str(tmp_path / "new" / "x.jsonl"), new_folders=True)
    with pytest.raises(ValueError, match="is a folder; give a file name"):
        checks.output_file("--out", str(tmp_path), image=True)
    with pytest.raises(ValueError, match="image extension arjet can write"):
        checks.output_file("--out", str(tmp_path / "x.psd"), image=True)
    with pytest.raises(ValueError, match="is a file, so no folder can be made there"):
        checks.output_file("--json", str(tmp_path / "file" / "x.json"), suffixes=(".json",))
    with pytest.raises(ValueError, match="--json must end in one of"):
        checks.output_file("--json", str(tmp_path / "x.txt"), suffixes=(".json",))
    with pytest.raises(ValueError, match="is a file, not a folder"):
        checks.output_dir("--out", str(tmp_path / "file"))
    assert checks.output_dir("--out", str(tmp_path / "a" / "b")) == tmp_path / "a" / "b"
    assert not (tmp_path / "a").exists()  # checking creates nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nor leaves a probe behind
    assert checks.missing_folders(tmp_path / "a" / "b") == [tmp_path / "a" / "b", tmp_path / "a"]


def test_output_files_that_are_not_regular_files_are_refused(tmp_path):
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="fifo.png' is not a regular file"):
        checks.output_file("--out", str(fifo), image=True)
    (tmp_path / "full.png").symlink_to("/dev/full")
    with pytest.raises(ValueError, match="is a symbolic link to '/dev/full', which is not an image file"):
        checks.output_file("--out", str(tmp_path / "full.png"), image=True)


def test_a_symlink_is_written_through_only_to_an_image_file(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    (tmp_path / "link.png").symlink_to(tmp_path / "notes.txt")
    with pytest.raises(
        ValueError, match="link.png' is a symbolic link to .*notes.txt', which is not an image"
    ):
        checks.output_file("--out", str(tmp_path / "link.png"), image=True)
    (tmp_path / "old.png").write_bytes(b"")
    (tmp_path / "current.png").symlink_to(tmp_path / "old.png")
    assert checks.output_file("--out", str(tmp_path / "current.png"), image=True) == tmp_path / "old.png"
    (tmp_path / "report.json").symlink_to(tmp_path / "notes.txt")
    with pytest.raises(ValueError, match="is a symbolic link to .*notes.txt', which is not a file"):
        checks.output_file("--out", str(tmp_path / "report.json"), suffixes=(".json",))


@pytest.mark.parametrize("path", ["/proc/self/x.png", "/sys/kernel/x.png", "/proc/x.png"])
def test_output_files_in_kernel_folders_are_refused(path):
    if not Path(path).parent.is_dir():
        pytest.skip(f"{Path(path).parent} does not exist on this system")
    with pytest.raises(ValueError, match="no file can be written in"):
        checks.output_file("--out", path, image=True)


def test_an_existing_file_that_cannot_be_written_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "x.png"
    target.write_bytes(b"")

    def refuse(path, flags, *args):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(checks.os, "open", refuse)  # as for another user's file (root may write any)
    with pytest.raises(ValueError, match="x.png' exists and cannot be overwritten \\(Permission denied\\)"):
        checks.output_file("--out", str(target), image=True)


def test_an_output_folder_can_be_required_empty(tmp_path):
    assert checks.output_dir("--out", tmp_path, empty=True) == tmp_path
    (tmp_path / "x").write_text("")
    with pytest.raises(
        ValueError, match=r"is a folder that is not empty \(it holds x\); give a new or empty"
    ):
        checks.output_dir("--out", tmp_path, empty=True)
    for name in "abcde":
        (tmp_path / name).write_text("")
    with pytest.raises(ValueError, match=r"\(it holds [a-x, ]+, \.\.\.\); the reason; give a new or empty"):
        checks.output_dir("--out", tmp_path, empty=True, why_empty="the reason")


def test_text_refuses_lone_surrogates_by_position():
    assert checks.text("prompt", "a red circle, ünïcode ☺") == "a red circle, ünïcode ☺"
    with pytest.raises(
        ValueError,
        match="prompt holds U\\+DCFF at character 6, a lone surrogate \\(Python's stand-in for a byte 0xff",
    ):
        checks.text("prompt", "a red \udcff circle")  # `a red \xff circle` read from a command line
    with pytest.raises(
        ValueError, match="prompt holds U\\+D800 at character 0, a lone surrogate; it is not text"
    ):
        checks.text("prompt", "\ud800")
