"""`arjet train sjd2`: fine-tune an AR checkpoint for next-clean-token prediction from noisy inputs (SJD2).

Each training sequence's code inputs are split into segments with a noise level each (`0` = clean);
noisy inputs are `denorm(alpha_t * norm(e) + sigma_t * eps) + level_embedding(t)` (`arjet.addons.noise`);
the targets stay the clean next codes (ordinary cross-entropy). A share of sequences stays entirely clean
and a share of prompts is dropped (CFG, for families that have it), so plain AR sampling keeps its quality.
Works for any pipeline family through its session adapter, a preview grid (GLM-Image) trained with its
target; full fine-tuning for small models, LoRA (peft) for large ones;
`accelerate launch -m arjet train sjd2 ...` spreads it over several GPUs. The result is the base pipeline
plus a `noise_conditioning` component, which is what `sjd2` requires; a base that already has one (an
earlier SJD2 fine-tune) is continued.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from .. import checks
from ..addons.noise import NoiseConditioning
from ..session import Prefix
from .configs import SJD2TrainConfig
from .processes import Processes
from .scaffold import TrainingRun, check_base, check_outputs, uses_bf16
from .schedule import warmup_cosine
from .sequence import code_loss, teacher_forced_logits


def noisy_code_inputs(
    noise: NoiseConditioning, clean: torch.Tensor, config: SJD2TrainConfig, generator: torch.Generator
) -> torch.Tensor:
    """Code input embeddings `[B, M, d]` with a random noise level per segment (some sequences all clean)."""
    batch, length, _ = clean.shape
    levels = torch.zeros(batch, length)
    for row in range(batch):
        if torch.rand((), generator=generator) < config.clean_share:
            continue
        start = 0
        while start < length:
            size = int(torch.randint(config.min_segment, config.max_segment + 1, (), generator=generator))
            levels[row, start : start + size] = torch.randint(0, config.levels + 1, (), generator=generator)
            start += size
    t = (levels / config.levels).to(clean.device)
    eps = torch.randn(clean.shape, generator=generator).to(clean.device)
    noisy = noise.model_input(noise.add_noise(clean, t, eps), t)
    return torch.where((t > 0)[..., None], noisy.to(clean.dtype), clean)


class CodeData:
    """(prompt, codes) pairs: the built-in shapes domain (fresh phrasings each draw) or a JSONL of
    `{"prompt": ..., "image": path}` records encoded once with the pipeline's image tokenizer; a record
    without an image gets the base model's own codes for its prompt (`ar`, seeded by its line), which is
    also where a preview grid's codes come from (`preview`, else None)."""

    def __init__(self, pipe, config: SJD2TrainConfig):
        self.pipe, self.config = pipe, config
        self.rng = np.random.default_rng(config.seed)
        self.preview: torch.Tensor | None = None
        if config.data == "shapes":  # the built-in domain; its model is a Janus
            from ..data import Scene
            from .ar import load_or_encode

            codes, scenes = load_or_encode(
                pipe.model.model.vqmodel, Path(config.data_cache), "train", config.images
            )
            self.codes = torch.from_numpy(codes.astype(np.int64))
            self.scenes = [Scene.from_dict(s) for s in scenes]
            self.prompts = None
        else:
            self.prompts, self.codes = self._encode_jsonl(Path(config.data))

    def _encode_jsonl(self, path: Path) -> tuple[list[str], torch.Tensor]:
        from ..data import to_tensor
        from ..eval.images import MODEL_IMAGE_PIXELS, read_image

        records = read_data_records(path)

        tokenizer = self.pipe.image_tokenizer
        height, width = self.pipe.default_size()
        grid = self.pipe.grid_for(height, width)
        with_images = sum("image" in record for record in records)
        if with_images not in (0, len(records)):
            raise ValueError(
                f"{path}: give every record an image, or none (to train on the model's own codes)"
            )
        if with_images and self.pipe.preview_grid(grid) is not None:
            raise ValueError(
                f"{path}: {type(self.pipe).__name__} trains on its own codes (arjet does not run its image "
                "tokenizer); give prompt records without images"
            )
        if not with_images:
            return self._sample(records, path)
        codes = []
        for record in records:
            try:  # the size from the file's header, before a pixel is decoded
                image = read_image(path.parent / str(record["image"]), MODEL_IMAGE_PIXELS, (width, height))
            except ValueError as error:
                raise ValueError(
                    f"{error}; this model is fine-tuned on {width} x {height} images: resize the data set first"
                ) from None
            pixels = to_tensor(image)[None]
            codes.append(tokenizer.encode(pixels.to(self.pipe.device)).flatten(1).cpu())
        return [r["prompt"] for r in records], torch.cat(codes)

    def _sample(self, records: list[dict], path: Path) -> tuple[list[str], torch.Tensor]:
        """The base model's own codes (and preview codes) for each record's prompt: `ar`, seed = line + seed."""
        prompts = [record.get("prompt") for record in records]
        if not all(isinstance(prompt, str) and prompt.strip() for prompt in prompts):
            raise ValueError(f"{path}: every record needs a non-empty 'prompt'")
        step = self.pipe.limits.max_images_per_call
        codes, previews = [], []
        for start in range(0, len(prompts), step):
            seeds = [self.config.seed + line for line in range(start, min(start + step, len(prompts)))]
            out = self.pipe(prompts[start : start + step], sampler="ar", seed=seeds, output_type="latent")
            codes.append(out.codes.flatten(1).cpu())
            if out.preview_codes is not None:
                previews.append(out.preview_codes.flatten(1).cpu())
        self.preview = torch.cat(previews) if previews else None
        return prompts, torch.cat(codes)

    def __len__(self) -> int:
        return len(self.codes)

    def batch(
        self, index: np.ndarray, grid: tuple[int, int]
    ) -> tuple[Prefix, torch.Tensor, torch.Tensor | None]:
        """The prompts' prefix (some replaced by the unconditional row, where the family has CFG), the codes
        `[B, H, W]` and the preview grid's `[B, h, w]` (None without one)."""
        if self.prompts is None:
            from ..data import describe

            prompts = [describe(self.scenes[i], self.rng) for i in index]
        else:
            prompts = [self.prompts[i] for i in index]
        rows = torch.from_numpy(index)
        preview = None if self.preview is None else self.preview[rows].view(-1, *self.pipe.preview_grid(grid))
        if not self.pipe.classifier_free_guidance:
            prefix = self.pipe.encode_prompts(prompts, None, grid, guided=False)
            return (
                prefix,
                self.codes[rows].view(-1, *grid).to(prefix.ids.device),
                _to(preview, prefix.ids.device),
            )
        prefix = self.pipe.encode_prompts(prompts, None, grid, guided=True)
        half = len(prompts)
        drop = torch.from_numpy(self.rng.random(half) < self.config.condition_dropout)
        drop = drop.to(prefix.ids.device)
        ids = torch.where(drop[:, None], prefix.ids[half:], prefix.ids[:half])
        visible = torch.where(drop[:, None], prefix.visible[half:], prefix.visible[:half])
        codes = self.codes[rows].view(-1, *grid).to(ids.device)
        return Prefix(ids, visible, prefix.pad[:half]), codes, _to(preview, ids.device)


