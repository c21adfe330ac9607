"""The package face: public names and parts on first use, `dir(arjet)` without helper imports."""

import subprocess
import sys

import pytest

import arjet


@pytest.mark.parametrize(
    "part", ["testing", "data", "eval", "pipelines", "presets", "vq", "session", "addons"]
)
def test_parts_are_attributes_after_a_bare_import(part):
    """`import arjet; arjet.testing.tiny_pipeline(...)` as the README writes it, in a fresh interpreter
    where nothing has imported the part before."""
    probe = f"import arjet\nprint(arjet.{part}.__name__)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"arjet.{part}"


def test_every_listed_part_resolves_and_unknown_names_are_attribute_errors():
    for part in arjet.SUBMODULES:
        assert getattr(arjet, part).__name__ == f"arjet.{part}"
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        arjet.nope  # noqa: B018


def test_dir_shows_the_public_names_and_parts_only():
    listed = dir(arjet)
    assert {"Any", "TYPE_CHECKING", "annotations", "typing"}.isdisjoint(listed)
    assert set(arjet.__all__) | {"testing", "data", "eval", "__version__"} <= set(listed)
    assert [name for name in listed if not name.startswith("__")] == sorted(
        {*arjet.__all__, *arjet.SUBMODULES}
    )


def test_importing_the_models_with_torchao_installed_prints_nothing():
    """transformers and diffusers import torchao (the `quant` extra) when it is installed; its deprecation
    lines would open every command's stderr. arjet filters exactly those lines, nothing else."""
    pytest.importorskip("torchao")
    code = (
        "import arjet, logging\n"
        "from transformers import LlamaModel\n"
        "from diffusers import AutoencoderKL\n"
        "logging.getLogger('torch.utils._pytree').warning('another pytree warning')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()  # torch's log format: `W1129 12:00:00.000 pid file:line] text`
    assert len(lines) == 1 and lines[0].endswith("] another pytree warning"), done.stderr
