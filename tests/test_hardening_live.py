"""Hardening against the running service (real Ray Serve, tiny vLLM engines): a dead engine, stuck tier calls, a
trickled body, /metrics behind a key, anonymous access under tenants."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from tests.conftest import TENANT_KEY, TENANT_KEY_ENV
from tests.live import eventually, in_flight, policy_edit

pytestmark = pytest.mark.integration
QUESTION = [{"role": "user", "content": "what is the sum of 17 and 25"}]
TIMEOUT = httpx.Timeout(120)


def chat(url: str, headers: dict[str, str] | None = None, **body: object) -> httpx.Response:
    payload = {"model": "thinktier", "messages": QUESTION, "max_tokens": 4, "max_thinking_tokens": 4, **body}
    return httpx.post(f"{url}/v1/chat/completions", json=payload, headers=headers or {}, timeout=TIMEOUT)


def test_metrics_can_require_a_key_while_health_stays_open(serving_url: str, served_policy_file: Path) -> None:
    key = {"Authorization": f"Bearer {TENANT_KEY}"}
    locked = {"server": {"metrics_api_key_env": TENANT_KEY_ENV}}
    with policy_edit(served_policy_file, locked, lambda: httpx.get(f"{serving_url}/metrics").status_code == 401):
        refused = httpx.get(f"{serving_url}/metrics", headers={"Authorization": "Bearer sk-wrong"})
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
        assert "thinktier_requests_total" in httpx.get(f"{serving_url}/metrics", headers=key).text
        assert httpx.get(f"{serving_url}/healthz").status_code == 200
        assert httpx.get(f"{serving_url}/readyz").status_code == 200
    eventually(lambda: httpx.get(f"{serving_url}/metrics").status_code == 200, "/metrics never opened again")


def test_anonymous_is_refused_under_tenants_unless_allowed_and_then_held_to_its_own_limits(
    serving_url: str, served_policy_file: Path
) -> None:
    tenants = {"tenants": {"acme": {"api_key_env": TENANT_KEY_ENV}}}
    with policy_edit(served_policy_file, tenants, lambda: chat(serving_url).status_code == 401):
        for header in ({}, {"Authorization": "Bearer"}, {"Authorization": "bearer"}):
            assert chat(serving_url, headers=header).status_code == 401
        assert chat(serving_url, headers={"Authorization": f"Bearer {TENANT_KEY}"}).status_code == 200
    limited = {
        "server": {"allow_anonymous": True},
        "tenants": {"acme": {"api_key_env": TENANT_KEY_ENV}, "anonymous": {"max_effort": "low", "max_concurrent_requests": 2}},
    }

    def low_effort() -> bool:
        return chat(serving_url, reasoning_effort="high").headers.get("x-thinktier-effort") == "low"

    with policy_edit(served_policy_file, limited, low_effort):
        assert in_flight(serving_url) == {"acme": 0, "anonymous": 0}
    eventually(lambda: chat(serving_url, reasoning_effort="high").headers.get("x-thinktier-effort") == "high",
               "the anonymous limits never went away")


def test_a_tier_call_past_its_deadline_gets_a_504_or_a_timeout_event_and_gives_its_slot_back(
    serving_url: str, served_policy_file: Path
) -> None:
    hasty = {"server": {"tier_idle_timeout_s": 0.0001}}
    with policy_edit(served_policy_file, hasty, lambda: chat(serving_url, stream=True).status_code == 504):
        response = chat(serving_url, stream=True, model="tiny-chat")
        assert response.status_code == 504
        error = response.json()["error"]
        assert error["code"] == "timeout" and "server.tier_idle_timeout_s" in error["message"]
        assert in_flight(serving_url) == {"anonymous": 0}
        assert chat(serving_url).status_code == 200  # non-streamed calls are bound by tier_timeout_s alone
    eventually(lambda: chat(serving_url, stream=True).status_code == 200, "streams never came back")


def test_a_body_trickled_in_gets_a_408_instead_of_holding_the_ingress(serving_url: str, served_policy_file: Path) -> None:
    address = urlparse(serving_url)

    def trickle(seconds: float) -> bytes:
        """A request whose body comes one byte every 0.2 s, for at most `seconds`: what the server answered by then."""
        body = b'{"model": "tiny-chat", "messages": [{"role": "user", "content": "' + b"x" * 200 + b'"}]}'
        with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode())
            sock.settimeout(0.2)
            start = time.monotonic()
            for byte in body:
                if time.monotonic() - start > seconds:
                    return b""
                try:
                    sock.sendall(bytes([byte]))
                    if reply := sock.recv(65536):
                        return whole(sock, reply)
                except TimeoutError:
                    continue
                except OSError:  # the server answered and closed
                    return whole(sock, b"")
            return b""

    def whole(sock: socket.socket, reply: bytes) -> bytes:
        """The reply read to the end of its body."""
        sock.settimeout(5)
        while b"\r\n\r\n" not in reply or len(reply.partition(b"\r\n\r\n")[2]) < int(
            next(ln for ln in reply.split(b"\r\n") if ln.lower().startswith(b"content-length:")).split(b":")[1]
        ):
            reply += sock.recv(65536)
        return reply

    impatient = {"server": {"body_read_timeout_s": 1}}
    with policy_edit(served_policy_file, impatient, lambda: b" 408 " in trickle(4)):
        start = time.monotonic()
        reply = trickle(20)
        assert b" 408 " in reply.split(b"\r\n")[0] and b'"request_timeout"' in reply
        assert time.monotonic() - start < 10
        assert chat(serving_url).status_code == 200


def _engine_cores(deployment: str) -> list[Any]:
    import psutil

    title = f"ServeReplica:thinktier:{deployment}"
    replicas = [p for p in psutil.process_iter(["cmdline"]) if title in " ".join(p.info["cmdline"] or [])]
    return [child for replica in replicas for child in replica.children(recursive=True)]


def test_a_dead_engine_is_replaced_and_its_tier_fails_over_to_chat_meanwhile(serving_url: str) -> None:
    before = chat(serving_url, reasoning_effort="high")
    assert before.status_code == 200 and before.headers["x-thinktier-tier"] == "reasoning"
    cores = _engine_cores("tier-reasoning")
    assert cores, "no engine process found under the reasoning tier's replica"
    for core in cores:
        core.kill()
    start = time.monotonic()
    degraded = []
    for stream in (False, True, False):  # the dead replica's failures, then (off the board) a tier that is down
        response = chat(serving_url, reasoning_effort="high", stream=stream)
        assert response.status_code == 200, response.text
        assert response.headers["x-thinktier-tier"] == "chat"
        degraded.append(response.headers["x-thinktier-degraded"])
        if stream:
            assert response.text.rstrip().endswith("data: [DONE]") and '"error"' not in response.text
    assert set(degraded) <= {"chat:tier_failed", "chat:tier_down"}, degraded
    eventually(lambda: httpx.get(f"{serving_url}/readyz").status_code == 503, "/readyz never saw the dead engine", 30)
    assert httpx.get(f"{serving_url}/readyz").json()["replicas"]["reasoning"] == 0
    eventually(lambda: httpx.get(f"{serving_url}/readyz").status_code == 200, "Serve never replaced the replica", 300)
    recovered = time.monotonic() - start
    after = chat(serving_url, reasoning_effort="high")
    assert after.status_code == 200 and after.headers["x-thinktier-tier"] == "reasoning"
    assert "x-thinktier-degraded" not in after.headers
    assert after.headers["x-thinktier-replica"] != before.headers["x-thinktier-replica"]
    print(f"reasoning tier back {recovered:.0f} s after its engine was killed")


def test_logs_are_json_lines_that_carry_the_request_id(serving_url: str) -> None:
    import json
    import uuid

    import ray

    request_id = f"trace-{uuid.uuid4().hex}"
    response = httpx.post(f"{serving_url}/v1/chat/completions", headers={"x-request-id": request_id}, timeout=TIMEOUT,
                          json={"model": "tiny-chat", "messages": QUESTION, "max_tokens": 2})
    assert response.status_code == 200 and response.headers["x-request-id"] == request_id
    logs = Path(ray._private.worker._global_node.get_logs_dir_path()) / "serve"

    def logged() -> list[dict[str, Any]]:
        lines = [ln for f in logs.glob("replica_thinktier_*.log") for ln in f.read_text(errors="replace").splitlines()
                 if request_id in ln]
        return [json.loads(ln) for ln in lines]

    eventually(lambda: len(logged()) >= 2, "the request's log lines never appeared", 15)
    records = logged()
    assert all(r["request_id"] == request_id for r in records)
    deployments = {r["deployment"].removeprefix("thinktier_") for r in records}
    assert {"Ingress", "DifficultyClassifier"} <= deployments, deployments  # the id follows the request's calls
