"""The README's first command, as a new user runs it: `thinktier up` on the embedded default policy.

These tests run the installed `thinktier` console script beside this interpreter (.venv/bin/thinktier), so
they fail when bootstrap leaves out anything the default policy needs, as on a fresh machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from tests.conftest import free_port
from tests.live import start_up, thinktier_up
from thinktier.deployments.tier.models import missing_package
from thinktier.policies.loader import load_policy

GSM_PROBLEM = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)


def test_bootstrap_installed_what_the_default_policy_needs() -> None:
    policy = load_policy(None)
    problems = [missing_package(tier.model) for tier in policy.tiers.values()]
    assert problems == [None] * len(problems), problems


def _still_running(processes: list[psutil.Process]) -> list[str]:
    """Those of `processes` (the same processes: a pid reused since does not count) that still run, as 'pid cmdline'."""
    running = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                running.append(f"{process.pid} {' '.join(process.cmdline())[:120]}")
    return running


@pytest.fixture
def up_default() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`thinktier up` exactly as the README runs it (on a free port), ready; stopped with Ctrl-C afterwards."""
    with thinktier_up() as running:
        yield running


@pytest.mark.integration
def test_thinktier_up_serves_the_default_model_through_the_openai_client(
    up_default: tuple[str, subprocess.Popen[str]],
) -> None:
    url, proc = up_default
    started = psutil.Process(proc.pid).children(recursive=True)
    commands = " ".join(" ".join(process.cmdline()) for process in started)
    assert all(name in commands for name in ("gcs_server", "raylet", "VLLM::EngineCore", "haproxy")), commands
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
    completion = client.chat.completions.create(
        model="thinktier", reasoning_effort="low", messages=[{"role": "user", "content": GSM_PROBLEM}], seed=1,
    )
    message = completion.choices[0].message
    reasoning = (message.model_extra or {}).get("reasoning")
    assert reasoning, "the reasoning tier writes a thinking section"
    assert message.content, "and an answer after it"
    assert completion.usage.completion_tokens_details.reasoning_tokens > 0
    assert completion.model == "thinktier-reasoning"
    long_token = httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": "Bearer " + "k" * 64_000}, timeout=120,
                            json={"model": "thinktier", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert long_token.status_code == 200, "a request with a 64 KB header passes HAProxy as it passes Serve's proxy"
    stream = client.chat.completions.create(  # in flight when thinktier is told to stop: it drains, then stops
        model="thinktier", reasoning_effort="low", messages=[{"role": "user", "content": GSM_PROBLEM}], seed=1, stream=True,
    )
    chunks = [next(iter(stream))]
    proc.send_signal(signal.SIGTERM)
    try:
        chunks += list(stream)  # the openai client raises on an SSE error event
    except openai.APIError:
        proc.wait(120)
        pytest.fail(f"the stream in flight was cut; thinktier up said:\n{proc.stdout.read()}")
    assert chunks[-1].choices and chunks[-1].choices[0].finish_reason is not None, "the stream ran to its end"
    assert proc.wait(120) == 0, "SIGTERM stops thinktier cleanly"
    assert "draining requests in flight" in proc.stdout.read()
    assert _still_running(started) == [], "every process thinktier up started is gone"


def _run_to_exit(*args: str, timeout_s: float = 300, open_files: int | None = None) -> tuple[int, str]:
    proc = start_up(*args, open_files=open_files)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, output


def test_up_on_a_port_in_use_fails_at_once_and_says_so() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        code, output = _run_to_exit("--port", str(port))
    assert code == 1, output
    assert f"cannot serve on 127.0.0.1:{port}" in output and "--port" in output
    assert f"(pid {os.getpid()}, " in output  # whose port it is: this test's process
    assert "starting Ray" not in output
    assert time.monotonic() - started < 120


def test_up_where_the_open_files_limit_is_too_low_for_haproxy_fails_at_once_and_says_how_to_raise_it() -> None:
    assert load_policy(None).server.http_proxy == "haproxy"
    started = time.monotonic()
    code, output = _run_to_exit("--port", str(free_port()), open_files=1024)
    assert code == 1, output
    assert "thinktier up: server.http_proxy: haproxy needs an open-files limit of at least" in output, output
    assert "ulimit -n" in output and "server.http_proxy: serve" in output
    assert "starting Ray" not in output and "model builtin:" not in output
    assert time.monotonic() - started < 60


def test_up_with_a_model_that_cannot_be_resolved_fails_before_ray(tmp_path: Path) -> None:
    policy = load_policy(None).model_dump(mode="json")
    policy["tiers"]["reasoning"]["model"] = "builtin:no-such-model"
    path = tmp_path / "policy.yaml"
    import yaml

    path.write_text(yaml.safe_dump(policy))
    code, output = _run_to_exit("--policy", str(path), "--port", str(free_port()))
    assert code == 1, output
    assert "model builtin:no-such-model cannot be resolved: unknown builtin model" in output
    assert "starting Ray" not in output


@pytest.mark.integration
def test_a_replica_that_cannot_start_is_reported_with_its_own_error(serve_port: int, tmp_path: Path) -> None:
    import yaml
    from ray import serve

    from tests.conftest import TINY_POLICY
    from thinktier.cluster.local import LocalCluster, StartupError

    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    policy = yaml.safe_load(TINY_POLICY.read_text())
    policy["tiers"]["chat"]["model"] = str(broken)
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    cluster = LocalCluster(path, port=serve_port, app_name="broken", route_prefix="/broken")
    started = time.monotonic()
    with pytest.raises(StartupError) as failure:
        cluster.start(timeout_s=600)
    message = str(failure.value)
    assert message.startswith("tier-chat is DEPLOY_FAILED: "), message
    assert "Error" in message.splitlines()[0], "the replica's own exception line"
    assert "full log: " in message
    assert time.monotonic() - started < 300, "it fails when the deployment does, not at the timeout"
    assert "broken" not in serve.status().applications, "a failed start removes its application"
