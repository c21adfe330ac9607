"""The GPU suites: the captured decode step and real-size speed on one GPU (`gpu`), and the same sections at
smaller sizes (`gpu-quick`). The targets are the GPU-proof issue's."""

from __future__ import annotations

from typing import Any

from .report import CAPTURED
from .spec import BenchRun, Figure, FloorShapes, Section, Suite, Target, ThroughputRun

SHAPES_PROMPTS = 6  # held-out prompts per built-in run


def _modes(
    label: str, samplers: tuple[str, ...], profile: tuple[str, ...] = (), **kwargs: Any
) -> tuple[BenchRun, BenchRun]:
    """The same run eagerly and as captured CUDA graphs (the second with the kernel profiles, if any). The
    eager run, there for its codes, takes no untimed first call."""
    return (
        BenchRun(f"{label} eager", samplers, compile="none", **{**kwargs, "warmup": False}),
        BenchRun(f"{label} cuda-graphs", samplers, compile="cuda-graphs", profile=profile, **kwargs),
    )


def _compiled(label: str, samplers: tuple[str, ...], **kwargs: Any) -> BenchRun:
    """The run with the decoder's layers compiled by inductor inside the captured steps (its untimed first
    call per sampler compiles)."""
    return BenchRun(f"{label} inductor-graphs", samplers, compile="inductor-graphs", **kwargs)


LUMINA_SAMPLERS = ("ar", "sjd", "sjd-pac", "zipar")
BUILTIN_SAMPLERS = ("ar", "sjd", "mc-sjd", "sjd-pac")
LUMINA_FLOOR = FloorShapes(
    layers=32, hidden=4096, ffn=11008, heads=32, kv_heads=32, head_rows=8192, cache=2400, filled=1200
)


def _gpu_sections(quick: bool) -> tuple[Section, ...]:
    small = 256 if quick else 384
    shapes_n = 4 if quick else SHAPES_PROMPTS
    return (
        Section(
            "shapes",
            "built-in model (8.6 M parameters, float32)",
            200,
            model="shapes",
            runs=(
                *_modes("batch 1", BUILTIN_SAMPLERS, ("ar", "sjd"), n=shapes_n),
                _compiled("batch 1", ("ar", "sjd"), n=shapes_n),
                *_modes("batch 8", ("ar", "sjd", "mc-sjd"), n=8, batch_size=8),
            ),
        ),
        Section(
            "shapes-sjd2",
            "built-in model fine-tuned for SJD2 (float32)",
            90,
            model="shapes-sjd2",
            runs=_modes("batch 1", ("ar", "sjd2"), n=shapes_n),
        ),
        Section(
            "shapes-engine",
            "built-in model through the engine, 8 requests at a time (float32, captured steps)",
            120,
            model="shapes",
            throughput=ThroughputRun(("ar", "sjd", "mc-sjd", "adaptive"), (8,), n=16 if quick else 32),
        ),
        Section(
            "graph-floor", "minimal decoder of Lumina-mGPT-7B shapes (graph floor)", 90, floor=LUMINA_FLOOR
        ),
        Section(
            "lumina-mgpt-7b",
            "Lumina-mGPT-7B architecture, random weights (bfloat16)",
            300 if quick else 420,
            arch="lumina-mgpt-7b-768",
            runs=(
                *_modes(f"{small} px", LUMINA_SAMPLERS, ("ar", "sjd"), size=small),
                _compiled(f"{small} px", ("ar", "sjd", "sjd-pac"), size=small),
                *(
                    ()
                    if quick
                    else (
                        BenchRun("768 px cuda-graphs", ("ar",), size=768, warmup=False),
                        _compiled("768 px", ("ar",), size=768),
                    )
                ),
            ),
        ),
        Section(
            "janus-pro-7b",
            "Janus-Pro-7B architecture, random weights (bfloat16)",
            200,
            arch="janus-pro-7b",
            size=small,
            runs=(*_modes(f"{small} px", ("ar", "sjd")), _compiled(f"{small} px", ("ar", "sjd"))),
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
            240,
            arch="janus-pro-7b",
            size=small,
            throughput=ThroughputRun(("ar", "mc-sjd", "adaptive"), (1, 8) if quick else (1, 8, 32), n=4),
        ),
    )


