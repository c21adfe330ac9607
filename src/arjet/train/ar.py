"""`arjet train ar`: the built-in text-to-image model, a small `JanusForConditionalGeneration`.

The images of the procedural shapes domain are encoded once with the trained VQ tokenizer (cached), and
the model learns next-code prediction after the prompt, laid out exactly as `JanusPipeline` lays it out
at inference (`encode_prompts`): the same template, tokenizer and CFG rows. A share of the prompts is
replaced by the unconditional row (condition dropout) so classifier-free guidance works. Each epoch draws
a fresh phrasing of every scene's prompt. bf16 autocast where the device runs bfloat16 natively, AdamW with
warm-up and cosine decay, a wall-clock budget, periodic held-out loss and a saved pipeline folder.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from transformers import JanusConfig, JanusForConditionalGeneration, JanusVQVAE

from .. import checks
from ..machine import check_fits_in_memory, end_with_parent
from ..pipelines.components import load_component
from ..pipelines.janus import JanusPipeline, build_janus_tokenizer
from ..session import Prefix
from .configs import ARTrainConfig
from .scaffold import TRAINING_COPIES, TrainingRun, check_outputs, require_folder, uses_bf16
from .schedule import warmup_cosine
from .sequence import code_loss, teacher_forced_logits


def build_model(
    config: ARTrainConfig, vq: JanusVQVAE, vocab_size: int, pad_id: int
) -> JanusForConditionalGeneration:
    model = JanusForConditionalGeneration(janus_config(config, vq, vocab_size, pad_id))
    model.model.vqmodel.load_state_dict(vq.state_dict())
    for parameter in model.model.vqmodel.parameters():
        parameter.requires_grad_(False)
    return model


def janus_config(config: ARTrainConfig, vq: JanusVQVAE, vocab_size: int, pad_id: int) -> JanusConfig:
    """The model's config: the decoder of `config`'s sizes around the trained VQ `vq`."""
    vq_config = vq.config.to_dict()
    vq_config.update(projection_dim=config.hidden_size, image_token_embed_dim=config.hidden_size)
    side = vq.config.num_patches
    return JanusConfig(
        text_config=dict(
            model_type="llama",
            vocab_size=vocab_size,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            num_hidden_layers=config.layers,
            num_attention_heads=config.heads,
            num_key_value_heads=config.kv_heads,
            max_position_embeddings=512,
            pad_token_id=pad_id,
            tie_word_embeddings=False,
        ),
        # the understanding tower is unused for generation: keep it minimal; its size sets the code grid
        vision_config=dict(
            image_size=side * 4,
            patch_size=4,
            num_image_tokens=side * side,
            hidden_size=32,
            projection_dim=config.hidden_size,
            num_hidden_layers=1,
            num_attention_heads=4,
            mlp_ratio=2,
        ),
        vq_config=vq_config,
        image_token_id=0,
    )


def domain_words(samples: int = 20_000, seed: int = 0) -> list[str]:
    """Every word the prompt generator uses (scanned from many descriptions)."""
    from ..data import describe, sample_scene

    rng = np.random.default_rng(seed)
    words: set[str] = set()
    tokenizer = build_janus_tokenizer([])
    pre = tokenizer.backend_tokenizer.pre_tokenizer
    normalizer = tokenizer.backend_tokenizer.normalizer
    for _ in range(samples):
        text = normalizer.normalize_str(describe(sample_scene(rng), rng))
        words.update(piece for piece, _ in pre.pre_tokenize_str(text))
    return sorted(words)


def encode_split(
    vq: JanusVQVAE, split: str, count: int, batch_size: int = 256, workers: int = 0
) -> tuple[np.ndarray, list[dict]]:
    """VQ codes `[count, H*W]` (uint16) and scenes of the first `count` items of a split."""
    from tqdm.auto import tqdm

    from ..data import ShapesDataset
    from ..vq.janus import JanusVQTokenizer

    tokenizer = JanusVQTokenizer(vq)
    dataset = ShapesDataset(split, size=tokenizer.grid[0] * tokenizer.downsample, length=count)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        worker_init_fn=end_with_parent,
        collate_fn=_collate,
    )
    codes, scenes = [], []
    for images, batch_scenes in tqdm(loader, desc=f"encoding {split}", unit="batch"):
        encoded = tokenizer.encode(images.to(vq.device)).flatten(1).to(torch.int32).cpu()
        codes.append(encoded.numpy().astype(np.uint16))
        scenes.extend(batch_scenes)
    return np.concatenate(codes), scenes


def _collate(items):
    images = torch.stack([item[0] for item in items])
    return images, [item[2] for item in items]  # scenes as dicts (`ShapesDataset` items)


def load_or_encode(
    vq: JanusVQVAE, cache: Path, split: str, count: int, workers: int = 0
) -> tuple[np.ndarray, list[dict]]:
    codes_path, scenes_path = cache / f"{split}-{count}.npy", cache / f"{split}-{count}.jsonl"
    if codes_path.is_file() and scenes_path.is_file():
        scenes = checks.read_json_lines(scenes_path)
        return _cached_codes(codes_path, len(scenes)), scenes
    codes, scenes = encode_split(vq, split, count, workers=workers)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(codes_path, codes)
    scenes_path.write_text("\n".join(json.dumps(s) for s in scenes))
    return codes, scenes


def _cached_codes(path: Path, count: int) -> np.ndarray:
    """The codes of a cache file: `[count, cells]` uint16 as `load_or_encode` saves them, checked from the
    file's header (memory-mapped) before they are read; ValueError naming the file otherwise."""
    try:
        codes = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise ValueError(f"{path} is not a cache of encoded codes ({error}); remove it") from None
    if codes.dtype != np.uint16 or codes.ndim != 2 or len(codes) != count:
        raise ValueError(
            f"{path} holds {codes.dtype} codes of shape {codes.shape}, not the [{count}, cells] uint16 codes "
            "of this cache; remove it"
        )
    return np.array(codes)


