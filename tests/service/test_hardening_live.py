"""Hardening against the running service (real Ray Serve, tiny vLLM engines): a dead engine (idle and mid-stream),
clients that leave mid-stream, a truncated policy file, stuck tier calls, a trickled body, /metrics behind a key,
anonymous access under tenants. Each fault's figures go to the hardening results (tests/hardening_results.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from tests.conftest import TENANT_KEY, TENANT_KEY_ENV
from tests.hardening_results import Recorder
from tests.live import engines_busy, eventually, in_flight, policy_edit, scraped

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
    serving_url: str, served_policy_file: Path, record: Recorder
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
    record("fault", "stuck tier: no chunk within server.tier_idle_timeout_s", 1, {"504 code timeout": 1},
           recover_s=0, recovered_when="the tenant's slot was back when the 504 arrived")


def test_a_body_trickled_in_gets_a_408_instead_of_holding_the_ingress(
    serving_url: str, served_policy_file: Path, record: Recorder
) -> None:
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
        answered_s = time.monotonic() - start
        assert b" 408 " in reply.split(b"\r\n")[0] and b'"request_timeout"' in reply
        assert time.monotonic() - start < 10
        assert chat(serving_url).status_code == 200
    record("fault", "body trickled one byte per 0.2 s (server.body_read_timeout_s: 1)", 1, {"408 code request_timeout": 1},
           recover_s=answered_s, recovered_when="the 408 freed the Ingress (from the request's start)")


def _engine_cores(deployment: str) -> list[Any]:
    import psutil

    title = f"ServeReplica:thinktier:{deployment}"
    replicas = [p for p in psutil.process_iter(["cmdline"]) if title in " ".join(p.info["cmdline"] or [])]
    return [child for replica in replicas for child in replica.children(recursive=True)]


def _kill_engine(deployment: str) -> float:
    """SIGKILL the vLLM engine processes under the deployment's replica; when (time.monotonic())."""
    cores = _engine_cores(deployment)
    assert cores, f"no engine process found under the replica of {deployment}"
    for core in cores:
        core.kill()
    return time.monotonic()


def _replaced(url: str) -> None:
    """Wait until /readyz has seen the reasoning tier's dead engine (503), then until Serve replaced the replica (200)."""
    eventually(lambda: httpx.get(f"{url}/readyz").status_code == 503, "/readyz never saw the dead engine", 30)
    assert httpx.get(f"{url}/readyz").json()["replicas"]["reasoning"] == 0
    eventually(lambda: httpx.get(f"{url}/readyz").status_code == 200, "Serve never replaced the replica", 300)


def test_a_dead_engine_is_replaced_and_its_tier_fails_over_to_chat_meanwhile(serving_url: str, record: Recorder) -> None:
    before = chat(serving_url, reasoning_effort="high")
    assert before.status_code == 200 and before.headers["x-thinktier-tier"] == "reasoning"
    start = _kill_engine("tier-reasoning")
    degraded = []
    for stream in (False, True, False):  # the dead replica's failures, then (off the board) a tier that is down
        response = chat(serving_url, reasoning_effort="high", stream=stream)
        assert response.status_code == 200, response.text
        assert response.headers["x-thinktier-tier"] == "chat"
        degraded.append(response.headers["x-thinktier-degraded"])
        if stream:
            assert response.text.rstrip().endswith("data: [DONE]") and '"error"' not in response.text
    assert set(degraded) <= {"chat:tier_failed", "chat:tier_down"}, degraded
    _replaced(serving_url)
    recovered = time.monotonic() - start
    after = chat(serving_url, reasoning_effort="high")
    assert after.status_code == 200 and after.headers["x-thinktier-tier"] == "reasoning"
    assert "x-thinktier-degraded" not in after.headers
    assert after.headers["x-thinktier-replica"] != before.headers["x-thinktier-replica"]
    record("fault", "vLLM engine of the reasoning replica killed while idle", 1,
           {"later requests served by the chat tier (degraded)": len(degraded), "served by the new replica": 1},
           recover_s=recovered, recovered_when="/readyz 200 again: Serve replaced the replica (requests were served "
           "throughout, by the chat tier)")


LONG = {  # budgets that keep a stream decoding for a while (within the tiny policy's max_model_len)
    "tiers": {"reasoning": {"budgets": {"high": {"thinking_tokens": 600, "answer_tokens": 32}}},
              "chat": {"budgets": {"high": {"thinking_tokens": 0, "answer_tokens": 600}}}},
}


