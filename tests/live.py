"""Helpers of the tests against the running service: `thinktier up` as a user runs it, policy edits, state over HTTP."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port

THINKTIER = Path(sys.executable).parent / "thinktier"
"""The installed console script beside this interpreter (.venv/bin/thinktier): what bootstrap gives a new user."""


def start_up(*args: str, open_files: int | None = None) -> subprocess.Popen[str]:
    """`thinktier up ARGS`, optionally under an open-files limit (soft and hard) of `open_files`."""
    limit = None if open_files is None else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    return subprocess.Popen(
        [str(THINKTIER), "up", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env=os.environ | {"PYTHONUNBUFFERED": "1"}, preexec_fn=limit,
    )


@contextmanager
def thinktier_up(*args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`thinktier up ARGS` on a free port, once /readyz answers; stopped with Ctrl-C afterwards unless it has exited."""
    port = free_port()
    proc = start_up(*args, "--port", str(port))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 900
    try:
        while True:
            if proc.poll() is not None:
                assert proc.stdout is not None
                pytest.fail(f"thinktier up exited with {proc.returncode} before it was ready:\n{proc.stdout.read()}")
            if time.monotonic() > deadline:
                pytest.fail("thinktier up was not ready after 900 s")
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        yield url, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.communicate(timeout=120)  # reads what it prints while stopping: wait() on a full pipe would block
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def eventually(check: Callable[[], bool], what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def merged(base: dict[str, Any], edits: dict[str, Any]) -> dict[str, Any]:
    """`base` with `edits` laid over it, sections merged key by key."""
    out = dict(base)
    for key, value in edits.items():
        inner = base.get(key)
        out[key] = merged(inner, value) if isinstance(value, dict) and isinstance(inner, dict) else value
    return out


@contextmanager
def policy_edit(path: Path, edits: dict[str, Any], applied: Callable[[], bool]) -> Iterator[None]:
    """The served policy with `edits` merged in until the block ends, then the original again. The watcher applies a
    file once two polls read the same content, so `applied` is polled until it holds."""
    original = path.read_text()
    path.write_text(yaml.safe_dump(merged(yaml.safe_load(original), edits)))
    try:
        eventually(applied, f"the policy edit {edits} never applied")
        yield
    finally:
        path.write_text(original)


def in_flight(url: str, headers: dict[str, str] | None = None) -> dict[str, float]:
    """thinktier_tenant_requests_in_flight by tenant, from /metrics."""
    text = httpx.get(f"{url}/metrics", headers=headers or {}, timeout=30).text
    prefix = "thinktier_tenant_requests_in_flight{tenant="
    return {ln.split('"')[1]: float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(prefix)}


def scraped(url: str, sample: str, headers: dict[str, str] | None = None, **labels: str) -> float:
    """The sum of /metrics samples named `sample` (e.g. thinktier_requests_total) whose labels include `labels`."""
    text = httpx.get(f"{url}/metrics", headers=headers or {}, timeout=30).text
    return sum(
        s.value for family in text_string_to_metric_families(text) for s in family.samples
        if s.name == sample and labels.items() <= s.labels.items()
    )


def engines_busy(url: str) -> dict[str, float]:
    """What the tier replicas' engines hold, summed over replicas (from /metrics): running and waiting requests, and
    KV occupancy; all 0 when idle."""
    names = ("thinktier_requests_running", "thinktier_requests_waiting", "thinktier_kv_cache_occupancy_ratio")
    return {name.removeprefix("thinktier_"): scraped(url, name) for name in names}


@contextmanager
def synthetic_app(serve_port: int, policy_dir: Path, name: str, edits: dict[str, Any], tokens_per_s: float) -> Iterator[str]:
    """The real Ingress and LoadBoard in front of synthetic tiers (loadtest/bench/frontdoor/synthetic_tier.py: tokens at a
    set rate, no model), deployed with the deployment options of policies/examples/tiny.yaml with `edits` into the session's Serve
    as application `name` at /`name`, ready; its URL. Deleted afterwards (if the test has not done so)."""
    from ray import serve

    from tests.conftest import TINY_POLICY
    from thinktier.loadtest.bench.frontdoor.frontdoor_bench import frontdoor_app

    policy = policy_dir / f"{name}-policy.yaml"
    policy.write_text(yaml.safe_dump(merged(yaml.safe_load(TINY_POLICY.read_text()), edits)))
    serve.run(frontdoor_app(str(policy), tokens_per_s), name=name, route_prefix=f"/{name}", blocking=False)
    url = f"http://127.0.0.1:{serve_port}/{name}"
    try:
        eventually(lambda: httpx.get(f"{url}/readyz").status_code == 200, f"application {name} never got ready", 120)
        yield url
    finally:
        serve.delete(name)
