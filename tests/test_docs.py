"""The documentation holds together: the site builds with `mkdocs build --strict` (every page in the nav
exists, every internal link and anchor resolves, the API reference renders from the docstrings), and no
page, nor the README, cites a path outside the repository or one that is not there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(path for path in DOCS.rglob("*.md") if "plans" not in path.relative_to(DOCS).parts)
TEXTS = [ROOT / "README.md", ROOT / "mkdocs.yml", *PAGES]

# where this repository's own files live: a path in a code span that starts with one of these must exist
TOP_FOLDERS = ("src/", "tests/", "scripts/", "artifacts/", "docs/", "examples/", ".ci/")
# places on one machine that no reader has
OUTSIDE = re.compile(r"\.\./shared|/work/|/home/|/root/|/tmp/|file://")
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\s]+)`")


def outside_places(text: str) -> list[str]:
    return sorted({match.group(0) for match in OUTSIDE.finditer(text)})


def missing_paths(text: str) -> list[str]:
    """The repository paths a text names in code spans that are not in the repository."""
    missing = []
    for name in CODE_SPAN.findall(text):
        name = name.rstrip(".,:;")
        placeholder = "*" in name or "<" in name  # a pattern (`artifacts/<stage>`), not a file
        if name.startswith(TOP_FOLDERS) and not placeholder and not (ROOT / name).exists():
            missing.append(name)
    return missing


@pytest.mark.parametrize("path", TEXTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_page_cites_a_place_outside_the_repository(path):
    found = outside_places(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)} cites {found}"


@pytest.mark.parametrize("path", TEXTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_repository_path_a_page_names_exists(path):
    missing = missing_paths(path.read_text(encoding="utf-8"))
    assert not missing, f"{path.relative_to(ROOT)} names {missing}, which are not in the repository"


def test_every_link_of_the_readme_resolves_inside_the_repository():
    """The README is the repository's front page (GitHub renders it), outside the site: its relative links
    are checked here, the site's by `mkdocs build --strict`."""
    broken = []
    for target in LINK.findall((ROOT / "README.md").read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "#")):
            continue
        resolved = (ROOT / target.split("#")[0]).resolve()
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(target)
    assert not broken


def test_the_checks_find_what_they_look_for():
    """Negative controls: what each check must catch, and what it must let through."""
    assert outside_places("see /work/shared/docs/models.md and [notes](../shared/docs/x.md)") == [
        "../shared",
        "/work/",
    ]
    assert missing_paths("the map is in `docs/nowhere.md`, the table in `docs/architecture.md`.") == [
        "docs/nowhere.md"
    ]
    assert missing_paths("logs under `artifacts/<stage>`, `--out /models/x`") == []


def test_the_fast_lanes_table_names_only_tests_that_exist(pytestconfig):
    """Contributing's fast lane is `tests/conftest.py`'s table: a renamed or moved test must not silently
    fall back into the fast lane."""
    # the module pytest loaded (`import conftest` may find another folder's conftest.py first)
    tests = ROOT / "tests"
    (conftest,) = [
        plugin
        for plugin in pytestconfig.pluginmanager.get_plugins()
        if getattr(plugin, "__file__", None) == str(tests / "conftest.py")
    ]
    stale = []
    for entry in sorted(conftest.SLOW):
        path, _, name = entry.partition("::")
        file = tests / path
        if not file.is_file() or (name and not re.search(rf"^def {name}\(", file.read_text(), re.M)):
            stale.append(entry)
    assert not stale


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # no end-of-life banner in the output
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("index.html", "samplers/sjd/index.html", "api/samplers/index.html", "eval/index.html"):
        assert (tmp_path / "site" / page).is_file()
    # the API reference is rendered from the docstrings, not left as `::: name` lines
    api = (tmp_path / "site" / "api" / "samplers" / "index.html").read_text(encoding="utf-8")
    assert ":::" not in api and "SJD" in api
