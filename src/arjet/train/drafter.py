"""`arjet train drafter`: an EAGLE-style drafter for any checkpoint, by self-distillation (LANTERN, §4).

1. Data: the model itself generates `images` images' codes for the prompt set (with an exact sampler, so
   the codes follow the model's own distribution at its default guidance, temperature and top-k), and one
   teacher-forced forward through a decoding session gives its hidden state at every input, per CFG row:
   exactly the hidden states the drafter reads at decode time (`DecodingSession.last_hidden`, row-end
   tokens included). They are kept in memory (bfloat16), computed once, not stored on disk per sample as
   the official pipeline does.
2. Training: every CFG row is a sequence of pairs `(h_c, x_c)` (the hidden state that predicted cell `c`,
   the code of cell `c`); the drafter's output at `c` is fitted to `h_{c+1}` with EAGLE's loss,
   `SmoothL1(h^, h) + p_weight * CE(softmax(head(h)), head(h^))` over the whole code vocabulary, the
   model's code head and code embeddings frozen. For a guided model (`guided`, the default) the
   cross-entropy compares the CFG-mixed distributions of an image's two rows, which is what decoding
   draws from and verifies against. AdamW, warm-up and cosine decay, within `max_steps` and
   `max_minutes`.

The result is the base pipeline with its `drafter` component (`out/pipeline`) and the drafter alone
(`out/drafter`). One process on `device` (CPU by default, or a GPU), or several under `accelerate launch` /
`torchrun` (`arjet.train.processes`): each generates and trains on its share of the images, with the
gradients averaged, and the first one logs and saves.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from .. import checks
from ..addons.drafter import Drafter
from ..session import DecodingSession
from ..weights import load_tensors
from .configs import DrafterTrainConfig
from .processes import Processes
from .scaffold import TRAINING_COPIES, TrainingRun, check_base, check_outputs
from .schedule import warmup_cosine


def prompt_set(source: str, count: int, seed: int) -> list[str]:
    """`count` prompts: fresh descriptions of random scenes of the shapes domain (`"shapes"`), or the first
    `count` of a prompt file (cycled when it holds fewer)."""
    if source == "shapes":
        from ..data import describe, sample_scene

        rng = np.random.default_rng(seed)
        return [describe(sample_scene(rng), rng) for _ in range(count)]
    path = Path(source).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"--prompts {source!r}: no such file; pass a prompt file or 'shapes'")
    if path.suffix == ".json":
        prompts = _json_prompts(checks.read_json(path), path)
    elif path.suffix == ".jsonl":
        prompts = [_record_prompt(record, path) for record in checks.read_json_lines(path)]
    else:
        prompts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    prompts = [prompt for prompt in prompts if prompt.strip()]
    if not prompts:
        raise ValueError(f"--prompts {source!r} holds no prompts")
    return [prompts[i % len(prompts)] for i in range(count)]


def _json_prompts(data: Any, path: Path) -> list[str]:
    """The prompts of a .json prompt file: a list, or COCO captions (`{"annotations": [{"caption": ...}]}`)."""
    if isinstance(data, dict):
        data = data.get("annotations", [])
        if not isinstance(data, list):
            raise ValueError(f"{path}: 'annotations' must be a list of {{'caption': ...}} records")
        return [_record_prompt(item, path) for item in data]
    if not isinstance(data, list):
        raise ValueError(f"{path} holds neither a list of prompts nor COCO captions")
    return [str(item) for item in data]


def _record_prompt(record: Any, path: Path) -> str:
    if not isinstance(record, dict):
        raise ValueError(f"{path}: a record is not a JSON object, got {str(record)[:80]}")
    return str(record.get("prompt", record.get("caption", "")))


@torch.no_grad()
def distill(
    pipe, prompts: list[str], config: DrafterTrainConfig, progress=None, seeds: list[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own codes for `prompts` and its hidden states: `(hidden [R, N, d] bfloat16, codes [R, N])`
    with `R` sequences (one per CFG row) of the grid's `N` cells; `hidden[:, c]` is the hidden state whose
    output predicted cell `c`. `seeds`: one per prompt (default: from `config.seed` and the prompt's place).
    With `config.data_dir`, each batch is read from there when an earlier run made it (the same base,
    sampler, prompts and seeds), and written there when made."""
    if seeds is None:
        seeds = image_seeds(config, range(len(prompts)))
    store = Path(config.data_dir).expanduser() if config.data_dir else None
    hidden_rows, code_rows = [], []
    for start in range(0, len(prompts), config.data_batch):
        batch = prompts[start : start + config.data_batch]
        batch_seeds = seeds[start : start + config.data_batch]
        path = store / f"{_batch_key(config, batch, batch_seeds)}.safetensors" if store else None
        if path is not None and path.is_file():
            hidden, codes = _stored_batch(path)
        else:
            hidden, codes = _distill_batch(pipe, batch, config.data_sampler, batch_seeds)
            if path is not None:
                store.mkdir(parents=True, exist_ok=True)
                partial = path.with_suffix(f".{os.getpid()}.partial")  # never a half-written batch to read
                save_file({"hidden": hidden.contiguous(), "codes": codes.contiguous()}, partial)
                partial.replace(path)
        hidden_rows.append(hidden)
        code_rows.append(codes)
        if progress is not None:
            progress(len(batch))
    return torch.cat(hidden_rows), torch.cat(code_rows)


