"""What decides every image of an evaluation run, kept as `OUT/config.json` so a run resumes only itself.

Metric options (feature network, CLIP, reference images) are not part of it: the images stay valid when
they change, and the metrics are recomputed at the end of every run. config.json keeps its first layout
(`version` 1): the sampling options as four keys of their own, so runs made before resume.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

from .. import checks
from ..samplers import SamplingOptions
from .atomic import write_text
from .records import MERGED_RECORDS

ADDED_SETTINGS = ("quantization",)  # after layout 1: written only when set

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"
REPORT_FILE = "report.md"


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
    sampling: SamplingOptions = SamplingOptions()  # None numbers: the model's; temperature 1 unless set
    dtype: str | None = None
    quantization: str | None = None  # the AR decoder's weights quantized so (`arjet.Quantization`), or not
    compile: bool | str = False  # the pipeline's `compile=` (rounding may differ from eager: part of a run)
    version: int = 1  # of this layout

    @staticmethod
    def prompt_digest(prompts: list[str]) -> str:
        return hashlib.sha1("\n".join(prompts).encode()).hexdigest()

    def __post_init__(self) -> None:
        if not isinstance(self.sampling, SamplingOptions):
            raise ValueError(f"sampling must be an arjet.samplers.SamplingOptions, got {self.sampling!r}")

    def call_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of every pipeline call."""
        return {
            "height": self.height,
            "width": self.width,
            "compile": self.compile,
            **self.sampling.kwargs(),
        }

    def to_dict(self) -> dict[str, Any]:
        """The settings as config.json holds them (and metrics.json shows them): layout 1, flat; a setting
        added since (`ADDED_SETTINGS`) only when it is set, so a run without it keeps layout 1's keys."""
        settings = {**asdict(self), "sampling": self.sampling}
        return _flat({k: v for k, v in settings.items() if not (k in ADDED_SETTINGS and v is None)})


def _flat(settings: Mapping[str, Any]) -> dict[str, Any]:
    """`settings` with the sampling options as their four keys, in their place (config.json's layout 1)."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        flat.update(value.kwargs() if isinstance(value, SamplingOptions) else {key: value})
    return flat


def check_out_dir(out: str | os.PathLike, settings: EvalSettings) -> bool:
    """True when `out` already holds a run with these settings (resume it); False when it is new or empty.
    A file, a folder with other files but no run, or a run with other settings raises ValueError naming
    the problem and suggesting a new folder. Sampler lists compare as sets (`sjd,ar` resumes `ar,sjd`)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(
            f"--out {str(out)!r} is a file; pass a folder for the run (new, empty, or an earlier run)"
        )
    path = out / CONFIG_FILE
    if not path.is_file():
        if out.is_dir() and any(out.iterdir()):
            raise ValueError(
                f"--out {str(out)!r} holds files but no arjet evaluation run ({CONFIG_FILE}); arjet writes a run "
                f"only into a new or empty folder, or resumes its own run: pass e.g. {str(_suggest(out))!r}"
            )
        return False
    try:
        stored = checks.read_json(path)
    except ValueError as error:
        raise ValueError(f"{error}: not an arjet run's settings; pass a new --out") from None
    if not isinstance(stored, dict):
        raise ValueError(f"{path} is not an arjet run's settings (not a JSON object); pass a new --out")
    wanted = json.loads(json.dumps(settings.to_dict()))  # tuples -> lists, as stored
    # a setting added since a run was made reads as its default there (such a run was made with it)
    defaults = _flat(
        {field.name: field.default for field in fields(EvalSettings) if field.default is not MISSING}
    )
    stored = {**defaults, **stored}
    differences = [
        f"{key}: {stored.get(key)!r} there, {wanted.get(key)!r} now"
        for key in sorted(set(stored) | set(wanted))
        if _comparable(key, stored.get(key)) != _comparable(key, wanted.get(key))
    ]
    if differences:
        raise ValueError(
            f"{out} already holds an evaluation run with different settings ({'; '.join(differences)}). "
            f"Run the same command again to resume that run, or pass a new --out (e.g. {_suggest(out)})"
        )
    for name in (MERGED_RECORDS, METRICS_FILE, REPORT_FILE):  # written last: refused now, not after the run
        if (out / name).is_dir():
            raise ValueError(
                f"{out / name} is a folder where the run writes its file {name}; move it away and run the "
                "same command again"
            )
    return True


def _comparable(key: str, value: Any) -> Any:
    """Sampler lists are sets: the order only decides the report's order, never an image."""
    if key == "samplers" and isinstance(value, list):
        return sorted(map(str, value))
    return value


def write_config(out: str | os.PathLike, settings: EvalSettings) -> None:
    write_text(Path(out) / CONFIG_FILE, json.dumps(settings.to_dict(), indent=2) + "\n")


def _suggest(out: Path) -> Path:
    number = 2
    while out.with_name(f"{out.name}-{number}").exists():
        number += 1
    return out.with_name(f"{out.name}-{number}")
