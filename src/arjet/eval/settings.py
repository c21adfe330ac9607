"""What decides every image of an evaluation run, kept as `OUT/config.json` so a run resumes only itself.

Metric options (feature network, CLIP, reference images) are not part of it: the images stay valid when
they change, and the metrics are recomputed at the end of every run.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .atomic import write_text

CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class EvalSettings:
    model: str  # resolved checkpoint folder or hub id
    samplers: list[str]
    prompts: str  # prompt set name or file
    n: int  # prompts used (after capping at the set's size)
    seeds: list[int]
    prompts_sha1: str = ""
    height: int | None = None
    width: int | None = None
    guidance_scale: float | None = None
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    dtype: str | None = None
    version: int = 1  # of this layout

    @staticmethod
    def prompt_digest(prompts: list[str]) -> str:
        return hashlib.sha1("\n".join(prompts).encode()).hexdigest()

    def call_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of every pipeline call."""
        return dict(
            height=self.height,
            width=self.width,
            guidance_scale=self.guidance_scale,
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_out_dir(out: str | os.PathLike, settings: EvalSettings) -> bool:
    """True when `out` already holds a run with these settings (resume it); False when it holds none.
    A run with other settings raises ValueError naming the differences and suggesting a new folder."""
    path = Path(out) / CONFIG_FILE
    if not path.is_file():
        return False
    stored = json.loads(path.read_text(encoding="utf-8"))
    wanted = json.loads(json.dumps(settings.to_dict()))  # tuples -> lists, as stored
    differences = [
        f"{key}: {stored.get(key)!r} there, {wanted.get(key)!r} now"
        for key in sorted(set(stored) | set(wanted))
        if stored.get(key) != wanted.get(key)
    ]
    if differences:
        raise ValueError(
            f"{out} already holds an evaluation run with different settings ({'; '.join(differences)}). "
            f"Run the same command again to resume that run, or pass a new --out (e.g. {_suggest(Path(out))})"
        )
    return True


def write_config(out: str | os.PathLike, settings: EvalSettings) -> None:
    write_text(Path(out) / CONFIG_FILE, json.dumps(settings.to_dict(), indent=2) + "\n")


def _suggest(out: Path) -> Path:
    number = 2
    while out.with_name(f"{out.name}-{number}").exists():
        number += 1
    return out.with_name(f"{out.name}-{number}")
