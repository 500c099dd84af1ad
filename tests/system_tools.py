"""System tools the tests run that pip cannot install: a missing one fails its test with the command that installs it."""

from __future__ import annotations

import shutil

import pytest

INSTALL = {
    tool: f"scripts/install_tools.sh (as root; or: apt-get install -y --no-install-recommends {package})"
    for tool, package in {
        "promtool": "prometheus", "prometheus": "prometheus", "buildah": "buildah", "mmdebstrap": "mmdebstrap",
    }.items()
}


def system_tool(name: str) -> str:
    """The path of `name`; fails the calling test, saying how to install it, when it is not on PATH."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; install it with {INSTALL[name]}")
    return path
