"""One JSON line per finished image, written so that a run killed at any point loses nothing finished.

Each process appends to its own log, `OUT/records/process-<rank>.jsonl`, one `write` per line after the
image file is in place; a record therefore means "this image is done". A line cut short by a kill (no
newline yet) is skipped when read and cut off before the process appends again. `read_records` gathers
the logs of every process (any number, from any number of runs of the same settings) into one list and
reads nothing else: another file in `OUT/records/`, a line that is not a record, a record the run would
not write (`check`) or a second record of one image is refused by name. `write_merged` writes the sorted
`OUT/records.jsonl` at the end.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .. import checks
from .atomic import write_text

RECORDS_DIR = "records"
# a log read whole on resume: a 30,000-prompt run of 20 samplers writes about 300 MB
MAX_RECORDS_BYTES = 2**30
MERGED_RECORDS = "records.jsonl"
LOG_NAME = re.compile(r"process-(0|[1-9][0-9]{0,5})\.jsonl")  # `RecordLog`'s names, nothing else

Key = tuple[str, int, int]  # (sampler spec, prompt index, seed)


def record_key(record: dict[str, Any]) -> Key:
    return record["sampler"], record["index"], record["seed"]


class RecordLog:
    """The append-only record log of one process."""

    def __init__(self, out: str | os.PathLike, rank: int):
        self.path = Path(out) / RECORDS_DIR / f"process-{rank}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._cut_partial_line()

    def _cut_partial_line(self) -> None:
        if not self.path.exists():
            return
        data = checks.read_text_file(self.path, MAX_RECORDS_BYTES)
        if data and not data.endswith(b"\n"):
            with open(self.path, "r+b") as handle:
                handle.truncate(data.rfind(b"\n") + 1)

    def append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # the umask applies
        try:
            os.write(descriptor, line)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def read_records(
    out: str | os.PathLike, check: Callable[[dict[str, Any]], None] | None = None
) -> list[dict[str, Any]]:
    """Every complete record of the logs in `OUT/records/`, each checked with `check` (which raises
    ValueError for a record the run would not write). ValueError naming the file (and line) for anything
    else there: a file that is not a process log, a line that is not a JSON object, a second record of
    the same image."""
    folder = Path(out) / RECORDS_DIR
    records: dict[Key, dict[str, Any]] = {}
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not LOG_NAME.fullmatch(path.name) or path.is_symlink() or not path.is_file():
            raise ValueError(
                f"{path} is not a record log of this run (arjet writes only process-<rank>.jsonl files there, and "
                "reads nothing else); remove it, or pass a new --out"
            )
        for number, record in _log_lines(path):
            where = f"{path}, line {number}"
            try:
                key = record_key(record)
                hash(key)  # a list where a number belongs is not a key
                if check is not None:
                    check(record)
            except (KeyError, TypeError, ValueError) as error:
                reason = f"no {error} field" if isinstance(error, KeyError) else str(error)
                raise ValueError(
                    f"{where} is not a record this run wrote ({reason}); remove it, or pass a new --out"
                ) from None
            if key in records:
                raise ValueError(
                    f"{where} records image {key} a second time (a run records each image once); remove the line, "
                    "or pass a new --out"
                )
            records[key] = record
    return list(records.values())


def _log_lines(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    """(line number, record) for every newline-terminated line of a log; the text after the last newline,
    a line cut short by a kill, is left out (`RecordLog` cuts it off before appending)."""
    lines = checks.read_text_file(path, MAX_RECORDS_BYTES).split(b"\n")[:-1]
    for number, line in enumerate(lines, 1):
        where = f"{path}, line {number}"
        try:
            record = checks.json_value(line, where)
        except ValueError as error:
            raise ValueError(f"{error}; remove the line, or pass a new --out") from None
        if not isinstance(record, dict):
            raise ValueError(f"{where} is not a record (a JSON object); remove it, or pass a new --out")
        yield number, record


def sort_records(records: Iterable[dict[str, Any]], samplers: Sequence[str]) -> list[dict[str, Any]]:
    """Records ordered by sampler (as listed), prompt index and seed."""
    order = {spec: position for position, spec in enumerate(samplers)}
    return sorted(records, key=lambda r: (order.get(r["sampler"], len(order)), r["index"], r["seed"]))


def write_merged(out: str | os.PathLike, records: Sequence[dict[str, Any]]) -> Path:
    path = Path(out) / MERGED_RECORDS
    write_text(path, "".join(json.dumps(record) + "\n" for record in records))
    return path
