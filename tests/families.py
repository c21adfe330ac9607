"""The model families the tests run on, and what each decodes with."""

from __future__ import annotations

FAMILIES = ("janus", "emu3", "lumina_mgpt", "glm_image")
# families whose AR stage has classifier-free guidance (GLM-Image's model defines no unconditional branch)
GUIDED_FAMILIES = ("janus", "emu3", "lumina_mgpt")


def guidance(family: str, scale: float = 3.0) -> float | None:
    """The CFG scale a test decodes `family` with: `scale`, or None for a family without CFG."""
    return scale if family in GUIDED_FAMILIES else None


def guided(family: str) -> bool:
    return family in GUIDED_FAMILIES


def cfg_for(family: str, guided: bool | None) -> bool:
    """Whether a session test of `family` runs guided: as asked, or by default when the family has CFG; a
    guided variant of a family without CFG is skipped."""
    import pytest

    if guided is None:
        return family in GUIDED_FAMILIES
    if guided and family not in GUIDED_FAMILIES:
        pytest.skip(f"{family} has no classifier-free guidance")
    return guided


def decoded_grids(pipe, grid: tuple[int, int]) -> list[tuple[int, int]]:
    """The grids a call decodes in turn: the family's preview grid first (GLM-Image), then `grid`."""
    preview = pipe.preview_grid(grid)
    return [grid] if preview is None else [preview, grid]


def all_cells(pipe, grid: tuple[int, int]) -> int:
    """Codes a call decodes per image for a target `grid`, the preview grid's included."""
    return sum(height * width for height, width in decoded_grids(pipe, grid))


def statistical_logit_scale(family: str, scale: float = 3.0) -> float:
    """The tiny model's logit scale for a chi-square test against its exact joint: `scale`, but 6 for
    GLM-Image, whose 2 x 3 grid comes after a 1 x 2 preview: 8 cells, which a flatter model spreads over
    too many outcomes for 4000 draws (at 6, 115 outcomes expect 5 draws or more, holding 49% of the mass;
    the negative controls reject it as they do the others, p < 1e-9 when written)."""
    return 6.0 if family == "glm_image" else scale


def guidance_of(pipe, scale: float = 3.0) -> float | None:
    """The CFG scale a test decodes `pipe` with: `scale`, or None where the family has no CFG."""
    return scale if pipe.classifier_free_guidance else None