class Batches:
    """Prompt prefix + codes for training steps, with fresh phrasings and condition dropout."""

    def __init__(self, pipe: JanusPipeline, codes: np.ndarray, scenes: list[dict], dropout: float, seed: int):
        from ..data import Scene

        self.pipe = pipe
        self.codes = torch.from_numpy(codes.astype(np.int64))
        self.scenes = [Scene.from_dict(s) for s in scenes]
        self.dropout = dropout
        self.rng = np.random.default_rng(seed)
        self.grid = pipe.image_tokenizer.grid

    def make(self, index: np.ndarray, train: bool = True, device: str = "cpu"):
        from ..data import describe

        prompts = [describe(self.scenes[i], self.rng) for i in index]
        prefix = self.pipe.encode_prompts(prompts, None, self.grid, guided=True)
        half = len(prompts)
        drop = (
            torch.from_numpy(self.rng.random(half) < self.dropout)
            if train
            else torch.zeros(half, dtype=torch.bool)
        )
        drop = drop.to(prefix.ids.device)
        ids = torch.where(drop[:, None], prefix.ids[half:], prefix.ids[:half])
        visible = torch.where(drop[:, None], prefix.visible[half:], prefix.visible[:half])
        codes = self.codes[torch.from_numpy(index)].view(-1, *self.grid)
        return Prefix(ids.to(device), visible.to(device), prefix.pad[:half].to(device)), codes.to(device)