def read_data_records(path: Path) -> list[dict]:
    """The records of a JSON-lines data set (blank lines skipped); ValueError naming the file for a line that
    is not a JSON object, or a file without records."""
    records = checks.read_json_lines(path)
    for record in records:
        if not isinstance(record, dict):
            raise ValueError(f"{path}: a record is not a JSON object, got {str(record)[:80]}")
    if not records:
        raise ValueError(f"{path} holds no records; each line must be {{'prompt': ..., 'image': path}}")
    return records


def train_sjd2(config: SJD2TrainConfig) -> Path:
    from accelerate import Accelerator, PartialState

    from ..pipelines import ARPipeline

    check_outputs(config)
    check_base("--base", config.base)
    if config.data != "shapes":
        if not Path(config.data).expanduser().is_file():
            raise FileNotFoundError(
                f"--data {config.data!r}: no such file; pass a JSON-lines file of prompt / image records, or "
                "'shapes'"
            )
        read_data_records(Path(config.data).expanduser())  # a bad file fails before the model loads
    # the base first: a folder refused here has started nothing (Accelerate's state is set once per process)
    pipe = ARPipeline.from_pretrained(config.base, dtype=torch.float32)
    bf16 = uses_bf16(config.bf16, PartialState().device)
    accelerator = Accelerator(mixed_precision="bf16" if bf16 else "no")
    run = TrainingRun(config, "sjd2", show=accelerator.is_main_process)
    pipe = pipe.to(accelerator.device)
    pipe.set_progress_bar_config(disable=True)
    grid = pipe.grid_for(*pipe.default_size())
    noise = _noise_conditioning(pipe, config.levels).to(accelerator.device)
    model = pipe.model  # the AR model (its component: `pipe.ar_component`)
    if config.lora_rank:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=config.lora_rank,
            lora_alpha=2 * config.lora_rank,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        )
        model = get_peft_model(model, lora)
    # encoded before train(): an image tokenizer with batch norm (Emu3's) must encode in eval mode
    data = CodeData(pipe, config)
    model.train()
    model_parameters = [p for p in model.parameters() if p.requires_grad]
    noise_parameters = list(noise.parameters())
    trainable = model_parameters + noise_parameters
    optimizer = torch.optim.AdamW(
        [{"params": model_parameters, "lr": config.lr}, {"params": noise_parameters, "lr": config.noise_lr}],
        weight_decay=0.0,
    )
    # the forward goes through the pipeline's own modules (its session adapter), never through a DDP wrapper,
    # so only the optimizer is prepared and gradients are averaged over the processes here
    optimizer = accelerator.prepare(optimizer)
    generator = torch.Generator().manual_seed(config.seed + accelerator.process_index)
    order_rng = np.random.default_rng(config.seed + accelerator.process_index)
    adapter = pipe.session_adapter()
    processes = Processes(
        accelerator.process_index, accelerator.num_processes, accelerator.local_process_index
    )
    for step, seconds in processes.steps(run, str(accelerator.device)):
        index = order_rng.integers(0, len(data), config.batch_size)
        prefix, codes, preview = data.batch(index, grid)
        scale = warmup_cosine(config, step, seconds) / config.lr if config.lr > 0 else 0.0
        for group, base_lr in zip(optimizer.param_groups, (config.lr, config.noise_lr), strict=True):
            group["lr"] = base_lr * scale
        with accelerator.autocast():
            loss = _noisy_loss(pipe, adapter, noise, config, generator, prefix, codes, preview)
        optimizer.zero_grad(set_to_none=True)
        accelerator.backward(loss)
        processes.average_gradients(trainable)
        accelerator.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        run.progress.set_postfix(loss=f"{loss.item():.3f}")
        if accelerator.is_main_process and (step + 1) % config.log_every == 0:
            run.log({"step": step + 1, "minutes": run.minutes, "loss": loss.item()})
    accelerator.wait_for_everyone()
    run.check_finite(model, noise)
    if accelerator.is_main_process:
        if config.lora_rank:
            model = model.merge_and_unload()
        pipe.register_modules(**{pipe.ar_component: model.eval()}, noise_conditioning=noise.eval())
        pipe.save_pretrained(run.out / "pipeline")
        (run.out / "train_config.json").write_text(json.dumps(asdict(config), indent=2))
        (run.out / "metrics.json").write_text(
            json.dumps({"steps": run.step, "minutes": run.minutes}, indent=2)
        )
    return run.out / "pipeline"


