"""`arjet train clip`: the domain CLIP, a small open_clip model trained contrastively on the shapes domain.

It gives arjet an offline CLIP score and FID features for the built-in model, and judges whether generated
images show the prompt's colours and shapes. Custom open_clip config: a small image tower on 64x64 renders
(open_clip's ModifiedResNet by default, or its ViT) and a small text transformer with a word-level tokenizer
over the domain's vocabulary, pooled at its end-of-text token. The loss is the symmetric InfoNCE over the
batch plus, per image, a cross-entropy against hard negatives: the same phrasing of the same scene with one
object's shape (or colour) swapped, which is exactly the choice the attribute-accuracy judge asks for.
Saved as a CLIP folder (`arjet.eval.clip`): `open_clip_config.json`, bfloat16
`open_clip_model.safetensors` and the tokenizer files.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers.processors import TemplateProcessing

from ..machine import check_fits_in_memory, end_with_parent
from ..pipelines.text_tokenizer import build_word_tokenizer
from .configs import ClipTrainConfig, integer_list
from .scaffold import TRAINING_COPIES, TrainingRun, check_bytes_fit, check_outputs, require_folder

PAD, EOS = "<pad>", "</s>"


def clip_tokenizer(words: list[str]):
    """Word-level tokenizer that closes every text with an end-of-text token (the pooled position)."""
    tokenizer = build_word_tokenizer(words, [PAD, EOS], bos_token=EOS, eos_token=EOS, pad_token=PAD)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"$A {EOS}", special_tokens=[(EOS, eos_id)]
    )
    return tokenizer


def model_config(config: ClipTrainConfig, vocab_size: int, pad_id: int, eos_id: int) -> dict:
    layers = integer_list("vision_layers", config.vision_layers)
    if config.vision == "resnet":
        vision = {
            "image_size": config.image_size,
            "layers": layers,
            "width": config.vision_width,
            "head_width": 32,
        }
    else:
        vision = {
            "image_size": config.image_size,
            "patch_size": config.patch_size,
            "width": config.vision_width,
            "layers": layers[0],
            "head_width": 32,
            "mlp_ratio": 2.0,
        }
    return {
        "embed_dim": config.embed_dim,
        "vision_cfg": vision,
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


def swap_attribute(scene, attribute: str, rng: np.random.Generator, count: int = 1) -> list:
    """`count` copies of the scene, each with one object's `attribute` ("shape" or "color") changed to a
    different value (every object's, for a count scene, which the prompt names once); the object is chosen
    once, the new values are distinct."""
    from ..data import COLORS, SHAPES

    values = list(SHAPES) if attribute == "shape" else list(COLORS)
    target = int(rng.integers(len(scene.objects)))
    current = getattr(scene.objects[target], attribute)
    others = [v for v in values if v != current]
    chosen = rng.choice(len(others), size=min(count, len(others)), replace=False)
    return [
        replace(
            scene,
            objects=tuple(
                replace(o, **{attribute: others[int(k)]}) if scene.layout == "count" or i == target else o
                for i, o in enumerate(scene.objects)
            ),
        )
        for k in chosen
    ]


def captions_with_negatives(scenes: list, config: ClipTrainConfig, rng: np.random.Generator) -> list[str]:
    """Each scene's caption, then its hard negatives in the same phrasing: `[B * (1 + K)]`, grouped by scene."""
    from ..data import describe

    texts = []
    for scene in scenes:
        phrasing = int(rng.integers(2**31))
        variants = [scene]
        variants += (
            swap_attribute(scene, "shape", rng, config.shape_negatives) if config.shape_negatives else []
        )
        variants += (
            swap_attribute(scene, "color", rng, config.color_negatives) if config.color_negatives else []
        )
        # the phrasing depends only on the layout and background, so one seed phrases every variant alike
        texts += [describe(variant, np.random.default_rng(phrasing)) for variant in variants]
    return texts


def clip_loss(image_features: torch.Tensor, text_features: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE over the batch's captions plus the per-image choice among caption and negatives.

    `text_features` is `[B * (1 + K)]`, each image's caption first and its K hard negatives after it."""
    batch = image_features.shape[0]
    grouped = text_features.view(batch, -1, text_features.shape[-1])
    captions = grouped[:, 0]
    logits = scale * image_features @ captions.T
    target = torch.arange(batch, device=logits.device)
    loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
    if grouped.shape[1] > 1:
        hard = scale * torch.einsum("bd,bkd->bk", image_features, grouped)
        loss = loss + F.cross_entropy(hard, torch.zeros_like(target))
    return loss


def render_set_bytes(config: ClipTrainConfig) -> int:
    """The memory `_render_set` takes at its peak: the uint8 images twice (the batches, then joined) and one
    render at a time in each worker."""
    from ..data import render_bytes

    return 2 * config.images * 3 * config.image_size**2 + max(1, config.workers) * render_bytes(
        config.image_size
    )


def _render_set(config: ClipTrainConfig) -> tuple[torch.Tensor, list]:
    from ..data import Scene, ShapesDataset

    dataset = ShapesDataset("train", config.image_size, length=config.images)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=512,
        num_workers=config.workers,
        worker_init_fn=end_with_parent,
        collate_fn=lambda items: items,
    )
    images, scenes = [], []
    for items in loader:
        images.append(torch.stack([item[0] for item in items]).add(1).mul(127.5).round().to(torch.uint8))
        scenes.extend(Scene.from_dict(item[2]) for item in items)
    return torch.cat(images), scenes


def train_clip(config: ClipTrainConfig) -> Path:
    import open_clip

    from ..eval.clip import WEIGHTS_FILE, OpenCLIP, save_open_clip_folder
    from ..eval.domain import zero_shot_accuracy
    from .ar import domain_words

    check_outputs(config)
    if config.init:
        init = require_folder("--init", config.init, "pass a CLIP folder saved by `arjet train clip`")
        if not (init / WEIGHTS_FILE).is_file():
            raise FileNotFoundError(f"--init {config.init!r} holds no {WEIGHTS_FILE}")
    tokenizer = clip_tokenizer(domain_words(seed=config.seed))
    cfg = model_config(config, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    check_fits_in_memory("the CLIP of these options", lambda: open_clip.CLIP(**cfg), copies=TRAINING_COPIES)
    check_bytes_fit(
        f"rendering --images {config.images} of --image-size {config.image_size}", render_set_bytes(config)
    )
    run = TrainingRun(config, "clip", log=config.log or None)
    model = open_clip.CLIP(**cfg)
    if config.init:
        from ..weights import load_tensors

        state = load_tensors(
            Path(config.init) / WEIGHTS_FILE, "CLIP weights", "pass a folder saved by `arjet train clip`"
        )
        model.load_state_dict({k: v.float() for k, v in state.items()})
    preprocess = {"mean": list(open_clip.OPENAI_DATASET_MEAN), "std": list(open_clip.OPENAI_DATASET_STD)}
    open_clip.set_model_preprocess_cfg(model, {"size": config.image_size, **preprocess})
    mean, std = (
        torch.tensor(preprocess["mean"]).view(1, 3, 1, 1),
        torch.tensor(preprocess["std"]).view(1, 3, 1, 1),
    )

    def tokenize(texts: list[str]) -> torch.Tensor:
        # open_clip's CLIP adds its positional embedding at full length: pad to the context length
        return tokenizer(texts, padding="max_length", truncation=True, max_length=config.context_length,
                         return_tensors="pt")["input_ids"]  # fmt: skip

    def evaluate(step: int) -> None:
        if config.eval_scenes > 0:
            accuracy = zero_shot_accuracy(
                OpenCLIP(model, tokenize, key=f"training:{step}"), config.eval_scenes
            )
            run.log({"step": step, "minutes": round(run.minutes, 2), **accuracy})
            run.progress.write(
                f"step {step}: zero-shot colour {accuracy['color']:.3f}, shape {accuracy['shape']:.3f}"
            )
        model.train()

    images, scenes = _render_set(config)
    rng = np.random.default_rng(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.1)
    model.train()
    for step in run.steps():
        index = rng.integers(0, len(scenes), config.batch_size)
        pixels = (images[torch.from_numpy(index)].float() / 255 - mean) / std
        texts = tokenize(captions_with_negatives([scenes[i] for i in index], config, rng))
        warm = min(1.0, (step + 1) / 200)
        decay = 0.5 * (1 + np.cos(np.pi * min(1.0, step / config.max_steps)))
        for group in optimizer.param_groups:
            group["lr"] = config.lr * warm * max(decay, 0.05)
        image_features, text_features, scale = model(pixels, texts)
        loss = clip_loss(image_features, text_features, scale)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        done = step + 1
        if done % config.log_every == 0:
            run.progress.set_postfix(loss=f"{loss.item():.3f}")
            run.log({"step": done, "minutes": round(run.minutes, 2), "loss": round(loss.item(), 4)})
        if config.eval_every > 0 and done % config.eval_every == 0:
            evaluate(done)
    if config.eval_every <= 0 or run.step % config.eval_every:
        evaluate(run.step)
    model.eval()
    run.check_finite(model)
    # bfloat16 on disk keeps the package small; open_clip loads it into float32 parameters
    save_open_clip_folder(model.to(torch.bfloat16), cfg, run.out, preprocess_cfg=preprocess)
    tokenizer.save_pretrained(run.out)
    return run.out