def _decided(url: str, model: str) -> httpx.Headers:
    """The decision headers of a high-effort stream to `model` (the stream itself is dropped, so aborted)."""
    body = {"model": model, "messages": QUESTION, "reasoning_effort": "high", "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT) as response:
        return response.headers


def _short_budgets(url: str) -> bool:
    """The tiny policy's own budgets are back (after a LONG edit)."""
    return _decided(url, "tiny-chat").get("x-thinktier-answer-budget") == "48"


def _long_budgets(url: str) -> bool:
    return (_decided(url, "tiny-reasoning").get("x-thinktier-thinking-budget") == "600"
            and _decided(url, "tiny-chat").get("x-thinktier-answer-budget") == "600")


def test_an_engine_killed_mid_stream_ends_the_stream_with_an_error_event_and_the_tier_recovers(
    serving_url: str, served_policy_file: Path, record: Recorder
) -> None:
    body = {"model": "tiny-reasoning", "messages": QUESTION, "reasoning_effort": "high", "stream": True, "temperature": 0}
    with policy_edit(served_policy_file, LONG, lambda: _long_budgets(serving_url)):
        with httpx.stream("POST", f"{serving_url}/v1/chat/completions", json=body, timeout=TIMEOUT) as response:
            assert response.status_code == 200
            replica = response.headers["x-thinktier-replica"]
            lines = (line for line in response.iter_lines() if line.startswith("data: "))
            events = [next(lines)]
            killed = _kill_engine("tier-reasoning")
            events += list(lines)
        print(f"{len(events)} events, the last two: {events[-2:]}")
        assert events[-1] == "data: [DONE]"
        error = json.loads(events[-2].removeprefix("data: "))["error"]
        assert error["type"] == "server_error" and error["message"]
        chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
        assert all(c["choices"][0]["finish_reason"] is None for c in chunks if c["choices"]), "it ended mid-stream"
        following = chat(serving_url, reasoning_effort="high")
        assert following.status_code == 200, following.text  # the chat tier serves it, or the new replica does
        _replaced(serving_url)
        recovered = time.monotonic() - killed
        after = chat(serving_url, reasoning_effort="high")
        assert after.status_code == 200 and after.headers["x-thinktier-tier"] == "reasoning"
        assert after.headers["x-thinktier-replica"] != replica
    eventually(lambda: _short_budgets(serving_url), "the policy's budgets never came back")
    record("fault", "vLLM engine of the reasoning replica killed mid-stream", 1,
           {"stream ended with an SSE error event and [DONE]": 1, "next request served": 1},
           recover_s=recovered, recovered_when="/readyz 200 again: Serve replaced the replica (the next request was "
           "served at once)")


DISCONNECTS = 30


async def _open_and_drop(url: str, n: int) -> int:
    """`n` high-effort streams, alternately to each tier, dropped by their clients once every one has reached an engine
    (running or waiting there); how many had their 200 by then."""
    answered: list[int] = []
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT, limits=httpx.Limits(max_connections=n)) as client:

        async def stream(i: int) -> str:
            body = {"model": ("tiny-reasoning", "tiny-chat")[i % 2], "messages": QUESTION, "reasoning_effort": "high",
                    "stream": True, "temperature": 0}  # greedy: the random model's answer runs to its budget
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                answered.append(response.status_code)
                lines = [line async for line in response.aiter_lines() if line]
            return f"{body['model']}: {response.status_code} {len(lines)} lines, the last {lines[-1:]}"

        tasks = [asyncio.create_task(stream(i)) for i in range(n)]
        deadline = time.monotonic() + 60
        while True:
            busy = await asyncio.to_thread(engines_busy, url)
            if busy["requests_running"] + busy["requests_waiting"] >= n:
                break
            assert time.monotonic() < deadline, f"the {n} streams never all reached the engines: {busy}"
            ended = [t.result() for t in tasks if t.done()]
            assert not ended, f"{len(ended)} streams ended before their clients left: {ended[:3]}"
            await asyncio.sleep(0.2)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert set(answered) <= {200}, answered
    return len(answered)