def _noisy_loss(pipe, adapter, noise, config, generator, prefix, codes, preview) -> torch.Tensor:
    """Cross-entropy of the clean codes given noisy inputs: over the grid, and first over a preview grid
    (whose clean codes then join the grid's prefix, as when decoding), weighted by their cells."""
    grids = [(prefix, codes)]
    if preview is not None:
        layout = pipe.image_layout(tuple(preview.shape[1:]))
        grids = [(prefix, preview), (pipe.preview_prefix(prefix, layout, preview.flatten(1)), codes)]
    total, cells = 0.0, 0
    for grid_prefix, grid_codes in grids:
        clean = adapter.embed_codes(grid_codes.flatten(1)[:, :-1])
        inputs = noisy_code_inputs(noise, clean, config, generator)
        logits = teacher_forced_logits(pipe, grid_prefix, grid_codes, code_inputs=inputs)
        total = total + code_loss(logits, grid_codes) * grid_codes[0].numel()
        cells += grid_codes[0].numel()
    return total / cells


def _to(tensor: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if tensor is None else tensor.to(device)


def _noise_conditioning(pipe, levels: int) -> NoiseConditioning:
    """The base checkpoint's own (continuing an SJD2 fine-tune) or a new one fitted to its code embeddings."""
    noise = pipe.noise_conditioning
    if noise is not None:
        if noise.config.levels != levels:
            raise ValueError(
                f"the base checkpoint is an SJD2 fine-tune with {noise.config.levels} levels; continue it with "
                f"--levels {noise.config.levels}, not {levels}"
            )
        return noise.float()
    table = _code_table(pipe)
    noise = NoiseConditioning(hidden_size=table.shape[-1], levels=levels)
    noise.set_statistics(table)
    return noise


def _code_table(pipe) -> torch.Tensor:
    adapter = pipe.session_adapter()
    vocab = adapter.code_vocab_size
    with torch.no_grad():
        return adapter.embed_codes(torch.arange(vocab)[None])[0].float()
