"""The distribution a user installs: one import package, `thinktier`, holding every layer and its data files."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("cli", "cluster", "deployments", "loadtest", "policies", "training")
IGNORED = shutil.ignore_patterns("__pycache__", "results")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from a copy of the working tree (setuptools' build/ folder would carry stale modules)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md", "thinktier", *LAYERS):
        copy = shutil.copytree if (ROOT / name).is_dir() and not (ROOT / name).is_symlink() else shutil.copy
        copy(ROOT / name, source / name, **({"symlinks": True, "ignore": IGNORED} if copy is shutil.copytree else {}))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(out),
         str(source)],
        check=True, capture_output=True, cwd=out,
    )
    (built,) = out.glob("thinktier-*.whl")
    return built


def test_the_wheel_installs_one_import_package_with_every_module_and_data_file(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = "-".join(wheel.name.split("-")[:2]) + ".dist-info"
    assert {name.split("/")[0] for name in names} == {"thinktier", dist_info}
    in_source = {p.name for p in (ROOT / "thinktier").glob("*.py")}
    in_source |= {p.relative_to(ROOT).as_posix() for layer in LAYERS for p in (ROOT / layer).rglob("*.py")}
    assert {name.removeprefix("thinktier/") for name in names if name.endswith(".py")} == in_source
    assert "thinktier/policies/default.yaml" in names
    assert "thinktier/deployments/classifier/artifacts/difficulty-v5.json" in names
    assert "thinktier/training/data/chat_prompts.json" in names
    assert "thinktier/deployments/tier/artifacts/reasoner-small/model.safetensors" in names


def test_an_empty_virtualenv_imports_thinktier_from_the_wheel_and_gets_no_generic_top_level_modules(
    wheel: Path, tmp_path: Path
) -> None:
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)], check=True, capture_output=True)
    probe = (
        "import importlib.util, thinktier\n"
        "print(thinktier.__version__)\n"
        "print(sorted(n for n in ('cli', 'cluster', 'deployments', 'policies', 'loadtest', 'training')"
        " if importlib.util.find_spec(n)))\n"
    )
    shown = subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path).stdout.split("\n")
    assert shown[:2] == ["0.1.0", "[]"]
