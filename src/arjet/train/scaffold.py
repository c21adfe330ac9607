"""What every training stage does around its own step: seed and threads, the output folder, the budget
loop (`max_steps` or `max_minutes` of wall clock, whichever runs out first), a progress bar and a JSON-lines
log, and the checks of the places a stage writes and of the local folders it reads.

One run per folder: a stage writes into a new or empty `--out` (its log, metrics and weights there), never
over an earlier run nor into another run's log. No stage resumes a run; `ar` and `clip` continue from saved
weights with `--init` (into a new folder), and the caches of encoded or generated data (`--data-cache`,
`--data-dir`) are meant to be shared between runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

from .. import checks, machine

# what training keeps per parameter, in parameters: the weights, their gradients and Adam's two moments
TRAINING_COPIES = 4
ONE_RUN = (
    "a folder holds one training run (arjet train never writes over an earlier run or adds to its log; no "
    "stage resumes one, while ar and clip continue from its weights with --init into a new folder)"
)


def check_outputs(config: Any) -> list[Path]:
    """Check every place the stage writes (its config's fields marked `output`, see
    `arjet.train.configs.output`) before any work: the run's folder new or empty, a file new, a cache
    folder writable; an empty value is skipped. Returns the folders a run would make, the deepest first."""
    made: set[Path] = set()
    for item in fields(config):
        kind, value = item.metadata.get("output"), getattr(config, item.name)
        if kind is None or not value:
            continue
        option = "--" + item.name.replace("_", "-")
        if kind == "file":
            if Path(value).expanduser().exists() or Path(value).expanduser().is_symlink():
                raise ValueError(
                    f"{option} {str(value)!r} already exists; arjet train writes a new file for every run, "
                    f"never into an earlier run's: give a new file name, or leave {option} out"
                )
            checks.output_file(option, value, new_folders=True)
            made.update(checks.missing_folders(Path(value).expanduser().parent))
        else:
            checks.output_dir(option, value, empty=kind == "folder", why_empty=ONE_RUN)
            made.update(checks.missing_folders(value))
    return sorted(made, key=lambda folder: len(folder.parts), reverse=True)


def check_bytes_fit(what: str, needed: int, device: Any = "cpu") -> None:
    """Refuse, before it is allocated, work that needs more memory than `device` has free (`needed` bytes,
    counted from the options); a ValueError naming `what`."""
    import torch

    free = machine.available_bytes(device)
    if free is not None and needed > free:
        raise ValueError(
            f"{what} would take at least {needed / 1e9:.3g} GB, more than the {free / 1e9:.3g} GB of memory "
            f"free on {torch.device(device).type}; make it smaller"
        )


class TrainingRun:
    """One stage's run of `config` (a config of `arjet.train.configs`: `out`, `seed`, `threads`, `max_steps`,
    `max_minutes`). Seeds torch, sets its threads and makes the output folder when created; `steps()` yields
    step numbers while the budget lasts, which starts with the first step (loading and encoding data before
    it is not counted). `show=False` hides the progress bar (processes other than the first). `log`: the
    JSON-lines log (default `out/train_log.jsonl`)."""

    def __init__(self, config: Any, name: str, *, log: str | Path | None = None, show: bool = True):
        import torch

        torch.manual_seed(config.seed)
        torch.set_num_threads(config.threads)
        self.config = config
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log_path = Path(log) if log is not None else self.out / "train_log.jsonl"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.start = time.time()
        self.step = 0  # steps finished
        self.name, self.show = name, show
        self.progress: Any = None  # the bar of `steps()`, shown from the first step on

    @property
    def seconds(self) -> float:
        return time.time() - self.start

    @property
    def minutes(self) -> float:
        return self.seconds / 60

    def steps(self) -> Iterator[int]:
        """0, 1, 2, ... while fewer than `max_steps` steps are done and `max_minutes` have not passed; each
        step counts as done (and moves the progress bar) when the next is asked for."""
        from tqdm.auto import tqdm

        config = self.config
        self.progress = tqdm(
            total=config.max_steps, desc=f"train {self.name}", unit="step", disable=not self.show
        )
        self.start = time.time()
        while self.step < config.max_steps and self.seconds < config.max_minutes * 60:
            yield self.step
            self.step += 1
            self.progress.update(1)
        self.progress.close()

    def check_finite(self, *modules: Any) -> None:
        """Refuse to save weights that are not finite: the run diverged (e.g. a learning rate far too high), and
        a model of NaNs would only fail later, elsewhere."""
        import torch

        for module in modules:
            for name, parameter in module.named_parameters():
                if not torch.isfinite(parameter).all():
                    raise ValueError(
                        f"training diverged: after {self.step} steps the weight {name} holds NaN or infinite "
                        "values, so nothing was saved; lower --lr (or the other rates) and train again"
                    )

    def log(self, record: dict[str, Any]) -> None:
        """Append one JSON line to the log (opened per write: a killed run loses nothing written)."""
        with open(self.log_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")


def require_folder(option: str, value: str, hint: str) -> Path:
    """A local folder the stage reads (never a hub lookup); FileNotFoundError naming the path otherwise, and
    a ValueError naming a file of it that is cut short or malformed (`checks.check_checkpoint_files`)."""
    path = Path(value).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"{option} {value!r}: no such folder ({path.resolve()}); {hint}")
    checks.check_checkpoint_files(option, path)
    return path


def check_base(option: str, value: str) -> None:
    """A model the stage starts from, by name or folder: a folder's files are checked as `require_folder`
    checks them (a name is the package's own model, or a hub id its loader resolves)."""
    if Path(value).expanduser().is_dir():
        checks.check_checkpoint_files(option, value)


def uses_bf16(requested: bool, device: Any) -> bool:
    """bfloat16 autocast where the stage's `--bf16` asks for it and `device` runs bfloat16 natively
    (`arjet.machine.bfloat16_is_fast`); elsewhere float32, which is then the faster of the two."""
    return requested and machine.bfloat16_is_fast(device)
