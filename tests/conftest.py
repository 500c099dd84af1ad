"""Session fixtures: one Ray + Serve cluster with real tiny vLLM engines for the whole test run."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
TINY_POLICY = TESTS.parent / "policies" / "examples" / "tiny.yaml"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def served_policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The serving cluster's policy file: a copy of policies/examples/tiny.yaml that live-reload tests may edit."""
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    shutil.copy(TINY_POLICY, path)
    return path


@pytest.fixture(scope="session")
def serving_cluster(served_policy_file: Path) -> Iterator[object]:
    """thinktier on real Ray Serve with two real vLLM tiers of the tiny random-weight model."""
    from cluster.local import LocalCluster

    cluster = LocalCluster(served_policy_file, port=free_port(), num_cpus=2, progress=lambda line: print(f"[cluster] {line}"))
    cluster.start(timeout_s=600)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def serving_url(serving_cluster: object) -> str:
    return serving_cluster.url  # type: ignore[attr-defined]