def test_clients_that_leave_mid_stream_have_their_engine_requests_aborted(
    serving_url: str, served_policy_file: Path, record: Recorder
) -> None:
    with policy_edit(served_policy_file, LONG, lambda: _long_budgets(serving_url)):
        eventually(lambda: not any(engines_busy(serving_url).values()), "the engines were busy before the test", 30)
        completed = scraped(serving_url, "thinktier_requests_total", outcome="ok")
        answered = asyncio.run(_open_and_drop(serving_url, DISCONNECTS))
        left = time.monotonic()
        eventually(lambda: not any(engines_busy(serving_url).values()), "the engines kept the requests of clients that "
                   f"left: {engines_busy(serving_url)}", 30)
        idle_s = time.monotonic() - left
        assert in_flight(serving_url) == {"anonymous": 0}
        assert scraped(serving_url, "thinktier_requests_total", outcome="ok") == completed, "a stream decoded to its end"
    eventually(lambda: _short_budgets(serving_url), "the policy's budgets never came back")
    print(f"{answered} of {DISCONNECTS} streams had started; the engines were idle {idle_s:.1f} s after the clients left")
    record("fault", f"{DISCONNECTS} clients disconnected mid-stream", DISCONNECTS,
           {"engine request aborted": DISCONNECTS},
           recover_s=idle_s, recovered_when="every tier replica at 0 running, 0 waiting and 0 KV occupancy, every "
           "tenant at 0 in flight")


def test_a_truncated_policy_file_is_rejected_and_the_service_keeps_its_policy(
    serving_url: str, served_policy_file: Path, record: Recorder
) -> None:
    keyed = {"Authorization": f"Bearer {TENANT_KEY}"}
    tenants = {"tenants": {"acme": {"api_key_env": TENANT_KEY_ENV, "max_effort": "low"}}}
    with policy_edit(served_policy_file, tenants, lambda: chat(serving_url).status_code == 401):
        whole = served_policy_file.read_text()
        start = whole.index("  reasoning:\n") + len("  reasoning:\n")
        served_policy_file.write_text(whole[: (start + whole.index("\n", start)) // 2])  # a writer that died mid-line
        rejected = scraped(serving_url, "thinktier_policy_reloads_total", outcome="rejected")
        answers: list[httpx.Response] = []

        def counted() -> bool:
            answers.append(chat(serving_url, headers=keyed, reasoning_effort="high"))
            return scraped(serving_url, "thinktier_policy_reloads_total", outcome="rejected") > rejected

        eventually(counted, "the truncated policy was never counted as a rejected reload")
        assert [(a.status_code, a.headers["x-thinktier-effort"]) for a in answers] == [(200, "low")] * len(answers)
        assert chat(serving_url).status_code == 401, "the tenants of the last good policy still hold"
        assert chat(serving_url, headers=keyed, reasoning_effort="high").headers["x-thinktier-effort"] == "low"
    eventually(lambda: chat(serving_url).status_code == 200, "the policy without tenants never came back")
    record("fault", "policy file truncated mid-write (tenants and keys in force)", 1,
           {"reload rejected": 1, "requests served under the last good policy": len(answers) + 1,
            "anonymous refused (401)": 1}, recover_s=0, recovered_when="nothing changed")


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


def test_a_request_sees_one_policy_from_start_to_end(serving_url: str, served_policy_file: Path) -> None:
    """A reload that lands while a request's body is still arriving does not change that request: it is decided and
    served under the policy it arrived under."""
    import threading

    body = json.dumps({"model": "tiny-chat", "messages": QUESTION, "reasoning_effort": "high"}).encode()
    rest = threading.Event()
    answer: dict[str, httpx.Response] = {}

    def parts() -> Any:
        yield body[:8]
        rest.wait(60)
        yield body[8:]

    def send() -> None:
        answer["r"] = httpx.post(f"{serving_url}/v1/chat/completions", content=parts(),
                                 headers={"Content-Type": "application/json"}, timeout=TIMEOUT)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    time.sleep(3)  # the Ingress has the request and is reading its body
    shorter = {"tiers": {"chat": {"budgets": {"high": {"thinking_tokens": 0, "answer_tokens": 40}}}}}

    def applied() -> bool:
        return _decided(serving_url, "tiny-chat").get("x-thinktier-answer-budget") == "40"

    with policy_edit(served_policy_file, shorter, applied):
        rest.set()
        sender.join(120)
    eventually(lambda: _short_budgets(serving_url), "the tiny policy's budgets never came back", 60)
    assert answer["r"].status_code == 200
    assert answer["r"].headers["x-thinktier-answer-budget"] == "48"  # the policy it arrived under, not the reload's 40