def _stored_batch(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden, codes) of a batch an earlier run kept in `data_dir`; ValueError naming a file that is cut
    short or holds other tensors (remove it, and the batch is generated again)."""
    data = load_tensors(path, "kept drafter data", "remove it: the batch is generated again")
    if set(data) != {"hidden", "codes"}:
        raise ValueError(f"{path} holds {sorted(data)[:4]}, not a batch's hidden and codes; remove it")
    return data["hidden"], data["codes"]


def _distill_batch(
    pipe, prompts: list[str], sampler: str, seeds: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of `distill`: the codes `sampler` draws, then one teacher-forced pass for the hidden states."""
    grid = pipe.grid_for(*pipe.default_size())
    scale = pipe.checkpoint_guidance_scale()
    guided = scale != 1
    codes = pipe(prompts, sampler=sampler, seed=seeds, output_type="latent").codes.flatten(1)
    session = DecodingSession(
        pipe.session_adapter(),
        pipe.image_layout(grid),
        pipe.encode_prompts(prompts, None, grid, guided),
        scale if guided else None,
    )
    cells = torch.arange(1, codes.shape[1], device=codes.device).expand(len(prompts), -1)
    session.logits(cells, codes[:, :-1])
    hidden = torch.cat([session.first_hidden[:, None], session.last_hidden], 1)
    return hidden.to("cpu", torch.bfloat16), session.both_halves(codes).cpu()


def _batch_key(config: DrafterTrainConfig, prompts: list[str], seeds: list[int]) -> str:
    """A batch's file name in `data_dir`: a digest of what determines its data."""
    what = {"base": config.base, "sampler": config.data_sampler, "prompts": prompts, "seeds": seeds}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:24]


def image_seeds(config: DrafterTrainConfig, places: Iterable[int]) -> list[int]:
    """The seed of each training image, by its place in the whole prompt set (whichever process makes it)."""
    return [config.seed * 1_000_003 + place for place in places]


