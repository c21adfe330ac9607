"""Golden codes: every sampler on every family's tiny pipeline and on the built-in models, fixed seeds,
batches of three, compared code for code with `golden_codes.json`.

The statistical tests say a sampler has the right distribution; this one says a change that should alter
nothing (a refactor, a faster kernel of the same maths) altered nothing. The file was written by
`PYTHONPATH=tests python tests/samplers/test_golden.py`; write it again only for a change that is meant to
change codes, and say so in the commit. A new sampler's cases are added with `--new`, which decodes only the
cases the file lacks and keeps every other line byte for byte.

Every case decodes in float64. In float32 the CPU's kernels (AVX2, AVX-512, AMX, or the default ones)
round matrix products differently, one probability lands on the other side of a uniform draw, and that
flipped code changes every later one: float32 codes depend on the machine's instruction set. In float64
the kernels differ by about 1e-16 instead of 1e-7, too little to move any case's probabilities across its
draws: the codes are the same with torch's native kernels (AVX-512 and AMX), `ATEN_CPU_CAPABILITY=default`
and `ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2`, on one and two
threads. That float32 decodes draw the distribution float64 ones draw is the last tests' job: a comparison
of distributions, not of bits.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch

import arjet
from arjet.addons.noise import NoiseConditioning
from arjet.testing import tiny_drafter, tiny_pipeline

from families import guided
from stats import drawn, two_sample_p_value

GOLDEN = Path(__file__).with_name("golden_codes.json")
DTYPE = torch.float64  # codes independent of the CPU's instruction set (see above)
PROMPTS = ["a red circle left of a blue square", "a green triangle"]
SEEDS = [11, 12, 13]  # three images: the first prompt twice, then the second (batch > 1, mixed prompts)
TINY_GRIDS = {"janus": (4, 4), "emu3": (3, 5), "lumina_mgpt": (3, 5), "glm_image": (3, 5)}
SAMPLING = {  # name -> pipe(...) keyword arguments shaping the target distribution
    "cfg": dict(guidance_scale=3.0, temperature=0.9, top_k=8),
    "top_p": dict(guidance_scale=2.0, temperature=1.1, top_p=0.7),
    "greedy": dict(guidance_scale=3.0, temperature=0.0),
}  # a family without CFG (GLM-Image) decodes the same settings unguided
# specs on the tiny pipelines: every registered name at its defaults, then the paths defaults do not take
TINY_SPECS = [
    ("ar", "cfg"),
    ("sjd", "cfg"),
    ("mc-sjd", "cfg"),
    ("sjd:window=4,init=repeat_vertical", "cfg"),
    ("sjd:init=sample_horizontal,coupling=true", "top_p"),
    ("sjd:window=5,init=repeat_horizontal", "greedy"),
    ("sjd-pac", "cfg"),
    ("sjd-pac:window=9,tree_width=2,tree_depth=3,init=sample_vertical", "cfg"),
    ("sjd-pac:window=7,tree_depth=2,coupling=false", "top_p"),
    ("sjd2", "cfg"),
    ("sjd2:window=8,levels=2,coupling=false", "cfg"),
    ("zipar", "cfg"),
    ("zipar:w=2", "cfg"),
    ("zipar:w=3,schedule=llamagen", "cfg"),
    ("zipar+sjd:w=3,window=4", "cfg"),
    ("zipar+sjd:w=2,window=3,coupling=true,init=sample_vertical", "top_p"),
    ("lantern", "cfg"),
    ("lantern:k=4,delta=0.3", "cfg"),
    ("lantern:k=4,delta=0.3", "greedy"),
    ("lantern:k=4,lam=2,bound=tv", "cfg"),
    ("zipar+lantern:w=2,window=4,k=4", "cfg"),
    ("eagle", "cfg"),
    ("eagle:window=6,tree_width=2,tree_depth=2", "top_p"),
    ("eagle:window=8,tree_width=2", "greedy"),
    ("eagle:chain=jacobi,window=9,tree_width=2", "cfg"),
    ("lantern++", "cfg"),
    ("lantern++:drafter=true,k=4,lam=2", "cfg"),
    ("lantern:drafter=true,tree_width=3,expand=2,tree_depth=4,k=4,delta=0.3", "cfg"),
    ("eagle2", "cfg"),
    ("eagle2:tree_width=2,expand=2,tree_depth=3", "top_p"),
    ("eagle2:tree_width=3,expand=1,tree_depth=4", "greedy"),
    ("gsd", "cfg"),
    ("gsd:window=5,group=4,prob_gap=0.3", "top_p"),
    ("sjd:acceptance=entropy", "cfg"),
    ("mc-sjd:acceptance=entropy", "top_p"),
    ("cool-sd", "cfg"),
    ("cool-sd:delta=2", "top_p"),
    ("mc-sjd:coupling=gumbel", "cfg"),
    ("mc-sjd:coupling=gumbel,window=4,init=sample_horizontal", "top_p"),
    ("sjd:reuse=0.5", "cfg"),
    ("sjd:window=5,reuse=2", "top_p"),
    ("pjd", "cfg"),
    ("pjd:c=2,window=4,keep=1,init=repeat_horizontal", "top_p"),
]
BUILTIN_SPECS = {
    "shapes": ["ar", "sjd", "mc-sjd", "sjd-pac", "zipar", "zipar+sjd", "lantern", "lantern:bound=tv"],
    "shapes-sjd2": ["sjd2"],
}


@functools.cache
def _tiny(family: str):
    pipe = tiny_pipeline(family, grid=TINY_GRIDS[family], vocab_size=16, logit_scale=3.0, dtype=DTYPE)
    hidden = pipe.session_adapter().embed_codes(torch.zeros(1, 1, dtype=torch.long)).shape[-1]
    with torch.random.fork_rng():
        torch.manual_seed(0)
        noise = NoiseConditioning(hidden_size=hidden, levels=4)
        torch.nn.init.normal_(noise.level_mlp[-1].weight, std=0.5)  # untrained but active
    pipe.register_modules(noise_conditioning=noise.to(DTYPE))
    return tiny_drafter(pipe, fc_scale=3.0)


@functools.cache
def _builtin(name: str):
    pipe = arjet.load(name, dtype=DTYPE)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _cases() -> list[tuple[str, str, str]]:
    tiny = [(family, spec, sampling) for family in TINY_GRIDS for spec, sampling in TINY_SPECS]
    builtin = [(name, spec, "builtin") for name, specs in BUILTIN_SPECS.items() for spec in specs]
    return tiny + builtin


def _key(model: str, spec: str, sampling: str) -> str:
    return f"{model} | {spec} | {sampling}"


def _codes(model: str, spec: str, sampling: str) -> list[list[int]]:
    if sampling == "builtin":
        pipe, kwargs = _builtin(model), {}
    else:
        pipe, kwargs = _tiny(model), SAMPLING[sampling]
        if not guided(model):
            kwargs = {**kwargs, "guidance_scale": None}
    out = pipe([PROMPTS[0], PROMPTS[0], PROMPTS[1]], sampler=spec, seed=SEEDS, output_type="latent", **kwargs)
    return drawn(out).tolist()  # a preview grid's codes first (GLM-Image)


@functools.cache
def _golden() -> dict[str, list[list[int]]]:
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize(("model", "spec", "sampling"), _cases(), ids=lambda v: str(v))
def test_codes_equal_the_golden_codes(model, spec, sampling):
    expected = _golden()[_key(model, spec, sampling)]
    assert _codes(model, spec, sampling) == expected


def test_the_golden_file_covers_every_registered_sampler_and_nothing_stale():
    covered = {spec.split(":")[0] for _, spec, _ in _cases()}
    assert covered == set(arjet.samplers.available())
    assert set(_golden()) == {_key(*case) for case in _cases()}


# -- the paper names are aliases of one canonical spec: it decodes their golden codes ----------------------
CANONICAL = {  # every alias spec of a golden case -> the canonical spec it expands to (samplers/registry.py)
    "mc-sjd": "sjd:coupling=true",
    "lantern": "sjd+lantern",
    "lantern:k=4,delta=0.3": "sjd+lantern:k=4,delta=0.3",
    "lantern:k=4,lam=2,bound=tv": "sjd+lantern:k=4,lam=2,bound=tv",
    "lantern:bound=tv": "sjd+lantern:bound=tv",
    "lantern:drafter=true,tree_width=3,expand=2,tree_depth=4,k=4,delta=0.3": (
        "eagle2+lantern:tree_width=3,expand=2,tree_depth=4,k=4,delta=0.3"
    ),
    "lantern++": "sjd-pac+lantern",
    "lantern++:drafter=true,k=4,lam=2": "eagle+lantern:k=4,lam=2",
    "zipar+lantern:w=2,window=4,k=4": "zipar+sjd+lantern:w=2,window=4,k=4",
    "mc-sjd:acceptance=entropy": "sjd+entropy:coupling=true",
    "gsd": "sjd+gsd",
    "gsd:window=5,group=4,prob_gap=0.3": "sjd+gsd:window=5,group=4,prob_gap=0.3",
    "cool-sd": "eagle+cool-sd",
    "cool-sd:delta=2": "eagle+cool-sd:delta=2",
}
ALIASES = {"mc-sjd", "lantern", "lantern++", "zipar+lantern", "gsd", "cool-sd"}
COMPOSITES = {"sjd+lantern", "eagle2+lantern", "sjd-pac+lantern", "eagle+lantern", "zipar+sjd+lantern"}
COMPOSITES |= {"sjd+entropy", "sjd+gsd", "eagle+cool-sd"}


def _alias_cases() -> list[tuple[str, str, str]]:
    return [case for case in _cases() if case[1] in CANONICAL]


@pytest.mark.parametrize(("model", "spec", "sampling"), _alias_cases(), ids=lambda v: str(v))
def test_the_canonical_spec_decodes_its_aliases_golden_codes(model, spec, sampling):
    """`lantern` is `sjd+lantern`, `lantern++:drafter=true` is `eagle+lantern`, ...: the same codes, read
    from the alias's own golden key (the file has no keys for canonical specs)."""
    assert _codes(model, CANONICAL[spec], sampling) == _golden()[_key(model, spec, sampling)]


