"""The map stays true: one SJD step runs code in exactly the files `docs/architecture.md` lists."""

import re
import sys
from pathlib import Path

import pytest

import arjet
from arjet.samplers import decode as decode_module
from arjet.testing import tiny_pipeline

PACKAGE = Path(arjet.__file__).parent
ARCHITECTURE = PACKAGE.parents[1] / "docs" / "architecture.md"
ADAPTERS = {"janus": "pipelines/janus.py", "emu3": "pipelines/vocab_adapter.py"}
ADAPTERS |= {"lumina_mgpt": ADAPTERS["emu3"], "glm_image": ADAPTERS["emu3"]}
JACOBI = str(PACKAGE / "samplers" / "jacobi.py")


def documented() -> tuple[set[str], set[str]]:
    """The step map's files: those every step visits, and the family adapters (one of which it visits)."""
    text = ARCHITECTURE.read_text()
    block = text[text.index("<!-- step-map -->") : text.index("<!-- /step-map -->")]
    shared, adapters = set(), set()
    for line in block.splitlines():
        if line.startswith("- the family's model adapter"):
            adapters |= set(re.findall(r"`([\w/]+\.py)`", line))
        elif line.startswith("- `"):
            shared.add(re.match(r"- `([\w/]+\.py)`", line).group(1))
    return shared, adapters


def trace_steady_step(family: str, monkeypatch, record) -> None:
    """Run an SJD decode with `record` as the profile function during a steady `Decode.advance` (the second)."""
    calls = []
    advance = decode_module.Decode.advance

    def traced(self, stepper, steps=1, *, unchecked=0):
        calls.append(steps)
        if len(calls) != 2:
            return advance(self, stepper, steps, unchecked=unchecked)
        sys.setprofile(record)
        try:
            return advance(self, stepper, steps, unchecked=unchecked)
        finally:
            sys.setprofile(None)

    monkeypatch.setattr(decode_module.Decode, "advance", traced)
    pipe = tiny_pipeline(family, grid=(8, 8), vocab_size=16)
    pipe.set_progress_bar_config(disable=True)
    pipe("a red circle", sampler="sjd:window=4,init=sample_vertical", seed=0, output_type="latent")
    assert len(calls) > 2, "the decode ended before a steady step"


def traced_step_files(family: str, monkeypatch) -> set[str]:
    """The arjet files whose code runs during a steady step of an SJD decode."""
    files: set[str] = set()

    def record(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(str(PACKAGE)):
            files.add(Path(frame.f_code.co_filename).relative_to(PACKAGE).as_posix())

    trace_steady_step(family, monkeypatch, record)
    return files


def traced_jacobi_chains(monkeypatch) -> set[tuple[str, ...]]:
    """Every chain of nested calls inside `samplers/jacobi.py` during a steady SJD step, outermost first."""
    chains: set[tuple[str, ...]] = set()

    def record(frame, event, arg):
        names = []
        while event == "call" and frame is not None and frame.f_code.co_filename == JACOBI:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        if names:
            chains.add(tuple(reversed(names)))

    trace_steady_step("janus", monkeypatch, record)
    return chains


@pytest.mark.parametrize("family", sorted(ADAPTERS))
def test_one_sjd_step_visits_the_documented_files(family, monkeypatch):
    shared, adapters = documented()
    assert len(shared) + 1 <= 6 and ADAPTERS[family] in adapters
    assert traced_step_files(family, monkeypatch) == shared | {ADAPTERS[family]}


def test_the_trace_sees_a_file_the_step_newly_calls(monkeypatch):
    """Negative control: a step that calls into one more file is caught."""
    from arjet.session import layout

    step = arjet.samplers.sjd.WindowStepper.step

    def step_with_a_detour(self):
        layout.ImageLayout((1, 1)).grid_offsets()
        step(self)

    monkeypatch.setattr(arjet.samplers.sjd.WindowStepper, "step", step_with_a_detour)
    assert "session/layout.py" in traced_step_files("janus", monkeypatch)


def test_the_steps_shared_pieces_are_at_most_two_levels_deep(monkeypatch):
    """The pieces a step calls in jacobi.py (verify, resample, redraft, guess) call at most one more level of
    them before a leaf helper: e.g. `guess -> fill_guesses -> random_codes`, never the old
    `guess_window -> guess -> fill_guesses -> random_codes`."""
    chains = traced_jacobi_chains(monkeypatch)
    assert {chain[0] for chain in chains} >= {"verify", "resample", "redraft", "guess"}
    assert max(len(chain) for chain in chains) <= 3, sorted(chains, key=len)[-1]


def test_the_chain_trace_sees_one_more_level(monkeypatch):
    """Negative control: a wrapper defined in jacobi.py around `guess` makes the drafts chain one level deeper."""
    from arjet.samplers import jacobi, sjd

    namespace = {"inner": jacobi.guess}
    exec(
        compile("def guess(*args, **kwargs):\n    return inner(*args, **kwargs)\n", JACOBI, "exec"), namespace
    )
    monkeypatch.setattr(sjd, "guess", namespace["guess"])
    assert max(len(chain) for chain in traced_jacobi_chains(monkeypatch)) == 4