def train_ar(config: ARTrainConfig) -> Path:
    check_outputs(config)
    if config.init:
        require_folder("--init", config.init, "pass a pipeline folder saved by `arjet train ar`")
    else:
        require_folder("--vq", config.vq, "train the VQ tokenizer first (`arjet train vq --out FOLDER`)")
    run = TrainingRun(config, "ar")
    out = run.out
    if config.init:
        pipe = JanusPipeline.from_pretrained(config.init, dtype=torch.float32)
        model, tokenizer = pipe.model.to(config.device), pipe.tokenizer
    else:
        vq = load_component(JanusVQVAE, config.vq, "vq").eval()
        tokenizer = build_janus_tokenizer(config.words or domain_words(seed=config.seed))
        sizes = janus_config(config, vq, len(tokenizer), tokenizer.pad_token_id)
        check_fits_in_memory(
            "the AR model of these options",
            lambda: JanusForConditionalGeneration(sizes),
            copies=TRAINING_COPIES,
            device=config.device,
        )
        model = build_model(config, vq, len(tokenizer), tokenizer.pad_token_id).to(config.device)
        pipe = JanusPipeline(model=model, tokenizer=tokenizer)
    for parameter in model.model.vqmodel.parameters():
        parameter.requires_grad_(False)
    vq = model.model.vqmodel  # the frozen copy inside the model, on the training device
    cache = Path(config.data_cache).expanduser() if config.data_cache else out / "cache"
    train_codes, train_scenes = load_or_encode(vq, cache, "train", config.train_images, config.workers)
    held_codes, held_scenes = load_or_encode(vq, cache, "heldout", config.heldout_images, config.workers)
    batches = Batches(pipe, train_codes, train_scenes, config.condition_dropout, config.seed)
    heldout = Batches(pipe, held_codes, held_scenes, 0.0, config.seed + 1)

    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.dim() >= 2]
    no_decay = [p for p in trainable if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr,
        betas=(0.9, 0.95),
    )
    order = np.random.default_rng(config.seed).permutation(len(train_codes))
    cursor, epoch = 0, 0
    model.train()
    for step in run.steps():
        if cursor + config.batch_size > len(order):
            order, cursor, epoch = (
                np.random.default_rng(config.seed + epoch + 1).permutation(len(order)),
                0,
                epoch + 1,
            )
        index = order[cursor : cursor + config.batch_size]
        cursor += config.batch_size
        lr = warmup_cosine(config, step, run.seconds)
        for group in optimizer.param_groups:
            group["lr"] = lr
        with torch.autocast(
            torch.device(config.device).type,
            dtype=torch.bfloat16,
            enabled=uses_bf16(config.bf16, config.device),
        ):
            prefix, codes = batches.make(index, device=config.device)
            loss = code_loss(teacher_forced_logits(pipe, prefix, codes), codes)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        run.progress.set_postfix(loss=f"{loss.item():.3f}", epoch=epoch)
        if (step + 1) % config.eval_every == 0:
            record = {
                "step": step + 1,
                "epoch": epoch,
                "minutes": run.minutes,
                "lr": lr,
                "train_loss": loss.item(),
                "heldout_loss": evaluate(pipe, heldout, config),
            }
            run.log(record)
            run.check_finite(model)
            save(pipe, out, config, record)
    record = {
        "step": run.step,
        "epoch": epoch,
        "minutes": run.minutes,
        "heldout_loss": evaluate(pipe, heldout, config),
        "final": True,
    }
    run.log(record)
    run.check_finite(model)
    save(pipe, out, config, record)
    return out / "pipeline"


@torch.no_grad()
def evaluate(pipe: JanusPipeline, heldout: Batches, config: ARTrainConfig, batches: int = 8) -> float:
    model = pipe.model
    model.eval()
    total, count = 0.0, 0
    size = len(heldout.codes)
    for start in range(0, min(size, batches * config.batch_size), config.batch_size):
        index = np.arange(start, min(start + config.batch_size, size))
        with torch.autocast(
            torch.device(config.device).type,
            dtype=torch.bfloat16,
            enabled=uses_bf16(config.bf16, config.device),
        ):
            prefix, codes = heldout.make(index, train=False, device=config.device)
            total += code_loss(teacher_forced_logits(pipe, prefix, codes), codes).item() * len(index)
        count += len(index)
    model.train()
    return total / count


def save(pipe: JanusPipeline, out: Path, config: ARTrainConfig, record: dict) -> None:
    pipe.save_pretrained(out / "pipeline")
    (out / "train_config.json").write_text(json.dumps({**asdict(config), "words": []}, indent=2))
    (out / "metrics.json").write_text(json.dumps(record, indent=2))
