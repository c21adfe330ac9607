"""The procedural shapes domain: seeded scenes of coloured shapes, their renders and their prompts.

A scene holds 1-4 objects (7 shapes, 10 colours, two sizes, positions with left/right/above/below
relations, or several copies of one object to count) on a background (plain, gradient, stripes, checker,
noise texture). `render` draws it anti-aliased (4x supersampling); `describe` phrases it in one of several
ways, always naming every object's colour and shape. Everything is a pure function of a seed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import PIL.Image
import PIL.ImageDraw

SHAPES = ("circle", "square", "triangle", "star", "diamond", "hexagon", "cross")
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35),
    "orange": (245, 135, 20),
    "yellow": (245, 215, 30),
    "green": (35, 160, 60),
    "blue": (35, 75, 215),
    "purple": (130, 50, 185),
    "pink": (245, 125, 190),
    "white": (248, 248, 248),
    "black": (20, 20, 20),
    "brown": (125, 75, 35),
}
BACKGROUND_COLORS: dict[str, tuple[int, int, int]] = {
    **COLORS,
    "gray": (128, 128, 128),
    "beige": (225, 205, 165),
}
BACKGROUNDS = ("plain", "gradient", "stripes", "checker", "noise")
SIZES = {"small": 0.115, "large": 0.2}  # radius as a fraction of the image side
NUMBERS = {2: "two", 3: "three", 4: "four"}
SUPERSAMPLE = 4


@dataclass(frozen=True)
class Shape:
    shape: str
    color: str
    size: str
    x: float  # centre, fraction of the width
    y: float  # centre, fraction of the height


@dataclass(frozen=True)
class Background:
    kind: str
    colors: tuple[str, ...]
    vertical: bool = False  # gradient / stripe direction
    seed: int = 0  # noise texture


@dataclass(frozen=True)
class Scene:
    objects: tuple[Shape, ...]
    background: Background
    layout: str = "single"  # single | pair | count | group
    relation: str = ""  # for pairs: "left" (object 0 is left of object 1), "above", or "" (side by side)
    extra: dict = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Scene:
        background = data["background"]
        return cls(
            objects=tuple(Shape(**o) for o in data["objects"]),
            background=Background(
                background["kind"], tuple(background["colors"]), background["vertical"], background["seed"]
            ),
            layout=data["layout"],
            relation=data["relation"],
            extra=dict(data.get("extra") or {}),
        )


# -- sampling ---------------------------------------------------------------------------------------
def sample_scene(rng: np.random.Generator) -> Scene:
    layout = rng.choice(["single", "pair", "count", "group"], p=[0.35, 0.35, 0.15, 0.15])
    background = _sample_background(rng)
    taken = set(background.colors)  # an object never takes a colour of its background
    if layout == "single":
        objects = [_object(rng, taken, _jitter(rng, 0.5, 0.5, 0.22))]
        return Scene(tuple(objects), background, "single")
    if layout == "pair":
        relation = rng.choice(["left", "above"])
        first = _object(rng, taken, (0.0, 0.0))
        second = _object(rng, taken | {first.color} if rng.random() < 0.7 else taken, (0.0, 0.0))
        along, across = rng.uniform(0.25, 0.32), rng.uniform(0.4, 0.6)
        if relation == "left":
            a, b = (0.5 - along, across), (0.5 + along, across + rng.uniform(-0.08, 0.08))
        else:
            a, b = (across, 0.5 - along), (across + rng.uniform(-0.08, 0.08), 0.5 + along)
        objects = [_place(first, *a), _place(second, *b)]
        return Scene(tuple(objects), background, "pair", relation)
    if layout == "count":
        count = int(rng.integers(2, 5))
        prototype = _object(rng, taken, (0.0, 0.0), size="small" if count > 2 else None)
        spots = _spots(rng, count)
        return Scene(tuple(_place(prototype, x, y) for x, y in spots), background, "count")
    count = int(rng.integers(3, 5))
    objects, used = [], set()
    for x, y in _spots(rng, count):
        item = _object(rng, taken | used, (x, y), size="small")
        used.add(item.color)
        objects.append(item)
    return Scene(tuple(objects), background, "group")


def _sample_background(rng: np.random.Generator) -> Background:
    kind = rng.choice(BACKGROUNDS, p=[0.4, 0.2, 0.15, 0.15, 0.1])
    names = list(BACKGROUND_COLORS)
    first = names[int(rng.integers(len(names)))]
    second = rng.choice([n for n in names if n != first])
    colors = (first,) if kind in ("plain", "noise") else (first, str(second))
    return Background(str(kind), colors, bool(rng.random() < 0.5), int(rng.integers(2**31)))


def _object(rng, avoid: set[str], center: tuple[float, float], size: str | None = None) -> Shape:
    colors = [c for c in COLORS if c not in avoid] or list(COLORS)
    return Shape(
        shape=SHAPES[int(rng.integers(len(SHAPES)))],
        color=colors[int(rng.integers(len(colors)))],
        size=size or ("large" if rng.random() < 0.55 else "small"),
        x=float(center[0]),
        y=float(center[1]),
    )


def _place(item: Shape, x: float, y: float) -> Shape:
    return Shape(item.shape, item.color, item.size, float(x), float(y))


def _jitter(rng, x: float, y: float, amount: float) -> tuple[float, float]:
    return x + rng.uniform(-amount, amount), y + rng.uniform(-amount, amount)


def _spots(rng, count: int) -> list[tuple[float, float]]:
    """`count` well-separated centres: quadrants (2x2) or a row, with jitter."""
    if count == 2:
        return [_jitter(rng, 0.28, 0.5, 0.05), _jitter(rng, 0.72, 0.5, 0.05)]
    quadrants = [(0.27, 0.27), (0.73, 0.27), (0.27, 0.73), (0.73, 0.73)]
    order = rng.permutation(4)[:count]
    return [_jitter(rng, *quadrants[i], 0.04) for i in sorted(order)]


# -- rendering --------------------------------------------------------------------------------------
# bytes per pixel of the supersampled canvas while one render runs: a noise texture in float64 (24), the
# float32 pixels and their clipped copy (24), the uint8 canvas and PIL's 4-byte pixels (7), some to spare
CANVAS_BYTES_PER_PIXEL = 64


def render_bytes(size: int) -> int:
    """The memory one `render(scene, size)` takes at its peak, in bytes (its canvas is `4 * size` a side),
    for a caller to check before asking for a size no machine can draw."""
    return CANVAS_BYTES_PER_PIXEL * (SUPERSAMPLE * size) ** 2


def render(scene: Scene, size: int = 64) -> PIL.Image.Image:
    big = size * SUPERSAMPLE
    image = PIL.Image.fromarray(_background(scene.background, big))
    draw = PIL.ImageDraw.Draw(image)
    for item in scene.objects:
        radius = SIZES[item.size] * big
        draw.polygon(_outline(item.shape, item.x * big, item.y * big, radius), fill=COLORS[item.color])
    return image.resize((size, size), PIL.Image.Resampling.LANCZOS)


def _background(background: Background, side: int) -> np.ndarray:
    first = np.array(BACKGROUND_COLORS[background.colors[0]], dtype=np.float32)
    second = np.array(BACKGROUND_COLORS[background.colors[-1]], dtype=np.float32)
    axis = np.linspace(0.0, 1.0, side, dtype=np.float32)
    along = axis[:, None] if background.vertical else axis[None, :]
    along = np.broadcast_to(along, (side, side))
    if background.kind == "plain":
        pixels = np.broadcast_to(first, (side, side, 3))
    elif background.kind == "gradient":
        pixels = first + (second - first) * along[..., None]
    elif background.kind == "stripes":
        band = (np.floor(along * 8) % 2)[..., None]
        pixels = first * (1 - band) + second * band
    elif background.kind == "checker":
        cells = (np.floor(axis * 6)[:, None] + np.floor(axis * 6)[None, :]) % 2
        pixels = first * (1 - cells[..., None]) + second * cells[..., None]
    else:  # noise: a texture drawn at 1/4 of the render size, then scaled up
        grain = np.random.default_rng(background.seed).normal(
            0, 28, (side // SUPERSAMPLE, side // SUPERSAMPLE, 3)
        )
        grain = np.kron(grain, np.ones((SUPERSAMPLE, SUPERSAMPLE, 1)))
        pixels = first + grain
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _outline(shape: str, x: float, y: float, r: float) -> list[tuple[float, float]]:
    def ring(count: int, radius: float, phase: float) -> list[tuple[float, float]]:
        return [
            (
                x + radius * math.cos(phase + 2 * math.pi * k / count),
                y + radius * math.sin(phase + 2 * math.pi * k / count),
            )
            for k in range(count)
        ]

    if shape == "circle":
        return ring(64, r, 0.0)
    if shape == "square":
        side = r * 0.85
        return [(x - side, y - side), (x + side, y - side), (x + side, y + side), (x - side, y + side)]
    if shape == "triangle":
        return ring(3, r * 1.1, -math.pi / 2)
    if shape == "diamond":
        return [(x, y - r), (x + r * 0.7, y), (x, y + r), (x - r * 0.7, y)]
    if shape == "hexagon":
        return ring(6, r, 0.0)
    if shape == "star":
        outer, inner = ring(5, r * 1.1, -math.pi / 2), ring(5, r * 0.45, -math.pi / 2 + math.pi / 5)
        return [point for pair in zip(outer, inner, strict=True) for point in pair]
    if shape == "cross":
        a, b = r * 0.9, r * 0.32
        return [
            (x - b, y - a),
            (x + b, y - a),
            (x + b, y - b),
            (x + a, y - b),
            (x + a, y + b),
            (x + b, y + b),
            (x + b, y + a),
            (x - b, y + a),
            (x - b, y + b),
            (x - a, y + b),
            (x - a, y - b),
            (x - b, y - b),
        ]
    raise ValueError(f"unknown shape {shape!r}; known: {SHAPES}")


# -- prompts ----------------------------------------------------------------------------------------
def describe(scene: Scene, rng: np.random.Generator) -> str:
    """One phrasing of the scene; every object's colour and shape is named."""
    objects = scene.objects
    if scene.layout == "single":
        item = objects[0]
        text = _pick(
            rng,
            [
                f"{_a(_noun(item))}",
                f"{_a(item.size + ' ' + _noun(item))}",
                f"{_noun(item)}",
                f"a picture of {_a(_noun(item))}",
                f"one {_noun(item)}",
            ],
        )
    elif scene.layout == "pair":
        first, second = objects
        if scene.relation == "left":
            options = [
                f"{_a(_noun(first))} left of {_a(_noun(second))}",
                f"{_a(_noun(second))} right of {_a(_noun(first))}",
                f"{_a(_noun(first))} to the left of {_a(_noun(second))}",
                f"{_a(_noun(first))} and {_a(_noun(second))}",
            ]
        else:
            options = [
                f"{_a(_noun(first))} above {_a(_noun(second))}",
                f"{_a(_noun(second))} below {_a(_noun(first))}",
                f"{_a(_noun(first))} on top of {_a(_noun(second))}",
                f"{_a(_noun(first))} and {_a(_noun(second))}",
            ]
        text = _pick(rng, options)
    elif scene.layout == "count":
        item, count = objects[0], len(objects)
        plural = f"{item.color} {item.shape}es" if item.shape == "cross" else f"{item.color} {item.shape}s"
        text = _pick(
            rng, [f"{NUMBERS[count]} {plural}", f"{count} {plural}", f"a group of {NUMBERS[count]} {plural}"]
        )
    else:
        names = [f"{_a(_noun(item))}" for item in objects]
        text = ", ".join(names[:-1]) + " and " + names[-1]
    if rng.random() < 0.65:
        text += " " + _background_phrase(scene.background, rng)
    return text


def _noun(item: Shape) -> str:
    return f"{item.color} {item.shape}"


def _a(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _pick(rng: np.random.Generator, options: list[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _background_phrase(background: Background, rng: np.random.Generator) -> str:
    first, second = background.colors[0], background.colors[-1]
    options = {
        "plain": [f"on {_a(first)} background", f"on {first}"],
        "gradient": [f"on {_a(first)} to {second} gradient", "on a gradient background"],
        "stripes": [f"on {first} and {second} stripes", "on a striped background"],
        "checker": [f"on {_a(first)} and {second} checkerboard", "on a checkered background"],
        "noise": ["on a noisy " + first + " background", "on a noisy background"],
    }[background.kind]
    return _pick(rng, options)