def _mode_targets(mode: str, quick: bool) -> list[Target]:
    """The speed targets, read from the runs of one captured mode ("cuda-graphs" or "inductor-graphs")."""
    small = f"{256 if quick else 384} px {mode}"
    graphs = f"batch 1 {mode}"
    tag = f" [{mode}]"
    targets = []
    if not quick:  # the quick suite has no 768-px run
        targets.append(
            Target(
                f"Lumina-mGPT-7B 768 px: `ar` ms / forward over the graph floor (1 query){tag}",
                Figure("lumina-mgpt-7b", f"768 px {mode}", "ar", "ms_per_forward"),
                1.25,
                per=Figure("graph-floor", "floor", "1", "graph_ms"),
            )
        )
    targets += [
        Target(
            f"Lumina-mGPT-7B: `sjd` window forward over an `ar` forward (replayed steps){tag}",
            Figure("lumina-mgpt-7b", small, "sjd", "ms_per_replay"),
            1.25,
            per=Figure("lumina-mgpt-7b", small, "ar", "ms_per_replay"),
        ),
        Target(
            f"Lumina-mGPT-7B: `sjd-pac` 64-input forward over an `ar` forward (replayed steps){tag}",
            Figure("lumina-mgpt-7b", small, "sjd-pac", "ms_per_replay"),
            1.4,
            per=Figure("lumina-mgpt-7b", small, "ar", "ms_per_replay"),
        ),
        Target(
            f"Janus-Pro-7B: `ar` ms / forward{tag}",
            Figure("janus-pro-7b", small, "ar", "ms_per_forward"),
            8.0,
            unit=" ms",
        ),
    ]
    if mode != "cuda-graphs":  # compiled layers are for the real-size models; the built-in run informs
        return targets
    targets.append(
        Target(
            f"built-in: `ar` ms / forward{tag}",
            Figure("shapes", graphs, "ar", "ms_per_forward"),
            2.0,
            unit=" ms",
        )
    )
    targets += [
        Target(
            f"built-in `{s}`: latency speedup / step compression{tag}",
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
    return targets


def _images_per_second_over_ar(name: str, section: str, run: str, sampler: str) -> Target:
    """At least twice `ar`'s images per second, `ar` measured in the same run."""
    return Target(
        name,
        Figure(section, run, sampler, "images_per_second"),
        2.0,
        per=Figure(section, run, "ar", "images_per_second"),
        at_least=True,
    )


def _gpu_targets(quick: bool) -> tuple[Target, ...]:
    return (
        *(target for mode in CAPTURED for target in _mode_targets(mode, quick)),
        _images_per_second_over_ar(
            "built-in, batch 8: `sjd` images / s over `ar` images / s [cuda-graphs]",
            "shapes",
            "batch 8 cuda-graphs",
            "sjd",
        ),
        _images_per_second_over_ar(
            "built-in engine, 8 requests at a time: `adaptive` images / s over `ar` images / s",
            "shapes-engine",
            "concurrency 8",
            "adaptive",
        ),
    )


# -- the proof suite: the GPU-proof issue's sections, in its order ------------------------------------------

PROOF_SIZES = {"janus-pro-7b": 384, "lumina-mgpt-7b": 768}


def default_mode() -> str:
    """The mode `pipe(...)` runs in on a CUDA device when the caller names none ("none": eager steps)."""
    from dataclasses import fields

    import torch

    from ...pipelines.inputs import GenerationInputs
    from ...session.capture import compile_mode

    default = next(f.default for f in fields(GenerationInputs) if f.name == "compile")
    return compile_mode(default, torch.device("cuda"))


def _three_modes(label: str, samplers: tuple[str, ...], **kwargs: Any) -> tuple[BenchRun, ...]:
    """Eager steps (the comparison and the codes), captured ones, then compiled layers inside captured steps.
    The eager run goes last: at real size it is the slowest, and a section stopped at its limit keeps the
    runs it finished."""
    eager, graphs = _modes(label, samplers, **kwargs)
    return graphs, _compiled(label, samplers, **{k: v for k, v in kwargs.items() if k != "profile"}), eager


def _proof_sections() -> tuple[Section, ...]:
    janus, lumina = PROOF_SIZES["janus-pro-7b"], PROOF_SIZES["lumina-mgpt-7b"]
    return (
        Section(
            "shapes",
            "built-in model (8.6 M parameters, float32), each mode",
            150,
            model="shapes",
            runs=_three_modes("batch 1", BUILTIN_SAMPLERS, n=4, profile=("ar", "sjd")),
        ),
        Section(
            "shapes-engine",
            "built-in model through the engine at 1 and 8 requests at a time (float32, captured steps)",
            150,
            model="shapes",
            throughput=ThroughputRun(("ar", "mc-sjd", "adaptive"), (1, 8), n=16),
        ),
        Section(
            "graph-floor", "minimal decoder of Lumina-mGPT-7B shapes (graph floor)", 60, floor=LUMINA_FLOOR
        ),
        Section(
            "janus-pro-7b",
            "Janus-Pro-7B architecture, random weights (bfloat16), each mode",
            150,
            arch="janus-pro-7b",
            size=janus,
            runs=_three_modes(f"{janus} px", ("ar", "sjd")),
        ),
        Section(
            "lumina-mgpt-7b",
            "Lumina-mGPT-7B architecture at 768 px, random weights (bfloat16), each mode",
            300,
            arch="lumina-mgpt-7b-768",
            runs=(  # no untimed first call where nothing compiles: one 768-px decode is 2,352 steps
                BenchRun(f"{lumina} px cuda-graphs", ("ar",), size=lumina, warmup=False),
                _compiled(f"{lumina} px", ("ar",), size=lumina),
                BenchRun(f"{lumina} px eager", ("ar",), compile="none", size=lumina, warmup=False),
            ),
        ),
    )


def _proof_targets() -> tuple[Target, ...]:
    janus, lumina = PROOF_SIZES["janus-pro-7b"], PROOF_SIZES["lumina-mgpt-7b"]
    default = default_mode()
    shown = {"none": "eager"}.get(default, default)
    modes = (*CAPTURED, "eager")
    targets: list[Target] = [
        Target(
            f"built-in `{sampler}`: images / s of the default mode ({shown}) over eager's",
            Figure("shapes", f"batch 1 {shown}", sampler, "images_per_second"),
            2.0,
            per=Figure("shapes", "batch 1 eager", sampler, "images_per_second"),
            at_least=True,
        )
        for sampler in ("ar", "sjd")
    ]
    targets += [
        Target(
            f"built-in `sjd`: latency speedup / step compression [{mode}]",
            Figure("shapes", f"batch 1 {mode}", "sjd", "latency_speedup"),
            0.7,
            per=Figure("shapes", f"batch 1 {mode}", "sjd", "step_compression"),
            at_least=True,
        )
        for mode in modes
    ]
    targets += [
        Target(
            f"built-in engine, {c} request(s) at a time: `adaptive` images / s over `ar`'s",
            Figure("shapes-engine", f"concurrency {c}", "adaptive", "images_per_second"),
            limit,
            per=Figure("shapes-engine", f"concurrency {c}", "ar", "images_per_second"),
            at_least=True,
        )
        for c, limit in ((1, 2.0), (8, 1.0))
    ]
    targets += [
        Target(
            f"Lumina-mGPT-7B {lumina} px: `ar` ms / forward over the graph floor (1 query) [{mode}]",
            Figure("lumina-mgpt-7b", f"{lumina} px {mode}", "ar", "ms_per_forward"),
            1.25,
            per=Figure("graph-floor", "floor", "1", "graph_ms"),
        )
        for mode in modes
    ]
    targets += [
        Target(
            f"Janus-Pro-7B {janus} px: `ar` ms / forward [{mode}] (the limit is an H100's)",
            Figure("janus-pro-7b", f"{janus} px {mode}", "ar", "ms_per_forward"),
            8.0,
            unit=" ms",
        )
        for mode in modes
    ]
    return tuple(targets)


SUITES: dict[str, Suite] = {
    "gpu": Suite(
        "gpu",
        "captured decode step and real-size speed on one GPU",
        _gpu_sections(False),
        _gpu_targets(False),
        budget_s=540,
    ),
    "gpu-quick": Suite(
        "gpu-quick", "the gpu suite at smaller sizes", _gpu_sections(True), _gpu_targets(True), budget_s=240
    ),
    "gpu-proof": Suite(
        "gpu-proof",
        "the default path, the engine and the real sizes on one GPU (the GPU-proof issue's sections)",
        _proof_sections(),
        _proof_targets(),
        budget_s=420,
    ),
}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; choose one of {', '.join(SUITES)}")
    return SUITES[name]


# -- running ---------------------------------------------------------------------------------------------
