"""`arjet train vq`: the built-in model's image tokenizer, a small transformers `JanusVQVAE`.

64x64 renders of the shapes domain -> 16x16 codes. Trained the way `JanusVQVAE.decode` reads codes:
latents and codebook are both L2-normalised (LlamaGen's VQ-16 recipe) and each latent takes its nearest
code; gradients pass straight through. Losses: L1 + MSE reconstruction, an image-gradient L1 term for
crisp shape edges, commitment and codebook terms. Codes unused for a while are restarted from recent
latents, which keeps the whole codebook in use.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import JanusVQVAE, JanusVQVAEConfig

from ..machine import check_fits_in_memory, end_with_parent
from ..pipelines.components import load_component
from .configs import VQTrainConfig, integer_list
from .scaffold import TRAINING_COPIES, TrainingRun, check_bytes_fit, check_outputs


def build_vq(config: VQTrainConfig) -> JanusVQVAE:
    multipliers = integer_list("channel_multiplier", config.channel_multiplier)
    grid = config.image_size // 2 ** (len(multipliers) - 1)
    return JanusVQVAE(
        JanusVQVAEConfig(
            embed_dim=config.embed_dim,
            num_embeddings=config.codebook_size,
            latent_channels=config.latent_channels,
            base_channels=config.base_channels,
            channel_multiplier=multipliers,
            num_res_blocks=config.num_res_blocks,
            num_patches=grid,
        )
    )


def quantize(vq: JanusVQVAE, pixels: torch.Tensor):
    """(reconstruction, codes, normalised latents, chosen normalised code vectors)."""
    latents = F.normalize(vq.quant_conv(vq.encoder(pixels)), dim=1)
    codebook = F.normalize(vq.quantize.embedding.weight, dim=-1)
    flat = latents.permute(0, 2, 3, 1)
    codes = (flat @ codebook.T).argmax(-1)
    chosen = codebook[codes].permute(0, 3, 1, 2)
    straight = latents + (chosen - latents).detach()
    return vq.decoder(vq.post_quant_conv(straight)), codes, latents, chosen


def vq_loss(config: VQTrainConfig, pixels, reconstruction, latents, chosen) -> dict[str, torch.Tensor]:
    def gradients(x):
        return x[..., 1:, :] - x[..., :-1, :], x[..., :, 1:] - x[..., :, :-1]

    (dy, dx), (ry, rx) = gradients(pixels), gradients(reconstruction)
    terms = {
        "l1": (reconstruction - pixels).abs().mean(),
        "mse": F.mse_loss(reconstruction, pixels),
        "edge": config.edge_weight * ((ry - dy).abs().mean() + (rx - dx).abs().mean()),
        "commit": config.commitment * F.mse_loss(latents, chosen.detach()),
        "codebook": F.mse_loss(chosen, latents.detach()),
    }
    terms["total"] = sum(terms.values())
    return terms


def psnr(reconstruction: torch.Tensor, pixels: torch.Tensor) -> torch.Tensor:
    """Per image, for images in [-1, 1]."""
    mse = ((reconstruction.clamp(-1, 1) - pixels) / 2).pow(2).flatten(1).mean(1)
    return 10 * torch.log10(1.0 / mse.clamp(min=1e-10))


def _stack_images(items) -> torch.Tensor:
    return torch.stack([item[0] for item in items])


def _batches(config: VQTrainConfig):
    from ..data import ShapesDataset

    dataset = ShapesDataset("train", config.image_size, length=10_000_000)
    sampler = torch.utils.data.RandomSampler(
        dataset, replacement=True, num_samples=10**9, generator=torch.Generator().manual_seed(config.seed)
    )
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=config.batch_size,
        sampler=sampler,
        num_workers=config.workers,
        worker_init_fn=end_with_parent,
        persistent_workers=config.workers > 0,
        collate_fn=_stack_images,
    )
    yield from loader


def check_vq_fits(config: VQTrainConfig) -> None:
    """Refuse, before anything is allocated, options whose training would not fit in memory: the VQ with
    its gradients and Adam's moments, a step's images and the feature maps at full resolution (on the
    training device), and the renders (on the CPU: each worker draws one image at a time)."""
    from ..data import render_bytes

    check_fits_in_memory(
        "the VQ of these options", lambda: build_vq(config), copies=TRAINING_COPIES, device=config.device
    )
    check_bytes_fit(
        f"a step of --batch-size {config.batch_size} images of --image-size {config.image_size}",
        step_bytes(config),
        config.device,
    )
    check_bytes_fit(
        f"rendering images of --image-size {config.image_size} in {max(1, config.workers)} process(es)",
        max(1, config.workers) * render_bytes(config.image_size),
    )


def step_bytes(config: VQTrainConfig) -> int:
    """What one training step holds at least, in bytes: the batch and its reconstruction, and the feature
    maps of the first encoder and last decoder layer at full resolution (float32; the layers between
    hold more, so this never refuses a step that fits)."""
    first = config.base_channels * integer_list("channel_multiplier", config.channel_multiplier)[0]
    return 4 * config.batch_size * config.image_size**2 * (2 * 3 + 2 * first)


def train_vq(config: VQTrainConfig) -> Path:
    check_outputs(config)
    check_vq_fits(config)
    run = TrainingRun(config, "vq")
    vq = build_vq(config).to(config.device).train()
    optimizer = torch.optim.Adam(vq.parameters(), lr=config.lr, betas=(0.9, 0.99))
    usage = torch.zeros(config.codebook_size, device=config.device)
    recent: list[torch.Tensor] = []
    for step, pixels in zip(run.steps(), _batches(config), strict=False):  # the budget ends it
        pixels = pixels.to(config.device)
        reconstruction, codes, latents, chosen = quantize(vq, pixels)
        losses = vq_loss(config, pixels, reconstruction, latents, chosen)
        optimizer.zero_grad(set_to_none=True)
        losses["total"].backward()
        optimizer.step()
        done = step + 1
        usage += torch.bincount(codes.flatten(), minlength=config.codebook_size)
        recent = [*recent[-3:], latents.detach().permute(0, 2, 3, 1).reshape(-1, config.embed_dim)]
        if done % config.restart_every == 0:
            _restart_dead_codes(vq, usage, torch.cat(recent))
            usage.zero_()
        if done % config.log_every == 0:
            record = {k: round(v.item(), 5) for k, v in losses.items()}
            record.update(
                step=done,
                minutes=round(run.minutes, 2),
                psnr=round(psnr(reconstruction, pixels).mean().item(), 2),
            )
            run.progress.set_postfix(psnr=record["psnr"], loss=record["total"])
            run.log(record)
    run.check_finite(vq)
    vq.eval().save_pretrained(run.out)
    metrics = evaluate_vq(run.out, count=config.eval_images, device=config.device)
    metrics.update(steps=run.step, minutes=round(run.minutes, 1), config=asdict(config))
    (run.out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return run.out


@torch.no_grad()
def _restart_dead_codes(vq: JanusVQVAE, usage: torch.Tensor, latents: torch.Tensor) -> None:
    dead = (usage == 0).nonzero().flatten()
    if len(dead) and len(latents):
        pick = torch.randint(len(latents), (len(dead),), device=latents.device)
        vq.quantize.embedding.weight.data[dead] = latents[pick] + 0.01 * torch.randn_like(latents[pick])


@torch.no_grad()
def evaluate_vq(path: str | Path, count: int = 1000, device: str = "cpu") -> dict:
    """Held-out reconstruction PSNR (mean, 10th percentile) and codebook usage."""
    from ..data import heldout_set, render_reference, to_tensor

    vq = load_component(JanusVQVAE, path, "vq").to(device).eval()
    size = vq.config.num_patches * 2 ** (len(vq.config.channel_multiplier) - 1)
    items = heldout_set(count)
    values, used = [], set()
    for start in range(0, len(items), 100):
        pixels = torch.stack(
            [to_tensor(render_reference(item, size)) for item in items[start : start + 100]]
        ).to(device)
        reconstruction, codes, _, _ = quantize(vq, pixels)
        decoded = vq.decode(codes.flatten(1))
        torch.testing.assert_close(
            decoded, reconstruction, atol=2e-2, rtol=0
        )  # HF decode reads our codes (TF32 on GPU)
        values.append(psnr(decoded, pixels).cpu())
        used.update(codes.unique().tolist())
    values = torch.cat(values)
    return {
        "heldout_images": len(items),
        "psnr_mean": round(values.mean().item(), 2),
        "psnr_p10": round(values.quantile(0.1).item(), 2),
        "codebook_used": len(used),
        "codebook_size": vq.config.num_embeddings,
    }
