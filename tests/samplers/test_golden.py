"""Golden codes: every sampler on every family's tiny pipeline and on the built-in models, fixed seeds,
batches of three, compared code for code with `golden_codes.json`.

The statistical tests say a sampler has the right distribution; this one says a change that should alter
nothing (a refactor, a faster kernel of the same maths) altered nothing. The file was written by
`python tests/samplers/test_golden.py` before the samplers' interior was redesigned; write it again only
for a change that is meant to change codes, and say so in the commit.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch

import arjet
from arjet.session.noise import NoiseConditioning
from arjet.testing import tiny_drafter, tiny_pipeline

from families import guided
from stats import drawn

GOLDEN = Path(__file__).with_name("golden_codes.json")
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
]
BUILTIN_SPECS = {
    "shapes": ["ar", "sjd", "mc-sjd", "sjd-pac", "zipar", "zipar+sjd", "lantern", "lantern:bound=tv"],
    "shapes-sjd2": ["sjd2"],
}


@functools.cache
def _tiny(family: str):
    pipe = tiny_pipeline(family, grid=TINY_GRIDS[family], vocab_size=16, logit_scale=3.0)
    hidden = pipe.session_adapter().embed_codes(torch.zeros(1, 1, dtype=torch.long)).shape[-1]
    with torch.random.fork_rng():
        torch.manual_seed(0)
        noise = NoiseConditioning(hidden_size=hidden, levels=4)
        torch.nn.init.normal_(noise.level_mlp[-1].weight, std=0.5)  # untrained but active
    pipe.register_modules(noise_conditioning=noise)
    return tiny_drafter(pipe, fc_scale=3.0)


@functools.cache
def _builtin(name: str):
    pipe = arjet.load(name)
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


if __name__ == "__main__":
    torch.set_num_threads(min(2, torch.get_num_threads()))
    rows = [f"{json.dumps(_key(*case))}: {json.dumps(_codes(*case))}" for case in _cases()]
    GOLDEN.write_text("{\n" + ",\n".join(rows) + "\n}\n")  # one line per case: diffs name the case
    print(f"wrote {len(_cases())} cases to {GOLDEN}")
