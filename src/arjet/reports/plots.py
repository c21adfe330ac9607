"""Figures of an evaluation: speed against quality, accepted tokens per step, commit-step maps, and the
same prompts and seeds side by side across samplers.

Every function returns a matplotlib `Figure` built without pyplot (no global backend, no display), to
save with `figure.savefig(path)`.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import PIL.Image
from matplotlib import colormaps
from matplotlib.figure import Figure

from .grid import image_grid

LABELS = {
    "fid": "FID (lower is better)",
    "clip_score": "CLIP score (higher is better)",
    "accepted_per_step": "accepted tokens per step",
    "step_compression": "step compression (x fewer forward passes than ar)",
    "latency_speedup": "latency speedup vs ar",
    "forward_passes": "forward passes per image",
    "seconds": "seconds per image (one run's timing)",
}


def speed_quality(rows: Sequence[Mapping[str, Any]]) -> Figure:
    """One panel per (speed figure, quality metric) with values; one labelled point per sampler. Without
    ratios (no `ar` run) the x axis is the mean number of forward passes; without any quality metric the
    y axis is the mean number of accepted tokens per step. A dashed line marks `ar`'s quality."""

    def present(keys: tuple[str, ...]) -> list[str]:
        return [key for key in keys if any(row.get(key) is not None for row in rows)]

    qualities = present(("fid", "clip_score")) or ["accepted_per_step"]
    x_axes = present(("step_compression", "latency_speedup")) or ["forward_passes"]
    figure = Figure(figsize=(4.6 * len(qualities), 3.8 * len(x_axes)), layout="constrained")
    axes = figure.subplots(len(x_axes), len(qualities), squeeze=False)
    for r, x_key in enumerate(x_axes):
        for c, y_key in enumerate(qualities):
            ax = axes[r][c]
            for k, row in enumerate(rows):
                x, y = row.get(x_key), row.get(y_key)
                if x is None or y is None:
                    continue
                ax.scatter([x], [y], s=60, color=f"C{k}", zorder=3)
                ax.annotate(row["sampler"], (x, y), textcoords="offset points", xytext=(6, 4), fontsize=9)
            baseline = next((row.get(y_key) for row in rows if row["sampler"] == "ar"), None)
            if baseline is not None:
                ax.axhline(baseline, color="grey", linestyle="--", linewidth=1, zorder=1)
            ax.set_xlabel(LABELS[x_key])
            ax.set_ylabel(LABELS[y_key])
            ax.grid(alpha=0.3)
            ax.margins(0.25)
    figure.suptitle("speed vs quality, per sampler")
    return figure


def accepted_histogram(counts: Mapping[str, Mapping[int, int]]) -> Figure:
    """Per sampler, the share of forward passes that committed 1, 2, ... tokens (all images pooled);
    `counts[sampler][tokens]` is the number of such forward passes."""
    samplers = list(counts)
    largest = max((max(c, default=1) for c in counts.values()), default=1)
    figure = Figure(figsize=(max(6.0, 0.25 * largest + 4), 1.9 * len(samplers) + 0.8), layout="constrained")
    axes = figure.subplots(len(samplers), 1, sharex=True, squeeze=False)[:, 0]
    for k, (ax, spec) in enumerate(zip(axes, samplers, strict=True)):
        tokens = np.asarray(list(counts[spec]), dtype=float)
        steps = np.asarray(list(counts[spec].values()), dtype=float)
        total = steps.sum()
        ax.bar(tokens, steps / max(total, 1), width=0.9, color=f"C{k}")
        mean = (tokens * steps).sum() / total if total else float("nan")
        ax.set_title(f"{spec}: {int(total)} steps, {mean:.2f} tokens/step pooled", fontsize=10, loc="left")
        ax.set_ylabel("share of steps")
        ax.grid(axis="y", alpha=0.3)
    axes[-1].set_xlabel("tokens committed by one forward pass")
    axes[-1].set_xlim(0.4, largest + 0.6)
    axes[-1].xaxis.get_major_locator().set_params(integer=True)
    return figure


def commit_step_maps(maps: Mapping[str, Sequence[tuple[str, np.ndarray]]]) -> Figure:
    """Rows: samplers; columns: the same few images. Each cell coloured by the forward pass that fixed it,
    on one colour scale per sampler (1 to its largest pass count), so each row shows its decoding order."""
    samplers = list(maps)
    columns = max(len(images) for images in maps.values())
    figure = Figure(figsize=(max(2.3 * columns + 1.4, 5.0), 2.3 * len(samplers) + 0.6), layout="constrained")
    axes = figure.subplots(len(samplers), columns, squeeze=False)
    for r, spec in enumerate(samplers):
        top = max(int(grid.max()) for _, grid in maps[spec])
        shown = None
        for c in range(columns):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c >= len(maps[spec]):
                ax.axis("off")
                continue
            title, grid = maps[spec][c]
            shown = ax.imshow(grid, cmap="viridis", vmin=1, vmax=max(top, 2), interpolation="nearest")
            ax.set_title(f"{title}: {int(grid.max())} passes", fontsize=8)
            if c == 0:
                ax.set_ylabel(spec, fontsize=10)
        figure.colorbar(shown, ax=axes[r].tolist(), shrink=0.9, label="forward pass")
    figure.suptitle("the forward pass that fixed each cell")
    return figure


