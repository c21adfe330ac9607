"""`arjet train clip`: the domain CLIP, a small open_clip model trained contrastively on the shapes domain.

It gives arjet an offline CLIP score and FID features for the built-in model. Custom open_clip config
(a small ViT on 64x64 renders, a small text transformer with a word-level tokenizer over the domain's
vocabulary, pooled at its end-of-text token), trained with the symmetric InfoNCE loss on fresh phrasings
of rendered scenes. Saved as a CLIP folder (`arjet.eval.clip`): `open_clip_config.json`, bfloat16
`open_clip_model.safetensors` and the tokenizer files.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers.processors import TemplateProcessing

from ..text_tokenizer import build_word_tokenizer
from .options import add_config_arguments, append_jsonl, config_from_arguments

PAD, EOS = "<pad>", "</s>"


@dataclass
class ClipTrainConfig:
    out: str = "src/arjet/assets/shapes-clip"
    seed: int = 0
    images: int = 60_000
    image_size: int = 64
    embed_dim: int = 128
    vision_width: int = 128
    vision_layers: int = 4
    patch_size: int = 8
    text_width: int = 96
    text_layers: int = 3
    context_length: int = 32
    batch_size: int = 256
    lr: float = 1e-3
    max_steps: int = 4000
    max_minutes: float = 25.0
    workers: int = 2
    threads: int = 2
    log_every: int = 100
    log: str = "artifacts/clip/train_log.jsonl"
    init: str = ""  # a CLIP folder to continue from (same config)
    hard_negatives: bool = True  # each image also scored against its caption with one shape swapped


def clip_tokenizer(words: list[str]):
    """Word-level tokenizer that closes every text with an end-of-text token (the pooled position)."""
    tokenizer = build_word_tokenizer(words, [PAD, EOS], bos_token=EOS, eos_token=EOS, pad_token=PAD)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"$A {EOS}", special_tokens=[(EOS, eos_id)]
    )
    return tokenizer


def model_config(config: ClipTrainConfig, vocab_size: int, pad_id: int, eos_id: int) -> dict:
    return {
        "embed_dim": config.embed_dim,
        "vision_cfg": {
            "image_size": config.image_size,
            "patch_size": config.patch_size,
            "width": config.vision_width,
            "layers": config.vision_layers,
            "head_width": 32,
            "mlp_ratio": 2.0,
        },
        "text_cfg": {
            "context_length": config.context_length,
            "vocab_size": vocab_size,
            "width": config.text_width,
            "heads": 4,
            "layers": config.text_layers,
            "mlp_ratio": 2.0,
            "pad_id": pad_id,
            "eos_id": eos_id,
            "pool_type": "eos",
            "hf_tokenizer_name": "local",  # open_clip then reads the tokenizer from the CLIP folder itself
        },
    }


def swap_shape(scene, rng: np.random.Generator):
    """The scene with one object's shape (every object's, for a count scene) changed to another shape."""
    from dataclasses import replace

    from ..data import SHAPES

    target = int(rng.integers(len(scene.objects)))
    shape = scene.objects[target].shape
    other = SHAPES[(SHAPES.index(shape) + 1 + int(rng.integers(len(SHAPES) - 1))) % len(SHAPES)]
    objects = tuple(
        replace(o, shape=other) if scene.layout == "count" or i == target else o
        for i, o in enumerate(scene.objects)
    )
    return replace(scene, objects=objects)


def _render_set(config: ClipTrainConfig) -> tuple[torch.Tensor, list]:
    from ..data import Scene, ShapesDataset

    dataset = ShapesDataset("train", config.image_size, length=config.images)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=512, num_workers=config.workers, collate_fn=lambda items: items
    )
    images, scenes = [], []
    for items in loader:
        images.append(torch.stack([item[0] for item in items]).add(1).mul(127.5).round().to(torch.uint8))
        scenes.extend(Scene.from_dict(item[2]) for item in items)
    return torch.cat(images), scenes


def train_clip(config: ClipTrainConfig) -> Path:
    import open_clip
    from tqdm.auto import tqdm

    from ..data import describe
    from ..eval.clip import save_open_clip_folder
    from .ar import domain_words

    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    log = Path(config.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = clip_tokenizer(domain_words(seed=config.seed))
    cfg = model_config(config, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    model = open_clip.CLIP(**cfg)
    if config.init:
        from safetensors.torch import load_file

        from ..eval.clip import WEIGHTS_FILE

        model.load_state_dict({k: v.float() for k, v in load_file(Path(config.init) / WEIGHTS_FILE).items()})
    mean, std = (
        torch.tensor(open_clip.OPENAI_DATASET_MEAN).view(1, 3, 1, 1),
        torch.tensor(open_clip.OPENAI_DATASET_STD).view(1, 3, 1, 1),
    )
    images, scenes = _render_set(config)
    rng = np.random.default_rng(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.1)
    start, step = time.time(), 0
    progress = tqdm(total=config.max_steps, desc="train clip", unit="step")
    model.train()
    while step < config.max_steps and time.time() - start < config.max_minutes * 60:
        index = rng.integers(0, len(scenes), config.batch_size)
        pixels = (images[torch.from_numpy(index)].float() / 255 - mean) / std
        captions = [describe(scenes[i], rng) for i in index]
        if config.hard_negatives:
            captions += [describe(swap_shape(scenes[i], rng), rng) for i in index]
        texts = tokenizer(
            captions,
            padding="max_length",
            truncation=True,
            max_length=config.context_length,
            return_tensors="pt",
        )["input_ids"]
        warm = min(1.0, (step + 1) / 200)
        decay = 0.5 * (1 + np.cos(np.pi * min(1.0, step / config.max_steps)))
        for group in optimizer.param_groups:
            group["lr"] = config.lr * warm * max(decay, 0.05)
        image_features, text_features, scale = model(pixels, texts)
        logits = scale * image_features @ text_features.T  # [B, B] or [B, 2B] with the hard negatives
        target = torch.arange(len(index))
        loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits[:, : len(index)].T, target)) / 2
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        progress.update(1)
        if step % config.log_every == 0:
            progress.set_postfix(loss=f"{loss.item():.3f}")
            record = {
                "step": step,
                "minutes": round((time.time() - start) / 60, 2),
                "loss": round(loss.item(), 4),
            }
            append_jsonl(log, record)
    model.eval()
    # bfloat16 on disk keeps the package small; open_clip loads it into float32 parameters
    save_open_clip_folder(
        model.to(torch.bfloat16),
        cfg,
        out,
        preprocess_cfg={
            "mean": list(open_clip.OPENAI_DATASET_MEAN),
            "std": list(open_clip.OPENAI_DATASET_STD),
        },
    )
    tokenizer.save_pretrained(out)
    return out


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("clip", help="train the domain CLIP (offline CLIP score and FID features)")
    add_config_arguments(parser, ClipTrainConfig)
    parser.set_defaults(func=lambda args: train_clip(config_from_arguments(ClipTrainConfig, args)) and 0)
