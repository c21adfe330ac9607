"""Fixtures for the domain's data tests: the shared folder of public prompt sets."""

from __future__ import annotations

from pathlib import Path

import pytest

PROMPTS_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "prompts"


@pytest.fixture
def prompts_dir(monkeypatch) -> Path:
    if not (PROMPTS_DIR / "INDEX.md").is_file():
        pytest.skip(f"the shared prompt data is not at {PROMPTS_DIR}")
    monkeypatch.setenv("ARJET_PROMPTS_DIR", str(PROMPTS_DIR))
    return PROMPTS_DIR
