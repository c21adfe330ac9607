"""Prompt sets by name (`parti`, `geneval`, `drawbench`, `coco5k`, `coco30k`, `dpg`, `shapes`) or from a file.

The public sets are not shipped with arjet (their licences differ); point the `data_dir` argument (the
command line's `--data-dir`, or `ARJET_PROMPTS_DIR`) at a folder laid out like the one below, and a missing file gives an error that
names exactly what to put where. `shapes` is the built-in domain's fixed held-out set and needs no files.
Files: `.txt` (one prompt per line), `.tsv` / `.csv` (a `Prompt` / `prompt` / `caption` column), `.jsonl`
(a `prompt` / `caption` / `text` field per line).
"""

from __future__ import annotations

import csv
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from .. import checks

PROMPTS_DIR_VARIABLE = "ARJET_PROMPTS_DIR"


@dataclass(frozen=True)
class PromptSet:
    name: str
    relative_path: str
    description: str
    source: str


PROMPT_SETS: dict[str, PromptSet] = {
    s.name: s
    for s in (
        PromptSet(
            "parti", "partiprompts/PartiPrompts.tsv", "PartiPrompts, 1,632 prompts", "google-research/parti"
        ),
        PromptSet(
            "geneval", "geneval/evaluation_metadata.jsonl", "GenEval, 553 prompts", "djghosh13/geneval"
        ),
        PromptSet(
            "drawbench",
            "drawbench/drawbench_imagen_categories.csv",
            "DrawBench, 200 prompts",
            "Imagen (Google)",
        ),
        PromptSet(
            "coco5k",
            "coco_captions/mlperf_inference_coco5k/captions_source.tsv",
            "COCO-2014 val, 5,000 images, one caption each",
            "mlcommons/inference text_to_image/coco2014/captions",
        ),
        PromptSet(
            "coco30k",
            "coco_captions/llamagen_coco30k/coco_captions.csv",
            "COCO-2014 val, 30,000 captions (GigaGAN / LlamaGen protocol)",
            "FoundationVision/LlamaGen evaluations/t2i",
        ),
        PromptSet(
            "dpg",
            "dpg_bench/dpg_prompts_derived.jsonl",
            "DPG-Bench, 1,065 dense prompts",
            "TencentQQGYLab/ELLA",
        ),
    )
}
BUILTIN_SETS = ("shapes",)


def available_prompt_sets() -> list[str]:
    return sorted([*PROMPT_SETS, *BUILTIN_SETS])


def prompts_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    chosen = data_dir if data_dir is not None else os.environ.get(PROMPTS_DIR_VARIABLE)
    return Path(chosen).expanduser() if chosen else None


def load_prompts(
    name_or_file: str,
    n: int | None = None,
    data_dir: str | os.PathLike | None = None,
    *,
    data_dir_option: str = "data_dir",
) -> list[str]:
    """The first `n` prompts (all when None) of a named set or a prompt file. Asking for more prompts than
    the set holds warns and returns them all. `data_dir` is the folder of the public sets (default:
    `$ARJET_PROMPTS_DIR`); `data_dir_option` is how the caller's user spells it (the command line:
    `--data-dir`), for the message when a set's file is not there."""
    checks.optional_integer("n", n, 1)
    if name_or_file in BUILTIN_SETS:
        from . import heldout_set

        prompts = [item["prompt"] for item in heldout_set()]
    elif name_or_file in PROMPT_SETS:
        prompts = read_prompt_file(_named_file(PROMPT_SETS[name_or_file], data_dir, data_dir_option))
    elif Path(name_or_file).expanduser().exists():  # a FIFO or a folder: `read_text_file` says what it is
        prompts = read_prompt_file(Path(name_or_file).expanduser())
    else:
        raise ValueError(
            f"unknown prompt set {name_or_file!r} (and no such file); use one of {', '.join(available_prompt_sets())} "
            "or the path of a .txt / .tsv / .csv / .jsonl file"
        )
    if not prompts:
        raise ValueError(f"prompt set {name_or_file!r} holds no prompts")
    if n is not None and n > len(prompts):
        warnings.warn(
            f"asked for {n} prompts but {name_or_file!r} has {len(prompts)}; using all of them", stacklevel=2
        )
    return prompts[:n] if n is not None else prompts


def _named_file(prompt_set: PromptSet, data_dir: str | os.PathLike | None, option: str) -> Path:
    root = prompts_dir(data_dir)
    where = f"point {option} (or {PROMPTS_DIR_VARIABLE}) at the folder that holds {prompt_set.relative_path}"
    if root is None:
        raise FileNotFoundError(
            f"prompt set {prompt_set.name!r} ({prompt_set.description}, from {prompt_set.source}) is not shipped "
            f"with arjet: {where}"
        )
    path = root / prompt_set.relative_path
    if not path.is_file():
        raise FileNotFoundError(
            f"prompt set {prompt_set.name!r} expects the file {path} ({prompt_set.description}, from "
            f"{prompt_set.source}); put it there or {where}"
        )
    return path


_COLUMNS = ("Prompt", "prompt", "caption", "Caption", "text")
SUFFIXES = (".txt", ".tsv", ".csv", ".jsonl")


def read_prompt_file(path: Path) -> list[str]:
    """Prompts from a .txt, .tsv, .csv or .jsonl file (see the module docstring for the layouts). Anything
    that is not a prompt (bytes that are not UTF-8, a line that is not a JSON object, a record without a
    prompt field or with one that is not text) is a ValueError naming the file and the line."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"unsupported prompt file {path}: use {', '.join(SUFFIXES)}")
    lines = _text_lines(path)
    if suffix == ".jsonl":
        return [_json_prompt(line, path, number) for number, line in enumerate(lines, 1) if line.strip()]
    if suffix in (".tsv", ".csv"):
        header = lines[0] if lines else ""
        # LlamaGen's coco_captions.csv is one unquoted caption per line under a `Prompt` header
        delimiter = "\t" if suffix == ".tsv" or "\t" in header or header.strip() in _COLUMNS else ","
        rows = csv.DictReader(lines, delimiter=delimiter)
        try:
            return [_field(row, path, rows.line_num).strip() for row in rows]
        except csv.Error as error:
            raise ValueError(f"{path} line {rows.line_num}: not {suffix[1:]} ({error})") from None
    return [_prompt(line.strip(), path, n) for n, line in enumerate(lines, 1) if line.strip()]


def _text_lines(path: Path) -> list[str]:
    data = checks.read_text_file(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(
            f"{path} line {line}: the byte 0x{data[error.start]:02x} is not UTF-8 text; save the file as UTF-8"
        ) from None
    return text.splitlines()


def _json_prompt(line: str, path: Path, number: int) -> str:
    record = checks.json_value(line, f"{path} line {number}")
    if not isinstance(record, dict):
        raise ValueError(f"{path} line {number}: not a JSON object, got {line.strip()[:80]}")
    return _field(record, path, number)


def _field(record: dict, path: Path, number: int) -> str:
    for column in _COLUMNS:
        if record.get(column):
            value = record[column]
            if not isinstance(value, str):
                raise ValueError(f"{path} line {number}: the field {column!r} is {value!r}, not text")
            return _prompt(value, path, number)
    raise ValueError(f"{path} line {number}: a record has none of the fields {_COLUMNS}: {str(record)[:120]}")


def _prompt(text: str, path: Path, number: int) -> str:
    return checks.text(f"{path} line {number}", text)