def wrap_spec(spec: str, width: int = 20) -> str:
    """A sampler spec on lines of about `width` characters, broken after its `:` and `,` (a spec has no
    spaces for `textwrap` to break at, and a long one would run into its neighbour's column)."""
    lines = [""]
    for part in re.split(r"(?<=[:,])", spec):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def comparison_grid(
    images: Sequence[Sequence[PIL.Image.Image]], row_labels: Sequence[str], column_labels: Sequence[str]
) -> Figure:
    """`images[row][column]`: rows are prompts, columns samplers (same seed along a row)."""
    flat = [image for row in images for image in row]
    width, height = flat[0].size
    factor = max(1, -(-128 // max(width, height)))  # small images are enlarged (nearest) to about 128 px
    enlarged = [
        image.resize((width * factor, height * factor), PIL.Image.Resampling.NEAREST) for image in flat
    ]
    padding = 4
    tiled = image_grid(enlarged, columns=len(column_labels), padding=padding)
    cell_w, cell_h = width * factor + padding, height * factor + padding
    figure = Figure(
        figsize=(1.6 * len(column_labels) + 2.6, 1.6 * len(row_labels) + 0.6), layout="constrained"
    )
    ax = figure.subplots()
    ax.imshow(np.asarray(tiled), interpolation="nearest")
    ax.set_xticks([padding + cell_w * (c + 0.5) - padding / 2 for c in range(len(column_labels))])
    ax.set_xticklabels([wrap_spec(label) for label in column_labels], fontsize=9)
    ax.xaxis.tick_top()
    ax.set_yticks([padding + cell_h * (r + 0.5) - padding / 2 for r in range(len(row_labels))])
    ax.set_yticklabels([textwrap.fill(label, 28) for label in row_labels], fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    return figure


def throughput(rows: Sequence[Mapping[str, Any]]) -> Figure:
    """Images per second against concurrency, one line per sampler (`rows`: `sampler`, `concurrency`,
    `images_per_second`)."""
    figure = Figure(figsize=(5.2, 3.8), layout="constrained")
    axes = figure.add_subplot()
    for sampler in dict.fromkeys(row["sampler"] for row in rows):
        points = sorted(
            (row["concurrency"], row["images_per_second"]) for row in rows if row["sampler"] == sampler
        )
        axes.plot(*zip(*points, strict=True), marker="o", label=sampler)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("concurrent requests (engine lanes)")
    axes.set_ylabel("images / s")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def frontier(
    points: Sequence[Mapping[str, Any]],
    fronts: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
    spread: Mapping[str, tuple[float, float]],
) -> Figure:
    """Quality against cost across samplers: one panel per (quality metric, cost axis) in `fronts`' keys
    (`(axis, metric)`, axis `forward_passes` or `seconds`); every point of `points` that has both figures
    (`sampler`, `seed`, the metric, the axis; a point without the axis is left out of that panel), its
    front joined by a line, the points named (only the front's and `ar`'s where a panel has more than 12),
    `ar`'s `spread` per metric shaded.
    A second seed of a sampler is drawn hollow."""
    axes_names = list(dict.fromkeys(axis for axis, _ in fronts))
    metrics = list(dict.fromkeys(metric for _, metric in fronts))
    first_seed = min(point["seed"] for point in points)
    figure = Figure(figsize=(7.0 * len(axes_names), 5.2 * len(metrics)), layout="constrained")
    grid = figure.subplots(len(metrics), len(axes_names), squeeze=False)
    palette = colormaps["tab20"]
    colours = {name: palette(k % 20) for k, name in enumerate(dict.fromkeys(p["sampler"] for p in points))}
    for r, metric in enumerate(metrics):
        for c, axis in enumerate(axes_names):
            ax = grid[r][c]
            if metric in spread:
                ax.axhspan(*spread[metric], color="grey", alpha=0.2, label="ar's run-to-run spread", zorder=0)
            front = fronts[axis, metric]
            ar = [p for p in points if p["sampler"] == "ar" and p["seed"] == first_seed]
            ax.plot([p[axis] for p in front], [p[metric] for p in front], color="black", linewidth=1.2,
                    drawstyle="steps-post", label="Pareto front", zorder=2)  # fmt: skip
            shown = [p for p in points if p.get(axis) is not None and p.get(metric) is not None]
            named = {(p["sampler"], p["seed"]) for p in (shown if len(shown) <= 12 else [*front, *ar])}
            labelled = set()
            for point in points:
                x, y = point.get(axis), point.get(metric)
                if x is None or y is None:
                    continue
                colour = "black" if point["sampler"] == "ar" else colours[point["sampler"]]
                hollow = point["seed"] != first_seed
                ax.scatter(
                    [x], [y], s=40, zorder=3, edgecolors=colour, facecolors="none" if hollow else colour
                )
                if (point["sampler"], point["seed"]) in named and point["sampler"] not in labelled:
                    labelled.add(point["sampler"])
                    ax.annotate(wrap_spec(point["sampler"], 28), (x, y), textcoords="offset points",
                                xytext=(4, 3), fontsize=6)  # fmt: skip
            ax.set_xlabel(LABELS[axis])
            ax.set_ylabel(LABELS[metric])
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize="small", loc="best")
    figure.suptitle(f"speed vs quality across samplers (filled: seed {first_seed}; hollow: another seed)")
    return figure
