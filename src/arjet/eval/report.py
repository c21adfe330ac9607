"""What a finished run leaves for people: `metrics.json`, `report.md` (the table) and `plots/*.png`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..bench.speed import environment
from ..builtin import model_name
from ..reports import plots
from ..reports.tables import markdown_table, number, ratio, significant
from .atomic import atomic_target, write_text
from .scoring import SamplerResult, load_images
from .settings import METRICS_FILE, REPORT_FILE, EvalSettings

PLOTS_DIR = "plots"
HEADER = (
    "sampler",
    "images",
    "FID",
    "CLIP score",
    "forward passes",
    "step compression",
    "s / image",
    "images / s",
    "latency speedup",
    "accepted / step",
)


def results_table(results: Sequence[SamplerResult]) -> str:
    """The report's table; with a column of the drafter's forward passes per image when a sampler used one."""
    drafted = any(r.drafter_forwards for r in results)
    rows = [
        (
            f"`{r.sampler}`",
            str(r.images),
            number(r.fid),
            number(r.clip_score),
            number(r.forward_passes, 1),
            ratio(r.step_compression),
            number(r.seconds, 3),
            significant(r.images_per_second),
            ratio(r.latency_speedup),
            number(r.accepted_per_step),
            *((number(r.drafter_forwards, 1),) if drafted else ()),
        )
        for r in results
    ]
    header = (*HEADER, "drafter forwards") if drafted else HEADER
    return markdown_table(header, rows, numeric=[False, *[True] * (len(header) - 1)])


def judge_note(prompts: str, fid_features: str | None, clip_model: str | None) -> str | None:
    """A warning when the domain CLIP (trained on the built-in shapes scenes only) judges other prompts."""
    judged = [
        what
        for what, spec in (("CLIP score", clip_model), ("FID features", fid_features))
        if spec is not None and spec.split(":")[0] == "domain"
    ]
    if not judged or prompts == "shapes":
        return None
    return (
        f"the domain CLIP ({' and '.join(judged)}) knows only the built-in shapes scenes, so on `{prompts}` its "
        "figures say little; pass --clip-model / --fid-features open_clip:MODEL:WEIGHTS (or inception) to judge "
        "other prompts"
    )


def fid_note(results: Sequence[SamplerResult], scoring: dict[str, Any]) -> str | None:
    """A warning when FID rests on fewer images per sampler than its features have dimensions: the
    covariances are then rank-deficient, the estimate is dominated by its bias (its floor between two sets
    of real images alone can exceed the gaps between samplers), and it compares with no larger run."""
    dims = scoring.get("fid_feature_dims")
    counts = [r.images for r in results if r.fid is not None]
    if not dims or not counts or min(counts) >= dims:
        return None
    return (
        f"FID from {min(counts)} images per sampler, fewer than its {dims} feature dimensions: it is dominated by "
        f"its bias and compares with no run of another size; use --n {dims} or more for FID"
    )


def write_report(
    out: Path,
    settings: EvalSettings,
    records: Sequence[dict[str, Any]],
    results: Sequence[SamplerResult],
    scoring: dict[str, Any],
    pipe,
    command: str | None = None,
    grid_prompts: int = 4,
) -> dict[str, Any]:
    """Write metrics.json, the plots and report.md; return what metrics.json holds."""
    notes = (
        [] if "ar" in settings.samplers else ["no `ar` run: step compression and latency speedup left empty"]
    )
    notes += [
        note
        for note in (
            fid_note(results, scoring),
            judge_note(settings.prompts, scoring.get("fid_features"), scoring.get("clip_model")),
        )
        if note
    ]
    metrics = {
        "command": command,
        "settings": {
            **settings.to_dict(),
            "model": model_name(settings.model),
            "prompts": _prompts_name(settings),
        },
        "scoring": scoring,
        "environment": environment(pipe, settings.call_kwargs()),
        "samplers": [r.to_dict() for r in results],
        "notes": notes,
    }
    write_text(out / METRICS_FILE, json.dumps(metrics, indent=2) + "\n")
    figures = write_plots(out, records, results, settings.samplers, grid_prompts)
    write_text(out / REPORT_FILE, _markdown(metrics, results, figures))
    return metrics


def _prompts_name(settings: EvalSettings) -> str:
    """A prompt set's name, or a prompt file's name without the folders of the machine it ran on."""
    path = Path(settings.prompts)
    return path.name if path.is_absolute() else settings.prompts


def write_plots(
    out: Path,
    records: Sequence[dict[str, Any]],
    results: Sequence[SamplerResult],
    samplers: Sequence[str],
    grid_prompts: int = 4,
) -> dict[str, str]:
    """The four figures as `plots/*.png`; returns {title: relative path}."""
    present = [spec for spec in samplers if any(r["sampler"] == spec for r in records)]
    if not present:
        return {}
    first_seed = min(r["seed"] for r in records)
    shown = {
        spec: {r["index"]: r for r in records if r["sampler"] == spec and r["seed"] == first_seed}
        for spec in present
    }
    maps = {
        spec: [
            (f"prompt {i}", np.asarray(r["commit_step"]))
            for i, r in sorted(rows.items())
            if "commit_step" in r
        ][:4]
        for spec, rows in shown.items()
    }
    figures = {
        "speed vs quality": ("speed_quality.png", plots.speed_quality([r.to_dict() for r in results])),
        "accepted tokens per step": (
            "accepted_per_step.png",
            plots.accepted_histogram({spec: pooled_histogram(records, spec) for spec in present}),
        ),
    }
    if any(maps.values()):
        figures["commit-step maps"] = (
            "commit_steps.png",
            plots.commit_step_maps({spec: shown_maps for spec, shown_maps in maps.items() if shown_maps}),
        )
    indices = sorted(set.intersection(*(set(rows) for rows in shown.values())))[:grid_prompts]
    if indices:
        images = [list(load_images(out, [shown[spec][i] for spec in present])) for i in indices]
        prompts = [shown[present[0]][i]["prompt"] for i in indices]
        figures["same prompts and seeds across samplers"] = (
            "grid.png",
            plots.comparison_grid(images, prompts, present),
        )
    written = {}
    for title, (name, figure) in figures.items():
        with atomic_target(out / PLOTS_DIR / name) as temporary:
            figure.savefig(temporary, format="png", dpi=110)
        written[title] = f"{PLOTS_DIR}/{name}"
    return written


def pooled_histogram(records: Sequence[dict[str, Any]], sampler: str) -> dict[int, int]:
    """Forward passes per number of committed tokens, over all images of `sampler`."""
    pooled: Counter[int] = Counter()
    for record in records:
        if record["sampler"] == sampler:
            pooled.update({int(tokens): steps for tokens, steps in record["accepted_histogram"].items()})
    return dict(sorted(pooled.items()))


def _markdown(metrics: dict[str, Any], results: Sequence[SamplerResult], figures: dict[str, str]) -> str:
    settings, scoring, env = metrics["settings"], metrics["scoring"], metrics["environment"]
    reference = scoring.get("reference")
    fid = (
        f"FID with `{scoring['fid_features']}` features against {reference['images']} reference images "
        f"({reference['source']})"
        if reference
        else "FID not computed"
    )
    clip = (
        f"CLIP score with `{scoring['clip_model']}`"
        if scoring.get("clip_model")
        else "CLIP score not computed"
    )
    weights = f", {settings['quantization']} weights" if settings.get("quantization") else ""
    lines = [
        "# arjet eval",
        "",
        f"```\n{metrics['command']}\n```" if metrics.get("command") else "",
        "",
        f"{settings['n']} prompts of `{settings['prompts']}` x {len(settings['seeds'])} seed(s) per sampler, "
        f"model `{settings['model']}` ({env['pipeline']}, {env['dtype']}{weights}) on {env['device']}. {fid}; "
        f"{clip}.",
        "",
        results_table(results),
        "",
        "Step compression: mean forward passes of `ar` / of the sampler, same prompts and seeds. Latency speedup: "
        "mean seconds per image of `ar` / of the sampler, measured in this run. Accepted / step: mean over images "
        "of the tokens one forward pass committed.",
        *[f"\nNote: {note}." for note in metrics["notes"]],
        "",
        *[f"![{title}]({path})" for title, path in figures.items()],
        "",
    ]
    return "\n".join(lines)
