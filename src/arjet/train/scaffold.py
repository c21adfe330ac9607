"""What every training stage does around its own step: seed and threads, the output folder, the budget
loop (`max_steps` or `max_minutes` of wall clock, whichever runs out first), a progress bar and a JSON-lines
log, and the checks of the local folders a stage reads.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# what training keeps per parameter, in parameters: the weights, their gradients and Adam's two moments
TRAINING_COPIES = 4


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
    """A local folder the stage reads (never a hub lookup); FileNotFoundError naming the path otherwise."""
    path = Path(value).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"{option} {value!r}: no such folder ({path.resolve()}); {hint}")
    return path
