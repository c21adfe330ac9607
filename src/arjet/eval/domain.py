"""`arjet domain-report`: how good the built-in shapes model is, judged by the domain CLIP.

For held-out prompts it generates one image each and measures, next to the same figures for the
reference renders: the CLIP score, FID with domain-CLIP features (and the floor: FID between two disjoint
sets of references), and colour / shape accuracy: for every object of a scene, the CLIP must prefer the
scene's canonical description over the same description with that object's colour (or shape) swapped
for each other value. On the references that is the domain CLIP's zero-shot accuracy.

The same figures for the references passed through the pipeline's image tokenizer (encode, then decode)
give the ceiling the tokenizer sets: an AR model can draw only what its codes can show.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .. import checks
from ..data import COLORS, NUMBERS, SHAPES, Scene, heldout_set, render_reference, to_tensor
from ..samplers import SamplingOptions
from .clip import OpenCLIP, load_clip
from .features import load_feature_network
from .metrics import clip_scores, feature_statistics, frechet_distance, image_batches


def canonical(scene: Scene) -> str:
    """One fixed phrasing of a scene (a phrasing the prompt generator also uses)."""
    objects = scene.objects
    noun = [f"{o.color} {o.shape}" for o in objects]
    article = [("an " if n[0] in "aeiou" else "a ") + n for n in noun]
    if scene.layout == "single":
        text = article[0]
    elif scene.layout == "pair":
        text = f"{article[0]} {'left of' if scene.relation == 'left' else 'above'} {article[1]}"
    elif scene.layout == "count":
        item = objects[0]
        plural = f"{item.shape}es" if item.shape == "cross" else f"{item.shape}s"
        text = f"{NUMBERS[len(objects)]} {item.color} {plural}"
    else:
        text = ", ".join(article[:-1]) + " and " + article[-1]
    background = scene.background
    if background.kind == "plain":
        return f"{text} on a {background.colors[0]} background"
    return text


def _variants(scene: Scene, attribute: str) -> list[tuple[list[str], int]]:
    """Per object: the canonical texts with that object's `attribute` set to every value, and the true index."""
    values = list(COLORS) if attribute == "color" else list(SHAPES)
    groups = (
        [range(len(scene.objects))] if scene.layout == "count" else [[i] for i in range(len(scene.objects))]
    )
    out = []
    for members in groups:
        texts = []
        for value in values:
            objects = tuple(
                replace(o, **{attribute: value}) if i in members else o for i, o in enumerate(scene.objects)
            )
            texts.append(canonical(replace(scene, objects=objects)))
        out.append((texts, values.index(getattr(scene.objects[members[0]], attribute))))
    return out


@torch.no_grad()
def attribute_accuracy(clip: OpenCLIP, images: list, scenes: list[Scene]) -> dict[str, float]:
    """Fraction of objects whose colour (shape) the CLIP picks among all colours (shapes)."""
    result = {}
    for attribute in ("color", "shape"):
        correct = total = 0
        for pixels, chunk in zip(image_batches(images, 64), _chunks(scenes, 64), strict=True):
            embeddings = F.normalize(clip.encode_images(pixels), dim=-1)
            for embedding, scene in zip(embeddings, chunk, strict=True):
                for texts, truth in _variants(scene, attribute):
                    scores = F.normalize(clip.encode_texts(texts), dim=-1) @ embedding
                    correct += int(scores.argmax()) == truth
                    total += 1
        result[attribute] = correct / total
    return result


def zero_shot_accuracy(clip: OpenCLIP, n: int = 500, size: int = 64) -> dict[str, float]:
    """The CLIP's colour and shape accuracy on the reference renders of the first `n` held-out scenes."""
    items = heldout_set(n)
    return attribute_accuracy(
        clip,
        [render_reference(item, size) for item in items],
        [Scene.from_dict(item["scene"]) for item in items],
    )


@torch.no_grad()
def reconstruct(pipe, images: list, batch: int = 100) -> list:
    """`images` passed through the pipeline's image tokenizer: encoded to codes and decoded again."""
    out = []
    for chunk in _chunks(images, batch):
        pixels = torch.stack([to_tensor(image) for image in chunk]).to(pipe.device)
        out.extend(pipe.images_from_codes(pipe.image_tokenizer.encode(pixels)))
    return out


def _chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def domain_report(
    pipe,
    n: int = 500,
    sampler: str = "ar",
    seed: int = 0,
    clip: str = "domain",
    batch: int = 50,
    grid: str | Path | None = None,
    grid_rows: int = 12,
    sampling: SamplingOptions | None = None,
) -> dict[str, Any]:
    """Generate one image for each of the first `n` held-out prompts (`sampling`: guidance, temperature,
    top-k, top-p; default the pipeline's) and judge them with the CLIP next to their references.
    `grid`: also save the first `grid_rows` prompts' reference, reconstruction and generated image there."""
    from tqdm.auto import tqdm

    sampling = sampling or SamplingOptions()
    check_report_size(n)
    checks.integer("batch", batch, 1, pipe.limits.max_images_per_call)
    items = heldout_set(2 * n)
    first, second = items[:n], items[n : 2 * n]
    size = pipe.default_size()[0]
    scenes = [Scene.from_dict(item["scene"]) for item in first]
    prompts = [item["prompt"] for item in first]
    generated = []
    pipe.set_progress_bar_config(disable=True)
    for start in tqdm(range(0, n, batch), desc=f"generating ({sampler})"):
        out = pipe(prompts[start : start + batch], sampler=sampler, seed=seed + start, **sampling.kwargs())
        generated.extend(out.images)
    references = [render_reference(item, size) for item in first]
    other_references = [render_reference(item, size) for item in second]
    model = load_clip(clip)
    features = load_feature_network(clip)
    reference_stats = feature_statistics(features, references)
    report: dict[str, Any] = {
        "n": n,
        "sampler": sampler,
        **{key: value for key, value in sampling.kwargs().items() if value is not None},
    }
    sets = {
        "generated": generated,
        "reconstructions": reconstruct(pipe, references),
        "references": references,
    }
    if grid is not None:
        _save_grid(Path(grid), sets, prompts[:grid_rows], sampler)
    for name, images in sets.items():
        report[f"clip_score_{name}"] = _mean(clip_scores(model, images, prompts))
        if name != "references":
            report[f"fid_{name}_vs_references"] = frechet_distance(features, reference_stats, images)
        accuracy = attribute_accuracy(model, images, scenes)
        report[f"color_accuracy_{name}"] = accuracy["color"]
        report[f"shape_accuracy_{name}"] = accuracy["shape"]
    report["fid_floor_references_vs_references"] = frechet_distance(
        features, reference_stats, other_references
    )
    return report


def check_report_size(n: Any) -> int:
    """`n` held-out prompts: at least 2 (FID needs two images) and at most half the held-out set (the other
    half gives the FID floor)."""
    largest = len(heldout_set()) // 2
    return checks.integer("n", n, 2, largest)


def _save_grid(path: Path, sets: dict[str, list], prompts: list[str], sampler: str) -> None:
    from ..reports.plots import comparison_grid

    order = ("references", "reconstructions", "generated")
    rows = [[sets[name][i] for name in order] for i in range(len(prompts))]
    figure = comparison_grid(rows, prompts, ["reference", "VQ reconstruction", f"generated ({sampler})"])
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
