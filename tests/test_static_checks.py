"""The repository passes its linter and its type checker, configured in pyproject.toml ([tool.ruff], [tool.mypy]).

mypy checks the package `thinktier` (policies and deployments strictly); a cold run takes a minute or two, a run
with its cache (.mypy_cache) seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> Path:
    binary = Path(sys.executable).parent / name
    if not binary.exists():
        pytest.fail(f"{name} is not installed next to {sys.executable}; run scripts/bootstrap.sh")
    return binary


def _run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_finds_nothing() -> None:
    linted = _run(_tool("ruff"), "check", ".")
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_mypy_finds_nothing() -> None:
    checked = _run(_tool("mypy"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