def drafter_loss(
    drafter: Drafter,
    adapter,
    hidden: torch.Tensor,
    codes: torch.Tensor,
    p_weight: float,
    guidance_scale: float | None = None,
    depths: int = 1,
) -> tuple[torch.Tensor, dict[str, float]]:
    """EAGLE's loss on sequences of pairs (`hidden [b, N, d]`, `codes [b, N]`), and its parts (`accept`: the
    chance that one code drawn from the drafter's distribution passes the exact test, at temperature 1). With
    `guidance_scale` the sequences are images' CFG rows in pairs (conditional, unconditional) and the
    next-code loss compares the mixed distributions `u + s * (c - u)`, the ones decoding draws from (an
    error in either row's logits is amplified by the scale there). With `depths > 1` the drafter is also
    scored `depths - 1` steps into its own drafts (`Drafter.unrolled`: EAGLE-3's training-time test): the
    loss and its parts are means over the depths, and `accept_<k>` is depth `k`'s acceptance."""
    with torch.no_grad():
        embeds = adapter.embed_codes(codes)
        target = hidden[:, 1:]
        target_logits = _guided(adapter.code_logits(target.to(embeds.dtype)).float(), guidance_scale)
        target_p = target_logits.softmax(-1)
    predicted = drafter.unrolled(embeds, hidden, depths)[:, :, :-1]  # [depths, b, N - 1, d]
    length = predicted.shape[2]
    # position j at depth k drafts from committed position j - k: none before k
    valid = (
        torch.arange(length, device=hidden.device)[None, :]
        >= torch.arange(depths, device=hidden.device)[:, None]
    )

    def per_depth(values: torch.Tensor) -> torch.Tensor:  # [depths, rows, N - 1] -> [depths]
        """Each depth's mean over its meaningful positions."""
        return (values * valid[:, None, :]).sum((1, 2)) / (valid.sum(1) * values.shape[1])

    smooth_l1 = F.smooth_l1_loss(predicted.float(), target.float().expand_as(predicted), reduction="none")
    v_loss = per_depth(smooth_l1.mean(-1))
    logits = adapter.code_logits(predicted.flatten(0, 1).to(embeds.dtype)).float()
    log_q = _guided(logits, guidance_scale).unflatten(0, (depths, -1)).log_softmax(-1)
    p_loss = per_depth(-(target_p * log_q).sum(-1))
    agree = per_depth((log_q.argmax(-1) == target_p.argmax(-1)).float())
    accept = per_depth(torch.minimum(target_p, log_q.exp()).sum(-1))  # 1 - TV: one drawn code's acceptance
    loss = (v_loss + p_weight * p_loss).mean()
    parts = {
        "v_loss": v_loss.mean().item(),
        "p_loss": p_loss.mean().item(),
        "top1": agree.mean().item(),
        "accept": accept.mean().item(),
    }
    if depths > 1:
        parts.update({f"accept_{k + 1}": value for k, value in enumerate(accept.tolist())})
    return loss, parts


def _guided(logits: torch.Tensor, scale: float | None) -> torch.Tensor:
    """Per-row logits `[2b, ...]` (pairs of rows) mixed per pair with the guidance `scale`; as they are
    without one."""
    if scale is None:
        return logits
    cond, uncond = logits.view(-1, 2, *logits.shape[1:]).unbind(1)
    return uncond + scale * (cond - uncond)


