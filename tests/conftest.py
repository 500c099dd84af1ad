"""Session fixtures: one Ray + Serve cluster with real tiny vLLM engines for the whole test run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
TINY_POLICY = TESTS / "policies" / "tiny.yaml"
SERVING_PORT = int(os.environ.get("THINKTIER_TEST_PORT", "18431"))


@pytest.fixture(scope="session")
def serving_cluster() -> Iterator[object]:
    """thinktier on real Ray Serve with two real vLLM tiers of the tiny random-weight model."""
    from cluster.local import LocalCluster

    cluster = LocalCluster(TINY_POLICY, port=SERVING_PORT, num_cpus=2, progress=lambda line: print(f"[cluster] {line}"))
    cluster.start(timeout_s=600)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def serving_url(serving_cluster: object) -> str:
    return serving_cluster.url  # type: ignore[attr-defined]
