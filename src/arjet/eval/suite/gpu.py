"""The GPU suites: the captured decode step and real-size speed on one GPU (`gpu`), and the same sections at
smaller sizes (`gpu-quick`). The targets are the GPU-proof issue's."""

from __future__ import annotations

from typing import Any

from .spec import BenchRun, Figure, FloorShapes, Section, Suite, Target, ThroughputRun

SHAPES_PROMPTS = 6  # held-out prompts per built-in run


def _modes(
    label: str, samplers: tuple[str, ...], profile: tuple[str, ...] = (), **kwargs: Any
) -> tuple[BenchRun, BenchRun]:
    """The same run eagerly and as captured CUDA graphs (the second with the kernel profiles, if any)."""
    return (
        BenchRun(f"{label} eager", samplers, compile="none", **kwargs),
        BenchRun(f"{label} cuda-graphs", samplers, compile="cuda-graphs", profile=profile, **kwargs),
    )


LUMINA_SAMPLERS = ("ar", "sjd", "sjd-pac", "zipar")
BUILTIN_SAMPLERS = ("ar", "sjd", "mc-sjd", "sjd-pac")
LUMINA_FLOOR = FloorShapes(
    layers=32, hidden=4096, ffn=11008, heads=32, kv_heads=32, head_rows=8192, cache=2400, filled=1200
)


def _gpu_sections(quick: bool) -> tuple[Section, ...]:
    small = 256 if quick else 384
    return (
        Section(
            "shapes",
            "built-in model (8.6 M parameters, float32)",
            150,
            model="shapes",
            runs=(
                *_modes("batch 1", BUILTIN_SAMPLERS, ("ar", "sjd"), n=4 if quick else SHAPES_PROMPTS),
                *_modes("batch 8", ("ar", "sjd", "mc-sjd"), n=8, batch_size=8),
            ),
        ),
        Section(
            "shapes-sjd2",
            "built-in model fine-tuned for SJD2 (float32)",
            75,
            model="shapes-sjd2",
            runs=_modes("batch 1", ("ar", "sjd2"), n=4 if quick else SHAPES_PROMPTS),
        ),
        Section(
            "lumina-mgpt-7b",
            "Lumina-mGPT-7B architecture, random weights (bfloat16)",
            240 if quick else 330,
            arch="lumina-mgpt-7b-768",
            runs=(
                *_modes(f"{small} px", LUMINA_SAMPLERS, ("ar", "sjd", "sjd-pac"), size=small),
                *(() if quick else (BenchRun("768 px cuda-graphs", ("ar",), size=768, warmup=False),)),
            ),
        ),
        Section(
            "graph-floor", "minimal decoder of Lumina-mGPT-7B shapes (graph floor)", 90, floor=LUMINA_FLOOR
        ),
        Section(
            "janus-pro-7b",
            "Janus-Pro-7B architecture, random weights (bfloat16)",
            150,
            arch="janus-pro-7b",
            size=small,
            runs=_modes(f"{small} px", ("ar", "sjd")),
        ),
        Section(
            "emu3-gen",
            "Emu3-Gen architecture at a small size, random weights (bfloat16)",
            150,
            arch="emu3-gen",
            runs=_modes("192 px" if not quick else "128 px", ("ar", "sjd"), size=128 if quick else 192),
        ),
        Section(
            "janus-pro-7b-engine",
            "Janus-Pro-7B architecture through the engine, random weights (bfloat16)",
            150,
            arch="janus-pro-7b",
            size=small,
            throughput=ThroughputRun(("ar", "mc-sjd", "adaptive"), (1, 8) if quick else (1, 8, 32), n=4),
        ),
    )


def _gpu_targets(quick: bool) -> tuple[Target, ...]:
    small = f"{256 if quick else 384} px cuda-graphs"
    graphs = "batch 1 cuda-graphs"
    speedup = [
        Target(
            f"built-in `{s}`: latency speedup / step compression",
            Figure(section, graphs, s, "latency_speedup"),
            0.8,
            per=Figure(section, graphs, s, "step_compression"),
            at_least=True,
        )
        for section, s in (
            ("shapes", "sjd"),
            ("shapes", "mc-sjd"),
            ("shapes", "sjd-pac"),
            ("shapes-sjd2", "sjd2"),
        )
    ]
    lumina_ar = (
        [
            Target(
                "Lumina-mGPT-7B 768 px: `ar` ms / forward over the graph floor (1 query)",
                Figure("lumina-mgpt-7b", "768 px cuda-graphs", "ar", "ms_per_forward"),
                1.25,
                per=Figure("graph-floor", "floor", "1", "graph_ms"),
            )
        ]
        if not quick
        else []
    )
    return (
        *lumina_ar,
        Target(
            "Lumina-mGPT-7B: `sjd` window forward over an `ar` forward (replayed steps)",
            Figure("lumina-mgpt-7b", small, "sjd", "ms_per_replay"),
            1.25,
            per=Figure("lumina-mgpt-7b", small, "ar", "ms_per_replay"),
        ),
        Target(
            "Lumina-mGPT-7B: `sjd-pac` 64-input forward over an `ar` forward (replayed steps)",
            Figure("lumina-mgpt-7b", small, "sjd-pac", "ms_per_replay"),
            1.4,
            per=Figure("lumina-mgpt-7b", small, "ar", "ms_per_replay"),
        ),
        Target(
            "Janus-Pro-7B: `ar` ms / forward",
            Figure("janus-pro-7b", small, "ar", "ms_per_forward"),
            8.0,
            unit=" ms",
        ),
        Target(
            "built-in: `ar` ms / forward", Figure("shapes", graphs, "ar", "ms_per_forward"), 2.0, unit=" ms"
        ),
        *speedup,
        Target(
            "built-in, batch 8: `sjd` images / s over `ar` images / s",
            Figure("shapes", "batch 8 cuda-graphs", "sjd", "images_per_second"),
            2.0,
            per=Figure("shapes", "batch 8 cuda-graphs", "ar", "images_per_second"),
            at_least=True,
        ),
    )


SUITES: dict[str, Suite] = {
    "gpu": Suite(
        "gpu",
        "captured decode step and real-size speed on one GPU",
        _gpu_sections(False),
        _gpu_targets(False),
        budget_s=480,
    ),
    "gpu-quick": Suite(
        "gpu-quick", "the gpu suite at smaller sizes", _gpu_sections(True), _gpu_targets(True), budget_s=240
    ),
}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; choose one of {', '.join(SUITES)}")
    return SUITES[name]


# -- running ---------------------------------------------------------------------------------------------
