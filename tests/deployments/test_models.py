"""Builtin model folders and users: a model built by one user (root, at an image's build) serves another (the image's
user ray), and a folder that user cannot read is an error that says so, not a rebuild."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from thinktier.deployments.tier import models

OTHER_USER = 65534
"""nobody: the user that reads a folder root built, when the tests run as root."""

RESOLVE_AS_ANOTHER_USER = """
import os, sys
from thinktier.deployments.tier import models
def rebuilt(dest):
    raise AssertionError("rebuilt")
models.BUILDERS["tiny-random"] = rebuilt
if os.getuid() == 0:  # root reads everything: drop to nobody once Python has started (root's home holds it)
    os.setgid(int(sys.argv[1]))
    os.setuid(int(sys.argv[1]))
print(models.resolve_model("builtin:tiny-random"))
"""


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A THINKTIER_CACHE that another user can reach (pytest's tmp_path lies in a folder only its user can search)."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        monkeypatch.setenv("THINKTIER_CACHE", folder)
        yield Path(folder)


def _resolve_as_another_user() -> subprocess.CompletedProcess[str]:
    """resolve_model('builtin:tiny-random') as nobody when this runs as root (else as this user), with a builder that
    fails if it is called."""
    command = [sys.executable, "-c", RESOLVE_AS_ANOTHER_USER, str(OTHER_USER)]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)


def _built_folder(cache: Path) -> Path:
    folder = cache / "models" / "tiny-random"
    folder.mkdir(parents=True)
    (folder / "thinktier-model.json").write_text(json.dumps({"builtin": "tiny-random", "version": models.BUILD_VERSION}))
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


def test_a_model_folder_that_cannot_be_read_is_an_error_that_says_so_not_a_rebuild(cache: Path) -> None:
    folder = _built_folder(cache)
    folder.chmod(0o700 if os.getuid() == 0 else 0)  # root's mkdtemp folder, as the image's build left it
    mode = stat.filemode(folder.stat().st_mode)
    resolved = _resolve_as_another_user()
    folder.chmod(0o755)
    assert resolved.returncode == 1, resolved.stdout + resolved.stderr
    error = resolved.stderr.strip().splitlines()[-1]
    assert error.startswith(f"RuntimeError: the model folder of builtin:tiny-random, {folder}, cannot be read by this user")
    assert f"{folder} is owned by uid {os.getuid()} gid {os.getgid()} with mode {mode}" in error
    assert f"chmod -R a+rX {folder}" in error and "THINKTIER_CACHE" in error
    assert "rebuilt" not in resolved.stderr
    assert sorted(path.name for path in folder.iterdir()) == ["model.safetensors", "thinktier-model.json"]


def test_an_unreadable_file_in_a_model_folder_is_named(cache: Path) -> None:
    folder = _built_folder(cache)
    weights = folder / "model.safetensors"
    weights.chmod(0o600 if os.getuid() == 0 else 0)  # how safetensors writes them
    resolved = _resolve_as_another_user()
    assert resolved.returncode == 1, resolved.stdout + resolved.stderr
    mode = stat.filemode(weights.stat().st_mode)
    assert f"{weights} is owned by uid {os.getuid()} gid {os.getgid()} with mode {mode}" in resolved.stderr
    assert f"chmod -R a+rX {folder}" in resolved.stderr


def test_a_built_model_can_be_read_by_every_user(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def build(dest: Path) -> None:
        weights = dest / "model.safetensors"
        weights.write_bytes(b"weights")
        weights.chmod(0o600)  # as safetensors leaves them

    monkeypatch.setitem(models.BUILDERS, "tiny-random", build)
    folder = Path(models.resolve_model("builtin:tiny-random"))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in folder.iterdir()} == {
        "model.safetensors": 0o644, "thinktier-model.json": 0o644,
    }
    resolved = _resolve_as_another_user()
    assert resolved.returncode == 0 and resolved.stdout.strip() == str(folder), resolved.stderr


def test_the_small_reasoner_ships_in_the_package_and_the_large_one_says_how_to_train_it(cache: Path) -> None:
    small = Path(models.resolve_model("builtin:reasoner-small"))
    assert small == models.ARTIFACTS / "reasoner-small"
    config = json.loads((small / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]  # an architecture vLLM serves unchanged
    with pytest.raises(RuntimeError, match="thinktier train reasoner --size large --device cuda"):
        models.resolve_model("builtin:reasoner-large")
    trained = cache / "models" / "reasoner-large"
    trained.mkdir(parents=True)
    (trained / "config.json").write_text("{}")
    assert models.resolve_model("builtin:reasoner-large") == str(trained)
    with pytest.raises(ValueError, match="builtin:reasoner-small"):
        models.resolve_model("builtin:no-such")