def test_every_alias_case_has_its_canonical_spec_and_every_composite_is_decoded():
    """(`mc-sjd` with the maximal coupling is `sjd:coupling=true`; its Gumbel coupling is a method of its own.)"""
    aliased = {spec for _, spec, _ in _cases() if spec.split(":")[0] in ALIASES and "gumbel" not in spec}
    assert aliased == set(CANONICAL)
    assert {spec.split(":")[0] for spec in CANONICAL.values()} == COMPOSITES | {"sjd"}


# -- float32 decodes, compared in distribution ----------------------------------------------------------
FLOAT32_SPECS = ["ar", "sjd", "sjd-pac", "lantern"]
FLOAT32_DRAWS = 1000  # images per sample: enough to tell temperature 0.9 from 1.3 (the negative control)
FLOAT32_SAMPLING = dict(guidance_scale=3.0, temperature=0.9)
FLOAT32_SEEDS = {torch.float32: 0, torch.float64: 10**6}  # disjoint seeds: the two samples are independent


@functools.cache
def _tiny_in(dtype: torch.dtype):
    return tiny_pipeline("janus", grid=(2, 2), vocab_size=8, logit_scale=3.0, dtype=dtype)  # same weights


@functools.cache
def _sample(dtype: torch.dtype, spec: str, temperature: float) -> torch.Tensor:
    """`[FLOAT32_DRAWS, 4]` codes of the tiny Janus model decoded in `dtype`."""
    sampling = {**FLOAT32_SAMPLING, "temperature": temperature}
    prompts = [PROMPTS[0]] * FLOAT32_DRAWS
    out = _tiny_in(dtype)(prompts, sampler=spec, seed=FLOAT32_SEEDS[dtype], output_type="latent", **sampling)
    return out.codes.flatten(1)