def train_drafter(config: DrafterTrainConfig) -> Path:
    from tqdm.auto import tqdm

    from ..builtin import load_model

    check_outputs(config)
    check_base("--base", config.base)
    if config.images < Processes.launched():  # checked before any process waits for the others
        raise ValueError(
            f"--images {config.images}: at least one per process ({Processes.launched()} processes)"
        )
    processes = Processes.from_environment(config.device)
    device = processes.device(config.device)
    pipe = load_model(config.base, device=device, dtype="float32")
    pipe.set_progress_bar_config(disable=True)
    Drafter.check_fits(  # before the data is generated: the drafter's width is the model's
        "the drafter of these options (--intermediate-size, --heads)",
        Drafter.sizes_for(pipe.session_adapter(), **drafter_options(config), device=device),
        copies=TRAINING_COPIES,
        device=device,
    )
    run = TrainingRun(config, "drafter", show=processes.main)
    prompts = prompt_set(config.prompts, config.images, config.seed)
    places = processes.shard(range(len(prompts)))
    with tqdm(
        total=len(places), desc="self-distillation data", unit="image", disable=not processes.main
    ) as bar:
        hidden, codes = distill(
            pipe, [prompts[i] for i in places], config, bar.update, image_seeds(config, places)
        )
    held_out = None
    if processes.main and config.val_images:
        every = prompt_set(config.prompts, config.images + config.val_images, config.seed)
        places = range(config.images, len(every))
        held_out = distill(pipe, every[config.images :], config, seeds=image_seeds(config, places))
    sequences = processes.total(len(codes), device)
    if processes.main:
        run.log({"images": len(prompts), "sequences": sequences, "minutes_data": run.minutes})
    drafter, loss, parts = fit_drafter(pipe, hidden, codes, config, run, processes, held_out)
    processes.finish()  # before the first process saves, which can outlast a collective's time-out
    if not processes.main:
        return run.out / "pipeline"
    run.check_finite(drafter)
    drafter.save_pretrained(run.out / "drafter")
    pipe.register_modules(drafter=drafter)
    pipe.save_pretrained(run.out / "pipeline")
    (run.out / "train_config.json").write_text(json.dumps(asdict(config), indent=2))
    metrics = {"steps": run.step, "minutes": run.minutes, "processes": processes.count, "loss": loss, **parts}
    (run.out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return run.out / "pipeline"


def drafter_options(config: DrafterTrainConfig) -> dict[str, Any]:
    """`Drafter.for_adapter`'s (and `sizes_for`'s) options from `config`: its MLP width and heads."""
    return {"intermediate_size": config.intermediate_size, "num_attention_heads": config.heads}


def fit_drafter(
    pipe,
    hidden: torch.Tensor,
    codes: torch.Tensor,
    config: DrafterTrainConfig,
    run: TrainingRun,
    processes: Processes | None = None,
    held_out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[Drafter, float, dict[str, float]]:
    """A new drafter for `pipe` fitted to this process's sequences (`distill`'s `hidden`, `codes`) within
    the run's budget, the gradients averaged over `processes`; returns it (in eval mode) with the last
    step's loss and its parts. With `held_out` sequences (the same layout) every log line scores the drafter
    on them too (`val_*`), and the weights returned are those of the best `val_accept`, with its parts."""
    processes = processes or Processes()
    adapter = pipe.session_adapter()
    pipe.model.requires_grad_(False)
    drafter = Drafter.for_adapter(adapter, **drafter_options(config), device=pipe.device).to(pipe.device)
    processes.same_start(drafter)
    drafter.train()
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0)
    order = np.random.default_rng(config.seed + 1_000_003 * processes.rank)
    scale = pipe.checkpoint_guidance_scale()
    guidance = scale if config.guided and scale != 1 else None
    pair = 2 if guidance is not None else 1  # `distill` keeps an image's two CFG rows side by side
    loss, parts = torch.zeros(()), {}
    best: tuple[dict[str, torch.Tensor], dict[str, float]] | None = None
    for step, seconds in processes.steps(run, str(pipe.device)):
        for group in optimizer.param_groups:
            group["lr"] = warmup_cosine(config, step, seconds)
        first = order.integers(0, len(codes) // pair, max(1, config.batch_size // pair)) * pair
        index = torch.from_numpy(first[:, None] + np.arange(pair)).flatten()
        batch_hidden = hidden[index].to(pipe.device, torch.float32)
        loss, parts = drafter_loss(
            drafter,
            adapter,
            batch_hidden,
            codes[index].to(pipe.device),
            config.p_weight,
            guidance,
            config.depths,
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        processes.average_gradients(drafter.parameters())
        torch.nn.utils.clip_grad_value_(drafter.parameters(), 0.5)
        optimizer.step()
        run.progress.set_postfix(loss=f"{loss.item():.3f}", top1=f"{parts['top1']:.2f}")
        if processes.main and (step + 1) % config.log_every == 0:
            record = {"step": step + 1, "minutes": run.minutes, "loss": loss.item(), **parts}
            if held_out is not None:
                record.update(_validate(drafter, adapter, held_out, config, guidance))
                if best is None or record["val_accept"] > best[1]["val_accept"]:
                    best = copy.deepcopy(drafter.state_dict()), record
            run.log(record)
    if best is not None:
        drafter.load_state_dict(best[0])
        parts = {k: v for k, v in best[1].items() if k not in ("step", "minutes", "loss")}
        return drafter.eval(), best[1]["loss"], {"best_step": best[1]["step"], **parts}
    return drafter.eval(), loss.item(), parts


@torch.no_grad()
def _validate(
    drafter: Drafter,
    adapter,
    held_out: tuple[torch.Tensor, torch.Tensor],
    config: DrafterTrainConfig,
    guidance: float | None,
) -> dict[str, float]:
    """The loss parts on the held-out sequences, named `val_*`."""
    hidden, codes = held_out
    device = drafter.fc.weight.device
    drafter.eval()
    _, parts = drafter_loss(
        drafter,
        adapter,
        hidden.to(device, torch.float32),
        codes.to(device),
        config.p_weight,
        guidance,
        config.depths,
    )
    drafter.train()
    return {f"val_{key}": value for key, value in parts.items()}
