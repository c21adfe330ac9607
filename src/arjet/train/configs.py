"""The settings of every `arjet train` stage, as data: one dataclass per stage, each field with its help
and its bounds, so `arjet train STAGE --help` and the checks of its options read them from one place
(counts are integers >= 0 unless a minimum says otherwise). Nothing heavy is imported here.

What every stage shares (seed, CPU threads, output folder, a budget of steps and wall-clock minutes) is
run by `arjet.train.scaffold.TrainingRun`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import checks

VISION_TOWERS = ("resnet", "vit")
# bounds every stage shares, so that an absurd value is refused before any work (a batch of 10**9 images
# rendered for a minute, then ran out of memory; 10**9 evaluation images ran for days)
MAX_BATCH_SIZE = 4096  # images or sequences in one training step
MAX_HELDOUT = 100_000  # held-out images or scenes a stage evaluates on


def option(
    default: Any,
    help: str,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    exclusive_minimum: bool = False,
) -> Any:
    """A config field: its default, one line of help and its bounds (numbers: `minimum` 0 unless given)."""
    if minimum is None and checks.is_number(default):
        minimum = 0
    bounds = {"minimum": minimum, "maximum": maximum, "exclusive_minimum": exclusive_minimum}
    return field(default=default, metadata={"help": help, **bounds})


def positive(default: Any, help: str) -> Any:
    """A size, count or rate that must be above zero (integers >= 1, numbers > 0)."""
    if isinstance(default, float):
        return option(default, help, 0.0, exclusive_minimum=True)
    return option(default, help, 1)


def per_step(default: int, help: str) -> Any:
    """Images or sequences per training step: 1 to `MAX_BATCH_SIZE`."""
    return option(default, help, 1, MAX_BATCH_SIZE)


def heldout(default: int, help: str, minimum: int = 1) -> Any:
    """Held-out images or scenes to evaluate on: `minimum` (0: none) to `MAX_HELDOUT`."""
    return option(default, help, minimum, MAX_HELDOUT)


def share(default: float, help: str) -> Any:
    return option(default, help, 0.0, 1.0)


def rate(default: float, help: str, *, zero: bool = False) -> Any:
    """A learning rate: above zero (or zero too, with `zero`) and at most 1, beyond which Adam's steps only
    diverge (a rate of 1e308 trained a model of NaNs)."""
    return option(default, help, 0.0, 1.0, exclusive_minimum=not zero)


def integers(default: str, help: str) -> Any:
    """Positive integers separated by commas, kept as written (`"1,2,3"`)."""
    return field(default=default, metadata={"help": help, "integers": True})


def output(default: str, help: str, kind: str = "folder") -> Any:
    """Where the stage writes, checked before any work (`arjet.train.scaffold.check_outputs`); `kind`: the
    run's folder (new or empty: one run per folder), a new file, or a cache folder that later runs reuse
    (`cache`: it may hold files). An empty value writes nothing there (or the stage's default place)."""
    return field(default=default, metadata={"help": help, "output": kind})


def seed() -> Any:
    return option(0, "random seed of the weights, the data order and the noise")


def threads() -> Any:
    return positive(2, "CPU threads torch may use")


def max_minutes(default: float) -> Any:
    return positive(default, "wall-clock budget in minutes; training stops at this or --max-steps")


def max_steps(default: int) -> Any:
    return positive(default, "optimizer steps at most; training stops at this or --max-minutes")


def device() -> Any:
    return option("cpu", "torch device to train on: cpu, cuda or cuda:N")


@dataclass
class VQTrainConfig:
    """`arjet train vq`: the built-in model's image tokenizer, a small transformers `JanusVQVAE`."""

    out: str = output("artifacts/vq", "output folder: weights, train_log.jsonl, metrics.json")
    seed: int = seed()
    image_size: int = positive(64, "side of the training renders in pixels")
    base_channels: int = positive(32, "channels of the first encoder level")
    channel_multiplier: str = integers("1,2,3", "channel multiplier per level, comma separated")
    num_res_blocks: int = positive(2, "residual blocks per level")
    latent_channels: int = positive(32, "channels of the latent before quantization")
    embed_dim: int = positive(8, "width of each code vector")
    codebook_size: int = positive(512, "number of codes")
    batch_size: int = per_step(64, "images per step")
    lr: float = rate(3e-4, "Adam learning rate")
    max_steps: int = max_steps(100_000)
    max_minutes: float = max_minutes(45.0)
    commitment: float = option(0.25, "weight of the commitment loss")
    edge_weight: float = option(1.0, "weight of the image-gradient (edge) loss")
    restart_every: int = positive(200, "steps between restarts of unused codes")
    device: str = device()
    workers: int = option(2, "data loader worker processes (0: render in this process)")
    threads: int = threads()
    log_every: int = positive(100, "steps between log lines")
    eval_images: int = heldout(1000, "held-out images for the final PSNR and codebook usage")

    def __post_init__(self):
        levels = len(integer_list("channel_multiplier", self.channel_multiplier))
        # each level after the first halves the image, and the last still runs 3x3 convolutions over it
        step = 2 ** (levels - 1)
        if self.image_size % step or self.image_size < 4 * step:
            raise ValueError(
                f"image_size {self.image_size}: with {levels} levels (channel_multiplier "
                f"{self.channel_multiplier}) the VQ halves the image {levels - 1} times, so it must be a "
                f"multiple of {step} and at least {4 * step}"
            )


@dataclass
class ARTrainConfig:
    """`arjet train ar`: the built-in text-to-image model, a small `JanusForConditionalGeneration`."""

    vq: str = option("artifacts/vq", "folder of the trained VQ tokenizer (`arjet train vq`)")
    out: str = output("artifacts/ar", "output folder: pipeline/, train_log.jsonl, metrics.json, cache/")
    data_cache: str = output(
        "",
        "cache of the encoded scenes, which a later run (another --out) reuses ('': OUT/cache)",
        kind="cache",
    )
    init: str = option(
        "", "continue from this saved pipeline (its tokenizer and weights) instead of a new model"
    )
    seed: int = seed()
    train_images: int = positive(120_000, "training scenes (encoded once, cached under --out)")
    heldout_images: int = heldout(1_000, "held-out scenes for the held-out loss")
    hidden_size: int = positive(256, "decoder width")
    layers: int = positive(8, "decoder layers")
    heads: int = positive(8, "attention heads")
    kv_heads: int = positive(4, "key / value heads")
    intermediate_size: int = positive(688, "MLP width")
    batch_size: int = per_step(64, "sequences per step")
    lr: float = rate(1.5e-3, "peak AdamW learning rate")
    min_lr: float = rate(1e-4, "learning rate at the end of the cosine decay", zero=True)
    weight_decay: float = option(0.05, "AdamW weight decay of the matrices")
    warmup_steps: int = option(300, "steps of linear warm-up")
    max_steps: int = max_steps(100_000)
    max_minutes: float = max_minutes(180.0)
    condition_dropout: float = share(0.1, "share of prompts replaced by the unconditional row (for CFG)")
    bf16: bool = option(True, "bfloat16 autocast (where the device runs bfloat16 natively: CUDA, AVX-512)")
    threads: int = threads()
    device: str = device()
    workers: int = option(0, "data loader worker processes for encoding")
    eval_every: int = positive(500, "steps between held-out evaluations (and saves)")
    words: list[str] = field(default_factory=list, metadata={"help": "", "command_line": False})


@dataclass
class ClipTrainConfig:
    """`arjet train clip`: the domain CLIP, a small open_clip model trained contrastively on the shapes
    domain (offline CLIP score, FID features and the colour / shape judge)."""

    out: str = output(
        "artifacts/clip",
        "output CLIP folder (never the installed package: copy a CLIP to ship there yourself)",
    )
    seed: int = seed()
    images: int = positive(100_000, "training renders")
    image_size: int = positive(64, "side of the renders in pixels")
    embed_dim: int = positive(128, "width of the joint embedding")
    vision: str = option("resnet", "image tower: resnet (open_clip's ModifiedResNet) or vit")
    vision_width: int = positive(16, "image tower width")
    vision_layers: str = integers(
        "1,1,1,1", "blocks per ResNet stage, comma separated; one number (depth) for a ViT"
    )
    patch_size: int = positive(8, "ViT patch size in pixels")
    text_width: int = positive(96, "text tower width")
    text_layers: int = positive(3, "text tower layers")
    context_length: int = positive(32, "tokens per caption")
    batch_size: int = per_step(256, "images per step")
    shape_negatives: int = option(
        3, "per image: its caption with one object's shape swapped, this many times"
    )
    color_negatives: int = option(
        2, "per image: its caption with one object's colour swapped, this many times"
    )
    lr: float = rate(1e-3, "peak AdamW learning rate")
    max_steps: int = max_steps(20_000)
    max_minutes: float = max_minutes(25.0)
    workers: int = option(2, "render worker processes")
    threads: int = threads()
    log_every: int = positive(100, "steps between log lines")
    eval_every: int = option(
        1000, "steps between zero-shot colour / shape accuracy checks (0: at the end only)"
    )
    eval_scenes: int = heldout(300, "held-out scenes of each accuracy check (0: none)", minimum=0)
    log: str = output("", "the training log, a new file (JSON lines; '': OUT/train_log.jsonl)", kind="file")
    init: str = option("", "a CLIP folder to continue from (same config)")

    def __post_init__(self):
        if self.vision not in VISION_TOWERS:
            raise ValueError(f"vision={self.vision!r}; choose one of {VISION_TOWERS}")
        layers = integer_list("vision_layers", self.vision_layers)
        if self.vision == "vit" and len(layers) != 1:
            raise ValueError(f"a ViT takes one number of layers, got vision_layers={self.vision_layers!r}")
        if self.shape_negatives < 0 or self.color_negatives < 0:
            raise ValueError("shape_negatives and color_negatives must be >= 0")


def integer_list(name: str, text: str) -> list[int]:
    """The positive integers of a comma-separated option (`"1,2,3"`); ValueError naming `name` otherwise."""
    values = checks.integers_from_text(str(text))
    if not values or min(values) < 1:
        raise ValueError(f"{name} must be positive integers separated by commas, like '1,2,3'; got {text!r}")
    return values


@dataclass
class SJD2TrainConfig:
    """`arjet train sjd2`: fine-tune an AR checkpoint for next-clean-token prediction from noisy inputs."""

    base: str = option("artifacts/ar/pipeline", "the checkpoint to fine-tune (any supported family)")
    out: str = output(
        "artifacts/sjd2", "output folder: pipeline/ (base + noise_conditioning), train_log.jsonl"
    )
    data: str = option(
        "shapes",
        "'shapes' (the built-in domain) or a JSON-lines file of prompt / image records; a record without an "
        "image trains on the base model's own codes for its prompt (sampled once with ar: GLM-Image's way, "
        "whose image tokenizer arjet does not run)",
    )
    data_cache: str = output(
        "artifacts/ar/cache", "cache of the encoded shapes data (shared with `train ar`)", kind="cache"
    )
    images: int = positive(120_000, "shapes training images")
    seed: int = seed()
    levels: int = positive(16, "noise levels the model learns")
    min_segment: int = positive(8, "shortest run of codes sharing one noise level")
    max_segment: int = positive(64, "longest run of codes sharing one noise level")
    clean_share: float = share(0.25, "share of sequences left entirely clean")
    condition_dropout: float = share(0.1, "share of prompts replaced by the unconditional row (for CFG)")
    batch_size: int = per_step(64, "sequences per step")
    lr: float = rate(3e-4, "learning rate of the model")
    min_lr: float = rate(
        3e-4, "below lr: cosine decay to it (the noise conditioning's rate scales alike)", zero=True
    )
    noise_lr: float = rate(1e-3, "learning rate of the noise conditioning")
    warmup_steps: int = option(100, "steps of linear warm-up")
    max_steps: int = max_steps(20_000)
    max_minutes: float = max_minutes(60.0)
    lora_rank: int = option(0, "LoRA rank for large models (0: full fine-tuning)")
    bf16: bool = option(
        True, "bfloat16 mixed precision (where the device runs bfloat16 natively: CUDA, AVX-512)"
    )
    threads: int = threads()
    log_every: int = positive(50, "steps between log lines")


@dataclass
class DrafterTrainConfig:
    """`arjet train drafter`: an EAGLE-style drafter for any checkpoint, by self-distillation (LANTERN): the
    model generates codes for a prompt set, and the drafter learns its next hidden state and next-code
    distribution from its own hidden states."""

    base: str = option("shapes", "the checkpoint to draft for (a built-in name or a folder, any family)")
    out: str = output(
        "artifacts/drafter", "output folder: pipeline/ (base + drafter), drafter/, train_log.jsonl"
    )
    prompts: str = option(
        "shapes",
        "'shapes' (the built-in domain's prompts) or a prompt file: .txt (one a line), .json (a list, or "
        "COCO captions), .jsonl (prompt or caption records)",
    )
    images: int = positive(512, "images the model generates for the training set")
    val_images: int = heldout(
        32,
        "held-out images (the prompt set continued, other seeds) the log scores the drafter on; the drafter "
        "saved is the one that scored best on them (0: none, the last one)",
        minimum=0,
    )
    data_sampler: str = option("sjd-pac", "the (exact) sampler that generates them")
    data_batch: int = positive(32, "images generated per call")
    data_dir: str = output(
        "",
        "a folder that keeps the generated data, a file a batch: batches an earlier run made there (the same "
        "base, sampler, prompts and seeds) are read instead of generated, so a run resumes or retrains "
        "without generating again ('': kept in memory only)",
        kind="cache",
    )
    seed: int = seed()
    heads: int = positive(8, "attention heads of the drafter's block")
    intermediate_size: int = option(0, "MLP width of the drafter's block (0: twice the model's width)")
    batch_size: int = per_step(16, "sequences (one per CFG row) per step")
    lr: float = rate(1e-3, "AdamW learning rate")
    min_lr: float = rate(1e-4, "below lr: cosine decay to it", zero=True)
    warmup_steps: int = option(50, "steps of linear warm-up")
    p_weight: float = option(0.1, "weight of the next-code loss (EAGLE's 0.1) beside the hidden-state loss")
    guided: bool = option(
        True,
        "fit the next-code loss on the CFG-mixed distribution that decoding draws from (each image's two "
        "rows together), not on each row's own; only for a model with guidance",
    )
    depths: int = positive(
        1,
        "drafting depths the loss scores: 1, teacher forcing alone (EAGLE-1/2); more, also the drafter fed its "
        "own outputs as it drafts deeper (EAGLE-3's training-time test; a step at 3 costs about 5 times one at 1)",
    )
    max_steps: int = max_steps(3000)
    max_minutes: float = max_minutes(30.0)
    device: str = device()
    threads: int = threads()
    log_every: int = positive(50, "steps between log lines")


STAGES = {
    "vq": VQTrainConfig,
    "ar": ARTrainConfig,
    "clip": ClipTrainConfig,
    "sjd2": SJD2TrainConfig,
    "drafter": DrafterTrainConfig,
}