@pytest.mark.parametrize("spec", FLOAT32_SPECS)
def test_float32_decodes_draw_the_float64_distribution(spec):
    temperature = FLOAT32_SAMPLING["temperature"]
    p = two_sample_p_value(
        _sample(torch.float32, spec, temperature), _sample(torch.float64, spec, temperature)
    )
    assert p > 1e-3


def test_the_float32_comparison_detects_a_different_temperature():
    """Negative control: float64 decodes at temperature 1.3 instead of 0.9 are told apart (p ~ 1e-16)."""
    first = _sample(torch.float32, "sjd", FLOAT32_SAMPLING["temperature"])
    assert two_sample_p_value(first, _sample(torch.float64, "sjd", 1.3)) < 1e-6


if __name__ == "__main__":
    # `--new`: add the cases the file lacks (a new sampler) and keep every existing line as it is
    import sys

    torch.set_num_threads(min(2, torch.get_num_threads()))
    known = _golden() if "--new" in sys.argv[1:] else {}
    rows = [
        f"{json.dumps(_key(*case))}: {json.dumps(known.get(_key(*case)) or _codes(*case))}"
        for case in _cases()
    ]
    GOLDEN.write_text("{\n" + ",\n".join(rows) + "\n}\n")  # one line per case: diffs name the case
    print(f"wrote {len(_cases())} cases to {GOLDEN} ({sum(_key(*c) not in known for c in _cases())} decoded)")
