"""One JSON line per finished image, written so that a run killed at any point loses nothing finished.

Each process appends to its own log, `OUT/records/process-<rank>.jsonl`, one `write` per line after the
image file is in place; a record therefore means "this image is done". A line cut short by a kill is
skipped when read and cut off before the process appends again. `read_records` gathers every log (any
number of processes, from any number of runs) into one list; `write_merged` writes the sorted
`OUT/records.jsonl` at the end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .atomic import write_text

RECORDS_DIR = "records"
MERGED_RECORDS = "records.jsonl"

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
        data = self.path.read_bytes()
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


def read_records(out: str | os.PathLike) -> list[dict[str, Any]]:
    """Every complete record in `OUT/records/*.jsonl`, one per key (a later duplicate wins)."""
    records: dict[Key, dict[str, Any]] = {}
    for path in sorted((Path(out) / RECORDS_DIR).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill: its image is made again
            records[record_key(record)] = record
    return list(records.values())


def sort_records(records: Iterable[dict[str, Any]], samplers: Sequence[str]) -> list[dict[str, Any]]:
    """Records ordered by sampler (as listed), prompt index and seed."""
    order = {spec: position for position, spec in enumerate(samplers)}
    return sorted(records, key=lambda r: (order.get(r["sampler"], len(order)), r["index"], r["seed"]))


def write_merged(out: str | os.PathLike, records: Sequence[dict[str, Any]]) -> Path:
    path = Path(out) / MERGED_RECORDS
    write_text(path, "".join(json.dumps(record) + "\n" for record in records))
    return path
